"""Every protocol's wire module, imported for its `wire.register` side effect (found by `protocols.names()`)."""
import importlib

from . import names

for _name in names():
    importlib.import_module(f"{__package__}.{_name}.wire")
