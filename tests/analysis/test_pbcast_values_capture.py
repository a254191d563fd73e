"""The bimodal histogram counted from the crashed sender's own capture (issue #34): analysis.protocols.pbcast_values'
`wire_seqs` (which messages a member's datagrams name), `sent_datagrams` (the datagrams it sent, from its pcap) and
`bimodal_values` with a capture: every message it put on the wire counted from observation, the offered rate only a
cross-check. Hand-worked on the 6-member crash log of tests/analysis/test_pbcast_values.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from analysis.pcap import LINKTYPE_LINUX_SLL2, CaptureFile
from analysis.protocols.pbcast_values import sent_datagrams, wire_seqs
from gossipnode import wire
from gossipnode.protocols.pbcast.wire import Data, Digest
from tests.analysis import synthetic
from tests.analysis.test_pbcast_values import T0, bimodal_log, make_run, sent

H1 = "10.0.0.2"          # make_run's address of h1 (id 1)


def dat(seq: int, origin: int = 1, sender: int = 1, repair: bool = False) -> bytes:
    return wire.encode(Data(sender, 3, origin, sender, seq, b"x" * 64, repair))


def dig(*ranges: tuple[int, int, int], sender: int = 1) -> bytes:
    return wire.encode(Digest(sender, 3, tuple(ranges)))


def test_wire_seqs_by_hand():
    got = wire_seqs([
        (0.5, dig((1, 1, 4), (2, 1, 9))),          # names origin 1's 1-4 (and origin 2's, not ours)
        (1.0, dat(5)),                               # a first-phase DATA of 5
        (2.0, dat(3, repair=True)),                  # a REPAIR of 3 (named by the digest first)
        (2.5, dat(7, origin=2)),                     # another origin
        (3.0, dat(8)[:20]),                          # cut inside the seq: skipped
        (3.5, b"ZZ" + dat(9)[2:]),                   # a foreign magic: skipped
        (4.0, dig((1, 10, 11), (1, 12, 12))[:-4]),   # the second range cut: the first only
    ], origin=1)
    assert got == {1: (0.5, "digest"), 2: (0.5, "digest"), 3: (0.5, "data"), 4: (0.5, "digest"),
                   5: (1.0, "data"), 10: (4.0, "digest"), 11: (4.0, "digest")}
    assert wire_seqs([], 1) == {}


def write_capture(d: Path, records: list[tuple[float, bytes]], snaplen: int = 128) -> None:
    (d / "pcaps").mkdir(exist_ok=True)
    synthetic.write_pcap(d / "pcaps" / "h1-any.pcap", LINKTYPE_LINUX_SLL2, records, snaplen=snaplen)


def test_sent_datagrams_are_the_members_own_udp_as_captured(tmp_path):
    write_capture(tmp_path, [
        (10.0, synthetic.sll2(synthetic.udp(H1, "10.0.0.3", dat(1)))),        # out: kept, cut by the snaplen
        (10.1, synthetic.sll2(synthetic.udp("10.0.0.3", H1, dat(2, sender=2)))),   # in: not its own
        (10.2, synthetic.sll2(synthetic.icmp_echo("h1", "h0"))),              # not UDP
        (10.3, synthetic.sll2(synthetic.udp(H1, "10.0.0.1", dig((1, 1, 2))))),
    ], snaplen=100)
    cap = CaptureFile("h1", "any", str(tmp_path / "pcaps" / "h1-any.pcap"), "pcaps/h1-any.pcap", H1)
    out = list(sent_datagrams(cap))
    assert [t for t, _ in out] == [pytest.approx(10.0), pytest.approx(10.3)]
    # SLL2 20 + IPv4 20 + UDP 8 = 48 bytes of headers: 52 of the DATA's 85 bytes were captured
    assert out[0][1] == dat(1)[:52] and out[1][1] == dig((1, 1, 2))
    assert wire_seqs(out, 1) == {1: (pytest.approx(10.0), "data"), 2: (pytest.approx(10.3), "digest")}
    missing = CaptureFile("h1", "any", str(tmp_path / "nope.pcap"), "nope.pcap", H1)
    assert list(sent_datagrams(missing)) == []


def crash_run(tmp_path: Path, name: str, capture: list[tuple[float, bytes]] | None, rate: float = 20) -> dict:
    """bimodal_log (h1 sends 1..6 by 9.9, crash at 10.0) with h1's log losing seq 6's data_sent and nothing logged
    of seq 7-9; the survivors received seq 6. With `capture`, h1's pcap (times relative to t0)."""
    ev = [e for e in bimodal_log() if not (e["event"] == "data_sent" and e["seq"] == 6)]
    d = make_run(tmp_path / name, ev, 6, workload={"rate_per_s": rate})
    if capture is not None:
        write_capture(d, [(T0 + t, p) for t, p in capture])
    return _values(d)


def _values(d: Path) -> dict:
    from analysis import protocols
    from analysis.rundir import load
    v = protocols.get("pbcast").run_values(load(d))
    return {k[len("bimodal_"):]: x for k, x in v.items() if k.startswith("bimodal_")}


def out_frame(payload: bytes) -> bytes:
    return synthetic.sll2(synthetic.udp(H1, "10.0.0.1", payload))


def test_without_a_capture_the_rate_extrapolates_as_before(tmp_path):
    # the last logged send is seq 5 at 9.5; at 20/s seq 6..15 were due by 10.0: seq 6 is known from the receptions,
    # 7..15 (9) extrapolated with fraction 0
    r = crash_run(tmp_path, "rate", None)
    assert r["source"] == "events+rate" and r["sender_pcap"] == []
    assert (r["src_log"], r["src_pcap"], r["src_received"], r["src_gap"], r["src_extrapolated"]) == (5, 0, 1, 0, 9)
    assert r["sent_extrapolated"] == 9 and r["sent_rate_estimate"] == 9
    assert (r["messages"], r["almost_all"], r["almost_none"], r["between"]) == (15, 3, 10, 2)


def test_with_the_senders_capture_every_count_is_observed(tmp_path):
    # h1's capture: DATA of 1..8 (6 at 9.9, 7 at 9.95, 8 at 9.97), a digest at 9.98 naming 1..9 (9 held, its DATA
    # lost on h1's own link), nothing later (the cut): 9 messages on the wire, none extrapolated. Seq 7, 8, 9:
    # nobody survived with them, fraction 0 each.
    cap = [(8.0 + 0.1 * s, out_frame(dat(s))) for s in range(1, 6)]
    cap += [(9.9, out_frame(dat(6))), (9.95, out_frame(dat(7))), (9.97, out_frame(dat(8))),
            (9.98, out_frame(dig((1, 1, 9))))]
    r = crash_run(tmp_path, "cap", cap)
    assert r["source"] == "pcap" and r["sender_pcap"] == ["h1"]
    # seq 1-5 logged, 6-9 from the capture (9 from the digest alone); the rate would have added 7..15
    assert (r["src_log"], r["src_pcap"], r["src_received"], r["src_gap"], r["src_extrapolated"]) == (5, 4, 0, 0, 0)
    assert r["sent_pcap_digest_only"] == 1 and r["sent_extrapolated"] == 0 and r["sent_rate_estimate"] == 9
    assert r["sent_log_not_on_wire"] == 0
    # the log's tail: last logged send 9.5, crash 10.0; the capture's last datagram 9.98; no capture counters in
    # this manifest, no lag recorded
    assert r["log_tail_s"] == pytest.approx(0.5) and r["wire_after_crash_s"] == pytest.approx(-0.02, abs=1e-6)
    assert r["pcap_dropped"] is None and r["crash_lag_ms_max"] is None
    # fractions 1, 1, 2/3, 1/3, 0 (seq 5: only h4), 1 (seq 6), 0, 0, 0
    assert (r["messages"], r["almost_all"], r["almost_none"], r["between"]) == (9, 3, 4, 2)
    want = [0] * 20
    want[19], want[13], want[6], want[0] = 3, 1, 1, 4
    assert r["hist_all"] == want
    # the last second [9.0, 10.0): seq 3-9 (seq 6-9 at their capture times)
    assert (r["last_messages"], r["last_almost_none"]) == (7, 4)


def test_a_logged_send_the_capture_lacks_is_counted_and_reported(tmp_path):
    # h1 logged seq 7 at 9.95 (its log kept it), nobody received it and its capture has no frame of it (lost on h1's
    # own link, or after a silent crash's cut): counted, fraction 0, and reported; seq 1-6 on the capture
    ev = bimodal_log() + [sent(7, 9.95)]
    d = make_run(tmp_path / "lack", ev, 6, workload={"rate_per_s": 20})
    write_capture(d, [(T0 + 8.0 + 0.1 * s, out_frame(dat(s))) for s in range(1, 7)])
    r = _values(d)
    assert r["sent_log_not_on_wire"] == 1 and r["src_log"] == 7 and r["src_pcap"] == 0
    assert (r["messages"], r["almost_all"], r["almost_none"], r["between"]) == (7, 3, 2, 2)
    # the rate: seq 7 at 9.95, 20/s: seq 8 due at 10.0 -> estimate 1, not counted (the capture is the observation)
    assert r["sent_rate_estimate"] == 1 and r["sent_extrapolated"] == 0
