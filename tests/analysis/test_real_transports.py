"""Real runs of the `direct` protocol on each transport (topologies/direct-{udp,tcp,mcast}.yaml, shortened to
10 s by tests/integration/transport_runs.py; shared with tests/integration/test_transports.py in one session):
Spark's per-type message counts equal tshark's with the generated dissector, on the senders' captures and four
other members' (a sample, to keep the three runs and their checks within about three minutes: every capture of
these runs holds every data message), and each receiver's capture holds every data message the senders logged
exactly once."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from analysis.dissector import generate
from analysis.rundir import load
from tests.analysis.test_dissector import _need_tshark, spark_types, tshark_types

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.spark, pytest.mark.slow]


@pytest.mark.parametrize("transport", ("udp", "tcp", "mcast"))
def test_spark_and_tshark_count_the_same_messages(direct_runs, spark, tmp_path, transport):
    _need_tshark()
    t = time.monotonic()
    run = load(direct_runs[transport]())
    t_run = time.monotonic() - t
    lua = tmp_path / "gossip.lua"
    lua.write_text(generate(udp_ports=sorted(run.ports.node), mcast_ports=sorted(run.ports.mcast),
                            tcp_ports=sorted(run.ports.node)))
    senders = {m.name for m in run.members if m.sender_index is not None}
    receivers = sorted((c for c in run.captures if c.node not in senders), key=lambda c: c.node)[:4]
    sample = [c for c in run.captures if c.node in senders] + receivers
    ours = spark_types(spark, sample, run.ports)
    t_spark = time.monotonic() - t - t_run
    with ThreadPoolExecutor(2) as pool:
        theirs = dict(zip([c.node for c in sample], pool.map(lambda c: tshark_types(lua, c.path), sample)))
    assert {n: c for n, c in theirs.items() if c} == ours
    assert len(senders) == 2 and set(ours) == {c.node for c in sample}
    sent = sum(1 for f in run.event_logs if f.stem != "orchestrator"
               for line in f.read_text().splitlines() if '"data_sent"' in line)
    # a receiver gets one copy of every message (a datagram or a TCP frame from its sender, or the group's
    # datagram); a sender's capture holds its own copies out and the other sender's in
    assert sent > 0 and all(ours[c.node][("direct", "DATA")] == sent for c in receivers)
    data = sum(c[("direct", "DATA")] for c in ours.values())
    print(f"\n{transport}: run {t_run:.1f} s (shared with tests/integration/test_transports.py), Spark "
          f"{t_spark:.1f} s, tshark {time.monotonic() - t - t_run - t_spark:.1f} s; {data} messages in "
          f"{len(sample)} captures")


@pytest.mark.parametrize("transport", ("udp", "tcp", "mcast"))
def test_arrow_ingest_equals_the_row_decoder(direct_runs, spark, tmp_path, transport):
    """The one-pass Arrow ingest (mapInArrow + the accumulated scan) against the reference on the driver: the
    row decoder `packet_rows` and the record scan `scan`, on every capture of a real run: the same rows, value
    for value (TCP reassembly included), and the same per-file scan."""
    from analysis import ingest
    from analysis.pcap import packet_rows, scan
    from analysis.schemas import CAPTURES, PACKETS

    run = load(direct_runs[transport]())
    names = run.addresses()
    scanned = ingest.ingest_packets(spark, run.captures, run.run_id, run.t0, names, tmp_path / "packets",
                                    run.clock_offsets, run.ports)
    assert scanned == [dict(zip(CAPTURES.fieldNames(), scan(c))) for c in run.captures]
    key = PACKETS.fieldNames().index
    by_frame = lambda r: (r[key("file")], r[key("frame")], r[key("msg_index")])  # noqa: E731
    table = sorted((tuple(r) for r in ingest.read_table(spark, tmp_path / "packets", PACKETS).collect()),
                   key=by_frame)
    offsets = run.clock_offsets or {}
    reference = sorted((row for c in run.captures
                        for row in packet_rows(c, run.run_id, run.t0, names, offsets.get(c.node, 0.0), run.ports)),
                       key=by_frame)
    assert len(table) == sum(s["packets"] for s in scanned) + sum(1 for r in reference if r[key("msg_index")] > 0)
    assert table == reference and any(r[key("decoded")] for r in table)   # decoded messages are among them
