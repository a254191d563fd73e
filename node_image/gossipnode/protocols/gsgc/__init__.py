"""GSGC (Guo, Hayden, van Renesse, Vogels, Birman 1997): stability detection, gossip failure detection, local
gossip with stability controllers. `core.GsgcNode` is the member, `params.GsgcParams` its configuration,
`wire` its messages."""
