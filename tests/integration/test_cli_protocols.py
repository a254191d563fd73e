"""Bad `protocol:` sections through the real CLI: exit 2, one line naming file, line and field, nothing built."""
from __future__ import annotations

import pytest

from orchestrator.backends.netns import NETNS_DIR

from .helpers import cli

TOPOLOGY = "name: plab\ntopology: {kind: tree, nodes: 9, degree: 4}\n"


@pytest.mark.parametrize("text,words", [
    (TOPOLOGY + "protocol:\n  pbcastt: {fanout: 1}\n", ["bad.yaml:3: protocol:", "unknown protocol 'pbcastt'",
                                                           "available: gsgc, direct"]),
    (TOPOLOGY + "protocol:\n  gsgc:\n    subgroup: 3\n    step: 2s\n    stepp: 1s\n",
     ["bad.yaml:7: protocol.gsgc.stepp:", "unknown key"]),
    (TOPOLOGY + "protocol:\n  gsgc: {subgroup: 0, step: 2s}\n", ["bad.yaml:4: protocol.gsgc.subgroup:",
                                                                  "greater than or equal to 1"]),
    (TOPOLOGY + "protocol:\n  gsgc: {subgroup: 2, step: soon}\n", ["bad.yaml:4: protocol.gsgc.step:", "time"]),
    (TOPOLOGY + "protocol:\n  direct: {transport: sctp}\n", ["bad.yaml:4: protocol.direct.transport:",
                                                             "'udp', 'tcp' or 'mcast'"]),
    (TOPOLOGY + "protocol: {gsgc: {subgroup: 1, step: 1s}, direct: {}}\n", ["bad.yaml:3: protocol:",
                                                                            "exactly one protocol"]),
    (TOPOLOGY + "multicast:\n  groups:\n    - {name: g, address: 10.1.2.3}\n",
     ["bad.yaml:5: multicast.groups[0].address:", "not a multicast address"]),
])
@pytest.mark.parametrize("command", ["up", "run"])
def test_bad_protocol_section_is_exit_2_one_line_nothing_built(tmp_path, state_dir, text, words, command):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    r = cli(command, str(f), timeout=60)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for w in words:
        assert w in lines[0], lines[0]
    assert not state_dir.exists() or not any(state_dir.iterdir())
    assert not [p for p in (NETNS_DIR.iterdir() if NETNS_DIR.is_dir() else []) if p.name.startswith("plab-")]
