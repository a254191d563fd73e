"""The `direct` protocol's core (sans-IO), the TCP framing of the runtime, and a TCP cluster on loopback (no root)."""
from __future__ import annotations

import asyncio
import socket

from gossipnode.config import NodeConfig
from gossipnode.protocols.base import Output
from gossipnode.protocols.direct.core import DirectNode
from gossipnode.protocols.direct.wire import Data
from gossipnode.runtime import NodeRuntime, _TcpConn
from gossipnode import wire

from .cluster import events, run_all


def config(me: int, n: int = 4, transport: str = "udp", ports: list[int] | None = None, **kw) -> NodeConfig:
    ports = ports or [30000 + i for i in range(n)]
    members = [{"id": i, "name": f"m{i}", "addr": f"127.0.0.1:{ports[i]}"} for i in range(n)]
    extra = {}
    if transport == "mcast":
        extra["multicast"] = [{"name": "g", "address": "239.1.0.1", "port": 7001}]
    return NodeConfig.model_validate({
        "name": f"m{me}", "id": me, "listen": members[me]["addr"], "members": members,
        "protocol": {"name": "direct", "transport": transport}, "senders": [0, 1],
        "workload": {"rate_per_s": 10, "size_bytes": 50}, "event_log": "/nonexistent/x.jsonl", **extra, **kw})


def first_send(core: DirectNode) -> Output:
    return core.tick(core.next_wakeup())


def test_each_transport_sends_one_message_its_way():
    udp = first_send(DirectNode(config(0, transport="udp"), 0.0))
    assert [d for d, _ in udp.send] == [1, 2, 3] and not udp.stream and not udp.mcast
    tcp = first_send(DirectNode(config(0, transport="tcp"), 0.0))
    assert [d for d, _ in tcp.stream] == [1, 2, 3] and not tcp.send
    mcast = first_send(DirectNode(config(0, transport="mcast"), 0.0))
    assert [g for g, _ in mcast.mcast] == ["g"] and not mcast.send and not mcast.stream
    msg = udp.send[0][1]
    assert (msg.sender, msg.seq, len(wire.encode(msg))) == (0, 1, 50)   # size_bytes is the whole datagram
    assert [e.event for e in udp.events] == ["data_sent"]


def test_a_receiver_logs_the_first_copy_only():
    core = DirectNode(config(2), 0.0)
    first = core.receive(Data(0, 1, b"x"), 1.0, "udp")
    again = core.receive(Data(0, 1, b"x"), 1.1, "udp")
    assert [(e.event, e.fields["origin"], e.fields["seq"]) for e in first.events] == [("data_received", 0, 1)]
    assert again.events == [] and core.counters["data_duplicate"] == 1


def test_over_tcp_a_failed_peer_is_sent_nothing_more():
    core = DirectNode(config(0, transport="tcp"), 0.0)
    out = core.on_connection(2, "failed", 0.5, "eof")
    assert [(e.event, e.fields) for e in out.events] == [("connection_failed", {"peer": 2, "reason": "eof"})]
    assert [d for d, _ in first_send(core).stream] == [1, 3]


class _FakeNode:
    def __init__(self):
        self.frames: list[bytes] = []
        self.bad: list[str] = []

    def on_frame(self, conn, frame):
        self.frames.append(frame)

    def bad_frame(self, conn, head, reason):
        self.bad.append(reason)


def test_tcp_frames_are_cut_by_the_envelope_length_across_and_within_segments():
    frames = [wire.encode(Data(1, seq, bytes(size))) for seq, size in ((1, 0), (2, 300), (3, 7))]
    stream = b"".join(frames)
    for cuts in ([], [1], [5, 9, 10, 200], list(range(1, len(stream)))):     # coalesced, split, byte by byte
        node = _FakeNode()
        conn = _TcpConn(node, 1, True)
        bounds = [0, *cuts, len(stream)]
        for a, b in zip(bounds, bounds[1:]):
            conn.data_received(stream[a:b])
        assert node.frames == frames and node.bad == [] and conn.buf == b""


def test_a_foreign_stream_is_a_bad_frame():
    node = _FakeNode()
    conn = _TcpConn(node, 1, True)
    conn.data_received(b"GET / HTTP/1.1\r\n\r\n")
    assert node.frames == [] and node.bad and "foreign packet" in node.bad[0]


def test_four_members_over_tcp_on_loopback_deliver_everything_once(tmp_path):
    socks = []
    for _ in range(4):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    cfgs = [config(i, transport="tcp", ports=ports, seed=3, duration_s=4.0,
                   workload={"rate_per_s": 20, "size_bytes": 40, "stop_s": 1.5})
            .model_copy(update={"event_log": tmp_path / f"m{i}.jsonl"}) for i in range(4)]
    assert asyncio.run(run_all([NodeRuntime(c, s) for c, s in zip(cfgs, socks)])) == ["duration"] * 4
    log = [e for c in cfgs for e in events(c)]
    sent = {(int(e["node"][1:]), e["seq"]) for e in log if e["event"] == "data_sent"}
    got = [(e["node"], e["origin"], e["seq"]) for e in log if e["event"] == "data_received"]
    # sends stop at 1.5 s, the run at 4 s: 2.5 s to deliver; late timers skip sends, so only "some" are required
    assert len(sent) >= 2 and len(got) == len(set(got)) == 3 * len(sent)
    ups = [e for e in log if e["event"] == "connection_up"]
    # senders 0 and 1 connect to everyone: 2 x 3 - 1 distinct pairs, each reported up at both ends
    assert len(ups) == 2 * 5


class _FakeTransport:
    def __init__(self):
        self.aborted = False

    def abort(self):
        self.aborted = True


def test_a_frame_the_core_rejects_is_dropped_alone_one_that_does_not_authenticate_ends_the_stream(tmp_path):
    # member 3 hears from member 2 on its TCP connection: DATA from 2, who is no sender, is the core's BadMessage —
    # logged, counted, the connection kept (the frames behind it are sound); a frame naming another member on 2's
    # connection, or bytes that do not decode, end it
    cfg = config(3, transport="tcp").model_copy(update={"event_log": tmp_path / "m3.jsonl"})
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        node = NodeRuntime(cfg, sock)
        node.core = DirectNode(cfg, 0.0)
        conn = _TcpConn(node, 2, True)
        conn.ip, conn.transport = "127.0.0.1", _FakeTransport()
        node.on_frame(conn, wire.encode(Data(2, 1, b"x")))
        assert node.counters["bad_packets"] == 1 and not conn.transport.aborted
        node.on_frame(conn, wire.encode(Data(0, 1, b"x")))
        assert node.counters["bad_packets"] == 2 and conn.transport.aborted
        conn.transport = _FakeTransport()
        node.on_frame(conn, b"\x00" * 24)
        assert node.counters["bad_packets"] == 3 and conn.transport.aborted
        node._log.close()
    reasons = [e["reason"] for e in events(cfg) if e["event"] == "bad_packet"]
    assert "who is not a sender" in reasons[0] and "on the connection of member 2" in reasons[1], reasons
