"""The command line. The only place that formats errors and draws progress (the core emits events)."""
from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from orchestrator import lab as labmod
from orchestrator.clikit import (CPU_FROM_HELP, DILATION_HELP, MACHINES_HELP, BackendName, BarProgress, ShaperName,
                                 machines_options as _machines_options, parse_cpu_from, parse_dilation,
                                 parse_sets as _parse_sets)
from orchestrator.errors import OrchestratorError, SpecError
from orchestrator.fidelity import PING_IP_BYTES
from orchestrator.graph import draw_png, to_dot
from orchestrator.plan import build_plan
from orchestrator.shaping.probe import check_shaper
from orchestrator.spec import load_experiment
from orchestrator.state import list_labs, load_state

app = typer.Typer(add_completion=True, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Emulation testbed for gossip and reliable-multicast protocols: build a shaped tree "
                       "network, run protocol experiments on it, tear it down.")
err = Console(stderr=True)
out = Console()
_debug = False


SHAPER_HELP = ("auto|netem|delayline|tbf: auto takes netem when the kernel has it, else the userspace delay line "
               "(NFQUEUE), else tbf (rate, queue and loss only).")


BACKEND_HELP = ("mininet (default: namespaces on this machine), docker (containers from the node image) or hosts "
                "(real machines over SSH and Ansible, with --inventory).")
INVENTORY_HELP = ("--backend hosts: the hosts file (YAML: name, ssh, user, key, address per host) or an Ansible "
                  "INI/YAML inventory (group 'testbed'; docs/backends.md).")
KNOWN_HOSTS_HELP = ("--backend hosts and --machines: known_hosts file the host keys are checked against (default "
                    "~/.ssh/known_hosts).")
ACCEPT_NEW_HELP = ("--backend hosts and --machines: accept and record the keys of hosts not in known_hosts yet (a "
                   "changed key is always refused). Without it an unknown host is an error.")


ALLOW_UNENFORCED_HELP = ("--backend hosts: run an experiment with a CPU budget (nodes.cpu) although real machines "
                         "cannot enforce it; the manifest records it as not enforced.")


def _hosts_options(backend: str, inventory: Path | None, known_hosts: Path | None, accept_new: bool,
                   strict: bool, allow_unenforced_cpu: bool = False) -> dict | None:
    if backend != "hosts":
        if inventory or known_hosts or accept_new or allow_unenforced_cpu:
            raise SpecError("--inventory, --known-hosts, --accept-new-host-keys and --allow-unenforced-cpu need "
                            "--backend hosts")
        return None
    if inventory is not None:              # the hosts file is input too: all of it checked before anything is built
        from orchestrator.hosts.inventory import load

        load(inventory)
    return {"inventory": inventory, "known_hosts": known_hosts, "accept_new_host_keys": accept_new,
            "strict": strict, "allow_unenforced_cpu": allow_unenforced_cpu}


def _backend_options(backend: str, machines: Path | None, inventory: Path | None, part: Path | None, known_hosts,
                     accept_new: bool, strict: bool, allow_unenforced_cpu: bool, sets, dilation: str | None
                     ) -> tuple[str, dict]:
    """The backend and its options from `up`'s and `run`'s flags: --machines, else --backend (hosts: its
    inventory options)."""
    if machines is not None:
        return "machines", _machines_options(machines, backend, inventory, part, known_hosts, accept_new, strict,
                                             sets, dilation)
    return backend, _hosts_options(backend, inventory, known_hosts, accept_new, strict, allow_unenforced_cpu) or {}


def _load_part(path: Path, backend: str, plan):
    """`up --part`'s file, checked against the plan (bad input: exit 2)."""
    from orchestrator.shard import Part

    if backend != "mininet":
        raise SpecError("--part needs the mininet backend (a machine builds its part in namespaces)")
    try:
        doc = json.loads(path.read_text())
        p = Part.from_json(doc)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SpecError(f"{path}: not a part of a split lab: {exc}") from None
    if doc.get("plan_digest") and doc["plan_digest"] != plan.digest():
        raise SpecError(f"{path}: this machine plans the experiment differently from the controller (plan digest "
                        f"{plan.digest()[:12]}, the controller's {doc['plan_digest'][:12]}): run the same "
                        "orchestrator version everywhere")
    unknown = sorted(p.nodes - {n.name for n in plan.nodes})
    if unknown:
        raise SpecError(f"{path}: node(s) {unknown[:5]} are not in the experiment's plan")
    return p


@app.callback()
def _main(debug: bool = typer.Option(False, "--debug", help="Show tracebacks on errors.")) -> None:
    global _debug
    _debug = debug


@app.command()
def up(
    experiment: Path = typer.Argument(..., help="Experiment file (YAML, optionally Jinja2-templated)."),
    backend: BackendName = typer.Option(BackendName.mininet, help=BACKEND_HELP),
    name: Optional[str] = typer.Option(None, help="Lab name (default: the experiment's name or file stem)."),
    shaper: ShaperName = typer.Option(ShaperName.auto, help=SHAPER_HELP),
    strict_shaping: bool = typer.Option(False, "--strict-shaping",
                                        help="Refuse to build when the shaper cannot emulate every parameter."),
    set_: Optional[List[str]] = typer.Option(None, "--set", help="NAME=VALUE for Jinja2 experiment templates."),
    inventory: Optional[Path] = typer.Option(None, "--inventory", help=INVENTORY_HELP),
    known_hosts: Optional[Path] = typer.Option(None, "--known-hosts", help=KNOWN_HOSTS_HELP),
    accept_new_host_keys: bool = typer.Option(False, "--accept-new-host-keys", help=ACCEPT_NEW_HELP),
    dilation: Optional[str] = typer.Option(None, "--dilation", help=DILATION_HELP),
    allow_unenforced_cpu: bool = typer.Option(False, "--allow-unenforced-cpu", help=ALLOW_UNENFORCED_HELP),
    machines: Optional[Path] = typer.Option(None, "--machines", help=MACHINES_HELP),
    part: Optional[Path] = typer.Option(None, "--part", hidden=True,
                                        help="Internal: build only this machine's part of a lab split over "
                                             "machines (JSON, orchestrator.shard.Part)."),
) -> None:
    """Build the experiment's network and leave it running."""
    backend, shaper = backend.value, check_shaper(shaper.value)
    prep = labmod.prepare(experiment, name, _parse_sets(set_), dilation=parse_dilation(dilation))
    dil = labmod.lab_dilation(prep)
    backend, options = _backend_options(backend, machines, inventory, part, known_hosts, accept_new_host_keys,
                                        strict_shaping, allow_unenforced_cpu, set_, dilation)
    nodes, links = prep.plan.nodes, prep.plan.links
    if part is not None:
        the_part = _load_part(part, backend, prep.plan)
        options = {"part": the_part}
        nodes = [n for n in nodes if n.name in the_part.nodes]
        links = [lk for lk in links if the_part.has_link(lk.parent, lk.child)]
    t0 = time.monotonic()
    with BarProgress(err) as progress:
        state = labmod.up(prep, backend, shaper, strict_shaping, str(experiment), progress, options, dilation=dil.n)
    members = sum(1 for n in nodes if n.role == "member")
    err.print(f"lab [bold]{state.lab}[/] is up: {len(nodes)} nodes ({members} members), "
              f"{len(links)} links, shaper {state.shaper}"
              + (f", time dilation {dil.n:g}" if dil.n != 1 else "") + f", {time.monotonic() - t0:.1f} s")
    print(state.lab)


@app.command()
def run(
    experiment: Path = typer.Argument(..., help="Experiment file."),
    backend: BackendName = typer.Option(BackendName.mininet, help=BACKEND_HELP),
    out_dir: Path = typer.Option(Path("runs"), "--out", help="Parent directory of the run directory."),
    keep: bool = typer.Option(False, "--keep", help="Leave the network up afterwards."),
    seed: Optional[int] = typer.Option(None, help="Override the experiment's seed (schedule draws, senders)."),
    name: Optional[str] = typer.Option(None, help="Lab name for the network this run builds."),
    lab: Optional[str] = typer.Option(None, help="Reuse this running lab (built from the same experiment)."),
    shaper: ShaperName = typer.Option(ShaperName.auto, help=SHAPER_HELP),
    strict_shaping: bool = typer.Option(False, "--strict-shaping"),
    set_: Optional[List[str]] = typer.Option(None, "--set", help="NAME=VALUE for Jinja2 experiment templates."),
    inventory: Optional[Path] = typer.Option(None, "--inventory", help=INVENTORY_HELP),
    known_hosts: Optional[Path] = typer.Option(None, "--known-hosts", help=KNOWN_HOSTS_HELP),
    accept_new_host_keys: bool = typer.Option(False, "--accept-new-host-keys", help=ACCEPT_NEW_HELP),
    dilation: Optional[str] = typer.Option(None, "--dilation", help=DILATION_HELP),
    cpu_from: Optional[Path] = typer.Option(None, "--cpu-from", help=CPU_FROM_HELP),
    allow_unenforced_cpu: bool = typer.Option(False, "--allow-unenforced-cpu", help=ALLOW_UNENFORCED_HELP),
    machines: Optional[Path] = typer.Option(None, "--machines", help=MACHINES_HELP),
) -> None:
    """Run an experiment end to end: network, fidelity probe, captures, nodes, schedule, collection.

    Prints the run directory (stdout) as soon as it exists, so it is there also when the run fails or is
    interrupted."""
    backend, shaper = backend.value, check_shaper(shaper.value)
    from orchestrator.runner import RunOptions, run as run_experiment

    printed: list[Path] = []

    def show_run_dir(path: Path) -> None:
        print(path, flush=True)
        printed.append(path)

    backend, options = _backend_options(backend, machines, inventory, None, known_hosts, accept_new_host_keys,
                                        strict_shaping, allow_unenforced_cpu, set_, dilation)
    opts = RunOptions(backend=backend, out=out_dir, keep=keep, seed=seed, shaper=shaper, strict=strict_shaping,
                      lab=lab, name=name, backend_options=options,
                      on_run_dir=show_run_dir, dilation=parse_dilation(dilation), measured=parse_cpu_from(cpu_from))
    t0 = time.monotonic()
    with BarProgress(err) as progress:
        run_dir = run_experiment(experiment, opts, progress, _parse_sets(set_))
    err.print(f"run finished in {time.monotonic() - t0:.1f} s")
    if not printed:                     # a backend that did not report it early
        print(run_dir)


@app.command()
def status(
    name: Optional[str] = typer.Argument(None, help="Lab name; without it, list the labs."),
    json_: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Show the labs, or one lab's nodes, links, shaping and kernel capabilities."""
    if name is None:
        labs = [labmod.status(lab) for lab in list_labs()]
        if json_:
            out.print_json(json.dumps([{k: s[k] for k in ("lab", "backend", "status", "shaper")} | {
                "nodes": len(s["nodes"]), "health": s["health"]} for s in labs]))
            return
        if not labs:
            out.print("no labs are up")
        for s in labs:
            out.print(f"{s['lab']}: {s['status']}, {s['backend']}, {len(s['nodes'])} nodes, shaper {s['shaper']}"
                      + (f", PROBLEMS: {'; '.join(s['health'])}" if s["health"] else ""))
        return
    s = labmod.status(name)
    if json_:
        out.print_json(json.dumps(s))
        if s["health"]:
            raise typer.Exit(1)           # an unhealthy lab is a failure for scripts too
        return
    caps = s["capabilities"]
    out.print(f"[bold]{escape(s['lab'])}[/] ({s['backend']}, {s['status']}) from {escape(s['experiment'])}")
    out.print(f"kernel {caps.get('kernel')}: netem={caps.get('netem')} tbf={caps.get('tbf')} "
              f"nfqueue={caps.get('nfqueue')} statistic={caps.get('statistic')}; shaper: [bold]{s['shaper']}[/]")
    if s.get("dilation", 1) != 1:
        out.print(f"time dilation {s['dilation']:g}: links realise delay x {s['dilation']:g} and rate / "
                  f"{s['dilation']:g} (the table shows the virtual parameters); `probe` reports virtual times")
    for w in s["warnings"]:
        out.print(f"[yellow]WARNING: {escape(w)}[/]")
    for h in s["health"]:
        out.print(f"[red]PROBLEM: {escape(h)}[/]")
    members = [n for n in s["nodes"] if n["role"] == "member"]
    out.print(f"{len(s['nodes'])} nodes: {len(members)} members, {len(s['nodes']) - len(members)} routers")
    table = Table("node", "role", "address", "parent")
    for n in s["nodes"][:50]:
        table.add_row(n["name"], n["role"], n["address"], n["parent"] or "-")
    out.print(table)
    if len(s["nodes"]) > 50:
        out.print(f"... {len(s['nodes']) - 50} more (--json lists all)")
    counted = s["shaper_totals"] is not None
    cols = ["link", "direction", "rate kbit/s", "delay ms", "jitter ms", "loss", "queue"]
    lt = Table(*cols, *(["packets", "lost", "overflowed", "max queue"] if counted else []))
    for lk in s["links"][:30]:
        for d in ("down", "up"):
            p = lk[d]
            row = [lk["id"], d, "cut" if p["cut"] else str(p["rate_kbit"] or "-"), f"{p['delay_ms']:g}",
                   f"{p['jitter_ms']:g}", f"{p['loss'] * 100:g}%", str(p["queue"] or "-")]
            c = p.get("counters")
            if counted:
                row += [str(c[k]) for k in ("packets", "lost", "overflowed", "max_queue")] if c else ["-"] * 4
            lt.add_row(*row)
    out.print(lt)
    if counted:
        t = s["shaper_totals"]
        he = t["hold_error"]
        p99 = f"{he['p99_s'] * 1000:.2f} ms" if he.get("p99_s") is not None else "-"
        out.print(f"delay line: {t['packets']} packets, kernel drops {t['kernel_drops']}, hold error p99 {p99}, "
                  f"CPU {t['cpu_s']:.1f} s, RSS {t['rss_bytes'] / 2**20:.0f} MiB")
    if len(s["links"]) > 30:
        out.print(f"... {len(s['links']) - 30} more links (--json lists all)")
    mc = s.get("multicast")
    if mc:
        d = mc["daemon"]
        out.print(f"multicast routing daemon: pid {d['pid']}, " + ("alive" if d["alive"] else "[red]NOT RUNNING[/]"))
        for g in mc["groups"]:
            out.print(f"group {g['name']} {g['address']}:{g['port']}: {len(g['members'])} members, "
                      f"{len(g['senders'])} senders, tree {g['tree_nodes']} nodes / {g['tree_links']} links, "
                      f"routes {g['mfc_installed'] if g['mfc_installed'] is not None else '-'}/{g['mfc_expected']} "
                      f"installed, ttl {g['ttl']}")
    if s["health"]:
        raise typer.Exit(1)               # the PROBLEM lines above: the lab is not healthy


@app.command(context_settings={"allow_interspersed_args": False})
def exec(  # noqa: A001 - the command is called exec
    name: str = typer.Argument(..., help="Lab name."),
    node: str = typer.Argument(..., help="Node name (e.g. h3)."),
    argv: List[str] = typer.Argument(..., help="Command after `--`; a word equal to a node name becomes its address."),
) -> None:
    """Run a command inside a node, like Mininet's `h1 ping h2`."""
    state = load_state(name)
    names = labmod.addresses(state, state.load_plan())     # the real addresses where the backend learned them
    argv = [names.get(a, a) for a in argv]
    from orchestrator.backends.registry import get_backend

    raise typer.Exit(get_backend(state.backend).exec(state, node, argv))


@app.command(name="cli")
def cli_(
    name: str = typer.Argument(..., help="Lab name."),
    script: Optional[Path] = typer.Option(None, "--script", help="Run these CLI commands and exit (like `mn`'s "
                                          "`source`)."),
) -> None:
    """Mininet's CLI on a running lab: `h1 ping h39`, `pingall`, `h3 tcpdump -ni any`, `link h0 h1 down|up`."""
    state = load_state(name)
    from orchestrator.backends.registry import get_backend
    from orchestrator.labcli import open_cli

    if script is not None and not script.is_file():
        raise SpecError(f"--script {script}: no such file")
    open_cli(state, get_backend(state.backend), str(script) if script else None)


@app.command()
def teardown(
    name: Optional[str] = typer.Argument(None, help="Lab name."),
    all_: bool = typer.Option(False, "--all", help="Tear down every lab this machine has."),
) -> None:
    """Remove a lab: processes, namespaces, links, shaping. Idempotent; works after a crashed orchestrator."""
    if all_ == (name is not None):
        raise SpecError("teardown takes a lab name or --all")
    t0 = time.monotonic()
    with BarProgress(err) as progress:
        labs = labmod.teardown_all(progress) if all_ else (labmod.teardown(name, progress) or [name])
    err.print(f"removed {', '.join(labs) if labs else 'nothing (no labs)'} in {time.monotonic() - t0:.1f} s")


@app.command()
def graph(
    target: str = typer.Argument(..., help="Experiment file or the name of a running lab."),
    out_prefix: Optional[Path] = typer.Option(None, "--out", help="Output prefix (default: graph-<name>)."),
) -> None:
    """Draw the topology: writes PREFIX.dot and PREFIX.png."""
    if Path(target).exists():
        plan, title = build_plan(load_experiment(target)), Path(target).stem
    elif target in list_labs():
        plan, title = load_state(target).load_plan(), target
    else:
        raise SpecError(f"{target}: neither an experiment file nor a running lab")
    prefix = out_prefix or Path(f"graph-{title}")
    prefix.with_suffix(".dot").write_text(to_dot(plan, title))
    draw_png(plan, prefix.with_suffix(".png"), title)
    out.print(f"wrote {prefix.with_suffix('.dot')} and {prefix.with_suffix('.png')}")


@app.command()
def probe(
    name: str = typer.Argument(..., help="Lab name."),
    links: int = typer.Option(4, "--links", min=0, help="Links to probe hop by hop."),
    paths: int = typer.Option(2, "--paths", min=0, help="Multi-hop member-to-member paths to probe."),
    count: int = typer.Option(10, "--count", min=1, help="Pings per probe."),
    rate: bool = typer.Option(True, "--rate/--no-rate", help="Send a UDP train to sample one link's rate."),
    seed: int = typer.Option(0, help="Seed for the choice of links and paths."),
    json_: bool = typer.Option(False, "--json", help="Machine-readable output (the fidelity.json format)."),
    group: Optional[str] = typer.Option(None, "--group", help="Check this multicast group instead: one sender "
                                        "streams --count datagrams, every member must get each once, every link "
                                        "one copy per packet where the group's tree crosses it."),
    sender: Optional[str] = typer.Option(None, "--sender", help="--group: the sending member (default: the first)."),
    size: int = typer.Option(100, "--size", min=12, max=1400, help="--group: UDP payload bytes."),
) -> None:
    """Fidelity probe on a running lab: per-hop RTT against 2 x (delay + serialisation), a rate sample, loss."""
    if group is not None:
        res = labmod.probe_group(name, group, count=count, size=size, sender=sender)
        if json_:
            print(json.dumps(res, indent=1))
        else:
            out.print(f"group {res['group']} {res['address']}: {res['count']} packets from {res['sender']} to "
                      f"{len(res['receivers'])} members over a tree of {res['tree_links']} links; max one-way "
                      f"delay error {res['max_abs_delay_error_ms'] or 0:.2f} ms")
            for p in res["problems"]:
                out.print(f"[red]PROBLEM: {escape(p)}[/]")
            for w in res["warnings"]:
                out.print(f"[yellow]WARNING: {escape(w)}[/]")
            out.print("OK: every member received every packet once, one copy per tree link" if res["ok"] else "")
        if not res["ok"]:
            raise typer.Exit(1)
        return
    err.print(f"probing {name}: {links} links, {paths} paths, {count} pings each"
              + (", then a rate sample" if rate else "") + " ...")
    res = labmod.probe_network(name, links=links, paths=paths, count=count, seed=seed, rate=rate)
    if json_:
        print(json.dumps(res, indent=1))
        return
    split = bool(res.get("underlay_rtt_ms"))          # a lab over several machines: cut links cross the underlay
    t = Table("src", "dst", "hops", "configured", "emulated", *(["underlay"] if split else []), "measured", "error",
              "error %", "rcvd/sent",
              title=f"RTT in ms: configured, what shaper {res['shaper']} emulates, "
                    + ("the underlay's round trips under the cut links crossed, " if split else "")
                    + f"measured median ({PING_IP_BYTES}-byte IP pings)")
    for p in res["paths"]:
        med, e = p["median_rtt_ms"], p["error_ms"]
        target = p["emulated_rtt_ms"] + p.get("underlay_ms", 0.0)
        pct = f"{100 * e / target:+.1f}" if e is not None and target else "-"
        under = [f"{p['underlay_ms']:.3f} ({p['cut_links']} cut)" if p.get("cut_links") else "-"] if split else []
        t.add_row(p["src"], p["dst"], str(p["hops"]), f"{p['expected_rtt_ms']:.2f}", f"{p['emulated_rtt_ms']:.2f}",
                  *under, "-" if med is None else f"{med:.2f}", "-" if e is None else f"{e:+.2f}", pct,
                  f"{p['received']}/{p['sent']}")
    out.print(t)
    if split:
        out.print("underlay RTT per cut link (ms, real): " + ", ".join(
            f"{k} {v:.3f}" for k, v in sorted(res["underlay_rtt_ms"].items())))
    out.print(f"loss: {res['sent'] - res['received']} of {res['sent']} pings lost "
              f"(expected {res['expected_lost']:.1f} from the configured loss)")
    r = res["rate"]
    if r is None:
        out.print("rate: no rate-limited link (or --no-rate)")
    elif r["measured_bps"] is None:
        out.print(f"rate: link {r['link']} {r['direction']}: train of {r['count']} received {r['received']}, "
                  "too few packets to measure")
    else:
        out.print(f"rate: link {r['link']} {r['direction']} ({r['src']} -> {r['dst']}): configured "
                  f"{r['configured_bps'] / 1000:g} kbit/s, measured {r['measured_bps'] / 1000:.2f} kbit/s "
                  f"({100 * r['error']:+.1f} %), train {r['received']}/{r['count']} x {r['wire_bytes']} B on the wire"
                  + ("" if r["emulated"] else " [shaper does not emulate rate]"))
    for param, hows in (res["parameters"] or {}).items():
        out.print(f"shaping of {param}: " + "; ".join(f"{how} ({n} link directions)" for how, n in hows.items()))


@app.command()
def analyze(
    run_dirs: List[Path] = typer.Argument(..., help="Run directories (several: also a comparison)."),
    master: str = typer.Option("local[*]", help="Spark master: local[*] or spark://host:port."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Where the comparison of several runs goes."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display (it is shown on a terminal)."),
) -> None:
    """Analyse run directories with Spark: Parquet tables, the generic and the protocol's metrics,
    report.md/report.html per run; progress per run and stage on a terminal."""
    from analysis.cli import main as analysis_main

    argv = [str(p) for p in run_dirs] + ["--master", master] + (["--out", str(out_dir)] if out_dir else [])
    argv += ["--quiet"] if quiet else []
    rc = analysis_main(argv)
    if rc:
        raise typer.Exit(rc)


@app.command()
def dissector(
    out_file: Path = typer.Option(..., "--out", help="The Lua file to write (e.g. gossip.lua)."),
    udp_port: List[int] = typer.Option([7000], "--udp-port", help="UDP unicast port(s) of the nodes."),
    mcast_port: List[int] = typer.Option([7001], "--mcast-port", help="Multicast group port(s)."),
    tcp_port: List[int] = typer.Option([7000], "--tcp-port", help="TCP port(s) of the nodes."),
) -> None:
    """Write a Wireshark Lua dissector of every registered protocol, generated from the wire registry
    (tshark -X lua_script:FILE -Y 'gossip.type == "GOSSIP"')."""
    from analysis.dissector import generate

    out_file.write_text(generate(udp_ports=udp_port, mcast_ports=mcast_port, tcp_ports=tcp_port))
    out.print(str(out_file))


@app.command(name="machine-check", hidden=True)
def machine_check(shaper: ShaperName = typer.Option(ShaperName.auto, help=SHAPER_HELP)) -> None:
    """Internal (`up --machines` asks every machine): this machine's code digest, uid, kernel features and
    shaper, as one JSON line."""
    from orchestrator.machinecheck import local_check

    print(json.dumps(local_check(shaper.value)))


@app.command(name="machine-agent", hidden=True)
def machine_agent(
    name: str = typer.Argument(..., help="Lab name."),
    part: Path = typer.Option(..., "--part", help="This machine's part (JSON, written by `up --machines`)."),
) -> None:
    """Internal (`run --machines` starts one per machine over SSH): this machine's members, driven by JSON lines
    on stdin (orchestrator/backends/machineagent.py)."""
    import os

    from orchestrator.backends.machineagent import Agent, serve

    replies = os.fdopen(os.dup(1), "w")     # the replies' own descriptor: anything else printed goes to stderr
    os.dup2(2, 1)
    serve(Agent(name, part), sys.stdin.buffer, replies)


@app.command()
def probe_kernel() -> None:
    """Probe what this kernel can shape with (netem, tbf, NFQUEUE, statistic)."""
    caps = labmod.probe(cache=False)
    out.print_json(json.dumps(caps.to_json()))


image_app = typer.Typer(no_args_is_help=True, help="Images of the Docker backend.")
app.add_typer(image_app, name="image")


@image_app.command("build")
def image_build(
    base_image: Optional[str] = typer.Option(None, "--base-image", envvar="BASE_IMAGE",
                                             help="Build the node image FROM this (e.g. python:3.11-slim-bookworm) "
                                                  "instead of the local debootstrap base."),
    tag: str = typer.Option("gossip-testbed/node:latest", help="Tag of the node image."),
    suite: str = typer.Option("bookworm", help="Debian suite of the debootstrap base."),
    mirror: str = typer.Option("http://deb.debian.org/debian", help="Debian mirror for debootstrap."),
    rebuild_base: bool = typer.Option(False, "--rebuild-base", help="Rebuild the base even if it exists."),
) -> None:
    """Build the base image (debootstrap + docker import, kept when it exists) and the node image; print sizes."""
    from orchestrator import images

    t0 = time.monotonic()
    with BarProgress(err) as progress:
        built = images.build_all(base_image, tag, suite, mirror, rebuild_base, progress)
    for info in built:
        out.print(info.describe())
    err.print(f"images ready in {time.monotonic() - t0:.1f} s")


from orchestrator.cli_sweep import register as _register_sweep  # noqa: E402 - needs `app`

_register_sweep(app)   # `sweep` and `tune`


def main() -> None:
    try:
        app()
    except OrchestratorError as exc:
        if _debug:
            traceback.print_exc()
        # The message is text, not rich markup: `[/]` or `[msgs/s]` in it must print as they are.
        err.print(f"[red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
