"""One exception base; only the CLI formats these (exit 2 for bad input, 1 for failures)."""
from __future__ import annotations


class OrchestratorError(Exception):
    """Base of every error the orchestrator reports to the user."""

    exit_code = 1


class SpecError(OrchestratorError):
    """Bad input (experiment file, names, options): reported before anything is created."""

    exit_code = 2


class PlanError(OrchestratorError):
    exit_code = 2


class BackendError(OrchestratorError):
    """A system operation failed (the message names the command and its stderr)."""


class ShapingError(OrchestratorError):
    """Shaping cannot be realised as asked (e.g. --strict-shaping on a kernel that cannot delay)."""


class LabExists(OrchestratorError):
    exit_code = 2


class LabNotFound(OrchestratorError):
    exit_code = 2


class DelayLineDied(OrchestratorError):
    """The delay-line process died or the kernel dropped queued packets: the run cannot be trusted."""


class CgroupError(OrchestratorError):
    """A CPU budget cannot be enforced here: no cpu controller, or a cgroup file refused a write (the message names
    the file and the error)."""
