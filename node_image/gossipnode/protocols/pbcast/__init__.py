"""pbcast: Bimodal Multicast (seed 001 §3; Birman et al. 1999): an unreliable first phase (IP multicast, or a
unicast tree) and unsynchronised anti-entropy rounds (digest, solicitation, retransmission; push-pull), a message
buffer garbage collected after C log n rounds. `layer.Pbcast` is the engine, also used by `vsync`."""
