"""A protocol node for the emulation testbed: sans-IO protocol cores, an asyncio runtime, the wire format."""
