"""Scratch folders on the host: payload files, workspaces, private copies, staged templates.

Every one is private (0700, from ``mkdtemp``) and named after the runner's pid, so that
``gradebox gc`` knows which belong to runners that are gone, and removes them (unmounting the
workspaces mounted inside them first).
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

__all__ = ["TMP_PREFIX", "collect_scratch", "left_by", "new_scratch", "pid_alive", "pid_in"]

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
    import tempfile

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
    # As tempfile.mkdtemp, in the folder tempfile.gettempdir() names, without importing
    # tempfile on `gradebox exec`'s hot path (~2 ms: random, shutil, weakref) where that
    # folder is plain to see; tempfile itself where it is not.
    prefix = f"{TMP_PREFIX}{os.getpid()}-"
    root = _temp_root()
    for _ in range(16 if root else 0):
        path = os.path.join(root, prefix + os.urandom(6).hex())
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        except OSError:
            break
        return Path(path)
    import tempfile

    return Path(tempfile.mkdtemp(prefix=prefix))


def _temp_root() -> str | None:
    """The folder ``tempfile.gettempdir()`` would name (where ``collect_scratch`` looks): the
    first of $TMPDIR, $TEMP, $TMP that is set, else /tmp, if it is a folder we may write in;
    None when unsure (tempfile then decides)."""
    loaded = sys.modules.get("tempfile")
    if loaded is not None:  # its choice made, or set (tempfile.tempdir)
        return loaded.gettempdir()
    folder = next((v for v in map(os.environ.get, ("TMPDIR", "TEMP", "TMP")) if v), "/tmp")
    if os.path.isdir(folder) and os.access(folder, os.W_OK | os.X_OK):
        return os.path.abspath(folder)
    return None
