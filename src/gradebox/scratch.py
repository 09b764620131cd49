"""Scratch folders on the host: payload files, workspaces, private copies, staged templates.

Every one is private (0700, from ``mkdtemp``) and named after the runner's pid, so that
``gradebox gc`` knows which belong to runners that are gone, and removes them (unmounting the
workspaces mounted inside them first).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from .atomic import storage_error
from .errors import StorageError

__all__ = [
    "TMP_PREFIX",
    "collect_scratch",
    "left_by",
    "new_scratch",
    "pid_alive",
    "pid_in",
    "scratch_error",
]

TMP_PREFIX = "gradebox-"


def scratch_error(exc: OSError) -> StorageError:
    """The scratch folder (``$TMPDIR``: workspaces, staged templates, payload files) ran out
    of space: the machine's fault, which ends the run, named as such rather than as whatever
    a half-made folder broke next. A file named outside it (the OCI backend's own storage)
    is named instead (a relative name is relative to some folder of ours: no help)."""
    tmp = tempfile.gettempdir()
    name = os.fsdecode(exc.filename) if exc.filename is not None else None
    if name is not None and os.path.isabs(name) and os.path.commonpath([tmp, name]) != tmp:
        return storage_error(exc, name, "cannot write")
    return storage_error(exc, f"{tmp} ($TMPDIR)", "scratch folder")


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


def pid_in(text: str) -> int | None:
    """The runner pid a name or label holds, as gradebox writes it (ASCII digits, no leading
    zero), else None: '²' is a digit to ``str.isdigit`` but no ``int``, '\u0661\u0662\u0663' is
    123 to ``int`` and '0123' too, and none of them is a name any runner of ours made."""
    if text.isascii() and text.isdigit() and not text.startswith("0"):
        return int(text)
    return None


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
    me = os.geteuid()
    for path in Path(tempfile.gettempdir()).glob(f"{TMP_PREFIX}*-*"):
        word = path.name[len(TMP_PREFIX) :].split("-", 1)[0]
        pid = pid_in(word)
        if pid is None and word != "ray":
            continue
        # Only a folder, never a link: any local user may put /tmp/gradebox-<pid>-x -> /mnt
        # there, and unmounting "below" it as root would detach what is mounted at its
        # target. And only ours (mkdtemp made it), but for root's `gc`, which sweeps every
        # user's; the watchdog's sweep takes its runner's own folders alone.
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or (st.st_uid != me and (owner is not None or me != 0)):
            continue
        # A cluster run's folder on a node (gradebox-ray-RUN) is the driver's to sweep; one
        # left by a driver that was killed goes with --all.
        if (pid is not None or everything) and left_by(pid, everything, owner):
            unmount_below(path)
            remove_tree(path)
            removed.append(path)
    return removed


def new_scratch() -> Path:
    """A private scratch folder (0700: other local users cannot read payloads or copies),
    named after this process so that `gradebox gc` knows whose it is."""
    return Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-"))
