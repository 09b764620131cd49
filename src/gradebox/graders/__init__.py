"""Graders: configuration, running one in a sandbox, and judging what it did.

May import: core, protocol, engine, images, files, sandbox, llm.
"""

from __future__ import annotations

from ..core.lazy import lazy_exports

TYPE_CHECKING = False  # not typing's (~3 ms on `gradebox exec`'s hot path)
if TYPE_CHECKING:
    from .config import GraderConfig, ProgramGrader, ScriptGrader, grader_from_data, load_grader
    from .run import run_grader
    from .verdict import judge

# Each name is imported on first use: `gradebox exec` reads a name or two from a light module
# of this package and must not pay for pydantic and the Docker SDK that the others load.
__getattr__ = lazy_exports(
    __name__,
    {
        "config": (
            "GraderConfig",
            "ProgramGrader",
            "ScriptGrader",
            "grader_from_data",
            "load_grader",
        ),
        "run": ("run_grader",),
        "verdict": ("judge",),
    },
)


__all__ = [
    "GraderConfig",
    "ProgramGrader",
    "ScriptGrader",
    "grader_from_data",
    "judge",
    "load_grader",
    "run_grader",
]
