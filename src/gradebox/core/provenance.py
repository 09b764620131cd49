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

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["CONFIGURES", "Origin", "Source"]


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
