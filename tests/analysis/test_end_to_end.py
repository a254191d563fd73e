"""The whole application on the synthetic run (CLI → Parquet, metrics, reports), and the packet counts checked
against tshark on the same pcaps."""
from __future__ import annotations

import csv
import json
import os
import random
import re
import shutil
import subprocess

import pytest
from pyspark.sql import functions as F

from analysis import ingest, metrics
from analysis.cli import main
from analysis.pcap import CaptureFile
from analysis.schemas import EVENTS, PACKETS
from tests.analysis import synthetic as syn


@pytest.mark.spark
def test_cli_analyses_what_it_can_and_names_every_broken_file(spark, run_dir, tmp_path, capsys):
    bogus = tmp_path / "not-a-run"
    bogus.mkdir()
    cmp = tmp_path / "cmp"
    assert main([str(run_dir), str(bogus), "--out", str(cmp)]) == 1  # one of the two could not be analysed
    err = capsys.readouterr().err
    problems = [
        f"{bogus}/manifest.json: file not found",
        "pcaps/h2-any.pcap: truncated packet 3 at byte 205 after 2 packets (10 of 82 bytes) — analysed 2 packet(s)",
        "pcaps/h3-any.pcap: file not found",
        "events/h2.jsonl: 1 line(s) are not JSON event records",
        "tc/h3.json: file not found",
    ]
    for p in problems:
        assert p in err
    report = (run_dir / "report.md").read_text()
    for p in problems[1:] + ["delay (5ms) is NOT emulated"]:
        assert p in report
    html = (run_dir / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 4 and "pcaps/h3-any.pcap: file not found" in html

    # Tables: 12 + 13 + 2 readable frames; every event record.
    packets = ingest.read_table(spark, run_dir / "analysis" / "packets", PACKETS)
    assert sorted(p.name for p in (run_dir / "analysis" / "packets").glob("node=*")) == [
        "node=h0", "node=h1", "node=h2"]
    assert packets.count() == 27 and packets.where(~F.col("decoded")).count() == 5
    events = ingest.read_table(spark, run_dir / "analysis" / "events", EVENTS)
    assert events.count() == sum(len(v) for v in syn.EVENTS.values())
    assert (run_dir / "analysis" / "events" / "event=stable").is_dir()

    # The key numbers (worked out in test_metrics.py).
    s = json.loads((run_dir / "analysis" / "metrics" / "summary.json").read_text())
    assert (s["members"], s["senders"], s["subgroup"], s["step_s"], s["packets"], s["undecodable"]) == (
        4, 2, 2, 1.0, 27, 5)
    assert (s["tpr_rounds"], s["tpr_mean_s"], s["tpr_std_s"]) == (2, 2.5, pytest.approx(0.5 ** 0.5))
    assert (s["tts_messages"], s["tts_stable"], s["tts_median_s"]) == (4, 3, 2.5)
    assert (s["fd_observers"], s["fd_detected"], s["fd_latency_median_s"]) == (3, 2, 2.25)
    assert s["gossip_msgs_per_member_s"] == pytest.approx((0.6 + 0.3 + 2 / 3.75) / 3)
    assert (s["false_declarations"], s["queue_drops"]) == (2, 8)
    with open(run_dir / "analysis" / "metrics" / "captures.csv") as f:
        caps = {r["file"]: r for r in csv.DictReader(f)}
    assert caps["pcaps/h3-any.pcap"]["error"] == "pcaps/h3-any.pcap: file not found"
    assert caps["pcaps/h1-any.pcap"]["tcpdump_captured"] == "13" and caps["pcaps/h1-any.pcap"]["undecodable"] == "2"
    assert sorted(p.name for p in (run_dir / "analysis" / "figures").glob("*.png")) == [
        "messages.png", "time_to_stable.png", "timeline.png", "tpr.png"]

    # The comparison names the run that failed.
    with open(cmp / "comparison.csv") as f:
        assert [r["run_id"] for r in csv.DictReader(f)] == ["synthetic-20260101T000000Z"]
    assert f"{bogus}: {bogus}/manifest.json: file not found" in (cmp / "report.md").read_text()


def test_no_analysable_run_is_an_error(tmp_path, capsys):
    assert main([str(tmp_path / "missing")]) == 2          # bad input, as everywhere
    assert f"error: {tmp_path / 'missing'}: not a directory" in capsys.readouterr().err


def _random_frames(rng: random.Random, n: int, wrap) -> list[tuple[float, bytes]]:
    names = list(syn.ADDR)
    out = []
    for i in range(n):
        a, b = rng.sample(names, 2)
        kind = rng.random()
        if kind < 0.5:
            payload = syn.gossip(syn.IDS[a], i)
        elif kind < 0.8:
            payload = syn.data(syn.IDS[a], i)
        elif kind < 0.9:
            payload = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
        else:
            out.append((1000 + i * 0.01, wrap(syn.icmp_echo(a, b))))
            continue
        out.append((1000 + i * 0.01, wrap(syn.udp(a, b, payload))))
    return out


def _tshark_frames_bytes(path) -> tuple[int, int]:
    out = subprocess.run(["tshark", "-r", str(path), "-q", "-z", "io,stat,0"], capture_output=True, text=True,
                         check=True).stdout
    m = re.search(r"\|\s*[\d.]+\s*<>\s*(?:[\d.]+|Dur)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|", out)
    assert m, out
    return int(m.group(1)), int(m.group(2))


@pytest.mark.spark
def test_per_node_packet_and_byte_counts_equal_tshark(spark, tmp_path):
    if shutil.which("tshark") is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("tshark missing in CI (make setup installs it)", pytrace=False)
        pytest.skip("needs tshark (run `make setup`)")
    rng = random.Random(7)
    specs = [("h0", 276, syn.sll2, 65535), ("h1", 1, syn.eth, 80), ("h2", 113, syn.sll, 65535),
             ("h3", 276, syn.sll2, 96)]
    caps = []
    for node, linktype, wrap, snaplen in specs:
        f = syn.write_pcap(tmp_path / f"{node}-any.pcap", linktype, _random_frames(rng, 400, wrap), snaplen)
        caps.append(CaptureFile(node, "any", str(f), f.name, syn.ADDR[node]))
    packets = ingest.parse_packets(ingest.files_frame(spark, caps), "r", 1000.0, {})
    ours = {r["node"]: (r["packets"], r["bytes"]) for r in metrics.packet_counts(packets).collect()}
    theirs = {c.node: _tshark_frames_bytes(c.path) for c in caps}
    assert ours == theirs
    assert all(n == 400 for n, _ in ours.values())
