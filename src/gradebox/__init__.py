"""gradebox: run evaluation graders, each in its own throwaway, locked-down container.

Example::

    from gradebox import Payload, get_sandbox, load_grader, run_grader

    with get_sandbox() as box:
        result = run_grader(load_grader("grader.yaml"), Payload(output="42"), "workspace", box)
    print(result.status, result.score)
"""

from ._version import __version__
from .errors import (
    ConfigError,
    EngineError,
    EngineUnavailable,
    GradeboxError,
    ImageError,
    SandboxClosed,
)
from .graders import GraderConfig, ProgramGrader, ScriptGrader, load_grader, run_grader
from .protocol import Check, GraderResult, Payload, Status
from .sandbox import Limits, RunOutcome, Sandbox, SandboxSpec, Security, get_sandbox

__all__ = [
    "Check",
    "ConfigError",
    "EngineError",
    "EngineUnavailable",
    "GraderConfig",
    "GraderResult",
    "GradeboxError",
    "ImageError",
    "Limits",
    "Payload",
    "ProgramGrader",
    "RunOutcome",
    "Sandbox",
    "SandboxClosed",
    "SandboxSpec",
    "ScriptGrader",
    "Security",
    "Status",
    "__version__",
    "get_sandbox",
    "load_grader",
    "run_grader",
]
