"""`orchestrator probe`: the fidelity probe on a running lab, through the CLI, with --json for scripts."""
from __future__ import annotations

import json

import pytest

from .helpers import cli, lab_namespaces, unique_lab

pytestmark = [pytest.mark.root, pytest.mark.mininet]

LINKS = "links: {rate: 30kbit, delay: 5ms, queue: 64}\n"


@pytest.mark.parametrize("shaper", ["delayline", "tbf"])
def test_probe_reports_hop_rtt_rate_and_loss(tmp_path, state_dir, shaper):
    lab = unique_lab("pr")
    f = tmp_path / "chain.yaml"
    f.write_text("topology: {kind: tree, nodes: 3, degree: 2}\n" + LINKS)
    r = cli("up", str(f), "--name", lab, "--shaper", shaper)
    assert r.returncode == 0, r.stderr
    try:
        r = cli("probe", lab, "--links", "2", "--paths", "1", "--count", "8", "--json")
        assert r.returncode == 0, r.stderr
        res = json.loads(r.stdout)
        assert res["shaper"] == shaper
        hops = [p for p in res["paths"] if p["hops"] == 1]
        assert len(hops) == 2 and any(p["hops"] == 2 for p in res["paths"])
        assert res["sent"] == res["received"] == 24
        rate = res["rate"]
        assert rate["received"] == rate["count"]
        if shaper == "delayline":
            for p in res["paths"]:
                # 2 x hops x (5 ms + 100-byte packet serialisation at 30 kbit/s) = 70.8 ms per hop.
                assert p["emulated_rtt_ms"] == pytest.approx(70.8 * p["hops"], rel=1e-3)
                assert p["median_rtt_ms"] == pytest.approx(p["emulated_rtt_ms"], rel=0.03)
            assert rate["measured_bps"] == pytest.approx(30_000, rel=0.05)
        else:
            assert all(p["emulated_rtt_ms"] == 0 for p in res["paths"])
            assert any(how.startswith("NOT") for how in res["parameters"]["delay"])
            assert rate["measured_bps"] == pytest.approx(30_000, rel=0.10)
        text = cli("probe", lab, "--links", "1", "--paths", "0", "--count", "3", "--no-rate")
        assert text.returncode == 0, text.stderr
        assert "RTT in ms" in text.stdout and "no rate-limited link (or --no-rate)" in text.stdout
    finally:
        assert cli("teardown", lab).returncode == 0
        assert lab_namespaces(lab) == []


def test_probe_of_an_unknown_lab_is_a_clear_input_error(state_dir):
    r = cli("probe", "nosuchlab")
    assert r.returncode == 2
    assert "nosuchlab" in r.stderr
