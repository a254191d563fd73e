"""`cyclonacked`: seed 003's CyclonAcked (§5) — Cyclon whose gossip broadcast is acknowledged: a view member that
does not acknowledge a DATA within `ack_timeout_s` is taken for failed and removed from the partial view.
docs/hyparview.md."""
