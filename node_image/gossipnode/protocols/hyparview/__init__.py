"""`hyparview`: Leitão, Pereira, Rodrigues, HyParView (seed 003, §4 and Algorithm 1) — a symmetric active view
of log(n) + c members kept on TCP connections and repaired reactively from a passive view of k(log(n) + c),
maintained by periodic shuffles; broadcast is a flood over the active view. docs/hyparview.md."""
