"""What one grader must pass before it runs: its privileges against what the runner allowed,
a Dockerfile build, the files its command names, a TypeScript runtime. ``plan`` runs these
for every grader of a suite; ``gradebox grade`` runs them on every call, its lean path too
(they read the filesystem and ``--allow``, which no cached configuration may answer for).

Must not import pydantic: ``gradebox grade``'s lean path calls ``check_grader`` with a record
from the cache (``graders.compiled.GraderRecord``).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError, NotAllowed
from ..images.catalog import DEFAULT_IMAGE
from ..sandbox.hardening import PRIVILEGES, privileges_of
from .run import check_grader_files

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    from .config import GraderConfig

__all__ = ["check_build", "check_grader", "check_privileges", "check_runtime"]


def check_privileges(
    asked: Iterable[str],
    allowed: set[str],
    *,
    what: str,
    file: str | None,
    field: str | None,
    line: int | None = None,
) -> None:
    """Refuse what was asked for and not allowed, naming the key and the fix."""
    missing = [p for p in asked if p not in allowed]
    if missing:
        wanted = ", ".join(f"{p} ({PRIVILEGES[p]})" for p in missing)
        raise NotAllowed(
            f"{what} asks for {wanted}; a grader cannot grant itself that: allow it with "
            f"`allow: [{', '.join(missing)}]` in the suite or "
            + " ".join(f"--allow {p}" for p in missing),
            file=file,
            line=line,
            field=field,
        )


def check_grader(
    grader: GraderConfig,
    allowed: set[str],
    *,
    file: str | None,
    field: str | None = None,
    line: int | None = None,
    workspaces: tuple[Path, ...] = (),
) -> None:
    """Files and privileges of one grader, before it runs."""
    asked = privileges_of(grader.security, grader.network, grader.limits)
    what = f"grader {grader.display_name()!r}"
    check_privileges(asked, allowed, what=what, file=file, field=field, line=line)
    check_build(grader.image, allowed, what=what, file=file, field=field, line=line)
    check_grader_files(grader, file=file, field=field, line=line, also_in=workspaces)
    check_runtime(grader, file=file, field=field, line=line)


def check_build(image: Any, allowed: set[str], *, field: str | None, **at: Any) -> None:
    """A Dockerfile build (``image: {build: ...}``) runs its RUN steps as root with
    capabilities on the engine: refused, naming ``image.build``, unless ``build`` is allowed.
    ``at``: ``check_privileges``'s ``what``, ``file`` and ``line``."""
    asked = privileges_of(None, image=image)  # a default configuration asks for nothing else
    check_privileges(asked, allowed, field=f"{field}.image.build" if field else "image.build", **at)


_TS = (".ts", ".mts", ".cts", ".tsx")
_NO_TYPESCRIPT = {"python", "shell"}  # our images without bun


def check_runtime(
    grader: GraderConfig, *, file: str | None, field: str | None, line: int | None = None
) -> None:
    """A TypeScript grader on one of our images that has no TypeScript runtime is refused
    before it runs, with the fix, instead of failing as "bun: not found"."""
    image = grader.image or DEFAULT_IMAGE
    if not isinstance(image, str) or image not in _NO_TYPESCRIPT:
        return
    if grader.type == "program":
        argv = [grader.program, *grader.args]
    else:
        argv = grader.command.split() if isinstance(grader.command, str) else grader.command
    script = next((a for a in argv if a.endswith(_TS)), None)
    runner = Path(argv[0]).name if argv else ""
    if script or runner in ("bun", "tsx", "ts-node", "deno"):
        what = script or runner
        raise ConfigError(
            f"{what!r} is TypeScript, and the {image!r} image has no TypeScript runtime; use "
            "image: node (it carries bun) or an image of your own that has one",
            file=file,
            line=line,
            field=f"{field}.image" if field else "image",
        )
