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


# --- runs of the `direct` protocol, one per transport -------------------------------------------------------------
#
# Same members, plan and addresses; senders h0 (id 0) and h1 (id 1); direct DATA messages of 13 + 37 = 50 bytes.
# The event logs and the pcaps are made independently (each to exercise its definitions):
#
# Events: h0 sends seq 1, 2, 3 at t0 + 1.0, 2.0, 3.0; h1 sends seq 1, 2 at t0 + 1.5, 2.5. h3 starts at t0 + 1.2;
# h2 is crashed at t0 + 2.75. Receipts (receiver: latency) — DIRECT_RECEIPTS below; h3 never logs h0's seq 2.
#
# Pcaps (Linux cooked v2, one per member, every copy of every message, with ARP noise): udp — a datagram per
# (message, other member), 7000 -> 7000; mcast — one datagram per message to 239.1.0.1:7001 from port 40000 + id,
# received once by every other member, plus an IGMP report and an mDNS datagram (224.0.0.251:5353); tcp — one
# connection per pair (opened by the lower id, to port 7000), handshake, the messages cut into segments as
# TCP_PATTERNS says (coalesced, split inside an envelope, a retransmission, a reordering seen by the receiver),
# a bare ACK after each data segment, FINs.
DIRECT_SIZE = 50
DIRECT_GROUP = ("data", "239.1.0.1", 7001)
DIRECT_SENT = {"h0": [(1, 1001.0), (2, 1002.0), (3, 1003.0)], "h1": [(1, 1001.5), (2, 1002.5)]}
DIRECT_RECEIPTS = {  # (origin, seq) -> {receiver: latency}
    ("h0", 1): {"h1": 0.010, "h2": 0.020},
    ("h1", 1): {"h0": 0.010, "h2": 0.020, "h3": 0.030},
    ("h0", 2): {"h1": 0.010, "h2": 0.050},
    ("h1", 2): {"h0": 0.020, "h2": 0.030, "h3": 0.060},
    ("h0", 3): {"h1": 0.010, "h3": 0.040},
}
DIRECT_STARTED = {"h0": 1000.0, "h1": 1000.0, "h2": 1000.0, "h3": 1001.2}
DIRECT_CRASH = ("h2", 2.75)
# TCP: how each direction's byte stream (its messages, concatenated) is cut into segments: a list of
# (start, end) byte ranges in sending order; "R" repeats the previous segment (a retransmission). `reorder`: the
# receiver captures these segment indexes swapped.
TCP_PATTERNS = {
    ("h0", "h1"): {"cuts": [(0, 100), (100, 105), (105, 150), "R"]},          # m1+m2 | m3's first 5 bytes | ...
    ("h0", "h2"): {"cuts": [(0, 20), (20, 103), (103, 150)]},                 # split m1, m2 whole, split m3
    ("h0", "h3"): {"cuts": [(0, 50), (50, 100), (100, 150)], "reorder": (1, 2)},
    ("h1", "h0"): {"cuts": [(0, 100)]},                                       # both of h1's in one segment
    ("h1", "h2"): {"cuts": [(0, 50), (50, 100)]},
    ("h1", "h3"): {"cuts": [(0, 4), (4, 9), (9, 50), (50, 100)]},             # m1's envelope over 2 segments
}


def direct_data(sender: int, seq: int) -> bytes:
    from gossipnode.protocols.direct import wire as dwire

    return wire.wire.encode(dwire.Data(sender, seq, b"p" * (DIRECT_SIZE - dwire.HEADER_SIZE)))


def tcp(src: str, dst: str, sport: int, dport: int, seq: int, ack: int, flags: int, payload: bytes = b"") -> dpkt.ip.IP:
    t = dpkt.tcp.TCP(sport=sport, dport=dport, seq=seq & 0xFFFFFFFF, ack=ack & 0xFFFFFFFF, flags=flags,
                     win=65535, data=payload)
    return dpkt.ip.IP(src=socket.inet_aton(ADDR.get(src, src)), dst=socket.inet_aton(ADDR.get(dst, dst)), p=6,
                      data=t)


def _direct_frames(transport: str) -> dict[str, list[tuple[float, bytes]]]:
    """Each member's captured frames (unsorted (ts, frame) lists) of the direct run on `transport`."""
    frames: dict[str, list[tuple[float, bytes]]] = {n: [(1000.5, sll2(bytes(dpkt.arp.ARP()), ethtype=0x0806))]
                                                    for n in ADDR}
    names = list(ADDR)
    if transport == "udp":
        for origin, sends in DIRECT_SENT.items():
            for seq, ts in sends:
                for k, dst in enumerate(n for n in names if n != origin):
                    f = sll2(udp(origin, dst, direct_data(IDS[origin], seq)))
                    frames[origin].append((ts + 0.0001 * k, f))
                    frames[dst].append((ts + 0.005 + 0.0001 * k, f))
    elif transport == "mcast":
        _, group, port = DIRECT_GROUP
        for origin, sends in DIRECT_SENT.items():
            for seq, ts in sends:
                f = sll2(udp(origin, group, direct_data(IDS[origin], seq), sport=40000 + IDS[origin], dport=port))
                frames[origin].append((ts, f))
                for dst in names:
                    if dst != origin:
                        frames[dst].append((ts + 0.005, f))
        igmp = dpkt.ip.IP(src=socket.inet_aton(ADDR["h2"]), dst=socket.inet_aton("224.0.0.22"), p=2,
                          data=b"\x22\x00\xf9\x02\x00\x00\x00\x01\x04\x00\x00\x00\xef\x01\x00\x01")
        frames["h2"].append((1000.6, sll2(igmp)))
        frames["h3"].append((1000.7, sll2(udp("h3", "224.0.0.251", b"m" * 20, sport=5353, dport=5353))))
    else:
        _tcp_frames(frames)
    return frames


def _tcp_frames(frames: dict[str, list[tuple[float, bytes]]]) -> None:
    names = list(ADDR)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if a not in DIRECT_SENT and b not in DIRECT_SENT:
                continue
            port_a = 50000 + 10 * IDS[a] + IDS[b]          # the opener's ephemeral port; b listens on 7000
            isn = {a: 1_000_000 * (IDS[a] + 1) + IDS[b], b: 4_294_967_000 - IDS[a]}   # b's wraps around 2^32
            ep = {a: (a, port_a), b: (b, 7000)}
            nxt = {a: isn[a] + 1, b: isn[b] + 1}
            t = 1000.1 + 0.01 * IDS[a] + 0.001 * IDS[b]
            seqs: list[tuple[float, str, str, dpkt.ip.IP]] = []   # (ts, sender, receiver, packet)

            def seg(src: str, ts: float, flags: int, seq: int, ack: int, payload: bytes = b"") -> None:
                dst = b if src == a else a
                seqs.append((ts, src, dst, tcp(src, dst, ep[src][1], ep[dst][1], seq, ack, flags, payload)))

            S, A, P, FIN = dpkt.tcp.TH_SYN, dpkt.tcp.TH_ACK, dpkt.tcp.TH_PUSH, dpkt.tcp.TH_FIN
            seg(a, t, S, isn[a], 0)
            seg(b, t + 0.0002, S | A, isn[b], nxt[a])
            seg(a, t + 0.0004, A, nxt[a], nxt[b])
            for src in (a, b):
                if src not in DIRECT_SENT:
                    continue
                dst = b if src == a else a
                stream = b"".join(direct_data(IDS[src], seq) for seq, _ in DIRECT_SENT[src])
                pattern = TCP_PATTERNS[(src, dst)]
                start_ts = DIRECT_SENT[src][0][1]
                sent: list[tuple[int, int]] = []
                for k, cut in enumerate(pattern["cuts"]):
                    lo, hi = sent[-1] if cut == "R" else cut
                    sent.append((lo, hi))
                    ts = start_ts + 0.01 * k
                    seg(src, ts, A | P, nxt[src] + lo, nxt[dst], stream[lo:hi])
                    seg(dst, ts + 0.001, A, nxt[dst], nxt[src] + hi)
                nxt[src] += len(stream)
            seg(a, 1009.0, A | FIN, nxt[a], nxt[b])
            seg(b, 1009.001, A | FIN, nxt[b], nxt[a] + 1)
            seg(a, 1009.002, A, nxt[a] + 1, nxt[b] + 1)
            for node in (a, b):
                mine = [x for x in seqs]
                reorder = TCP_PATTERNS.get((b if node == a else a, node), {}).get("reorder")
                if reorder:   # this receiver saw two of the peer's data segments swapped
                    data_idx = [j for j, x in enumerate(mine) if x[2] == node and len(x[3].data.data)]
                    i1, i2 = data_idx[reorder[0]], data_idx[reorder[1]]
                    (t1, *r1), (t2, *r2) = mine[i1], mine[i2]
                    mine[i1], mine[i2] = (t1, *r2), (t2, *r1)
                frames[node] += [(ts, sll2(pkt)) for ts, _, _, pkt in mine]


def direct_pcaps(d: Path, transport: str) -> dict[str, Path]:
    out = {}
    for node, recs in _direct_frames(transport).items():
        out[node] = write_pcap(d / "pcaps" / f"{node}-any.pcap", 276, sorted(recs, key=lambda r: r[0]))
    return out


def direct_events() -> dict[str, list[dict]]:
    ev: dict[str, list[dict]] = {n: [_ev(n, ts, "node_started", id=IDS[n])] for n, ts in DIRECT_STARTED.items()}
    for origin, sends in DIRECT_SENT.items():
        for seq, ts in sends:
            ev[origin].append(_ev(origin, ts, "data_sent", seq=seq, size=DIRECT_SIZE, fanout=3))
            for rcv, lat in DIRECT_RECEIPTS[(origin, seq)].items():
                ev[rcv].append(_ev(rcv, ts + lat, "data_received", origin=IDS[origin], seq=seq, sender=IDS[origin],
                                   repair=False, via="udp"))
    for n in ADDR:
        if n != DIRECT_CRASH[0]:
            ev[n].append(_ev(n, 1010.0, "node_stopped", reason="signal SIGTERM"))
        ev[n].sort(key=lambda e: e["ts"])
    crash, at = DIRECT_CRASH
    ev["orchestrator"] = [
        _ev("orchestrator", T0, "run_started", members=list(ADDR), duration_s=10.0),
        _ev("orchestrator", T0 + at, "action_applied", index=0, action="crash", op="crash", planned_s=at,
            actual_s=at, lag_ms=0.0, targets=[crash], links=[]),
        _ev("orchestrator", T0 + 11.0, "run_stopped", reason="completed"),
    ]
    return ev


def make_direct_run(root: Path, transport: str, run_id: str | None = None) -> Path:
    """A run directory of the `direct` protocol on `transport` (udp, tcp or mcast), in this version's format."""
    d = root / (run_id or f"direct-{transport}-20260101T000000Z")
    members = [{"id": IDS[n], "name": n, "addr": f"{ADDR[n]}:7000"} for n in ADDR]
    name, group, port = DIRECT_GROUP
    (d / "configs").mkdir(parents=True, exist_ok=True)
    for n in ADDR:
        cfg = {"name": n, "id": IDS[n], "listen": f"{ADDR[n]}:7000", "members": members,
               "protocol": {"name": "direct", "transport": transport}, "senders": [0, 1],
               "workload": {"rate_per_s": 1, "size_bytes": DIRECT_SIZE}, "seed": IDS[n],
               "event_log": f"/x/events/{n}.jsonl"}
        if transport == "mcast":
            cfg["multicast"] = [{"name": name, "address": group, "port": port, "ttl": 4, "send_if": None,
                                 "join_ifs": [], "source": ADDR[n], "may_send": True}]
        (d / "configs" / f"{n}.json").write_text(json.dumps(cfg))
    (d / "plan.json").write_text(json.dumps(plan()))
    (d / "events").mkdir()
    for node, evs in direct_events().items():
        (d / "events" / f"{node}.jsonl").write_text("\n".join(json.dumps(e) for e in evs) + "\n")
    pcaps = direct_pcaps(d, transport)
    manifest = {
        "run_id": d.name, "experiment_file": f"direct-{transport}.yaml", "seed": 1, "backend": "mininet",
        "shaper": "netem", "spec": {"name": f"direct-{transport}", "workload": {"senders": 2, "rate_per_s": 1}},
        "started_at": T0 - 2, "t0_unix": T0, "ended_at": T0 + 11.0, "status": "completed",
        "captures": [{"node": n, "ifname": "any", "file": f"pcaps/{n}-any.pcap",
                      "captured": sum(1 for _ in open_frames(p)), "dropped_by_kernel": 0}
                     for n, p in pcaps.items()],
    }
    (d / "manifest.json").write_text(json.dumps(manifest))
    return d


def open_frames(path: Path) -> list[bytes]:
    """The frames of a pcap written by write_pcap (for counting)."""
    data = path.read_bytes()
    off, out = 24, []
    while off < len(data):
        _, _, cap, _ = struct.unpack_from("<IIII", data, off)
        out.append(data[off + 16:off + 16 + cap])
        off += 16 + cap
    return out


def write_event_logs(d: Path, events: list[dict]) -> None:
    """events/<node>.jsonl per node under d, each ending in a torn line (a member killed mid-write)."""
    (d / "events").mkdir(parents=True)
    by: dict[str, list[dict]] = {}
    for e in events:
        by.setdefault(e["node"], []).append(e)
    for node, es in by.items():
        (d / "events" / f"{node}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in es) + '{"torn')
