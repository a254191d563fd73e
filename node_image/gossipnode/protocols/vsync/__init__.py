"""vsync: virtual synchrony over pbcast with a leader committee of k members (seed 001 §§4-5): Gseq Req/Ack
total ordering at the committee, dissemination by the Pbcast layer (`protocols/pbcast/layer.py`), in-sequence
delivery with a timeout-driven repair sub-protocol, periodic view changes (Prefreshview, deferred
AckPrefreshview, Newview) that drop members too far behind."""
