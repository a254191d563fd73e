"""A small synthetic run directory whose every number can be worked out by hand.

Frames are built with dpkt and written by `write_pcap` below (plain struct), not by the code under test. The
expected values the tests check are written out in the tests, derived from the constants here by hand.

Group: members h0..h3 (ids 0..3), tree h0 -> {h1, h2}, h2 -> h3; senders [3, 1] (h3 is S[0], h1 is S[1]).
Protocol start t0 = 1000.0; h2 is crashed at t0 + 4.0. Captures: h0 Linux cooked v2 (tcpdump -i any), h1
Ethernet, h2 Linux cooked v1 and cut short inside its third record, h3 listed in the manifest but missing.
"""
from __future__ import annotations

import json
import socket
import struct
from pathlib import Path

import dpkt

from gossipnode.protocols.gsgc import wire

T0 = 1000.0
ADDR = {"h0": "10.0.0.1", "h1": "10.0.0.2", "h2": "10.0.0.3", "h3": "10.0.0.4"}
IDS = {"h0": 0, "h1": 1, "h2": 2, "h3": 3}
SENDERS = [3, 1]
LINKS = [("h0", "h1", "h0-eth0", "h1-eth0", "10.128.0.0", "10.128.0.1"),
         ("h0", "h2", "h0-eth1", "h2-eth0", "10.128.0.2", "10.128.0.3"),
         ("h2", "h3", "h2-eth1", "h3-eth0", "10.128.0.4", "10.128.0.5")]

# (The event logs are made to exercise the definitions, not to be causally possible.)
# Wire messages: 17 bytes of headers (envelope 9 + GSGC's seq/round 8) and the body. Sizes: GOSSIP 17 + 4 + 8 * 2
# + ceil(4 / 8) = 38, LIVE 17 + 2 + 4 = 23, DATA 17 + 2 + 30 = 49; the envelope's length is the size - 9.
GOSSIP_SIZE, LIVE_SIZE, DATA_SIZE = 38, 23, 49


def gossip(sender: int, seq: int, rnd: int = 0) -> bytes:
    return wire.encode(wire.Message(wire.MsgType.GOSSIP, sender, seq, rnd, wire.Gossip((1, 2), (0, 1), 0b0011, 4)))


def live(sender: int, seq: int) -> bytes:
    return wire.encode(wire.Message(wire.MsgType.LIVE, sender, seq, 0, wire.Live(bytes([0, 1, 2, 3]))))


def data(sender: int, seq: int) -> bytes:
    return wire.encode(wire.Message(wire.MsgType.DATA, sender, seq, 0, wire.Data(sender, b"d" * 30)))


# --- frames ---------------------------------------------------------------------------------------------------

def udp(src: str, dst: str, payload: bytes, sport: int = 7000, dport: int = 7000) -> dpkt.ip.IP:
    u = dpkt.udp.UDP(sport=sport, dport=dport, data=payload)
    u.ulen = 8 + len(payload)
    return dpkt.ip.IP(src=socket.inet_aton(ADDR.get(src, src)), dst=socket.inet_aton(ADDR.get(dst, dst)),
                      p=17, data=u)


def icmp_echo(src: str, dst: str) -> dpkt.ip.IP:
    msg = dpkt.icmp.ICMP(type=8, data=dpkt.icmp.ICMP.Echo(id=1, seq=1, data=b"ping"))  # 12 bytes
    return dpkt.ip.IP(src=socket.inet_aton(ADDR[src]), dst=socket.inet_aton(ADDR[dst]), p=1, data=msg)


def sll2(l3: dpkt.Packet | bytes, ethtype: int = 0x0800, ifindex: int = 2) -> bytes:
    return bytes(dpkt.sll2.SLL2(ethtype=ethtype, intindex=ifindex, data=l3))


def sll(l3: dpkt.Packet | bytes, ethtype: int = 0x0800) -> bytes:
    return bytes(dpkt.sll.SLL(ethtype=ethtype, data=l3))


def eth(l3: dpkt.Packet | bytes, ethtype: int = 0x0800) -> bytes:
    return bytes(dpkt.ethernet.Ethernet(src=b"\x02" * 6, dst=b"\x04" * 6, type=ethtype, data=l3))


def eth_vlan(l3: dpkt.Packet, vlan: int = 5) -> bytes:
    return b"\x04" * 6 + b"\x02" * 6 + struct.pack("!HHH", 0x8100, vlan, 0x0800) + bytes(l3)


def write_pcap(path: Path, linktype: int, records: list[tuple[float, bytes]], snaplen: int = 65535,
               cut: int | None = None) -> Path:
    """A classic little-endian microsecond pcap. Frames longer than snaplen are stored cut, with their
    original length; `cut` truncates the file to that many bytes."""
    out = bytearray(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, linktype))
    for ts, frame in records:
        sec = int(ts)
        usec = int(round((ts - sec) * 1e6))
        cap = frame[:snaplen]
        out += struct.pack("<IIII", sec, usec, len(cap), len(frame)) + cap
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(out[:cut] if cut is not None else out))
    return path


# h0's own traffic (tcpdump -i any: Linux cooked v2): frame lengths 20 + 20 + 8 + payload.
H0_FRAMES = [
    (1001.1, sll2(udp("h0", "h1", gossip(0, 1)))),              # out GOSSIP   86
    (1001.2, sll2(udp("h0", "h1", live(0, 2)))),                # out LIVE     71
    (1001.3, sll2(udp("h1", "h0", data(1, 1)))),                # in  DATA     97
    (1001.6, sll2(udp("h0", "h1", gossip(0, 3)))),              # out GOSSIP   86
    (1002.1, sll2(udp("h0", "h1", gossip(0, 4)))),              # out GOSSIP   86
    (1002.4, sll2(icmp_echo("h1", "h0"))),                      # in  ICMP     52
    (1002.6, sll2(bytes(dpkt.arp.ARP()), ethtype=0x0806)),      # ARP          48
    (1003.1, sll2(udp("h0", "h1", gossip(0, 5, rnd=1)))),       # out GOSSIP   86
    (1003.2, sll2(udp("h0", "h1", live(0, 6)))),                # out LIVE     71
    (1003.3, sll2(udp("h1", "h0", data(1, 2)))),                # in  DATA     97
    (1003.4, sll2(udp("h0", "10.9.9.9", b"q" * 10, sport=40000, dport=53))),  # out UDP/53   58
    (1003.5, sll2(udp("h3", "h0", gossip(3, 1)))),              # in  GOSSIP   86
]

# h1 (Ethernet, snaplen 60: frames are 14 + 20 + 8 + payload; 60 keeps 18 payload bytes, 14 after a VLAN tag).
H1_FRAMES = [
    (1001.3, eth(udp("h1", "h0", data(1, 1)))),                 # out DATA     91, cut
    (1003.3, eth(udp("h1", "h0", data(1, 2)))),                 # out DATA     91, cut
    (1001.1, eth(udp("h0", "h1", gossip(0, 1)))),               # in  GOSSIP   80, cut
    (1001.2, eth(udp("h0", "h1", live(0, 2)))),                 # in  LIVE     65, cut
    (1001.6, eth(udp("h0", "h1", gossip(0, 3)))),               # in  GOSSIP
    (1002.1, eth(udp("h0", "h1", gossip(0, 4)))),               # in  GOSSIP
    (1003.1, eth(udp("h0", "h1", gossip(0, 5, rnd=1)))),        # in  GOSSIP
    (1003.2, eth(udp("h0", "h1", live(0, 6)))),                 # in  LIVE
    (1004.1, eth(udp("h1", "h0", gossip(1, 1)))),               # out GOSSIP
    (1004.2, eth(udp("h1", "h3", gossip(1, 2)))),               # out GOSSIP
    (1004.3, eth(udp("h1", "h3", gossip(1, 3)))),               # out GOSSIP
    (1004.4, eth(udp("h3", "h1", b"XX" + gossip(3, 9)[2:]))),   # in  foreign magic
    (1004.5, eth_vlan(udp("h1", "h3", gossip(1, 4)))),          # out GOSSIP, VLAN-tagged: header cut
]
H1_SNAPLEN = 60

# h2 (Linux cooked v1): two whole records, the file ends inside the third.
H2_FRAMES = [
    (1002.2, sll(udp("h2", "h0", live(2, 1)))),                 # out LIVE     67
    (1002.3, sll(udp("h2", "h0", gossip(2, 2)))),               # out GOSSIP   82
    (1003.0, sll(udp("h2", "h3", gossip(2, 3)))),               # cut short
]


def _ev(node: str, ts: float, event: str, **fields) -> dict:
    return {"ts": ts, "node": node, "event": event, **fields}


def _started(node: str, ts: float) -> list[dict]:
    return [_ev(node, ts, "node_started", id=IDS[node]),
            _ev(node, ts, "round_started", level="global", round=0, via="start")]


def _done(node: str, ts: float, rnd: int, via: str, steps: int, tpr: float, nxt: bool = True) -> list[dict]:
    out = [_ev(node, ts, "round_completed", level="global", round=rnd, via=via, steps=steps,
               started_ts=ts - tpr, tpr_s=tpr)]
    if nxt:
        out.append(_ev(node, ts, "round_started", level="global", round=rnd + 1, via=via))
    return out


def _stable(node: str, ts: float, s: list[int], level: str = "global") -> dict:
    return _ev(node, ts, "stable", level=level, via="gossip", round=0, s=s)


EVENTS: dict[str, list[dict]] = {
    "h0": [
        *_started("h0", 1000.0),
        _stable("h0", 1002.0, [0, 1]),
        *_done("h0", 1002.25, 0, "next_round", 2, 2.25),
        _ev("h0", 1003.0, "declared_failed", member=2, l=6),      # before h2's crash: a false declaration
        _ev("h0", 1003.75, "readmitted", member=2, l=0),
        *_done("h0", 1005.0, 1, "constructed", 3, 2.75),
        _stable("h0", 1005.0, [1, 2]),
        _ev("h0", 1006.0, "declared_failed", member=2, l=6),
        _ev("h0", 1010.0, "node_stopped", reason="signal SIGTERM"),
    ],
    "h1": [
        *_started("h1", 1000.0),
        _ev("h1", 1001.0, "data_sent", seq=1, size=49, fanout=3),
        *_done("h1", 1002.0, 0, "constructed", 2, 2.0),
        _stable("h1", 1002.25, [0, 1]),
        _stable("h1", 1003.0, [5, 5], level="local"),           # a local array: ignored by time to stable
        _ev("h1", 1003.0, "data_sent", seq=2, size=49, fanout=3),
        *_done("h1", 1005.5, 1, "next_round", 3, 3.5),
        _stable("h1", 1005.5, [1, 2]),
        _ev("h1", 1006.0, "data_sent", seq=3, size=49, fanout=3),
        _ev("h1", 1006.5, "declared_failed", member=2, l=6),
        _stable("h1", 1007.0, [wire.MAX_SEQ, 2]),                # an S entry above any seq sent
        _ev("h1", 1007.0, "declared_failed", member=2, l=7),      # not the first after the crash
        _ev("h1", 1010.0, "node_stopped", reason="signal SIGTERM"),
    ],
    "h2": [
        *_started("h2", 1000.25),
        *_done("h2", 1002.5, 0, "constructed", 3, 2.25),
        _stable("h2", 1002.5, [1, 1]),
    ],
    "h3": [
        *_started("h3", 1001.25),
        _ev("h3", 1001.5, "data_sent", seq=1, size=49, fanout=3),
        *_done("h3", 1002.5, 0, "next_round", 2, 1.25),
        _stable("h3", 1003.5, [0, 1]),
        _ev("h3", 1004.5, "declared_failed", member=1, l=6),      # h1 never crashed: a false declaration
        *_done("h3", 1004.75, 1, "next_round", 2, 2.25),        # before anyone constructed round 1
        _stable("h3", 1005.25, [1, 2]),
        _ev("h3", 1009.0, "node_stopped", reason="signal SIGTERM"),
    ],
    "orchestrator": [
        _ev("orchestrator", T0, "run_started", members=["h0", "h1", "h2", "h3"], duration_s=10.0),
        _ev("orchestrator", T0 + 2.0, "action_applied", index=1, action="pause", op="stop_signal", planned_s=2.0,
            actual_s=2.0, lag_ms=0.0, targets=["h3"], links=[]),
        _ev("orchestrator", T0 + 2.5, "action_applied", index=1, action="pause", op="cont_signal", planned_s=2.5,
            actual_s=2.5, lag_ms=0.0, targets=["h3"], links=[]),
        _ev("orchestrator", T0 + 4.0, "action_applied", index=0, action="crash", op="crash", planned_s=4.0,
            actual_s=4.0, lag_ms=0.0, targets=["h2"], links=[]),
        _ev("orchestrator", T0 + 11.0, "run_stopped", reason="completed"),
    ],
}
H2_PARTIAL_LINE = '{"ts": 1003.9, "node": "h2", "ev'  # the log of a SIGKILLed node may end mid-line


def event_lines(node: str) -> list[str]:
    return [json.dumps(e) for e in EVENTS[node]]


def tc_qdiscs(dev_drops: dict[str, int]) -> list[dict]:
    """`tc -s -j qdisc show` of a node shaped with tbf + pfifo (tbf's drops include its pfifo's)."""
    out = [{"kind": "noqueue", "handle": "0:", "dev": "lo", "root": True, "bytes": 0, "packets": 0, "drops": 0,
            "overlimits": 0, "backlog": 0}]
    for dev, drops in dev_drops.items():
        out.append({"kind": "tbf", "handle": "1:", "dev": dev, "root": True, "bytes": 1000, "packets": 10,
                    "drops": drops, "overlimits": 2 * drops, "backlog": 0})
        out.append({"kind": "pfifo", "handle": "10:", "dev": dev, "parent": "1:1", "bytes": 1000, "packets": 10,
                    "drops": drops, "overlimits": 0, "backlog": 0})
    return out


def plan() -> dict:
    nodes = []
    parent = {"h1": "h0", "h2": "h0", "h3": "h2"}
    for i, name in enumerate(["h0", "h1", "h2", "h3"]):
        nodes.append({"name": name, "index": i, "role": "member", "address": ADDR[name], "parent": parent.get(name),
                      "children": [c for c, p in parent.items() if p == name]})
    links = [{"id": f"{p}-{c}", "parent": p, "child": c, "parent_if": pif, "child_if": cif, "parent_addr": pa,
              "child_addr": ca, "down": {"rate_bps": 30000, "delay_s": 0.005, "queue_pkts": 64},
              "up": {"rate_bps": 30000, "delay_s": 0.005, "queue_pkts": 64}}
             for p, c, pif, cif, pa, ca in LINKS]
    return {"nodes": nodes, "links": links, "routes": {}, "seed": 1}


def make_run(root: Path, run_id: str = "synthetic-20260101T000000Z", step_s: float = 1.0,
             subgroup: int = 2) -> Path:
    """Write the synthetic run directory under `root` and return it."""
    d = root / run_id
    members = [{"id": IDS[n], "name": n, "addr": f"{ADDR[n]}:7000"} for n in ADDR]
    for n in ADDR:
        cfg = {"name": n, "id": IDS[n], "listen": f"{ADDR[n]}:7000", "members": members, "protocol": "gsgc",
               "gsgc": {"subgroup": subgroup, "step_s": step_s, "fail_k": 6}, "senders": SENDERS,
               "workload": {"rate_per_s": 1, "size_bytes": DATA_SIZE}}
        (d / "configs").mkdir(parents=True, exist_ok=True)
        (d / "configs" / f"{n}.json").write_text(json.dumps(cfg))
    (d / "plan.json").write_text(json.dumps(plan()))
    (d / "events").mkdir()
    for node in EVENTS:
        text = "\n".join(event_lines(node)) + "\n"
        if node == "h2":
            text += H2_PARTIAL_LINE
        (d / "events" / f"{node}.jsonl").write_text(text)
    write_pcap(d / "pcaps" / "h0-any.pcap", 276, H0_FRAMES)
    write_pcap(d / "pcaps" / "h1-any.pcap", 1, H1_FRAMES, snaplen=H1_SNAPLEN)
    whole = 24 + sum(16 + len(f) for _, f in H2_FRAMES[:2])
    write_pcap(d / "pcaps" / "h2-any.pcap", 113, H2_FRAMES, cut=whole + 16 + 10)
    (d / "tc").mkdir()
    (d / "tc" / "h0.json").write_text(json.dumps(tc_qdiscs({"h0-eth0": 5, "h0-eth1": 0})))
    (d / "tc" / "h1.json").write_text(json.dumps(tc_qdiscs({"h1-eth0": 0})))
    (d / "tc" / "h2.json").write_text(json.dumps(tc_qdiscs({"h2-eth0": 0, "h2-eth1": 3})))
    (d / "fidelity.json").write_text(json.dumps({"shaper": "tbf", "max_abs_error_ms": 0.05, "paths": [
        {"src": "h0", "dst": "h1", "hops": 1, "expected_rtt_ms": 70.8, "emulated_rtt_ms": 0.0,
         "median_rtt_ms": 0.05, "error_ms": 0.05, "sent": 10, "received": 10, "loss_measured": 0.0}]}))
    manifest = {
        "run_id": run_id, "experiment_file": "synthetic.yaml", "seed": 1, "backend": "mininet", "shaper": "tbf",
        "spec": {"name": "synthetic", "workload": {"senders": 2, "rate_per_s": 1}},
        "shaping_warnings": ["delay (5ms) is NOT emulated on 6 link directions with shaper 'tbf'"],
        "started_at": T0 - 2, "t0_unix": T0, "ended_at": T0 + 11.0, "status": "completed",
        "schedule": {"actions": 2, "applied_ops": 3, "lag_ms_median": 0.0, "lag_ms_max": 0.0},
        "fidelity": {"max_abs_error_ms": 0.05, "sent": 10, "received": 10},
        "captures": [{"node": n, "ifname": "any", "file": f"pcaps/{n}-any.pcap", "captured": c,
                      "dropped_by_kernel": 0} for n, c in (("h0", 12), ("h1", 13), ("h2", 3), ("h3", 9))],
    }
    (d / "manifest.json").write_text(json.dumps(manifest))
    return d
