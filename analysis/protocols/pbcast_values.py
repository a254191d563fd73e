"""pbcast's per-run numbers and the ones `vsync` and `tradvsync` share (seed 001's measurements), pure over the run's
files (`run_values`): the definitions are in analysis/protocols/pbcast.py's docstring; the Spark plug-in there keeps
only the report's tables and what needs the packets. No Spark here, so a figures script imports these without it."""
from __future__ import annotations

import math
import statistics
import struct
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from analysis.protocols import crash_times, generic_values, message_receipts

if TYPE_CHECKING:
    from analysis.pcap import CaptureFile
    from analysis.rundir import RunDir

FIGURE1_WINDOW_S = 0.5
FIGURE1_SAMPLES = 80
FIGURE1_TARGET = "h5"       # topologies/pbcast-fig1.yaml's perturbed member (its p = 0 runs have no perturb action)
BIN_WIDTH = 0.05            # the bimodal histogram's bins (the report's delivery histogram: tenths)
BINS = 20
LAST_S = 1.0                # bimodal: the messages sent in the last second before the crash


# --- the run's numbers, pure (run_values) ----------------------------------------------------------------------

def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def packing_of(manifest: dict) -> str:
    """`process` (a process per member) or `packs of N` (docs/packing.md), from the manifest's decision."""
    pk = manifest.get("packing") or {}
    return "process" if pk.get("mode", "process") == "process" else f"packs of {pk.get('members_per_process')}"


def spec_section(run: RunDir) -> dict[str, Any]:
    """The protocol's section of the run's spec (`protocol: {<name>: {...}}`)."""
    proto = (run.manifest.get("spec") or {}).get("protocol") or {}
    name = run.protocol or next(iter(proto), None)
    sec = proto.get(name) if isinstance(proto, dict) else None
    return sec if isinstance(sec, dict) else {}


def spec_params(run: RunDir) -> dict[str, Any]:
    spec = run.manifest.get("spec") or {}
    sched = spec.get("schedule") or []
    perturb = [a for a in sched if a.get("action") == "perturb"]
    crash = [a["fraction"] for a in sched if a.get("action") == "crash" and a.get("fraction") is not None]
    proto = spec.get("protocol") or {}
    return {"protocol": run.protocol or next(iter(proto), None), "members": len(run.members),
            "offered_per_s": (spec.get("workload") or {}).get("rate_per_s"),
            "loss": (spec.get("links") or {}).get("loss"), "packing": packing_of(run.manifest),
            "p": float(perturb[0].get("p", 0.0)) if perturb else 0.0, "crash_fraction": crash[0] if crash else None}


def senders_of(run: RunDir) -> set[str]:
    return {m.name for m in run.members if m.sender_index is not None}


def counters(stop_event: dict) -> dict[str, int]:
    """The protocol core's counters in a `node_stopped` event (pbcast: the layer's; vsync: its own + the layer's)."""
    return {k: int(v) for k, v in ((stop_event.get("protocol") or {}).get("counters") or {}).items()}


def throughput_values(run: RunDir) -> dict[str, Any]:
    """Figure 1's throughput (the module's docstring): per member, the medians, the sender's rate."""
    senders = senders_of(run)
    spec = run.manifest.get("spec") or {}
    apart = {m for a in spec.get("schedule") or [] if a.get("action") == "perturb" for m in a.get("nodes") or []}
    apart = apart or {FIGURE1_TARGET}
    started: set[str] = set()
    disturbed: set[str] = set()
    perturbed: set[str] = set()
    sends: list[float] = []
    got: dict[str, list[float]] = {}
    for e in run.events:
        ev, node = e.get("event"), e.get("node")
        if ev == "node_started":
            started.add(node)
        elif ev == "action_applied" and e.get("action") in ("perturb", "pause", "crash"):
            disturbed.update(e.get("targets") or [])
            if e.get("action") == "perturb":
                perturbed.update(e.get("targets") or [])
        elif ev == "data_sent":
            sends.append(float(e["ts"]))
        elif ev == "data_received":
            got.setdefault(node, []).append(float(e["ts"]))
    out: dict[str, Any] = {"throughput_unperturbed_per_s": None, "throughput_unperturbed_min_per_s": None,
                           "throughput_unperturbed_windows": 0, "throughput_perturbed_per_s": None,
                           "throughput_unperturbed_1s_per_s": None, "unperturbed_members": [],
                           "perturbed_members": sorted(perturbed), "sent_per_s": None,
                           "fig1_throughput_per_s": None, "fig1_throughput_min_per_s": None,
                           "fig1_throughput_perturbed_per_s": None, "fig1_throughput_1s_per_s": None,
                           "fig1_unperturbed": 0}
    if not sends:
        return out
    first, last = min(sends), max(sends)
    start = first + 1.0
    nwin = max(0, int((min(last, start + FIGURE1_SAMPLES * FIGURE1_WINDOW_S) - start) // FIGURE1_WINDOW_S))

    def means(w: float, n: int) -> dict[str, float]:
        end = start + n * w
        return {m: sum(1 for t in got.get(m, []) if start <= t < end) / (n * w) for m in sorted(started)} if n else {}

    per, per_s = means(FIGURE1_WINDOW_S, nwin), means(1.0, max(0, int((last - start) // 1.0)))
    out["throughput_unperturbed_windows"] = nwin
    if nwin:
        out["sent_per_s"] = (sum(1 for t in sends if start <= t < start + nwin * FIGURE1_WINDOW_S)
                             / (nwin * FIGURE1_WINDOW_S))
    def medians(extra: set[str]) -> tuple[list[str], dict[str, Any]]:
        """(the unperturbed members, their medians) with the members of `extra` set apart as if perturbed."""
        calm = sorted(m for m in per if m not in disturbed and m not in senders and m not in extra)
        pert = [per[m] for m in per if m in perturbed or (m in extra and m not in senders)]
        return calm, {"per_s": _median([per[m] for m in calm]), "min_per_s": min((per[m] for m in calm), default=None),
                      "perturbed_per_s": _median(pert), "1s_per_s": _median([per_s[m] for m in calm if m in per_s])}

    calm, v = medians(set())
    out.update({"unperturbed_members": calm, "throughput_unperturbed_per_s": v["per_s"],
                "throughput_unperturbed_min_per_s": v["min_per_s"], "throughput_perturbed_per_s": v["perturbed_per_s"],
                "throughput_unperturbed_1s_per_s": v["1s_per_s"]})
    calm, v = medians(apart)
    out.update({"fig1_unperturbed": len(calm), "fig1_throughput_per_s": v["per_s"],
                "fig1_throughput_min_per_s": v["min_per_s"], "fig1_throughput_perturbed_per_s": v["perturbed_per_s"],
                "fig1_throughput_1s_per_s": v["1s_per_s"]})
    return out


def message_fractions(run: RunDir) -> list[tuple[int, int, float, int, int]]:
    """(origin id, seq, sent ts, members alive at the send, how many of them logged its `data_received`) per data
    message with anyone alive at its send (analysis.protocols.message_receipts' definition)."""
    ids = {m.name: m.id for m in run.members}
    return [(origin, seq, ts, len(alive), len(rec))
            for origin, seq, ts, alive, rec in message_receipts(run.events, ids, crash_times(run.events, run.t0))
            if alive]


def delivery_bin(fraction: float) -> float:
    """The report's histogram bin of a delivery fraction: 1.0 for everyone, else its tenth (floor)."""
    return 1.0 if fraction >= 1.0 else math.floor(fraction * 10) / 10


def delivery_values(run: RunDir) -> dict[str, Any]:
    hist: dict[float, int] = {}
    for *_, alive, rec in message_fractions(run):
        b = delivery_bin(rec / alive)
        hist[b] = hist.get(b, 0) + 1
    total = sum(hist.values())
    return {"delivered_to_all_fraction": hist.get(1.0, 0) / total if total else None,
            "delivered_to_few_fraction": sum(v for b, v in hist.items() if b < 0.2) / total if total else None,
            "delivery_histogram": {f"{b:.1f}": v for b, v in sorted(hist.items())}}


def sender_values(run: RunDir) -> dict[str, Any]:
    senders = senders_of(run)
    refused, msgs, stops = 0, set(), []
    for e in run.events:
        ev = e.get("event")
        if ev == "send_blocked":
            refused += int(e.get("attempts", 1))
        elif ev == "data_sent":
            msgs.add((e.get("node"), e.get("seq")))
        elif ev == "node_stopped" and e.get("node") in senders:
            stops.append(e)
    pk = sum(int((s.get("runtime") or {}).get("packets_in", 0)) + int((s.get("runtime") or {}).get("packets_out", 0))
             for s in stops)
    ctr = [counters(s).get("send_blocked", 0) for s in stops]
    return {"refused": refused, "refused_counter": sum(ctr) if ctr else None,
            "sender_pkts_per_msg": pk / len(msgs) if stops and msgs else None}


def common_values(run: RunDir) -> dict[str, Any]:
    """What all three protocols' run_values share: the generic values, the parameters, the delivery distribution,
    Figure 1's throughput and the sender's numbers."""
    return {**generic_values(run), **spec_params(run), **delivery_values(run), **throughput_values(run),
            **sender_values(run)}


# --- pbcast's own: Figure 4, the bimodal histogram (pure) -----------------------------------------------------------

OVERHEAD = ("digest", "solicit", "repair")


def member_overhead(c: dict[str, int]) -> dict[str, int]:
    """A member's pbcast overhead messages from its counters: digests, solicitations, repairs, each sent + received
    (received repairs: the new ones and the duplicates), and their total."""
    out = {"digest": c.get("sent_digest", 0) + c.get("recv_digest", 0),
           "solicit": c.get("sent_solicit", 0) + c.get("recv_solicit", 0),
           "repair": c.get("sent_repair", 0) + c.get("recv_repair", 0) + c.get("duplicate_repair", 0)}
    out["total"] = sum(out.values())
    return out


def overhead_values(run: RunDir) -> dict[str, Any]:
    """Figure 4: a member's overhead per multicast is its `member_overhead` counted over the multicast period (the
    difference of its `pbcast_counters` at the workload window's start and stop: the paper's "per-message overheads
    on each group member"; rounds after the last multicast carry digests but no multicast) over the data messages
    sent; `overhead` the mean over the members that logged both (`overhead_max`, `overhead_sender` and
    `overhead_rest` beside it; `overhead_digest`, `_solicit`, `_repair` by kind and `overhead_repair_traffic` =
    solicitations + repairs). `overhead_counted_over`: `multicast period`, or `whole run` for runs without the
    window's counters (from `node_stopped`'s counters, as before 29 Nov 2026), whose `overhead_whole_run` is the
    same mean over the whole run either way. `deliveries` (distinct (member, message)) and `repair_fraction`, the
    share of them that came by repair (`repair: true`)."""
    ids = {m.name: m.id for m in run.members}
    senders = senders_of(run)
    sent: set[tuple[int, Any]] = set()
    got: set[tuple[str, Any, Any]] = set()
    stopped: dict[str, dict] = {}
    window: dict[str, dict[str, dict[str, int]]] = {}
    by_repair = 0
    for e in run.events:
        ev = e.get("event")
        if ev == "data_sent" and e.get("node") in ids:
            sent.add((ids[e["node"]], e.get("seq")))
        elif ev == "data_received":
            key = (e.get("node"), e.get("origin"), e.get("seq"))
            if key not in got:
                got.add(key)
                by_repair += bool(e.get("repair"))
        elif ev == "node_stopped":
            stopped[e["node"]] = e
        elif ev == "pbcast_counters" and e.get("window") in ("start", "stop"):
            window.setdefault(e["node"], {})[e["window"]] = {k: int(v) for k, v in (e.get("counters") or {}).items()}
    periods = {n: {k: w["stop"].get(k, 0) - w["start"].get(k, 0) for k in w["stop"]}
               for n, w in sorted(window.items()) if "start" in w and "stop" in w}
    whole = {n: counters(st) for n, st in sorted(stopped.items())}
    chosen = periods if periods else whole
    per = {n: {k: v / len(sent) for k, v in member_overhead(c).items()} for n, c in chosen.items()} if sent else {}
    totals = [v["total"] for v in per.values()]
    out: dict[str, Any] = {
        "members_stopped": len(stopped), "overhead": _mean(totals), "overhead_max": max(totals, default=None),
        "overhead_sender": _mean([v["total"] for n, v in per.items() if n in senders]),
        "overhead_rest": _mean([v["total"] for n, v in per.items() if n not in senders]),
        "overhead_counted_over": ("multicast period" if periods else "whole run") if per else None,
        "overhead_members": len(per),
        "overhead_whole_run": _mean([member_overhead(c)["total"] / len(sent) for c in whole.values()])
        if sent else None,
        "deliveries": len(got), "repair_fraction": by_repair / len(got) if got else None}
    for k in OVERHEAD:
        out[f"overhead_{k}"] = _mean([v[k] for v in per.values()])
    out["overhead_repair_traffic"] = (None if out["overhead_solicit"] is None else
                                      out["overhead_solicit"] + out["overhead_repair"])
    return out


def first_phase(run: RunDir) -> dict[str, Any]:
    """Figure 4's model: the IP multicast first phase crosses the plan's tree from the (one) sender; a member whose
    path has links of loss l1, l2, ... (each direction its own) misses it with probability 1 - prod(1 - l_i) (a
    copy lost on a link is lost for the subtree below), which pbcast's repairs make up. `first_phase_hops`: the
    mean path length to the other members, `first_phase_miss`: the mean miss. None without one sender or links."""
    senders = sorted(senders_of(run))
    adj: dict[str, list[tuple[str, float]]] = {}
    for lk in run.plan.get("links") or []:
        adj.setdefault(lk["parent"], []).append((lk["child"], float((lk.get("down") or {}).get("loss") or 0.0)))
        adj.setdefault(lk["child"], []).append((lk["parent"], float((lk.get("up") or {}).get("loss") or 0.0)))
    if len(senders) != 1 or senders[0] not in adj:
        return {"first_phase_hops": None, "first_phase_miss": None}
    reach = {senders[0]: (0, 1.0)}               # node -> (hops, probability a copy arrives)
    todo = [senders[0]]
    for u in todo:                               # breadth first: the plan's tree has one path to each node
        for v, loss in adj.get(u, []):
            if v not in reach:
                reach[v] = (reach[u][0] + 1, reach[u][1] * (1.0 - loss))
                todo.append(v)
    dest = [reach[m.name] for m in run.members if m.name != senders[0] and m.name in reach]
    if not dest:
        return {"first_phase_hops": 0.0, "first_phase_miss": 0.0}
    return {"first_phase_hops": sum(h for h, _ in dest) / len(dest),
            "first_phase_miss": sum(1.0 - a for _, a in dest) / len(dest)}


def histogram(fractions: list[float], width: float = BIN_WIDTH, bins: int = BINS) -> list[int]:
    """Counts per bin [i w, (i + 1) w); a fraction of 1.0 falls in the last bin."""
    out = [0] * bins
    for f in fractions:
        out[min(bins - 1, max(0, int(f / width + 1e-9)))] += 1
    return out


def split(fractions: list[float], hi: float = 0.95, lo: float = 0.05) -> dict[str, int]:
    """Messages at >= hi ("almost all"), <= lo ("almost none") and between."""
    a = sum(1 for f in fractions if f >= hi - 1e-12)
    z = sum(1 for f in fractions if f <= lo + 1e-12)
    return {"messages": len(fractions), "almost_all": a, "almost_none": z, "between": len(fractions) - a - z}


def _seconds(v: Any) -> float | None:
    """'100ms' / '0.1s' / 0.1 as seconds (the spec's durations); None if absent."""
    if v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v)
    t = str(v).strip()
    return float(t[:-2]) / 1000.0 if t.endswith("ms") else float(t[:-1] if t.endswith("s") else t)


def wire_seqs(datagrams: Iterable[tuple[float, bytes]], origin: int) -> dict[int, tuple[float, str]]:
    """The messages of `origin` that datagrams sent by a member name, from their (ts, UDP payload as captured):
    {seq: (first ts, "data" | "digest")}: "data" when a DATA or REPAIR of it left (its first-phase copy or a
    retransmission), else "digest" when only a DIGEST's range named it (the member held it and said so on the
    wire). Not pbcast, another protocol, a foreign magic or a field the capture cut: skipped. Pure."""
    from gossipnode import wire as gw
    from gossipnode.protocols.pbcast import wire as pw
    out: dict[int, tuple[float, str]] = {}
    hs = pw.HEADER_SIZE
    for ts, p in datagrams:
        if len(p) < hs:
            continue
        mg, ver, proto, mtype, _sender, _length = gw.ENVELOPE.unpack_from(p)
        if mg != gw.MAGIC or ver != gw.VERSION or proto != pw.PROTOCOL_ID:
            continue
        if mtype in (pw.MsgType.DATA, pw.MsgType.REPAIR) and len(p) >= hs + pw.ITEM.size:
            o, _root, seq = pw.ITEM.unpack_from(p, hs)
            if o == origin and seq >= 1:
                out[seq] = (min(out.get(seq, (math.inf, ""))[0], ts), "data")
        elif mtype == pw.MsgType.DIGEST and len(p) >= hs + 2:
            (count,) = struct.unpack_from("!H", p, hs)
            for k in range(count):
                off = hs + 2 + k * pw.RANGE.size
                if off + pw.RANGE.size > len(p):
                    break
                o, first, last = pw.RANGE.unpack_from(p, off)
                if o != origin or not 1 <= first <= last:
                    continue
                for seq in range(first, last + 1):
                    if seq not in out:
                        out[seq] = (ts, "digest")
    return out


def sent_datagrams(cap: CaptureFile, clock=None) -> Iterator[tuple[float, bytes]]:
    """(ts, UDP payload as captured) of every unfragmented IPv4/UDP datagram the capture's member sent (source its
    own address), in the run's virtual time with `clock`. The link layer is parsed as the packet table does
    (analysis.pcap.FrameDecoder). A file that cannot be read yields what precedes the problem."""
    from analysis.pcap import FrameDecoder, PcapError, PcapFile
    virtual = clock.to_virtual if clock is not None and not clock.identity else None
    try:
        pf = PcapFile(cap.path, cap.file)
    except (OSError, PcapError):
        return
    with pf:
        dec = FrameDecoder(pf.link_type, cap.address, {})
        try:
            for _n, ts, _cap_len, _orig_len, data in pf:
                _if, l3, _why = dec._l3(data)          # the packet table's own link-layer offsets
                if l3 is None or len(data) < l3 + 20:
                    continue
                vihl, frag, proto = data[l3], struct.unpack_from("!H", data, l3 + 6)[0], data[l3 + 9]
                l4 = l3 + (vihl & 0x0F) * 4
                if proto != 17 or frag & 0x3FFF or len(data) < l4 + 8:
                    continue
                if ".".join(map(str, data[l3 + 12:l3 + 16])) != cap.address:
                    continue
                udp_len = struct.unpack_from("!H", data, l4 + 4)[0]
                yield (virtual(ts) if virtual else ts), bytes(data[l4 + 8:l4 + max(8, udp_len)])
        except PcapError:
            return


def bimodal_values(run: RunDir) -> dict[str, Any]:
    """The bimodal histogram with a crash (§3), `bimodal_` values. Its fraction is of the *survivors*, not of the
    members alive at the send: the paper's histogram is what the members left after the crash got, and a crashed
    member's log loses its unflushed tail (its last ~0.1-0.4 s), so its deliveries just before the crash cannot be
    counted. Crashed: the targets of `crash` actions and every member that wrote `node_started` but no
    `node_stopped`; survivors the other members. Per message, the fraction of the survivors (its origin excluded)
    that logged its `data_received`; histograms in bins of 0.05 over all messages (`hist_all`) and over those sent
    in the last second before the crash (`hist_last`: the earliest crash action's t0 + `actual_s`); the split at
    >= 0.95 / <= 0.05 / between (`messages`, `almost_all`, `almost_none`, `between`; `last_` the same).

    Which messages exist. A crashed sender's log misses its last `data_sent`s, and those are the messages the
    histogram is about. Each message's source (counted in `src_*`, every message in exactly one):

    - `src_log`: its `data_sent` is in the sender's log. With the sender's capture, a logged message that the
      capture does not show and nobody received is counted too (fraction 0: the conservative side) and reported as
      `sent_log_not_on_wire` — lost on the sender's own link (its shaping drops before the capture sees a frame)
      or sent after a silent crash's cut (the cut takes effect tens to hundreds of ms after the action's
      `actual_s` on a loaded machine, so the capture, not the action's time, says what left);
    - `src_pcap`: not logged, but the sender's own capture (`capture: access`: pcaps/<sender>-any.pcap) shows it
      leaving — a DATA or REPAIR of it, or a DIGEST range naming it (`sent_pcap_digest_only` of these) — every
      datagram that passed the sender's interface is in that file, whatever happened to the process after;
    - `src_received`: neither, but some member (crashed ones included) logged its `data_received`;
    - `src_gap`: none of these, but a later seq of the sender is known (seqs are consecutive per sender): it was
      sent and is counted with fraction 0;
    - `src_extrapolated`: only for a crashed sender *without* a capture: the offered rate (`workload.rate_per_s`)
      from its last known send to the crash, counted with fraction 0 (an estimate: a sender behind its timer sent
      fewer). With the sender's capture this is 0: the capture is the observation.

    `sent_extrapolated` = `src_extrapolated` (0 with the sender's capture). `sent_rate_estimate`: the rate's
    estimate of the sends after the last one the log and the receptions know (the same formula), computed whether
    or not it is counted: the cross-check of `src_pcap` + `src_gap` (what the capture found beyond them).
    `sent_unlogged` / `sent_unseen`: messages without a `data_sent` / also never received (the earlier
    definition's counters). `sender_pcap`: the crashed senders whose capture was read (empty: every count from
    the events, and a crashed sender's last sends from the rate). `log_tail_s`: the crash's time minus the last
    `data_sent` a crashed sender logged (the log's lost tail, at most); `wire_after_crash_s`: its capture's last
    datagram minus the crash's time (a silent crash's cut takes effect after the action's recorded start);
    `pcap_dropped`: the kernel drops of the captures read (the manifest's); `crash_lag_ms_max`: the crash actions'
    largest schedule lag."""
    ids = {m.id: m.name for m in run.members}
    nid = {v: k for k, v in ids.items()}
    rate = (((run.manifest.get("spec") or {}).get("workload") or {}).get("rate_per_s"))
    started: set[str] = set()
    stopped: set[str] = set()
    crashed: set[str] = set()
    crash_ts: float | None = None
    for e in run.events:
        ev = e.get("event")
        if ev == "node_started":
            started.add(e["node"])
        elif ev == "node_stopped":
            stopped.add(e["node"])
        elif ev == "action_applied" and e.get("action") == "crash":
            crashed.update(e.get("targets") or [])
            at = run.t0 + float(e["actual_s"]) if e.get("actual_s") is not None else float(e["ts"])
            crash_ts = at if crash_ts is None else min(crash_ts, at)
    crashed |= started - stopped
    survivors = started - crashed
    logged: dict[tuple[int, int], float] = {}
    first: dict[tuple[int, int], float] = {}
    got: dict[tuple[int, int], set[str]] = {}
    for e in run.events:
        ev = e.get("event")
        if ev == "data_sent" and e.get("node") in nid:
            key = (nid[e["node"]], int(e["seq"]))
            logged[key] = min(logged.get(key, math.inf), float(e["ts"]))
        elif ev == "data_received":
            key = (int(e["origin"]), int(e["seq"]))
            first[key] = min(first.get(key, math.inf), float(e["ts"]))
            if e.get("node") in survivors:
                got.setdefault(key, set()).add(e["node"])
    caps = {c.node: c for c in run.captures if c.interface == "any" and c.address}
    wire: dict[tuple[int, int], tuple[float, str]] = {}
    read: list[str] = []
    last_out: list[float] = []
    origins = {o for o, _ in [*logged, *first]} & set(ids)
    for origin in sorted(origins):
        name = ids[origin]
        if name in crashed and name in caps:
            read.append(name)
            dg = list(sent_datagrams(caps[name], run.clock))
            last_out += [dg[-1][0]] if dg else []
            for seq, v in wire_seqs(dg, origin).items():
                wire[(origin, seq)] = v
    tails = [max(t for (o, _), t in logged.items() if o == nid[m]) for m in crashed
             if m in nid and any(o == nid[m] for o, _ in logged)]
    counted = {(c.get("node"), c.get("file")): c for c in run.manifest.get("captures") or []}
    dropped = [counted.get((m, caps[m].file), {}).get("dropped_by_kernel") for m in read]
    lags = [float(e["lag_ms"]) for e in run.events if e.get("event") == "action_applied"
            and e.get("action") == "crash" and e.get("lag_ms") is not None]
    out = bimodal_rows(ids, survivors, crashed, crash_ts, rate, logged, first, got, wire, set(read))
    sec = spec_section(run)
    modes = {a.get("mode", "kill") for a in ((run.manifest.get("spec") or {}).get("schedule") or [])
             if a.get("action") == "crash"}
    out.update({"crashed": sorted(crashed), "survivors": sorted(survivors), "crash_ts": crash_ts,
                "sender_pcap": sorted(read), "source": "pcap" if read else "events+rate",
                "crash_mode": "+".join(sorted(modes)) or None, "fanout": sec.get("fanout"),
                "log_tail_s": crash_ts - max(tails) if tails and crash_ts is not None else None,
                "wire_after_crash_s": max(last_out) - crash_ts if last_out and crash_ts is not None else None,
                "pcap_dropped": sum(dropped) if read and None not in dropped else None,
                "crash_lag_ms_max": max(lags) if lags else None,
                "round_s": _seconds(sec.get("round")), "tree_fanout": sec.get("tree_fanout"),
                "n_crashed": len(crashed), "n_survivors": len(survivors)})
    return {f"bimodal_{k}": v for k, v in out.items()}


def bimodal_rows(ids: dict[int, str], survivors: set[str], crashed: set[str], crash_ts: float | None,
                 rate: float | None, logged: dict, first: dict, got: dict, wire: dict,
                 captured: set[str]) -> dict[str, Any]:
    """`bimodal_values`' counting, pure: the messages per origin (the sources in its docstring), each message's
    fraction of the survivors that got it, the histograms and splits. `logged`/`first`: (origin, seq) -> ts of its
    `data_sent` / first `data_received`; `got`: -> the survivors that logged it; `wire`: -> (ts, how) from the
    origin's capture; `captured`: the origins whose capture was read."""
    top: dict[int, int] = {}
    for origin, seq in [*logged, *first, *wire]:
        if origin in ids:
            top[origin] = max(top.get(origin, 0), seq)
    rows: list[tuple[float, float]] = []          # (sent ts, fraction)
    src = {"log": 0, "pcap": 0, "received": 0, "gap": 0, "extrapolated": 0}
    unlogged = unseen = digest_only = estimate = off_wire = 0
    for origin in sorted(top):
        pool = survivors - {ids[origin]}
        ts = -math.inf
        for seq in range(1, top[origin] + 1):
            key = (origin, seq)
            if key in logged:
                ts, how = logged[key], "log"
                off_wire += ids[origin] in captured and key not in wire and key not in first
            elif key in wire:
                ts, how = wire[key][0], "pcap"
                digest_only += wire[key][1] == "digest"
            elif key in first:
                ts, how = first[key], "received"
            else:
                how = "gap"
            if key not in logged:
                unlogged += 1
                unseen += key not in first
            if pool:
                src[how] += 1
                rows.append((ts, len(got.get(key, set()) & pool) / len(pool)))
        mine = [(q, t) for (o, q), t in logged.items() if o == origin]
        if rate and crash_ts is not None and ids[origin] in crashed and mine and pool:
            s_l, t_l = max(mine)
            upto = s_l + int((crash_ts - t_l) * rate + 1e-9)     # the rate's last seq before the crash
            known = max([q for o, q in [*logged, *first] if o == origin], default=0)
            estimate += max(0, upto - known)
            if ids[origin] not in captured:
                for k in range(top[origin] + 1, upto + 1):
                    src["extrapolated"] += 1
                    rows.append((t_l + (k - s_l) / rate, 0.0))
    allf = [f for _, f in rows]
    lastf = [f for t, f in rows if crash_ts is not None and crash_ts - LAST_S <= t < crash_ts]
    return {"sent_unlogged": unlogged, "sent_unseen": unseen, "sent_extrapolated": src["extrapolated"],
            "sent_rate_estimate": estimate, "sent_pcap_digest_only": digest_only, "sent_log_not_on_wire": off_wire,
            **{f"src_{k}": v for k, v in src.items()},
            "hist_all": histogram(allf), "hist_last": histogram(lastf), **split(allf),
            **{f"last_{k}": v for k, v in split(lastf).items()}}


def pbcast_values(run: RunDir) -> dict[str, Any]:
    sec = spec_section(run)
    return {**common_values(run), "phase": sec.get("first_phase"), "gc_c": sec.get("gc_c"),
            **overhead_values(run), **first_phase(run), **bimodal_values(run)}
