"""Graders: configuration, running one in a sandbox, and judging what it did.

May import: core, protocol, engine, images, files, sandbox, llm.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not typing's (~3 ms on `gradebox exec`'s hot path)
if TYPE_CHECKING:
    from typing import Any

    from .config import GraderConfig, ProgramGrader, ScriptGrader, grader_from_data, load_grader
    from .run import run_grader
    from .verdict import judge

# Each name is imported on first use: `gradebox exec` reads a name or two from a light module
# of this package and must not pay for pydantic and the Docker SDK that the others load.
_WHERE = {
    "GraderConfig": "config",
    "ProgramGrader": "config",
    "ScriptGrader": "config",
    "grader_from_data": "config",
    "load_grader": "config",
    "run_grader": "run",
    "judge": "verdict",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "GraderConfig",
    "ProgramGrader",
    "ScriptGrader",
    "grader_from_data",
    "judge",
    "load_grader",
    "run_grader",
]
