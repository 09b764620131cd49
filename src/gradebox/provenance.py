"""Who wrote an input, and so what it may decide (the table in docs/security.md).

Keys, endpoints, host paths, privileges and limits come only from the operator (the command
line, the environment, the user's own config) and the suite's project (the suite file and the
``.gradebox/``/``.agentv/`` folders from it up). A grader file or grader pack may *name* a
model target, never define one; what the agent, a grader or a model writes is data.

Every loader of configuration (targets files, ``.env``, grader files, the image catalogue)
records an ``Origin`` with what it loaded, so the code that resolves a key or an endpoint
can refuse what came from a source that may not decide it. Imports nothing of ours: ``exec``'s
hot path may use it.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

__all__ = ["CONFIGURES", "Origin", "Source", "owned"]


class Source(StrEnum):
    """Who wrote an input."""

    OPERATOR = "operator"  # the command line, the environment, the user's own config
    PROJECT = "project"  # the suite file, its .gradebox/ and .agentv/ (from its folder up)
    GRADER = "grader"  # a grader file or grader pack (third party), exec's current folder
    AGENT = "agent"  # its answer, its workspace, a cli target's answer file
    GRADER_OUTPUT = "grader output"
    MODEL_REPLY = "model reply"


CONFIGURES = frozenset({Source.OPERATOR, Source.PROJECT})
"""The sources that may define model targets (endpoint, key variable, environment expansion),
host paths, privileges and limits."""


@dataclass(frozen=True)
class Origin:
    """Where a piece of configuration was read: its source and file (None: a flag or a
    variable)."""

    source: Source
    file: str | None = None

    @property
    def configures(self) -> bool:
        return self.source in CONFIGURES

    def __str__(self) -> str:
        return f"{self.file} ({self.source})" if self.file else str(self.source)


def owned(path: Path) -> bool:
    """Whether a configuration file found by walking up from a suite is ours to read: a
    regular file, not a link, owned by us or by root, that not every user may write, in a
    folder owned by us or by root that not every user may write (unless sticky, as ``/tmp``
    is). The walk passes shared folders (``/tmp``, ``/home``): a ``/tmp/.gradebox/targets.yaml``
    or ``/tmp/.env`` that another local user made is not the suite's project, nor is a link
    there to a file of ours (whose text the agent may have written), nor a file of ours in a
    folder of theirs (they could swap it between this check and its read)."""
    ours = (os.geteuid(), 0)
    try:
        st = os.lstat(path)
        link = os.lstat(path.parent)  # a link to a folder is as trusted as its maker
        folder = os.stat(path.parent)
    except OSError:
        return False
    return (
        link.st_uid in ours
        and stat.S_ISREG(st.st_mode)
        and st.st_uid in ours
        and not st.st_mode & 0o002
        and folder.st_uid in ours
        and (not folder.st_mode & 0o002 or bool(folder.st_mode & stat.S_ISVTX))
    )
