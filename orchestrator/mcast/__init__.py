"""IP multicast across the emulated tree (docs/multicast.md): the experiment's `multicast:` section (`spec`), the
groups' static shared trees and what each member's node must do (`tree`, pure), and the orchestrator-owned daemon
that holds every namespace's kernel multicast routing socket (`mrouted`)."""
