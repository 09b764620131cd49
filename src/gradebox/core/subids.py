"""Subordinate ids (``/etc/subuid``, ``/etc/subgid``): what a non-root user needs before it can
map ids in a user namespace, and the one line an administrator runs once to give it.

Pure host facts, below images/ and sandbox/: the rootless base-image build (``images.build``,
``mmdebstrap --mode=unshare``) and the rootless OCI backend (``sandbox.userns``) both ask.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

from .programs import which

__all__ = ["SPAN", "missing", "prerequisite", "subordinate", "user_name"]

SPAN = 65536  # ids 0..65535 inside: every id a Debian image uses, nobody (65534) included


def prerequisite(user: str | None = None) -> str:
    """The one line an administrator runs once so that ``user`` may run rootless."""
    user = user or user_name()
    return (
        "apt-get install -y uidmap mmdebstrap && "
        f"usermod --add-subuids 100000-165535 --add-subgids 100000-165535 {user}"
    )


def user_name() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def subordinate(path: str, uid: int) -> tuple[int, int] | None:
    """The first of ``uid``'s ranges in ``/etc/subuid`` (or subgid) with room for SPAN - 1
    ids: (start, count), or None."""
    names = {str(uid), user_name() if uid == os.getuid() else str(uid)}
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.strip().split(":")
        if len(parts) != 3 or parts[0] not in names:
            continue
        if parts[1].isdigit() and parts[2].isdigit() and int(parts[2]) >= SPAN - 1:
            return int(parts[1]), int(parts[2])
    return None


def missing() -> str | None:
    """Why this user cannot map ids (None: it can)."""
    for tool in ("newuidmap", "newgidmap"):
        if which(tool) is None:
            return f"no {tool} (package uidmap)"
    for path in ("/etc/subuid", "/etc/subgid"):
        if subordinate(path, os.getuid()) is None:
            return f"no range of {SPAN - 1} ids for {user_name()} in {path}"
    return None
