"""Installing this orchestrator on the machines of a lab over several machines (docs/machines.md): a machine whose
inventory entry names no `testbed_orchestrator` gets the controller's own code, once per code digest.

    <workdir>/orchestrator-<digest>/src/        orchestrator/ and node_image/gossipnode/, as the controller has them
    <workdir>/orchestrator-<digest>/venv/       a venv of the machine's python3 (ansible_python_interpreter) with the
                                                 wheels the machines' commands import, the sources on its path (.pth)

The controller downloads the wheels once for its own Python and platform (pip, cached like the hosts backend's node
wheels: the machines need the same Python minor version and architecture) and packs one tarball; the hosts
backend's deployment engine (ansible-runner, playbooks/machines_install.yml) copies it to every machine that has
no install of this code yet, where the install script (SCRIPT) unpacks it into a temporary directory, makes the
venv, installs the wheels offline, builds the delay line's compiled engine when it has a compiler (else the Python
engine runs, with a warning) and renames the directory into place last: a directory of that name is a finished
install. Nothing else on the machine changes;
`rm -rf <workdir>/orchestrator-*` removes every install.
"""
from __future__ import annotations

import sys
import tarfile
from pathlib import Path

from orchestrator.hosts.deploy import cached_wheels, wheel_cache
from orchestrator.hosts.hostsfile import Host
from orchestrator.machinecheck import CODE_ROOTS, REPO

# What the machines' commands import (up --part, machine-check, machine-agent, teardown, status, exec): not the
# analysis, Docker or Ansible.
REQUIREMENTS = ["pydantic>=2.6", "pyyaml>=6", "jinja2>=3.1", "typer>=0.12", "rich>=13", "pyroute2>=0.7",
                "cffi>=1.15", "mininet==2.3.0.dev6", "paramiko>=3.4"]

# $1 the install directory, $2 the machine's python, $3 the controller's Python version, $4 the bundle (removed).
SCRIPT = r"""set -e
D=$1; PY=$2; T="$D.tmp.$$"; trap 'rm -f "$4"' EXIT
got=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])') || { echo "no python at $PY" >&2; exit 3; }
[ "$got" = "$3" ] || { echo "python $got at $PY, the controller's is $3:" \
  "set ansible_python_interpreter to a python $3" >&2; exit 3; }
rm -rf "$T"; mkdir -p "$T"; trap 'rm -rf "$T" "$4"' EXIT
tar -xzf "$4" -C "$T"
"$PY" -m venv --without-pip "$T/venv"
"$T/venv/bin/python" "$(ls "$T"/tools/pip-*.whl | head -n 1)/pip" install -q --no-index --disable-pip-version-check \
  --find-links "$T/wheels" -r "$T/wheels/requirements.txt"
site=$("$T/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
printf '%s\n%s\n' "$D/src" "$D/src/node_image" > "$site/gossip-testbed.pth"
"$T/venv/bin/python" "$T/src/orchestrator/shaping/delayline/build_engine.py" >/dev/null 2>&1 \
  || echo "the delay line's compiled engine could not be built (no compiler or Python headers):" \
    "the Python engine runs" >&2
rm -rf "$D"; mv "$T" "$D"; rm -f "$4"; trap - EXIT
"""


def install_dir(host: Host, digest: str) -> str:
    return f"{host.workdir}/orchestrator-{digest}"


def python_of(host: Host, digest: str) -> str:
    return f"{install_dir(host, digest)}/venv/bin/python"


def wheels() -> Path:
    """The machines' wheels for this Python and platform (downloaded once with pip, cached), and a pip wheel."""
    return cached_wheels(wheel_cache().parent / f"machines-{wheel_cache().name}", REQUIREMENTS, "the machines")


def bundle(dest: Path, roots: tuple[Path, ...] = CODE_ROOTS) -> Path:
    """src/ (every file of the orchestrator and node packages but compiled and cached ones), wheels/ with
    requirements.txt, tools/pip-*.whl: one tarball, the same for every machine."""
    w = wheels()
    with tarfile.open(dest, mode="w:gz") as tar:
        for root in roots:
            for f in sorted(root.rglob("*")):
                if f.is_file() and "__pycache__" not in f.parts and f.suffix not in (".so", ".pyc"):
                    tar.add(f, arcname=f"src/{f.relative_to(REPO).as_posix()}")
        for f in sorted(w.glob("*.whl")):
            tar.add(f, arcname=f"wheels/{f.name}")
        tar.add(w / "requirements.txt", arcname="wheels/requirements.txt")
        for f in sorted((w / "pip").glob("pip-*.whl"))[-1:]:
            tar.add(f, arcname=f"tools/{f.name}")
    return dest


def installed(machine, digest: str) -> bool:
    h = machine.host
    rc, _, _ = machine.call((["sudo", "-n", "--"] if h.become else []) + ["test", "-x", python_of(h, digest)],
                            timeout_s=30)
    return rc == 0


def install(hosts: list[Host], digest: str, known_hosts: Path, accept_new: bool,
            progress=None) -> tuple[dict[str, str], dict[str, str]]:
    """Install this code on `hosts` with the hosts backend's deployment engine (ansible-runner,
    playbooks/machines_install.yml): ({host: what its install said on stderr, e.g. a missing compiler},
    {host: why it failed, in the machine's own words})."""
    import tempfile

    from orchestrator.hosts.ansible import AnsibleContext
    from orchestrator.hosts.render import connection_vars, render_vars

    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    with tempfile.TemporaryDirectory(prefix="orch-install-") as tmp:
        data = Path(tmp)
        tarball = bundle(data / f"orchestrator-{digest}.tar.gz")
        inventory = render_vars("(the orchestrator's install)", "", {
            h.name: {**connection_vars(h), "machines_workdir": h.workdir, "machines_dir": install_dir(h, digest),
                     "machines_python": h.python} for h in hosts})
        ctx = AnsibleContext(data_dir=data / "ansible", inventory=inventory,
                             extravars={"machines_bundle": str(tarball), "machines_script": SCRIPT,
                                        "machines_version": version},
                             known_hosts=known_hosts, accept_new_host_keys=accept_new,
                             users={h.name: h.user for h in hosts})
        try:
            ctx.prepare()
            res = ctx.run("machines_install.yml", progress)
        finally:
            ctx.close()
    problems = {h: f"cannot install the orchestrator: {why}" for h, why in res.failures.items()}
    if res.status != "successful" and not problems:
        problems = {h.name: f"cannot install the orchestrator: ansible-playbook {res.status} (rc {res.rc})"
                    for h in hosts}
    said = {h: (r.get("stderr") or "").strip() for h, r in res.reports.items() if h not in problems}
    return {h: s for h, s in said.items() if s}, problems
