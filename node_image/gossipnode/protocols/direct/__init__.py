"""`direct`: every data message goes straight from its sender to every other member, by UDP unicast, TCP or IP
multicast — no repair, no ordering, no membership protocol. The baseline against which the gossip protocols'
reliability and overhead are read, and the platform's own test protocol (each transport end to end)."""
