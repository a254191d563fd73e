"""`cyclon`: Voulgaris, Gavidia, van Steen's Cyclon as seed 003 (§5.1) runs it for comparison with HyParView — a
partial view of 35 entries with ages, shuffles of 14 with the oldest neighbour, joins by random walks of TTL 5 —
under a gossip broadcast of fanout 4 over UDP. docs/hyparview.md."""
