"""Ingest throughput of the Spark analysis against `tshark -T fields`, on the same pcap set, in one run.

Writes a synthetic capture set like a run's (one Linux cooked v2 pcap per member, snaplen 128, a GOSSIP / LIVE /
DATA mix with some ICMP and ARP), then times, in one SparkSession (start-up excluded):
  - spark vector: the analysis' ingest (`analysis.ingest.ingest_packets`): each pcap decoded once on the
    executors with numpy over the file's bytes into Arrow record batches (`analysis.pcapvec`, mapInArrow), the
    per-file scan collected in the same pass, the packets table written as Parquet;
  - spark vector, no write: the same decode handed to the JVM (`parse_packets`), summed instead of written: how
    much of the ingest is the decode and how much Spark's Parquet writer;
  - spark arrow: the ingest before it (the reference): the per-packet decoder (`analysis.pcap.packet_rows`: a
    FrameDecoder, a tuple per packet) into Arrow batches in the same mapInArrow, the same Parquet table;
  - spark rows: the ingest before that: a scan job reading every pcap, then the pcaps read again and parsed into
    an RDD of Python tuples → createDataFrame → the same Parquet table;
  - tshark: `tshark -r FILE -T fields -e frame.time_epoch -e ip.src -e ip.dst -e udp.srcport -e udp.dstport
    -e frame.len -e udp.length` over every file, once one file after another (one process) and once with as
    many processes as Spark has cores;
and prints packets/s for each and the ratios (vector against arrow, arrow against rows, each against tshark),
after checking that the vector and arrow tables are identical (every row, every column). tshark only splits the
fields; it cannot decode the protocol header.

    python benchmarks/bench_analysis.py [--packets 1048576] [--files 16] [--master local[*]] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gossipnode.protocols.gsgc import wire

SNAPLEN = 128
TSHARK_FIELDS = ["frame.time_epoch", "ip.src", "ip.dst", "udp.srcport", "udp.dstport", "frame.len", "udp.length"]


def _ip_udp(src: str, dst: str, payload: bytes) -> bytes:
    udp = struct.pack("!HHHH", 7000, 7000, 8 + len(payload), 0) + payload
    return struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0, socket.inet_aton(src),
                       socket.inet_aton(dst)) + udp


def _sll2(l3: bytes, ethertype: int = 0x0800) -> bytes:
    return struct.pack("!HHIHBB8s", ethertype, 0, 2, 1, 0, 6, b"\x00" * 8) + l3


def _templates(n_members: int, me: int, rng: random.Random) -> list[bytes]:
    """Frames one member's capture holds, in the proportions of a run with 25 senders."""
    addr = [f"10.0.{i // 250}.{i % 250 + 1}" for i in range(n_members)]
    peers = [i for i in range(n_members) if i != me]
    m = 25
    out = []
    for _ in range(64):
        p = rng.choice(peers)
        src, dst = (addr[me], addr[p]) if rng.random() < 0.5 else (addr[p], addr[me])
        sender = me if src == addr[me] else p
        gossip = wire.Message(wire.MsgType.GOSSIP, sender, rng.randrange(1 << 20), rng.randrange(100),
                              wire.Gossip(tuple(range(m)), tuple(range(m)), 1, n_members))
        live = wire.Message(wire.MsgType.LIVE, sender, rng.randrange(1 << 20), 0, wire.Live(bytes(n_members)))
        data = wire.Message(wire.MsgType.DATA, sender, rng.randrange(1 << 20), 0, wire.Data(sender, b"x" * 62))
        out += [_sll2(_ip_udp(src, dst, wire.encode(gossip)))] * 8 + [_sll2(_ip_udp(src, dst, wire.encode(live)))] * 8
        out += [_sll2(_ip_udp(src, dst, wire.encode(data)))] * 3
    out.append(_sll2(b"\x00" * 28, 0x0806))  # ARP: undecodable, counted
    return out


def write_captures(directory: Path, packets: int, files: int, seed: int = 1) -> list[Path]:
    rng = random.Random(seed)
    paths = []
    per_file = -(-packets // files)
    for i in range(files):
        frames = _templates(200, i, rng)
        path = directory / f"h{i}-any.pcap"
        n = min(per_file, packets - i * per_file)
        with open(path, "wb") as f:
            f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, SNAPLEN, 276))
            buf = bytearray()
            for k in range(n):
                frame = frames[rng.randrange(len(frames))]
                cap = frame[:SNAPLEN]
                buf += struct.pack("<IIII", 1_800_000_000 + k // 1000, (k % 1000) * 1000, len(cap), len(frame))
                buf += cap
                if len(buf) > 1 << 22:
                    f.write(buf)
                    buf.clear()
            f.write(buf)
        paths.append(path)
    return paths


def _rows_ingest(spark, caps, out: Path) -> list:
    """The ingest before the Arrow one (the reference): scan job, then RDD of tuples → createDataFrame."""
    from analysis import ingest
    from analysis.pcap import CaptureFile, packet_rows, scan
    from analysis.schemas import CAPTURES, PACKETS

    files = ingest.files_frame(spark, caps)
    n = files.count()
    one_per_task = (files.rdd.zipWithIndex().map(lambda r: (r[1], CaptureFile(**r[0].asDict())))
                    .partitionBy(max(n, 1), lambda i: i).values())
    scanned = spark.createDataFrame(one_per_task.map(scan), CAPTURES).collect()
    rows = one_per_task.flatMap(lambda cap: packet_rows(cap, "bench", 1_800_000_000.0, {}))
    ingest.write_packets(spark.createDataFrame(rows, PACKETS, verifySchema=False), out)
    return scanned


def _arrow_ingest(spark, caps, out: Path) -> list:
    """The ingest before the vectorised one (the reference): the per-packet decoder into Arrow batches
    (`packet_rows` → `to_batches`) in the same one-pass mapInArrow, the scan through the same accumulator."""
    from analysis import ingest
    from analysis.pcap import CaptureFile, CaptureScan, packet_rows
    from analysis.schemas import PACKETS

    sink = ingest.ScanSink(spark)
    acc = sink._acc

    def decode(batches):
        schema = ingest.arrow_schema(PACKETS)
        for b in batches:
            for f in b.to_pylist():
                cap = CaptureFile(**f)
                found = CaptureScan(cap)
                yield from ingest.to_batches(packet_rows(cap, "bench", 1_800_000_000.0, {}, scan=found), schema)
                acc.add({cap.file: found.row()})

    ingest.write_packets(ingest.files_frame(spark, caps).mapInArrow(decode, PACKETS), out)
    return sink.rows(caps)


def _decode_only(spark, caps) -> int:
    """The vectorised decode handed to the JVM, summed instead of written (the Parquet writer left out)."""
    from pyspark.sql import functions as F

    from analysis import ingest

    packets = ingest.parse_packets(ingest.files_frame(spark, caps), "bench", 1_800_000_000.0, {})
    return packets.agg(F.count("*"), F.sum("frame_len")).first()[0]


def time_spark(paths: list[Path], master: str, out: Path) -> dict:
    """Session start-up, the ingests (s) and the packets in each table, whether the vector and arrow tables are
    identical, and the cores."""
    from pyspark.sql import functions as F

    from analysis import ingest
    from analysis.pcap import CaptureFile
    from analysis.schemas import PACKETS
    from analysis.session import get_spark

    t = time.perf_counter()
    spark = get_spark(master)
    startup = time.perf_counter() - t
    caps = [CaptureFile(p.stem.rsplit("-", 1)[0], "any", str(p), p.name, None) for p in paths]
    res = {"startup_s": startup, "cores": spark.sparkContext.defaultParallelism}
    for name, job in (("rows", lambda o: _rows_ingest(spark, caps, o)),
                      ("arrow", lambda o: _arrow_ingest(spark, caps, o)),
                      ("vector", lambda o: ingest.ingest_packets(spark, caps, "bench", 1_800_000_000.0, {}, o))):
        t = time.perf_counter()
        scanned = job(out / name)
        res[f"{name}_s"] = time.perf_counter() - t
        res[f"{name}_rows"] = ingest.read_table(spark, out / name, PACKETS).agg(F.count("*")).first()[0]
        res[f"{name}_scanned"] = sum(r["packets"] for r in scanned)
    t = time.perf_counter()
    res["decode_rows"] = _decode_only(spark, caps)
    res["decode_s"] = time.perf_counter() - t
    vector, arrow = (ingest.read_table(spark, out / name, PACKETS) for name in ("vector", "arrow"))
    res["identical"] = vector.exceptAll(arrow).isEmpty() and arrow.exceptAll(vector).isEmpty()
    spark.stop()
    return res


def _tshark(path: Path) -> int:
    argv = ["tshark", "-r", str(path), "-T", "fields"] + [a for f in TSHARK_FIELDS for a in ("-e", f)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as p:
        lines = sum(1 for _ in p.stdout)
    if p.returncode:
        raise RuntimeError(f"tshark failed on {path}")
    return lines


def time_tshark(paths: list[Path], processes: int) -> tuple[float, int]:
    t = time.perf_counter()
    with ThreadPoolExecutor(processes) as pool:
        n = sum(pool.map(_tshark, paths))
    return time.perf_counter() - t, n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--packets", type=int, default=1 << 20)
    p.add_argument("--files", type=int, default=16)
    p.add_argument("--master", default="local[*]")
    p.add_argument("--dir", type=Path, help="where to write the pcaps and the table (default: a temporary dir)")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)
    if shutil.which("tshark") is None:
        print("tshark is not installed", file=sys.stderr)
        return 2
    work = args.dir or Path(tempfile.mkdtemp(prefix="bench-analysis-"))
    try:
        (work / "pcaps").mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        paths = write_captures(work / "pcaps", args.packets, args.files)
        size = sum(f.stat().st_size for f in paths)
        print(f"capture set: {args.packets} packets in {len(paths)} files, {size / 1e6:.1f} MB "
              f"(written in {time.perf_counter() - t:.1f} s); {os.cpu_count()} CPUs")
        sp = time_spark(paths, args.master, work / "packets")
        cores = sp["cores"]
        print(f"spark ({args.master}, {cores} cores): start-up {sp['startup_s']:.1f} s")
        for name in ("rows", "arrow", "vector"):
            print(f"spark {name}: ingest {sp[name + '_s']:.1f} s, {sp[name + '_rows']} rows -> "
                  f"{sp[name + '_rows'] / sp[name + '_s']:,.0f} packets/s")
        print(f"spark vector, decode only (no Parquet write): {sp['decode_s']:.1f} s -> "
              f"{sp['decode_rows'] / sp['decode_s']:,.0f} packets/s")
        print(f"vector and arrow tables identical: {'yes' if sp['identical'] else 'NO'}")
        seq_s, n_seq = time_tshark(paths, 1)
        print(f"tshark -T fields, 1 process: {seq_s:.1f} s, {n_seq} lines -> {n_seq / seq_s:,.0f} packets/s")
        par_s, n_par = time_tshark(paths, cores)
        print(f"tshark -T fields, {cores} processes: {par_s:.1f} s -> {n_par / par_s:,.0f} packets/s")
        counts = [sp["rows_rows"], sp["arrow_rows"], sp["vector_rows"], sp["decode_rows"], sp["rows_scanned"],
                  sp["arrow_scanned"], sp["vector_scanned"], n_seq, n_par]
        if set(counts) != {args.packets} or not sp["identical"]:
            print(f"packet counts differ or tables are not identical: spark rows / arrow / vector / decode only "
                  f"{counts[:4]}, their scans {counts[4:7]}, tshark {counts[7:]}, written {args.packets}; vector and "
                  f"arrow tables identical: {sp['identical']}", file=sys.stderr)
            return 1
        result = {"packets": args.packets, "files": len(paths), "bytes": size, "cores": cores,
                  "spark_startup_s": sp["startup_s"], "spark_rows_s": sp["rows_s"], "spark_arrow_s": sp["arrow_s"],
                  "spark_vector_s": sp["vector_s"], "spark_decode_s": sp["decode_s"],
                  "tshark_1_s": seq_s, "tshark_n_s": par_s, "spark_rows_pps": args.packets / sp["rows_s"],
                  "spark_arrow_pps": args.packets / sp["arrow_s"], "spark_vector_pps": args.packets / sp["vector_s"],
                  "spark_decode_pps": args.packets / sp["decode_s"], "tshark_1_pps": n_seq / seq_s,
                  "tshark_n_pps": n_par / par_s, "arrow_gain": sp["rows_s"] / sp["arrow_s"],
                  "vector_gain": sp["arrow_s"] / sp["vector_s"], "identical": sp["identical"],
                  "rows_vs_tshark_1": seq_s / sp["rows_s"], "rows_vs_tshark_n": par_s / sp["rows_s"],
                  "arrow_vs_tshark_1": seq_s / sp["arrow_s"], "arrow_vs_tshark_n": par_s / sp["arrow_s"],
                  "vector_vs_tshark_1": seq_s / sp["vector_s"], "vector_vs_tshark_n": par_s / sp["vector_s"]}
        print(f"arrow / rows: {result['arrow_gain']:.2f} x faster; vector / arrow: {result['vector_gain']:.2f} x faster")
        print(f"ratio spark / tshark (tshark time / spark time; > 1: spark faster): rows "
              f"{result['rows_vs_tshark_1']:.2f} (one tshark), {result['rows_vs_tshark_n']:.2f} ({cores} tsharks); "
              f"arrow {result['arrow_vs_tshark_1']:.2f}, {result['arrow_vs_tshark_n']:.2f}; "
              f"vector {result['vector_vs_tshark_1']:.2f}, {result['vector_vs_tshark_n']:.2f}")
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
