"""The protocols are found by their packages (gossipnode.protocols.names), also where the node's code is a zip —
as Spark ships it to its workers — so the analysis decodes every protocol there too."""
from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import gossipnode
from gossipnode import wire
from gossipnode.protocols import names, registry

SRC = Path(gossipnode.__file__).parent


def test_every_package_with_params_wire_and_core_is_a_protocol():
    found = names()
    assert {"gsgc", "direct"} <= set(found) and found == sorted(found)
    assert set(found) == set(registry.PROTOCOLS) == {c.name for c in wire.CODECS.values()}
    assert "peerview" not in found          # a shared helper package without core.py is not a protocol


def test_protocols_are_found_inside_a_zip(tmp_path):
    z = tmp_path / "gossipnode.zip"
    with zipfile.ZipFile(z, "w") as zf:
        for f in SRC.rglob("*.py"):
            zf.write(f, f.relative_to(SRC.parent))
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import gossipnode, gossipnode.wire as w; "
            "from gossipnode.protocols import names; assert '.zip' in gossipnode.__file__, gossipnode.__file__; "
            "print(','.join(names())); print(','.join(sorted(c.name for c in w.CODECS.values())))")
    r = subprocess.run([sys.executable, "-S", "-c", code, str(z)], capture_output=True, text=True,
                       cwd=tmp_path, timeout=120, env={"PYTHONPATH": ""})
    assert r.returncode == 0, r.stderr
    found, codecs = r.stdout.split()
    assert found.split(",") == names() and codecs.split(",") == sorted(names())
