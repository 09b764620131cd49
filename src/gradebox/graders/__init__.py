"""Graders: configuration, running one in a sandbox, and judging what it did."""

from .config import GraderConfig, ProgramGrader, ScriptGrader, grader_from_data, load_grader
from .run import run_grader
from .verdict import judge

__all__ = [
    "GraderConfig",
    "ProgramGrader",
    "ScriptGrader",
    "grader_from_data",
    "judge",
    "load_grader",
    "run_grader",
]
