"""Questions about a path a user wrote (in a suite, an eval file, a grader file), asked so that
the answer is yes or no, never an exception.

``Path.is_file()`` and friends raise ``OSError`` on Python before 3.13 for a name no filesystem
takes (a component longer than NAME_MAX: ``File name too long``) and ``ValueError`` for a NUL
byte; a hostile or mistyped file may hold either. Such a name names nothing: the caller then
says "not found" in its own words, with the field.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["exists", "is_dir", "is_file"]


def is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):
        return False
