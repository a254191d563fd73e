"""Pieces shared by the peer-sampling protocols of seed 003 (HyParView, Cyclon, Scamp, CyclonAcked): a wire
codec built from the declarative layouts (`wirekit`), the broadcast workload drawn from a shared seeded sequence
(`broadcast`) and the view bookkeeping that logs every change (`views`). Not a protocol itself (no core.py)."""
