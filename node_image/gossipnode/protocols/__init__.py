"""The protocols the node hosts, one package each (`gsgc/`, `direct/`, ...).

Kept free of imports so that `gossipnode.wire` can register the codecs (`wires.py`) without loading any protocol's
logic or pydantic; the registry of cores and parameter models is `registry.py`.
"""
