"""Questions about a path a user wrote (in a suite, an eval file, a grader file), asked so that
the answer is yes or no, never an exception.

``Path.is_file()`` and friends raise ``OSError`` on Python before 3.13 for a name no filesystem
takes (a component longer than NAME_MAX: ``File name too long``) and ``ValueError`` for a NUL
byte; a hostile or mistyped file may hold either. Such a name names nothing: the caller then
says "not found" in its own words, with the field.

And where AgentV looks for a file a path names (``resolve_path``): the one door for every file
an AgentV eval names (prompts, input files, a grader's script, cwd, prompt or transform), and
the only place that finds one refused, in one line, when another local user could have
written it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ..errors import ConfigError
from .untrusted import unshared

__all__ = ["exists", "is_dir", "is_file", "resolve_path"]


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


def resolve_path(rel: str, roots: Sequence[Path]) -> Path | None:
    """What ``rel`` names, or None: where AgentV's ``resolveFileReference`` looks, in its
    order. An absolute path as it is, then ``root/rel`` for each root with ``rel``'s leading
    slashes taken off: ``/plugins/x/SKILL.md`` in AgentV's own evals is the repository's.
    Each is normalized by its text, as ``path.resolve`` does: ``link/..`` is the folder that
    holds the link, never the parent of where the link leads, a place AgentV does not look.

    What is found is read into a prompt, an input or a grader, so it must be the project's:
    ``untrusted.unshared`` (ours or root's, each link and folder on its way too; root's
    folders pass, it is only read). The roots climb into shared folders (an eval in
    ``/tmp/proj/evals`` with no ``.git`` looks in ``/tmp`` and ``/``), where another local
    user may leave ``/tmp/prompt.md``. Such a find is a ``ConfigError`` naming it and why,
    never passed over for a later root: that would read a file AgentV does not."""
    text = rel.removeprefix("file://").strip()
    if not text:
        return None
    below = text.lstrip("/\\") or text
    candidates = [text] if os.path.isabs(text) else []
    for candidate in [*candidates, *(os.path.join(root, below) for root in roots)]:
        path = Path(os.path.normpath(candidate))
        if not exists(path):
            continue
        why = unshared(path, root_may_own=True)
        if why is not None:
            raise ConfigError(
                f"found for {rel!r} where AgentV looks, and not read: another local user "
                f"could have written it ({why}); run gradebox as the project's owner",
                file=str(path),
            )
        try:
            return path.resolve()
        except (OSError, ValueError):
            continue
    return None
