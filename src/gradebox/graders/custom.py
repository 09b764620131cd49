"""Custom assertions by name: ``.gradebox/assertions/NAME.EXT`` (or ``.agentv/assertions/``),
found by walking up from the suite's directory, run in a container like a script grader."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from .builtin import is_builtin

__all__ = ["ASSERTION_DIRS", "CustomAssertion", "discover"]

log = logging.getLogger("gradebox.assertions")

ASSERTION_DIRS = (".gradebox/assertions", ".agentv/assertions")
# extension -> (interpreter argv, image). Anything else must be executable (a shebang).
RUNNERS: dict[str, tuple[list[str], str]] = {
    ".py": (["python3"], "python"),
    ".sh": (["bash"], "python"),
    ".js": (["node"], "node"),
    ".mjs": (["node"], "node"),
}


@dataclass(frozen=True)
class CustomAssertion:
    name: str
    path: Path

    def command(self) -> list[str]:
        interpreter, _ = RUNNERS.get(self.path.suffix, ([], "python"))
        return [*interpreter, self.path.name]

    def image(self) -> str:
        return RUNNERS.get(self.path.suffix, ([], "python"))[1]


def discover(start: Path, dirs: tuple[str, ...] = ASSERTION_DIRS) -> dict[str, CustomAssertion]:
    """Every custom assertion visible from ``start``; the nearest definition of a name wins.

    A file named like a built-in (``contains.py``) is skipped with a warning: built-ins keep
    their meaning everywhere.
    """
    found: dict[str, CustomAssertion] = {}
    for directory in (start.resolve(), *start.resolve().parents):
        for sub in dirs:
            folder = directory / sub
            if not folder.is_dir():
                continue
            for path in sorted(folder.iterdir()):
                name = path.stem
                runnable = path.suffix in RUNNERS or (path.is_file() and os.access(path, os.X_OK))
                if not path.is_file() or not runnable or name in found:
                    continue
                if is_builtin(name) or name in ("program", "script"):
                    log.warning("%s: named like the built-in assertion %r; skipped", path, name)
                    continue
                found[name] = CustomAssertion(name, path)
    return found
