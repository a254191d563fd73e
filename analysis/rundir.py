"""A run directory's small files, read on the driver (docs/architecture.md §6): manifest, plan, node configs, fidelity,
tc statistics, and the lists of pcaps and event logs the Spark jobs read.

Only `manifest.json` and `plan.json` are required (`RunDirError` otherwise). Anything else that is missing or
unreadable becomes a warning naming the file, and the analysis goes on without it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis.pcap import MCAST_PORT, NODE_PORT, CaptureFile, Ports
from gossipnode.vclock import VirtualClock
from orchestrator import runschema as schema     # the run directory's files, the writer's and ours


class AnalysisError(Exception):
    """Base of the analysis' errors; the CLI prints them without a traceback."""


class RunDirError(AnalysisError):
    """The directory cannot be analysed at all (not a run directory, manifest or plan missing or corrupt)."""



def protocol_of(cfg: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """(protocol name, its parameters) from a node config: `protocol: {name, ...}` (this version), or the first
    wave's `protocol: "gsgc"` beside a `gsgc: {...}` section (older run directories)."""
    proto = cfg.get("protocol")
    if isinstance(proto, dict):
        return proto.get("name"), {k: v for k, v in proto.items() if k != "name"}
    if isinstance(cfg.get("gsgc"), dict):
        return "gsgc", dict(cfg["gsgc"])
    return (proto if isinstance(proto, str) else None), {}


@dataclass(frozen=True)
class Member:
    id: int
    name: str
    address: str | None
    sender_index: int | None
    local_group: int | None


@dataclass
class RunDir:
    path: Path
    manifest: dict[str, Any]
    plan: dict[str, Any]
    members: list[Member]
    params: dict[str, Any]                   # the protocol's parameters (gsgc: subgroup, step_s, fail_k, ...)
    t0: float                                # protocol start, virtual unix s (docs/virtual-time.md)
    end: float | None                        # run end, virtual unix s
    captures: list[CaptureFile]
    event_logs: list[Path]
    tc: dict[str, list[dict]]                # node → `tc -s -j qdisc show`
    delayline: dict | None
    fidelity: dict | None
    protocol: str | None = None              # the protocol's name (gsgc, direct, ...)
    ports: Ports = field(default_factory=Ports)   # where the captures hold the nodes' packets
    warnings: list[str] = field(default_factory=list)
    clock_offsets: dict[str, float] = field(default_factory=dict)   # node → host clock - controller clock
    clock: VirtualClock = field(default_factory=VirtualClock)       # the run's virtual time: pcaps are real
    judges: dict | None = None               # judges.json: the fidelity judges the runner recorded at the end
    _events: list[dict] | None = field(default=None, repr=False)

    @property
    def event_offsets(self) -> dict[str, float]:
        """`clock_offsets` as they appear in the events' virtual stamps (a real offset / the dilation)."""
        return {k: v / self.clock.dilation for k, v in self.clock_offsets.items()}

    @property
    def events(self) -> list[dict[str, Any]]:
        """Every event of the members and the orchestrator, as dicts (a torn last line of a killed member is
        skipped), read once; `ts` on the orchestrator's clock (real hosts' offsets taken out) in virtual time."""
        if self._events is None:
            offs = self.event_offsets
            out = []
            for f in self.event_logs:
                with f.open() as fh:
                    for line in fh:
                        try:
                            e = json.loads(line)
                        except json.JSONDecodeError:
                            continue
                        if offs and e.get("node") in offs and isinstance(e.get("ts"), (int, float)):
                            e["ts"] -= offs[e["node"]]
                        out.append(e)
            self._events = out
        return self._events

    @property
    def status(self) -> str | None:
        return self.manifest.get("status")

    @property
    def dilation(self) -> float:
        return self.clock.dilation

    @property
    def gsgc(self) -> dict[str, Any]:
        """The protocol's parameters (the name of the days when GSGC was the only protocol)."""
        return self.params

    @property
    def run_id(self) -> str:
        return str(self.manifest.get("run_id") or self.path.name)

    @property
    def out(self) -> Path:
        return self.path / "analysis"

    def addresses(self) -> dict[str, str]:
        """Every address of the plan (node addresses and link ends) → node name; a member's real address (the
        manifest's `realised`: real hosts) too."""
        names = {n["address"]: n["name"] for n in self.plan.get("nodes", []) if n.get("address")}
        names.update({a: n for n, a in ((self.manifest.get("realised") or {}).get("addresses") or {}).items()})
        for lk in self.plan.get("links", []):
            for end in ("parent", "child"):
                if lk.get(f"{end}_addr"):
                    names[lk[f"{end}_addr"]] = lk[end]
        return names


def wire_ports(configs: list[dict[str, Any]]) -> Ports:
    """The node ports (the members' `addr` and `listen` ports: UDP unicast and TCP) and the multicast group
    ports (`multicast[].port`) the node configs name; the defaults (7000, 7001) when they name none."""
    node, mcast = set(), set()
    for cfg in configs:
        for addr in [cfg.get("listen"), *(m.get("addr") for m in cfg.get("members") or [])]:
            port = str(addr or "").rpartition(":")[2]
            if port.isdigit():
                node.add(int(port))
        mcast.update(int(g["port"]) for g in cfg.get("multicast") or [] if isinstance(g, dict) and g.get("port"))
    return Ports(frozenset(node or {NODE_PORT}), frozenset(mcast or {MCAST_PORT}))


def _json(path: Path, warnings: list[str] | None, rel: str) -> Any:
    """Parse a JSON file; a problem raises RunDirError (warnings None) or becomes a warning (returns None)."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        msg = f"{rel}: file not found"
    except (OSError, UnicodeDecodeError) as exc:
        msg = f"{rel}: cannot read: {exc}"
    except json.JSONDecodeError as exc:
        msg = f"{rel}: corrupt JSON: {exc}"
    if warnings is None:
        raise RunDirError(msg)
    warnings.append(msg)
    return None


def load(path: Path) -> RunDir:
    path = path.resolve()
    if not path.is_dir():
        raise RunDirError(f"{path}: not a directory")
    manifest = _json(path / schema.MANIFEST, None, f"{path}/{schema.MANIFEST}")
    plan = _json(path / schema.PLAN, None, f"{path}/{schema.PLAN}")
    for name, doc in (("manifest.json", manifest), ("plan.json", plan)):
        if not isinstance(doc, dict):
            raise RunDirError(f"{path}/{name}: not a JSON object")
    warnings: list[str] = []
    nodes = {n["name"]: n for n in plan.get("nodes", [])}

    # Members and protocol parameters: every config carries the whole member list.
    configs = {}
    for f in sorted((path / "configs").glob("*.json")):
        cfg = _json(f, warnings, f"configs/{f.name}")
        if isinstance(cfg, dict):
            configs[f.stem] = cfg
    member_names = [n["name"] for n in plan.get("nodes", []) if n.get("role") == "member"]
    missing = [m for m in member_names if m not in configs]
    if missing:
        warnings.append(f"configs/: no config for {len(missing)} member(s) ({', '.join(missing[:5])}"
                        f"{', ...' if len(missing) > 5 else ''})")
    if configs:
        cfg = next(iter(configs.values()))
        senders = list(cfg.get("senders") or [])
        protocol_name, gsgc = protocol_of(cfg)
        groups = {i: g for g, grp in enumerate(gsgc.get("local_groups") or []) for i in grp.get("members", [])}
        members = [Member(m["id"], m["name"], m["addr"].rsplit(":", 1)[0],
                          senders.index(m["id"]) if m["id"] in senders else None, groups.get(m["id"]))
                   for m in cfg["members"]]
    else:
        # The runner numbers the plan's members in order; senders are unknown without a config.
        warnings.append("configs/: no readable node config; member ids follow the plan's order, senders unknown")
        protocol_name, gsgc = None, {}
        members = [Member(i, m, nodes[m].get("address"), None, None) for i, m in enumerate(member_names)]

    tm = manifest.get("time") or {}
    try:
        clock = VirtualClock(float(tm.get("dilation", 1.0)), float(tm.get("epoch", 0.0)))
    except (TypeError, ValueError) as exc:
        warnings.append(f"manifest.json: time: {exc}; taken as real time")
        clock = VirtualClock()
    t0 = manifest.get("t0_unix")             # virtual already
    if t0 is None:
        t0 = manifest.get("started_at")
        t0 = clock.to_virtual(float(t0)) if t0 is not None else None
        warnings.append("manifest.json: no t0_unix (the run did not start the protocol); times are from started_at"
                        if t0 is not None else "manifest.json: no t0_unix nor started_at; times are unix seconds")
    end = manifest.get("ended_at")          # a real unix time (when the orchestrator stopped)
    if end is not None:
        end = clock.to_virtual(float(end))

    # Captures: the manifest's list, plus any pcap in pcaps/ it does not name.
    addr = {m.name: m.address for m in members}
    captures: list[CaptureFile] = []
    listed = set()
    for c in manifest.get("captures") or []:
        rel = c["file"]
        listed.add(rel)
        captures.append(CaptureFile(c["node"], c["ifname"], str(path / rel), rel,
                                    addr.get(c["node"]) or nodes.get(c["node"], {}).get("address")))
    for f in sorted((path / "pcaps").glob("*.pcap")):
        rel = f"pcaps/{f.name}"
        if rel in listed:
            continue
        owner = max((n for n in nodes if f.stem.startswith(n + "-")), key=len, default=None)
        if owner is None:
            warnings.append(f"{rel}: no plan node matches the file name (<node>-<interface>.pcap); skipped")
            continue
        captures.append(CaptureFile(owner, f.stem[len(owner) + 1:], str(f), rel,
                                    addr.get(owner) or nodes[owner].get("address")))
    if not captures:
        warnings.append("pcaps/: no captures; packet metrics are empty")

    # Event logs: one per member (all started members write one) and the orchestrator's.
    event_logs = []
    for name in [*member_names, "orchestrator"]:
        f = path / "events" / f"{name}.jsonl"
        if f.is_file():
            event_logs.append(f)
        else:
            warnings.append(f"events/{name}.jsonl: file not found")

    tc: dict[str, list[dict]] = {}
    for name in nodes:
        f = path / "tc" / f"{name}.json"
        if not f.exists():
            warnings.append(f"tc/{name}.json: file not found")
            continue
        data = _json(f, warnings, f"tc/{name}.json")
        if isinstance(data, list):
            tc[name] = data
        elif data is not None:
            why = data.get("error", "") if isinstance(data, dict) else type(data).__name__
            warnings.append(f"tc/{name}.json: not a qdisc list ({str(why)[:80]})")
    delayline = _json(path / "tc" / "delayline.json", warnings, "tc/delayline.json") \
        if (path / "tc" / "delayline.json").exists() else None
    fidelity = _json(path / schema.FIDELITY, warnings, schema.FIDELITY)
    judges = _json(path / schema.JUDGES, warnings, schema.JUDGES) if (path / schema.JUDGES).exists() else None

    return RunDir(path=path, manifest=manifest, plan=plan, members=members, params=gsgc, protocol=protocol_name,
                  ports=wire_ports(list(configs.values())), t0=float(t0 or 0.0),
                  end=float(end) if end is not None else None, captures=captures, event_logs=event_logs,
                  tc=tc, delayline=delayline, fidelity=fidelity, warnings=warnings,
                  clock_offsets={str(k): float(v) for k, v in (manifest.get("clock_offsets_s") or {}).items()},
                  clock=clock, judges=judges if isinstance(judges, dict) else None)
