"""The Docker backend: one container per member from the node image, wired like the Mininet backend (docs/architecture.md §3).

Every member is a container (`network_mode="none"`, labels naming the lab and the node, so teardown finds
everything); routers are plain named namespaces. Once a member's container runs, its network namespace is given
the name `<lab>-<node>` (`ip netns attach`, a bind mount of /proc/<pid>/ns/net), so from then on the lab is
exactly what the Mininet backend builds: the same veth pairs, addresses, routes, qdiscs, iptables rules and delay
line, by the same code. The bind mount also keeps the namespace (and its veths) alive whatever the container's
processes do.

What runs where:
- The protocol node runs INSIDE its container (a `docker exec` of `python -m gossipnode`, through the SDK): its
  files (config, event log, stdout/stderr, control socket) live in a per-node directory that is bind-mounted at
  the same path in the container and on the host, and are copied into the run directory at the end.
  crash = SIGKILL of the node process (the container and its network stay, like a host whose process died);
  restart = a new exec; pause and perturb = SIGSTOP/SIGCONT of the node process (`docker pause` through the
  engine is 20-55 ms late per call, too coarse for 100 ms perturbations). A crash does not kill the container
  itself: with `network_mode="none"` a restarted container gets a NEW network namespace, without the node's
  wiring.
- Captures, the fidelity probe and tc statistics run host tools inside the node's namespace (`popen`, inherited
  from the Mininet backend), as on Mininet: tcpdump writes straight into the run directory.
- `orchestrator exec` runs the command inside the member's container (the image's own tools: the debootstrap
  base ships ping and ip); on a router it runs inside its namespace.

The container's main process is `sleep infinity`: it only holds the namespaces.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from orchestrator.backends import netns, packing
from orchestrator.backends.mininet import BATCH, MininetBackend
from orchestrator.backends.base import Progress
from orchestrator.backends.budgets import DockerBudgets
from orchestrator.backends.dockerexec import DockerNodeProcess
from orchestrator.backends.local import LocalDriver
from orchestrator.errors import BackendError
from orchestrator.plan import NetworkPlan
from orchestrator.state import LabState, ns_name, state_root

try:                    # the SDK's typed errors; without the SDK `client()` says so and none of these can happen
    from docker.errors import APIError, DockerException, ImageNotFound, NotFound
except ImportError:     # pragma: no cover - `make setup` installs it
    class DockerException(Exception):  # type: ignore[no-redef]
        pass

    APIError = NotFound = ImageNotFound = DockerException  # type: ignore[misc]

LABEL_APP = "gossip-testbed.app"
LABEL_LAB = "gossip-testbed.lab"
LABEL_NODE = "gossip-testbed.node"
LABEL_STATE = "gossip-testbed.state-dir"     # the state directory the lab belongs to (orphans are found per dir)
DEFAULT_NODE_IMAGE = "gossip-testbed/node:latest"
WORKERS = 4          # containers created/removed at a time (dockerd serialises much of it anyway)


LABEL_SOURCE = "gossip-testbed.source-digest"
NODE_SOURCE = Path(__file__).resolve().parents[2] / "node_image" / "gossipnode"


def node_image() -> str:
    return os.environ.get("ORCHESTRATOR_NODE_IMAGE", DEFAULT_NODE_IMAGE)


def source_digest(root: Path = NODE_SOURCE) -> str:
    """sha256 over the node's Python sources (paths and contents): the node image carries it as a label, so a
    lab never runs a node older than the code a Mininet lab would run."""
    import hashlib

    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def share_root(lab: str) -> Path:
    """Host directory holding one directory per member, bind-mounted at the same path in its container.
    Short on purpose: the node's control socket lives there (unix socket paths are limited to 108 bytes)."""
    return Path(os.environ.get("ORCHESTRATOR_DOCKER_SHARE", "/tmp")) / f"orch-docker-{lab}"


class DockerUnavailable(BackendError):
    """No Docker engine to talk to."""


HOW_TO_START = ("start it with `systemctl start docker`, or without systemd `dockerd >/var/log/dockerd.log 2>&1 &` "
                "(`make setup` installs docker.io and starts it)")


def client():
    """A Docker SDK client for a live engine, or one clear DockerUnavailable."""
    try:
        import docker
    except ImportError:
        raise DockerUnavailable("the Docker SDK for Python is not installed (`make setup`, or pip install docker)")
    try:
        c = docker.from_env(timeout=120)
        c.ping()
        return c
    except (DockerException, OSError) as exc:   # no socket, refused, timed out (requests' errors are OSErrors)
        sock = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        reason = str(exc).split("(")[0].strip() or exc.__class__.__name__
        raise DockerUnavailable(f"the Docker engine is not running or not reachable at {sock} ({reason}): "
                                f"{HOW_TO_START}") from None


def container_name(lab: str, node: str) -> str:
    return f"{lab}-{node}"


def lab_containers(c, lab: str) -> list:
    """Every container, running or not, labelled as belonging to `lab`."""
    return c.containers.list(all=True, ignore_removed=True, filters={"label": f"{LABEL_LAB}={lab}"})


def container_spec(lab: str, node: str, image: str, share: Path, state_dir: Path | None = None) -> dict:
    """Keyword arguments of `containers.run` for one member (pure)."""
    state_dir = state_dir if state_dir is not None else state_root(persistent=True)
    return {
        "image": image, "name": container_name(lab, node), "hostname": node,
        "entrypoint": ["sleep", "infinity"], "command": [],
        "network_mode": "none", "detach": True,
        "labels": {LABEL_APP: "gossip-testbed", LABEL_LAB: lab, LABEL_NODE: node, LABEL_STATE: str(state_dir)},
        "volumes": {str(share): {"bind": str(share), "mode": "rw"}},
        "environment": {"PYTHONUNBUFFERED": "1"},
    }


def node_paths(lab: str, node: str) -> dict[str, Path]:
    """Where a member's files live: the same path on the host and in its container (pure)."""
    d = share_root(lab) / node
    return {"dir": d, "config": d / "config.json", "events": d / "events.jsonl", "log": d / "node.log",
            "control": d / "ctl.sock"}


NODE_SCRIPT = 'exec python -m gossipnode --config "$1" >>"$2" 2>&1'


def node_argv(paths: dict[str, Path]) -> list[str]:
    """The node's command inside its container: stdout/stderr appended to its log (pure). The paths (they come
    from ORCHESTRATOR_DOCKER_SHARE) are arguments of the script, never part of it: no quoting can break it."""
    return ["sh", "-c", NODE_SCRIPT, "gossipnode", str(paths["config"]), str(paths["log"])]


class _Local(threading.local):
    client = None


class DockerDriver(LocalDriver):
    """Nodes run in their containers (`docker exec`); their files are in the lab's share, copied at the end."""

    def __init__(self, backend, ctx):
        super().__init__(backend, ctx)
        self._started: set[str] = set()
        if self.budgets.active:                     # nodes.cpu: Docker's own quota on each member's container
            self.budgets = DockerBudgets(ctx, {m.name: backend._container(ctx.state, m.name)
                                               for m in ctx.plan.members})

    def prepare(self) -> None:
        super().prepare()
        if isinstance(self.budgets, DockerBudgets):
            self.budgets.apply()

    def configure(self, configs: dict[str, dict]) -> dict[str, dict]:
        lab = self.ctx.state.lab
        out = {}
        for node, config in configs.items():
            paths = node_paths(lab, node)
            out[node] = {**config, "event_log": str(paths["events"]), "control": str(paths["control"])}
        self.configs = out
        return out

    def start_process(self, name: str):
        state, backend = self.ctx.state, self.backend
        container = backend._container(state, name)
        if container is None:
            raise BackendError(f"{name} is not a member of lab {state.lab} (no container)")
        paths = node_paths(state.lab, name)
        if name not in self._started:              # first start in this run: no files of an earlier run
            for key in ("events", "log"):
                paths[key].unlink(missing_ok=True)
            self._started.add(name)
        paths["config"].write_text(json.dumps(self.configs[name], indent=1))
        api = backend._docker().api
        try:
            ex = api.exec_create(container.id, node_argv(paths), stdout=False, stderr=False)
            api.exec_start(ex["Id"], detach=True)
        except APIError as exc:         # e.g. the container is not running
            raise BackendError(f"starting the node in {container.name} failed: {_explain(exc)}") from None
        return DockerNodeProcess(backend._docker(), container, ex["Id"])

    def collect_node_files(self, name: str) -> None:
        run_dir = self.ctx.run.path
        paths = node_paths(self.ctx.state.lab, name)
        for key, dest in (("events", run_dir / "events" / f"{name}.jsonl"),
                          ("log", run_dir / "logs" / f"{name}.log")):
            if paths[key].exists():
                dest.parent.mkdir(parents=True, exist_ok=True)
                with open(paths[key], "rb") as src, open(dest, "ab") as dst:
                    shutil.copyfileobj(src, dst)
                paths[key].unlink()


class DockerBackend(MininetBackend):
    name = "docker"
    driver_class = DockerDriver
    state_survives_reboot = True        # stopped containers (and the share) outlive a reboot

    def check_run(self, exp, plan: NetworkPlan, lab: str, state: LabState | None) -> None:
        packing.refuse(self.name, exp, len(plan.members))     # a node is a process in its container (#21)

    # --- labs without state: found by label ---------------------------------------------------------------
    def orphan_labs(self, known: set[str], progress: Progress) -> list[str]:
        # Only labs of this state directory: another directory's labs (another user's, a test's) are not ours.
        mine = f"{LABEL_STATE}={state_root(persistent=True)}"
        try:
            found = self._docker().containers.list(all=True, ignore_removed=True,
                                                   filters={"label": [f"{LABEL_APP}=gossip-testbed", mine]})
        except DockerUnavailable as exc:
            progress.note(f"WARNING: cannot look for Docker labs without state: {exc}")
            return []
        return sorted({x.labels.get(LABEL_LAB) for x in found} - known - {None})

    def teardown_orphan(self, lab: str, progress: Progress) -> None:
        """The containers labelled with `lab`, their namespaces' names and the share: all a Docker lab leaves
        behind when its state is gone (the routers' namespaces and the daemons vanish with the reboot that
        lost /run; after a deleted state they are found by `teardown` of the namespaces named after the
        containers' nodes)."""
        here = str(state_root(persistent=True))
        found = [x for x in lab_containers(self._docker(), lab) if x.labels.get(LABEL_STATE) == here]
        nodes = [x.labels.get(LABEL_NODE) for x in found if x.labels.get(LABEL_NODE)]
        state = LabState(lab=lab, backend=self.name, shaper="", persistent=True,
                         namespaces=netns.existing([ns_name(lab, n) for n in nodes]),
                         backend_data={"containers": [x.name for x in found], "share": str(share_root(lab))})
        progress.note(f"lab {lab}: no state; removing its {len(found)} labelled containers")
        self._teardown_before_processes(state, progress)
        netns.delete_namespaces(state.namespaces)

    def __init__(self) -> None:
        self._local = _Local()

    def _docker(self):
        if self._local.client is None:
            self._local.client = client()
        return self._local.client

    # --- build ------------------------------------------------------------------------------------------------
    def up(self, plan: NetworkPlan, state: LabState, progress: Progress) -> None:
        # The engine and the image are checked before anything is created.
        image = node_image()
        try:
            img = self._docker().images.get(image)
        except ImageNotFound:
            raise BackendError(f"the node image {image} does not exist: build it with `orchestrator image build` "
                               f"(or `make image`), or name another with ORCHESTRATOR_NODE_IMAGE") from None
        except APIError as exc:
            raise BackendError(f"the Docker engine failed looking up the node image {image}: {_explain(exc)}") \
                from None
        built_from = (img.labels or {}).get(LABEL_SOURCE)
        if built_from is None:
            progress.note(f"WARNING: {image} has no {LABEL_SOURCE} label: cannot tell which gossipnode it runs")
        elif built_from != source_digest():
            raise BackendError(f"the node image {image} was built from other gossipnode sources than "
                               f"{NODE_SOURCE}: rebuild it with `orchestrator image build` (seconds: the base "
                               f"is kept)")
        super().up(plan, state, progress)

    def _create_namespaces(self, plan: NetworkPlan, state: LabState, progress: Progress) -> None:
        lab = state.lab
        c = self._docker()
        image = node_image()
        members = [n.name for n in plan.members]
        routers = [n.name for n in plan.nodes if n.role != "member"]
        share = share_root(lab)
        names = {container_name(lab, m) for m in members}
        # Checked before anything is recorded: a failed `up` must not tear down containers that are not its own.
        clash = lab_containers(c, lab) + [x for x in c.containers.list(all=True, ignore_removed=True,
                                                                       filters={"name": lab}) if x.name in names]
        if clash:
            raise BackendError(f"container {clash[0].name} already exists (a lab of the same name under another "
                               f"state directory, or a leftover: `docker rm -f {clash[0].name}`)")
        # Recorded before anything is created: teardown (also after a killed orchestrator) finds all of it.
        state.backend_data = {"containers": sorted(names), "share": str(share), "image": image,
                              "image_id": c.images.get(image).id}
        state.save()
        for m in members:
            node_paths(lab, m)["dir"].mkdir(parents=True, exist_ok=True)

        progress.start("containers", len(members))
        pids: dict[str, int] = {}

        def create(node: str) -> None:
            container = self._docker().containers.run(**container_spec(lab, node, image, share))
            container.reload()                      # run() returns the attributes from before the start
            pid = container.attrs["State"]["Pid"]
            if not pid:
                raise BackendError(f"container {container.name} started without a process")
            pids[node] = pid

        _parallel(create, members, lambda: progress.advance("containers"))

        # Name every container's network namespace like the Mininet backend's; routers get a plain namespace.
        progress.start("namespaces", len(plan.nodes))
        lines = [f"netns attach {ns_name(lab, m)} {pids[m]}" for m in members] + \
                [f"netns add {ns_name(lab, r)}" for r in routers]
        for i in range(0, len(lines), BATCH):
            netns.ip_batch(lines[i:i + BATCH])
            progress.advance("namespaces", len(lines[i:i + BATCH]))

    # --- teardown ---------------------------------------------------------------------------------------------
    def _teardown_before_processes(self, state: LabState, progress: Progress) -> None:
        data = state.backend_data or {}
        if data.get("containers"):
            c = self._docker()
            # By label: set atomically at creation, so every container this lab created carries it.
            found = {x.name: x for x in lab_containers(c, state.lab)}
            progress.start("containers", len(found))

            def remove(x) -> None:
                try:
                    x.remove(force=True)        # SIGKILL, also of a paused container, then delete it
                except NotFound:
                    pass                        # already gone (idempotent)
                except APIError as exc:
                    raise BackendError(f"could not remove container {x.name}: {_explain(exc)}") from None

            _parallel(remove, list(found.values()), lambda: progress.advance("containers"))
            left = [x.name for x in lab_containers(c, state.lab)]
            if left:
                raise BackendError(f"{len(left)} containers of lab {state.lab} remain, e.g. {left[0]}")
        if data.get("share"):
            shutil.rmtree(data["share"], ignore_errors=True)

    # --- processes --------------------------------------------------------------------------------------------
    def _container(self, state: LabState, node: str):
        name = container_name(state.lab, node)
        if name not in (state.backend_data or {}).get("containers", []):
            return None
        try:
            return self._docker().containers.get(name)
        except NotFound:
            raise BackendError(f"the container {name} of lab {state.lab!r} does not exist") from None
        except APIError as exc:
            raise BackendError(f"the Docker engine failed looking up container {name}: {_explain(exc)}") from None

    def exec(self, state: LabState, node: str, argv: list[str]) -> int:
        container = self._container(state, node)
        if container is None:                       # a router: a plain namespace
            return super().exec(state, node, argv)
        if argv[:1] == ["--"]:
            argv = argv[1:]
        api = self._docker().api
        try:
            ex = api.exec_create(container.id, argv, stdout=True, stderr=True)
            stream = api.exec_start(ex["Id"], stream=True, demux=True)
        except APIError as exc:         # e.g. the container is not running
            raise BackendError(f"docker exec in {container.name} failed: {_explain(exc)}") from None
        try:
            for out, errs in stream:
                if out:
                    sys.stdout.buffer.write(out)
                    sys.stdout.flush()
                if errs:
                    sys.stderr.buffer.write(errs)
                    sys.stderr.flush()
        except KeyboardInterrupt:
            pid = api.exec_inspect(ex["Id"]).get("Pid")
            if pid:
                try:
                    os.kill(pid, signal.SIGINT)
                except ProcessLookupError:
                    pass
        for _ in range(500):
            info = api.exec_inspect(ex["Id"])
            if not info.get("Running"):
                return info.get("ExitCode") or 0
            time.sleep(0.01)
        return 1

    def health(self, state: LabState) -> list[str]:
        problems = super().health(state)
        want = set((state.backend_data or {}).get("containers", []))
        if want:
            try:
                mine = self._docker().containers.list(all=True, ignore_removed=True,
                                                      filters={"label": f"{LABEL_LAB}={state.lab}"})
                running = {x.name for x in mine if x.status in ("running", "paused")}
            except DockerUnavailable as exc:
                return problems + [str(exc)]
            missing = sorted(want - running)
            if missing:
                problems.append(f"{len(missing)} of {len(want)} containers are not running (e.g. {missing[0]})")
        return problems

    # --- measurements (benchmarks) ----------------------------------------------------------------------------
    def memory(self, state: LabState) -> dict[str, int]:
        """Memory charged to each member's container cgroup (bytes; cgroup v1 or v2), by node."""
        out = {}
        for x in lab_containers(self._docker(), state.lab):
            out[x.labels.get(LABEL_NODE, x.name)] = container_memory(x)
        return out


def cgroup_memory(pid: int) -> int | None:
    """Bytes charged to the memory cgroup of process `pid` minus its inactive file cache (cgroup v1 or v2), read
    from /sys/fs/cgroup directly; None when it cannot be read."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):                  # v1
            d = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
            usage_file, inactive_key = d / "memory.usage_in_bytes", "total_inactive_file"
            break
        if controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").exists():   # v2
            d = Path("/sys/fs/cgroup") / path.lstrip("/")
            usage_file, inactive_key = d / "memory.current", "inactive_file"
            break
    else:
        return None
    try:
        usage = int(usage_file.read_text())
        stat = dict(line.split() for line in (d / "memory.stat").read_text().splitlines())
    except (OSError, ValueError):
        return None
    return max(0, usage - int(stat.get(inactive_key, 0)))


def container_memory(container) -> int:
    """Bytes the container's cgroup uses, without inactive page cache. From the cgroup files (the engine's stats
    call takes about a second per container); the stats API when they cannot be read."""
    pid = container.attrs.get("State", {}).get("Pid")
    got = cgroup_memory(pid) if pid else None
    if got is not None:
        return got
    stats = container.stats(stream=False)
    mem = stats.get("memory_stats", {})
    detail = mem.get("stats", {})
    return max(0, mem.get("usage", 0) - detail.get("total_inactive_file", detail.get("inactive_file", 0)))


def _explain(exc: Exception) -> str:
    return getattr(exc, "explanation", None) or str(exc)


def _parallel(fn, items: list, on_done) -> None:
    """Apply `fn` to items with WORKERS threads; the first error (or Ctrl-C) cancels what has not started."""
    pool = ThreadPoolExecutor(max_workers=WORKERS)
    try:
        futures = [pool.submit(fn, it) for it in items]
        for f in as_completed(futures):
            f.result()
            on_done()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
