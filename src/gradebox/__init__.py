"""gradebox: run evaluation graders, each in its own throwaway, locked-down container.

Example::

    from gradebox import Payload, get_sandbox, load_grader, run_grader

    with get_sandbox() as box:
        result = run_grader(load_grader("grader.yaml"), Payload(output="42"), "workspace", box)
    print(result.status, result.score)

The top level holds the floors' folders and, besides this module, ``__main__``, ``errors`` and
the version; each folder's ``__init__`` says what it may import (``tests/unit/test_layers.py``).

May import: protocol, sandbox, graders.
"""

from __future__ import annotations

import importlib

from ._version import __version__

# The public names, each imported on first use: `gradebox --version` and other short commands
# must not pay for pydantic, docker and the rest.
_WHERE = {
    "ConfigError": "errors",
    "EngineError": "errors",
    "EngineUnavailable": "errors",
    "GradeboxError": "errors",
    "ImageError": "errors",
    "SandboxClosed": "errors",
    "GraderConfig": "graders",
    "ProgramGrader": "graders",
    "ScriptGrader": "graders",
    "load_grader": "graders",
    "run_grader": "graders",
    "Check": "protocol.models",
    "GraderResult": "protocol.models",
    "Payload": "protocol.models",
    "Status": "protocol.models",
    "Limits": "sandbox",
    "RunOutcome": "sandbox",
    "Sandbox": "sandbox",
    "SandboxSpec": "sandbox",
    "Security": "sandbox",
    "get_sandbox": "sandbox",
}

TYPE_CHECKING = False  # not typing's (~3 ms on `gradebox exec`'s hot path)
if TYPE_CHECKING:
    from typing import Any

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


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gradebox' has no attribute {name!r}")


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
