"""Experiment files: YAML (optionally Jinja2-templated) validated by pydantic models. Pure apart from reading the file.

Errors name the file, the field path and the line: `topologies/x.yaml:7: links.loss: '120%' is outside 0..100 %`.
The models are `orchestrator.models`, the reading and locating `orchestrator.source`; this module validates a
whole experiment, the plan and schedule checks included (it sits above plan.py and schedule.py, which import
the models, not this module).
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.errors import PlanError, SpecError
from orchestrator.models import (NAME_RE, Addressing, CaptureSpec, DirSpec, Experiment, GEModel,  # noqa: F401
                                 LinkOverride, LinkSpec, LinksSpec, SparseMembers, Strict, TreeTopology,
                                 check_name)
from orchestrator.plan import build_plan
from orchestrator.schedule import expand, parse_schedule
from orchestrator.source import (FieldError, PlanInputError, Source, format_loc, load_yaml,  # noqa: F401
                                 one_line, read_input, render, render_template)


# --- experiments -----------------------------------------------------------------------------------------------

def _load_document(text: str, path: str, variables: dict[str, Any] | None) -> tuple[dict, Source]:
    src = render(text, path, variables)
    data = load_yaml(src)
    if not isinstance(data, dict):
        raise src.plain("an experiment file is a YAML mapping with at least `topology:`")
    return data, src


def _validate(data: dict, src: Source) -> Experiment:
    try:
        exp = Experiment.model_validate(data)
    except ValidationError as exc:
        raise src.validation_error(exc) from None
    except RecursionError:
        raise src.plain("nested too deeply") from None
    check_experiment(exp, src)
    return exp


def check_experiment(exp: Experiment, src: Source | None = None):
    """What needs the plan: it can be built, and the schedule's targets and times fit it (so `up` refuses what
    `run` would). Returns (plan, timeline)."""
    src = src or Source("<experiment>", "")
    try:
        plan = build_plan(exp)
    except PlanError as exc:                 # located, and still a PlanError
        raise PlanInputError(str(src.located(exc))) from None
    except FieldError as exc:
        raise src.located(exc) from None
    except ValueError as exc:     # a value the models let through but the plan cannot use
        raise src.plain(f"cannot build the network plan: {exc}") from None
    try:
        timeline = expand(parse_schedule(exp.schedule), plan, exp.duration_s, exp.seed)
    except FieldError as exc:
        raise src.located(exc) from None
    if exp.nodes.cpu is not None and plan.members:
        from orchestrator.packs import decide_here
        from orchestrator.timebase import check_budgets

        per_process = decide_here(exp, len(plan.members)).members_per_process
        problem = check_budgets(exp.nodes.cpu, exp.time.dilation, per_process)
        if problem:
            raise src.error(("nodes", "cpu"), problem)
    return plan, timeline


def locate(path: str | Path, exc: FieldError, variables: dict[str, Any] | None = None) -> SpecError:
    """A FieldError found after loading (a backend's or the runner's own check) located in the experiment file."""
    try:
        _, src = _load_document(read_input(path, "experiment"), str(path), variables)
    except SpecError:
        return exc
    return src.located(exc)


def parse_experiment(text: str, path: str = "<string>", variables: dict[str, Any] | None = None,
                     seed: int | None = None, dilation: float | str | None = None) -> Experiment:
    """A whole experiment, validated (`seed` overrides the file's, before the schedule's draws are checked;
    `dilation` the file's `time.dilation`, before the CPU budgets are checked against it)."""
    data, src = _load_document(text, path, variables)
    if seed is not None:
        data["seed"] = seed
    if dilation is not None:
        data["time"] = {**(data.get("time") if isinstance(data.get("time"), dict) else {}), "dilation": dilation}
    return _validate(data, src)


def parse_document(text: str, path: str = "<string>", variables: dict[str, Any] | None = None) -> dict:
    """The experiment file as a plain dict (templating rendered), after validating all of it (for sweeps)."""
    data, src = _load_document(text, path, variables)
    _validate(copy.deepcopy(data), src)
    return data


def load_experiment(path: str | Path, variables: dict[str, Any] | None = None,
                    seed: int | None = None, dilation: float | str | None = None) -> Experiment:
    return parse_experiment(read_input(path, "experiment"), str(path), variables, seed, dilation)
