"""The Wireshark dissector generated from the wire registry: the Lua text (pure), the CLI command, and tshark with
it as a decoder independent of Spark: per-type message counts of every capture equal the packet table's."""
from __future__ import annotations

import os
import random
import shutil
import subprocess
from collections import Counter
from enum import IntEnum

import pytest

from analysis.dissector import generate
from gossipnode import wire
from tests.analysis import synthetic as syn

TRANSPORTS = ("udp", "mcast", "tcp")


def test_every_field_of_every_registered_layout_is_declared():
    lua = generate()
    for name in ("gossip.magic", "gossip.version", "gossip.protocol", "gossip.protocol_id", "gossip.type",
                 "gossip.type_id", "gossip.sender", "gossip.length", "gossip.error"):
        assert f'"{name}"' in lua
    # GSGC's header and bodies, direct's header and payload, as the layouts in the node's wire modules name them
    for name in ("gsgc.seq", "gsgc.round", "gsgc.origin", "gsgc.payload", "gsgc.count", "gsgc.ranges", "gsgc.m",
                 "gsgc.nbits", "gsgc.M", "gsgc.S", "gsgc.W", "gsgc.n", "gsgc.L", "direct.seq", "direct.payload"):
        assert f'"gossip.{name}"' in lua
    from gossipnode import wire
    table = ", ".join(f'[{c.id}] = "{c.name}"' for c in sorted(wire.CODECS.values(), key=lambda c: c.id))
    assert f"local PROTOCOLS = {{{table}}}" in lua and '[1] = "gsgc", [2] = "direct"' in table
    assert '[2] = {[1] = "DATA"},' in lua and '[4] = "GOSSIP", [5] = "SC_GOSSIP"' in lua
    assert "udp_table:add(7000, p_gossip)" in lua and "udp_table:add(7001, p_gossip)" in lua
    assert "tcp_table:add(7000, p_gossip_tcp)" in lua and "dissect_tcp_pdus(tvb, tree, ENVELOPE" in lua


class _T(IntEnum):
    A = 1
    B = 2


def _codec(**kw) -> wire.Codec:
    """A codec that is not registered: the generator takes any registry."""
    layouts = (wire.Layout(_T.A, "A", (wire.F("k", "u16"), wire.F("xs", "u32", "k"))),
               wire.Layout(_T.B, "B", (wire.F("k", "u8"), wire.F("bits", "bytes", "bits:k"),
                                       wire.F("pairs", "u16", "k*2"), wire.F("tail", "bytes", "rest"))))
    return wire.Codec(id=200, name="toy", types=_T, header=(), layouts=layouts, encode=None, decode=None, **kw)


def test_a_field_name_with_two_kinds_is_named_per_type_and_ports_are_parameters():
    lua = generate([_codec()], udp_ports=(9000,), mcast_ports=(9001, 9002), tcp_ports=(9003,))
    assert '"gossip.toy.A.k"' in lua and '"gossip.toy.B.k"' in lua      # u16 in A, u8 in B
    assert '"gossip.toy.xs"' in lua and '"gossip.toy.tail"' in lua
    assert 'local n = math.floor(((v["k"] or 0) + 7) / 8)' in lua           # bits:k
    assert 'local n = (v["k"] or 0) * 2' in lua                             # k*2
    assert [line for line in lua.splitlines() if line.endswith("p_gossip)") or line.endswith("p_gossip_tcp)")] == [
        "udp_table:add(9000, p_gossip)", "udp_table:add(9001, p_gossip)", "udp_table:add(9002, p_gossip)",
        "tcp_table:add(9003, p_gossip_tcp)"]
    assert "[200] = " in lua and "gsgc" not in lua


def test_cli_writes_the_dissector(tmp_path):
    from typer.testing import CliRunner

    from orchestrator.cli import app

    out = tmp_path / "gossip.lua"
    r = CliRunner().invoke(app, ["dissector", "--out", str(out), "--mcast-port", "7001", "--mcast-port", "7005"])
    assert r.exit_code == 0, r.output
    assert out.read_text() == generate(mcast_ports=(7001, 7005))


# --- tshark with the generated dissector, beside Spark ------------------------------------------------------------

def _need_tshark() -> None:
    if shutil.which("tshark") is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("tshark missing in CI (make setup installs it)", pytrace=False)
        pytest.skip("needs tshark (run `make setup`)")


def tshark_types(lua, pcap, extra: tuple[str, ...] = ()) -> Counter:
    """(protocol, type) -> messages tshark's dissector shows in a pcap (every message of every frame)."""
    out = subprocess.run(["tshark", "-o", "tcp.reassemble_out_of_order:TRUE", "-X", f"lua_script:{lua}", "-r",
                          str(pcap), "-T", "fields", "-e", "gossip.protocol", "-e", "gossip.type", "-E",
                          "occurrence=a", "-E", "aggregator=,", *extra],
                         capture_output=True, text=True, check=True)
    counts: Counter = Counter()
    for line in out.stdout.splitlines():
        protos, types = (line.split("\t") + [""])[:2]
        if types:
            counts.update(zip(protos.split(","), types.split(",")))
    return counts


def spark_types(spark, captures, ports=None) -> dict[str, Counter]:
    from analysis import ingest, metrics

    packets = ingest.parse_packets(ingest.files_frame(spark, captures), "r", syn.T0, {}, ports=ports)
    per: dict[str, Counter] = {}
    for r in metrics.messages_by_type(packets).collect():
        per.setdefault(r["node"], Counter())[(r["protocol_name"], r["type_name"])] += r["messages"]
    return per


@pytest.mark.spark
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_per_type_counts_equal_tsharks_for_each_transport(spark, tmp_path, transport):
    _need_tshark()
    from analysis.rundir import load

    run = load(syn.make_direct_run(tmp_path, transport))
    lua = tmp_path / "gossip.lua"
    lua.write_text(generate(mcast_ports=sorted(run.ports.mcast)))
    ours = spark_types(spark, run.captures, run.ports)
    theirs = {c.node: tshark_types(lua, c.path) for c in run.captures}
    assert ours == theirs
    # and what the synthetic run holds, by hand: every copy of h0's 3 and h1's 2 messages (unicast and TCP: one per
    # other member; multicast: one datagram each, seen by everyone)
    expected = {"udp": [11, 9, 5, 5], "tcp": [11, 9, 5, 5], "mcast": [5, 5, 5, 5]}[transport]
    assert [ours[n][("direct", "DATA")] for n in ("h0", "h1", "h2", "h3")] == expected


def _gsgc_frames(rng: random.Random, n: int) -> list[tuple[float, bytes]]:
    names = list(syn.ADDR)
    out = []
    for i in range(n):
        a, b = rng.sample(names, 2)
        kind = rng.random()
        if kind < 0.4:
            payload = syn.gossip(syn.IDS[a], i, rnd=i % 5)
        elif kind < 0.6:
            payload = syn.live(syn.IDS[a], i)
        elif kind < 0.8:
            payload = syn.data(syn.IDS[a], i)
        elif kind < 0.9:
            payload = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
        else:
            out.append((1000 + i * 0.01, syn.sll2(syn.icmp_echo(a, b))))
            continue
        out.append((1000 + i * 0.01, syn.sll2(syn.udp(a, b, payload))))
    return out


@pytest.mark.spark
def test_gsgc_per_type_counts_and_the_display_filter(spark, tmp_path):
    _need_tshark()
    from analysis.pcap import CaptureFile

    rng = random.Random(11)
    caps = []
    for node in ("h0", "h1"):
        f = syn.write_pcap(tmp_path / f"{node}-any.pcap", 276, _gsgc_frames(rng, 300))
        caps.append(CaptureFile(node, "any", str(f), f.name, syn.ADDR[node]))
    lua = tmp_path / "gossip.lua"
    lua.write_text(generate())
    ours = spark_types(spark, caps)
    assert ours == {c.node: tshark_types(lua, c.path) for c in caps}
    assert set(ours["h0"]) == {("gsgc", "GOSSIP"), ("gsgc", "LIVE"), ("gsgc", "DATA")}
    # the filter of the issue selects exactly the GOSSIP messages
    gossip = tshark_types(lua, caps[0].path, ("-Y", 'gossip.type == "GOSSIP"'))
    assert gossip == Counter({("gsgc", "GOSSIP"): ours["h0"][("gsgc", "GOSSIP")]})
