"""Custom assertions by name: ``.gradebox/assertions/NAME.EXT`` (or ``.agentv/assertions/``),
found by walking up from the suite's directory, run in a container like a script grader."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ..core.untrusted import trusted
from ..errors import ConfigError
from .builtin import is_builtin
from .config import ScriptGrader

__all__ = [
    "ASSERTION_DIRS",
    "GRADER_DIRS",
    "NOT_OURS",
    "CustomAssertion",
    "discover",
    "grader_for_file",
]

log = logging.getLogger("gradebox.assertions")

ASSERTION_DIRS = (".gradebox/assertions", ".agentv/assertions")
NOT_OURS = (
    "not the project's (another user's, a link, or below a folder others may change); "
    "only code of ours or root's found above the suite runs"
)
GRADER_DIRS = (".gradebox/graders", ".agentv/graders")
MODULE_SUFFIXES = (".js", ".mjs", ".cjs", ".ts", ".mts", ".cts")
# extension -> (interpreter argv, image). Anything else must be executable (a shebang).
# TypeScript runs under bun, which the node image carries (an unofficial build, pinned).
RUNNERS: dict[str, tuple[list[str], str]] = {
    ".py": (["python3"], "python"),
    ".sh": (["bash"], "python"),
    **{s: (["bun" if s.endswith("ts") else "node"], "node") for s in MODULE_SUFFIXES},
}
MODULE_RUNNER = "/usr/local/lib/gradebox/grade-module.mjs"
"""In the node image: imports a grader module and calls its ``grade`` (images/node)."""


@dataclass(frozen=True)
class CustomAssertion:
    name: str
    path: Path

    def command(self) -> list[str]:
        interpreter, _ = RUNNERS.get(self.path.suffix, ([], "python"))
        return [*interpreter, self.path.name]

    def image(self) -> str:
        return RUNNERS.get(self.path.suffix, ([], "python"))[1]


def discover(
    start: Path, dirs: tuple[str, ...] = ASSERTION_DIRS, refused: dict[str, Path] | None = None
) -> dict[str, CustomAssertion]:
    """Every custom assertion visible from ``start``; the nearest definition of a name wins.

    A file named like a built-in (``contains.py``) is skipped with a warning: built-ins keep
    their meaning everywhere. So is one that is not the project's (``untrusted.trusted``):
    the walk passes shared folders (``/tmp``, a folder of another user's), and a
    ``/tmp/.gradebox/assertions/x.py`` that another local user left there must not run as
    the suite's check; ``refused``, when given, collects them instead of the warning
    (``gradebox assert`` refuses the one asked for, in one line).
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
                if dirs == ASSERTION_DIRS and (is_builtin(name) or name in ("program", "script")):
                    log.warning("%s: named like the built-in assertion %r; skipped", path, name)
                    continue
                if not trusted(path):
                    if refused is None:
                        log.warning("%s: skipped: %s", path, NOT_OURS)
                    else:
                        refused.setdefault(name, path)
                    continue
                found[name] = CustomAssertion(name, path)
    return found


def grader_for_file(
    path: Path, *, name: str | None = None, dialect: str = "script"
) -> ScriptGrader:
    """A script grader that runs one file: ``.py`` with python3, ``.sh`` with bash, ``.js``/
    ``.mjs``/``.cjs`` with node, ``.ts`` with bun (node image), anything else directly (it must
    be executable).

    Example::

        grader = grader_for_file(Path("graders/my-grader.py"))
    """
    path = path.resolve()
    if not path.is_file():
        raise ConfigError("grader file not found", file=str(path))
    if path.suffix not in RUNNERS and not os.access(path, os.X_OK):
        raise ConfigError(
            "not executable and of no known kind (.py .sh .js .mjs .cjs .ts)", file=str(path)
        )
    found = CustomAssertion(path.stem, path)
    command = found.command()
    if dialect == "inline" and path.suffix in MODULE_SUFFIXES:
        # The inline reference imports JS/TS graders and calls the `grade` they export.
        command = [command[0], MODULE_RUNNER, path.name]
    grader = ScriptGrader.model_validate(
        {
            "type": "script",
            "name": name or path.stem,
            "command": command,
            "image": found.image(),
            "dialect": dialect,
        }
    )
    grader.with_source(path.parent)
    return grader
