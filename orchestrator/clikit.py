"""Pieces the command modules share: the progress display, `--set` parsing, `--machines`."""
from __future__ import annotations

from enum import Enum
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichBar, TextColumn, TimeElapsedColumn

from orchestrator.backends import registry
from orchestrator.errors import SpecError


# --backend: a choice, so --help lists them and a typo fails when the command line is parsed; the choices are
# the backend registry's names (orchestrator.backends.registry), the CLI resolves the name there.
BackendName = Enum("BackendName", {n: n for n in registry.names()}, type=str)


class ShaperName(str, Enum):
    """--shaper (the names of orchestrator.shaping.probe.SHAPERS)."""

    auto = "auto"
    netem = "netem"
    delayline = "delayline"
    tbf = "tbf"


class BarProgress:
    """Draws the core's progress events as rich progress bars (on stderr, so --json stays clean)."""

    def __init__(self, console: Console, label_width: int = 28, *extra_columns):
        self.bar = RichBar(TextColumn(f"{{task.description:<{label_width}}}"), BarColumn(), MofNCompleteColumn(),
                           TimeElapsedColumn(), *extra_columns, console=console, transient=False)
        self.tasks: dict[str, int] = {}

    def __enter__(self):
        self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        return self.bar.__exit__(*exc)

    def start(self, step: str, total: int) -> None:
        self.tasks[step] = self.bar.add_task(step, total=total)

    def advance(self, step: str, n: int = 1) -> None:
        self.bar.advance(self.tasks[step], n)

    def note(self, message: str) -> None:
        """A line of plain text: never markup (a playbook's task note `[up] ...` lost its tag, a path `[/tmp/...]`
        in an error raised rich's MarkupError and ended the command)."""
        self.bar.console.print(message, style="yellow" if message.startswith("WARNING") else None, markup=False)


DILATION_HELP = ("Time dilation N (one virtual second lasts N real seconds: node clocks, schedule, link delay and "
                 "rate, duration) or `auto` (sized from the members' CPU budgets); replaces the experiment's "
                 "time.dilation (docs/virtual-time.md).")


def parse_dilation(text: str | None) -> float | str | None:
    """`--dilation`: a number in (0, 1000] or `auto`; SpecError (exit 2) otherwise."""
    if text is None:
        return None
    from orchestrator.models import check_dilation

    try:
        return check_dilation(text)
    except ValueError as exc:
        raise SpecError(f"--dilation {text!r}: {exc}") from None


CPU_FROM_HELP = ("A finished run or sweep directory: `time: {dilation: auto}` is sized from the member CPU it measured "
                 "(min(budget, measured x 1.25) per member) instead of the budgets.")


def parse_cpu_from(path):
    """`--cpu-from RUN_OR_SWEEP_DIR` -> orchestrator.timebase.Measured (SpecError when it measured nothing)."""
    if path is None:
        return None
    from orchestrator.sweepfit import measured_from

    return measured_from(path)


def parse_sets(sets: list[str] | None) -> dict[str, str]:
    variables = {}
    for item in sets or []:
        if "=" not in item:
            raise SpecError(f"--set {item!r}: expected NAME=VALUE")
        k, v = item.split("=", 1)
        variables[k] = v
    return variables


MACHINES_HELP = ("Build the lab over several machines: an Ansible INI/YAML inventory (group 'testbed'; each machine "
                 "root and an underlay address testbed_address; the controller installs its own code there; "
                 "docs/machines.md).")


def machines_options(machines: Path, backend: str, inventory: Path | None, part: Path | None, known_hosts,
                      accept_new: bool, strict: bool, sets, dilation: str | None) -> dict:
    if backend != "mininet" or inventory is not None or part is not None:
        raise SpecError("--machines builds network namespaces on every machine: it takes no --backend, "
                        "--inventory or --part")
    from orchestrator.hosts.inventory import load

    load(machines)                        # the inventory is input: checked before anything is built
    return {"inventory": machines, "known_hosts": known_hosts, "accept_new_host_keys": accept_new,
            "strict": strict, "sets": list(sets or []), "dilation": dilation}
