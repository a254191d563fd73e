"""`scamp`: Ganesh, Kermarrec, Massoulié's Scamp as seed 003 (§2.4, §5.1) runs it for comparison with HyParView
— a reactive PartialView that grows to about (c + 1) log n, an InView, subscriptions forwarded with probability
1 / (1 + |PartialView|) of being kept, indirection, leases — under a gossip broadcast of fanout 4 over UDP.
docs/hyparview.md."""
