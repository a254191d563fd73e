"""tradvsync: traditional virtually synchronous multicast as seed 001 §2.1 describes it (Figure 1's protocol
class): the sender buffers each multicast until every member has acknowledged it, in a fixed-size buffer with
flow control (a full buffer blocks the sender); receivers deliver in order and acknowledge cumulatively; losses
are repaired by NAK and by sender retransmission. One slow member back-pressures the sender. Not a Horus clone:
no membership changes, no failure detection (a perturbed member is never dropped, as in Figure 1)."""
