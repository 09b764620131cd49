"""Naming and identity: the labels every gradebox container carries, and safe name slugs."""

from __future__ import annotations

import os
import re

from ..core.scratch import pid_in, pid_namespace

__all__ = [
    "LABEL_OWNER",
    "LABEL_PIDNS",
    "LABEL_RUN",
    "LABEL_SESSION",
    "owner_labels",
    "parse_owner",
    "pid_namespace",
    "slug",
]

LABEL_RUN = "gradebox.run"
LABEL_SESSION = "gradebox.session"
LABEL_OWNER = "gradebox.owner"  # "host:pid" of the runner process, for `gradebox gc`
# The pid namespace that pid is a pid in: runners in containers that share the host's name
# (--network host) and engine may have the same pid (7, say), and a pid says nothing of a
# namespace it is not in (the watchdog and gc leave such containers to `gc --all`).
LABEL_PIDNS = "gradebox.pidns"


def owner_labels(session: str) -> dict[str, str]:
    import socket  # here: `gradebox exec` on oci needs no label, and socket costs ~5 ms

    return {
        LABEL_SESSION: session,
        LABEL_OWNER: f"{socket.gethostname()}:{os.getpid()}",
        LABEL_PIDNS: pid_namespace(),
    }


def parse_owner(value: str) -> tuple[str, int] | None:
    host, _, pid = value.rpartition(":")
    number = pid_in(pid)
    return (host, number) if host and number is not None else None


def slug(name: str, limit: int = 40) -> str:
    """A container-name-safe form of a grader name."""
    cleaned = re.sub(r"[^a-zA-Z0-9_.-]+", "-", name).strip("-.") or "grader"
    return cleaned[:limit]
