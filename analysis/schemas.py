"""Explicit schemas of the analysis tables (Parquet) and of the JSON event records.

Times: `ts` is unix seconds (float, wall clock, as the node and tcpdump stamp them); `t_s` is seconds since the
protocol start `t0_unix` of the run's manifest.
"""
from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)


def _s(name: str, dtype, nullable: bool = True) -> StructField:
    return StructField(name, dtype, nullable)


# One row per captured frame; a TCP segment that completes several protocol messages has one row per message
# (`msg_index` 0, 1, ...; the frame's columns repeat). Written partitioned by `node`.
PACKETS = StructType([
    _s("run_id", StringType(), False),
    _s("node", StringType(), False),          # the capturing node (pcap file <node>-<interface>.pcap)
    _s("interface", StringType(), False),     # tcpdump's -i ("any", or an interface name)
    _s("file", StringType(), False),          # the pcap, relative to the run directory
    _s("frame", LongType(), False),           # 1-based position in the file (tshark's frame.number)
    _s("ts", DoubleType(), False),
    _s("t_s", DoubleType(), False),
    _s("frame_len", IntegerType(), False),    # length on the wire incl. the link header (tshark's frame.len)
    _s("cap_len", IntegerType(), False),      # bytes captured (snaplen may cut the frame)
    _s("if_index", IntegerType()),            # Linux cooked v2 only: the interface the frame crossed
    _s("direction", StringType()),            # out (src = node's address), in (dst = it, or a multicast group),
                                              # fwd; null: not IPv4
    _s("ip_src", StringType()),
    _s("ip_dst", StringType()),
    _s("src_node", StringType()),             # plan node owning ip_src (node or link address), if any
    _s("dst_node", StringType()),
    _s("ip_proto", IntegerType()),
    _s("ip_len", IntegerType()),              # IPv4 total length
    _s("src_port", IntegerType()),
    _s("dst_port", IntegerType()),
    _s("transport", StringType()),            # udp (unicast), mcast (UDP to a group), tcp; null: neither
    _s("payload_len", IntegerType()),         # UDP: payload length from the UDP header (the message size);
                                              # TCP: the segment's payload length
    _s("payload_truncated", BooleanType()),   # the capture holds less of the message (or payload) than it has
    _s("msg_index", IntegerType(), False),    # the message's position among those this frame completes (TCP)
    _s("decoded", BooleanType(), False),      # a protocol message: header decoded (and the body, when captured)
    _s("error", StringType()),                # why not decoded
    # wire.header_fields (null when not decoded); seq and round are null where the protocol has no such field
    _s("version", IntegerType()),
    _s("protocol", IntegerType()),            # the protocol's id (wire.Codec.id)
    _s("protocol_name", StringType()),
    _s("type", IntegerType()),
    _s("type_name", StringType()),
    _s("sender", IntegerType()),
    _s("seq", LongType()),
    _s("round", LongType()),
    _s("length", IntegerType()),              # bytes after the envelope: the message is ENVELOPE_SIZE + length
])

PACKET_COLUMNS = tuple(f.name for f in PACKETS.fields)

# One row per pcap file: what a structural scan of the file found (the packets table holds the frames).
CAPTURES = StructType([
    _s("node", StringType(), False),
    _s("interface", StringType(), False),
    _s("file", StringType(), False),
    _s("link_type", IntegerType()),
    _s("packets", LongType(), False),         # readable records
    _s("bytes", LongType(), False),           # sum of their original lengths
    _s("first_ts", DoubleType()),
    _s("last_ts", DoubleType()),
    _s("error", StringType()),                # missing, not a pcap, truncated or corrupt: the rest is unreadable
])

# The fields of the node's and the orchestrator's JSON event records that the metrics use, typed. Every record
# is also kept whole in the `raw` column of the events table.
EVENT_JSON = StructType([
    _s("ts", DoubleType()),
    _s("node", StringType()),
    _s("event", StringType()),
    _s("id", LongType()),                     # node_started
    _s("level", StringType()),
    _s("round", LongType()),
    _s("via", StringType()),
    _s("steps", LongType()),
    _s("started_ts", DoubleType()),
    _s("tpr_s", DoubleType()),
    _s("s", ArrayType(LongType())),           # stable: the stability array, indexed by sender position
    _s("seq", LongType()),
    _s("size", LongType()),
    _s("fanout", LongType()),
    _s("origin", LongType()),
    _s("sender", LongType()),
    _s("repair", BooleanType()),
    _s("through", LongType()),
    _s("missing", LongType()),
    _s("discarded", LongType()),
    _s("buffer_size", LongType()),
    _s("buffer_bytes", LongType()),
    _s("member", LongType()),                 # suspected, declared_failed, ...: the member id
    _s("l", LongType()),
    _s("group", LongType()),
    _s("reason", StringType()),
    _s("timer", StringType()),
    _s("missed", LongType()),
    # orchestrator records
    _s("action", StringType()),
    _s("op", StringType()),
    _s("index", LongType()),
    _s("planned_s", DoubleType()),
    _s("actual_s", DoubleType()),
    _s("lag_ms", DoubleType()),
    _s("targets", ArrayType(StringType())),
    _s("links", ArrayType(StringType())),
])

# One row per event record. Written partitioned by `event`.
EVENTS = StructType(
    [_s("run_id", StringType(), False), _s("source", StringType(), False)]  # source: the log file's name
    + [f for f in EVENT_JSON.fields if f.name in ("ts", "node", "event")]
    + [_s("t_s", DoubleType())]
    + [f for f in EVENT_JSON.fields if f.name not in ("ts", "node", "event")]
    + [_s("raw", StringType(), False)]
)

# The group's members (from the node configs); a small table the metrics join against.
MEMBERS = StructType([
    _s("member_id", IntegerType(), False),
    _s("member", StringType(), False),
    _s("sender_index", IntegerType()),        # position in `senders` (the index into M, R, S); null: not a sender
    _s("local_group", IntegerType()),         # index into gsgc.local_groups; null: global gossip
])
