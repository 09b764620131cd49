"""gradebox: run evaluation graders, each in its own throwaway, locked-down container.

Example::

    from gradebox import Payload, get_sandbox, load_grader, run_grader

    with get_sandbox() as box:
        result = run_grader(load_grader("grader.yaml"), Payload(output="42"), "workspace", box)
    print(result.status, result.score)

The top level holds the floors' folders and, besides this module, ``__main__``, ``errors`` and
the version; each folder's ``__init__`` says what it may import (``tests/unit/test_layers.py``).

May import: core, protocol, sandbox, graders.
"""

from __future__ import annotations

from ._version import __version__
from .core import lazy  # a module: not one of the public names

TYPE_CHECKING = False  # not typing's (~3 ms on `gradebox exec`'s hot path)
if TYPE_CHECKING:
    from .errors import (
        ConfigError,
        EngineError,
        EngineUnavailable,
        GradeboxError,
        ImageError,
        SandboxClosed,
    )
    from .graders import GraderConfig, ProgramGrader, ScriptGrader, load_grader, run_grader
    from .protocol.models import Check, GraderResult, Payload, Status
    from .sandbox import Limits, RunOutcome, Sandbox, SandboxSpec, Security, get_sandbox


# The public names, each imported on first use: `gradebox --version` and other short commands
# must not pay for pydantic, docker and the rest.
__getattr__ = lazy.lazy_exports(
    __name__,
    {
        "errors": (
            "ConfigError",
            "EngineError",
            "EngineUnavailable",
            "GradeboxError",
            "ImageError",
            "SandboxClosed",
        ),
        "graders": ("GraderConfig", "ProgramGrader", "ScriptGrader", "load_grader", "run_grader"),
        "protocol.models": ("Check", "GraderResult", "Payload", "Status"),
        "sandbox": ("Limits", "RunOutcome", "Sandbox", "SandboxSpec", "Security", "get_sandbox"),
    },
)


def __dir__() -> list[str]:
    return sorted(__all__)


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
