"""Scratch folders on the host: payload files, workspaces, private copies, staged templates.

Every one is private (0700, from ``mkdtemp``) and named after the runner's pid, so that
``gradebox gc`` knows which belong to runners that are gone, and removes them (unmounting the
workspaces mounted inside them first).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["TMP_PREFIX", "collect_scratch", "left_by", "new_scratch", "pid_alive"]

TMP_PREFIX = "gradebox-"


def pid_alive(pid: int) -> bool:
    """Is the runner with this pid (on this host) still there? (Containers and scratch
    folders are named or labelled after it.)"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True


def left_by(pid: int | None, everything: bool = False, owner: int | None = None) -> bool:
    """Is what the runner ``pid`` made (None: no pid in its name) to be collected? Yes when
    the runner is gone, or ``everything``; with ``owner``, only that runner's, gone or not
    (its watchdog's sweep: it knows the runner died, perhaps as a zombie not yet reaped)."""
    if owner is not None:
        return pid == owner
    return everything or pid is None or not pid_alive(pid)


def collect_scratch(everything: bool = False, owner: int | None = None) -> list[Path]:
    """Remove scratch dirs (payload files, workspaces and their mounts, private copies) of
    runners that are gone; ``everything``: all of them, cluster runs' folders too; ``owner``:
    only that runner's."""
    from .workspace import remove_tree, unmount_below

    removed = []
    for path in Path(tempfile.gettempdir()).glob(f"{TMP_PREFIX}*-*"):
        pid = path.name[len(TMP_PREFIX) :].split("-", 1)[0]
        if not path.is_dir() or not (pid.isdigit() or pid == "ray"):
            continue
        # A cluster run's folder on a node (gradebox-ray-RUN) is the driver's to sweep; one
        # left by a driver that was killed goes with --all.
        if (pid.isdigit() or everything) and left_by(
            int(pid) if pid.isdigit() else None, everything, owner
        ):
            unmount_below(path)
            remove_tree(path)
            removed.append(path)
    return removed


def new_scratch() -> Path:
    """A private scratch folder (0700: other local users cannot read payloads or copies),
    named after this process so that `gradebox gc` knows whose it is."""
    return Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-"))
