"""QuickSilver Scalable Multicast (Ostrowski, Birman, Phanishayee; seed 004): many overlapping groups, regions of
identical group membership (one IP multicast group each), loss recovery on a torus of token rings (partitions of
R caching replicas; a ring of partition leaders), collective ACK/NAK to the sender and sender rate control from
the slowest receiver's rate. docs/qsm.md."""
