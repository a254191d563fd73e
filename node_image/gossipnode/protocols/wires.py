"""Every protocol's wire module, imported for its `wire.register` side effect. A new protocol adds one line."""
from .direct import wire as _direct  # noqa: F401
from .gsgc import wire as _gsgc  # noqa: F401
