"""Scratch folders on the host: payload files, workspaces, private copies, staged templates.

Every one is private (0700, from ``mkdtemp``) and named after its owner, the runner that made
it: ``gradebox-PID-nPIDNS-PURPOSE-RANDOM`` (its pid, and the pid namespace that pid is a pid
in: a runner in a container that shares the host's /tmp has pids of its own). So ``gradebox
gc`` and the runner's watchdog know which belong to runners that are gone, and remove them
(unmounting the workspaces mounted inside them first). A folder with no owner in its name is
one no sweep could ever take: nothing of ours makes one.

Names in /tmp are hostile data: any local user may make ``/tmp/gradebox-3000000000-x`` (a pid
no process can have), a link, a file, a folder of their own. ``owner_of`` reads a name as
nothing of ours unless it is exactly what ``new_scratch`` writes.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .fstree import remove_tree, unmount_below

TYPE_CHECKING = False  # typing is not on `gradebox exec`'s hot path
if TYPE_CHECKING:
    from ..errors import StorageError

__all__ = [
    "TMP_PREFIX",
    "Owner",
    "collect_scratch",
    "left_by",
    "new_scratch",
    "owner_of",
    "pid_alive",
    "pid_in",
    "pid_namespace",
    "scratch_error",
    "scratch_folder",
]

TMP_PREFIX = "gradebox-"
# The largest pid Linux hands out (PID_MAX_LIMIT, 2**22): a bigger number names no process,
# and os.kill cannot even take one past a C int (OverflowError).
PID_MAX = 1 << 22


class Owner:
    """Who made a scratch folder: a runner's pid, in the pid namespace ``pidns`` (None: the
    name does not say, as in folders made before names said it). A plain class: ``typing``
    (for a NamedTuple) is not on `gradebox exec`'s hot path."""

    __slots__ = ("pid", "pidns")

    def __init__(self, pid: int, pidns: str | None) -> None:
        self.pid, self.pidns = pid, pidns

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Owner) and (self.pid, self.pidns) == (other.pid, other.pidns)

    def __hash__(self) -> int:
        return hash((self.pid, self.pidns))

    def __repr__(self) -> str:
        return f"Owner(pid={self.pid}, pidns={self.pidns!r})"


def scratch_error(exc: OSError) -> StorageError:
    """The scratch folder (``$TMPDIR``: workspaces, staged templates, payload files) ran out
    of space: the machine's fault, which ends the run, named as such rather than as whatever
    a half-made folder broke next. A file named outside it (the OCI backend's own storage)
    is named instead (a relative name is relative to some folder of ours: no help)."""
    from .atomic import storage_error  # on a fault only: not on exec's hot path

    # Where new_scratch made it. Not tempfile's first choice made now: on a full $TMPDIR its
    # probe file cannot be written, and it would name /tmp (grade's lean path, exec).
    tmp = _temp_root()
    if tmp is None:
        import tempfile  # lazy: tempfile (~6 ms) is not on `gradebox exec`'s path

        tmp = tempfile.gettempdir()
    name = os.fsdecode(exc.filename) if exc.filename is not None else None
    if name is not None and os.path.isabs(name) and os.path.commonpath([tmp, name]) != tmp:
        return storage_error(exc, name, "cannot write")
    return storage_error(exc, f"{tmp} ($TMPDIR)", "scratch folder")


def pid_alive(pid: int) -> bool:
    """Is the runner with this pid (on this host) still there? (Containers and scratch
    folders are named or labelled after it.)"""
    if not 0 < pid <= PID_MAX:
        return False  # no process has it (and os.kill would raise OverflowError)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    except (OverflowError, ValueError, OSError):
        return False
    return True


def pid_in(text: str) -> int | None:
    """The runner pid a name or label holds, as gradebox writes it (ASCII digits, no leading
    zero, at most ``PID_MAX``), else None: '²' is a digit to ``str.isdigit`` but no ``int``,
    '\u0661\u0662\u0663' is 123 to ``int`` and '0123' too, 3000000000 is no pid, and none of
    them is a name any runner of ours made."""
    if (
        0 < len(text) <= 7
        and text.isascii()
        and text.isdigit()
        and not text.startswith("0")
        and int(text) <= PID_MAX
    ):
        return int(text)
    return None


def pid_namespace() -> str:
    """This process's pid namespace (its inode), "" where /proc does not say."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""


def owner_of(name: str) -> Owner | None:
    """The owner a scratch folder's name holds, or None (not a name a runner of ours wrote).
    ``gradebox-PID-nPIDNS-...`` names both; ``gradebox-PID-...`` (older runners) the pid only."""
    if not name.startswith(TMP_PREFIX):
        return None
    parts = name[len(TMP_PREFIX) :].split("-", 2)
    pid = pid_in(parts[0])
    if pid is None or len(parts) < 2:
        return None
    ns = parts[1]
    if len(parts) == 3 and ns.startswith("n") and (ns == "n" or _number(ns[1:])):
        return Owner(pid, ns[1:] or None)
    return Owner(pid, None)


def _number(text: str) -> bool:
    """An inode number as this module writes one (ASCII digits, no leading zero)."""
    return 0 < len(text) <= 20 and text.isascii() and text.isdigit() and not text.startswith("0")


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
    only that runner's (of this pid namespace)."""
    removed = []
    me, here = os.geteuid(), pid_namespace()
    import tempfile  # lazy: tempfile (~6 ms) is not on `gradebox exec`'s path

    for path in Path(tempfile.gettempdir()).glob(f"{TMP_PREFIX}*-*"):
        made_by = owner_of(path.name)
        ray = path.name.startswith(f"{TMP_PREFIX}ray-")
        if made_by is None and not ray:
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
        if made_by is None:
            # A cluster run's folder on a node (gradebox-ray-RUN) is the driver's to sweep;
            # one left by a driver that was killed goes with --all.
            collect = everything and owner is None
        elif made_by.pidns not in (None, "", here):
            # Another pid namespace's runner: its pid says nothing here (--all only).
            collect = everything and owner is None
        else:
            collect = left_by(made_by.pid, everything, owner)
        if collect:
            unmount_below(path)
            remove_tree(path)
            removed.append(path)
    return removed


def new_scratch(purpose: str = "") -> Path:
    """A private scratch folder (0700: other local users cannot read payloads or copies),
    named after this process and its pid namespace so that `gradebox gc` and the watchdog
    know whose it is; ``purpose`` (a word) only helps a reader of /tmp."""
    # As tempfile.mkdtemp, in the folder tempfile.gettempdir() names, without importing
    # tempfile on `gradebox exec`'s hot path (~2 ms: random, shutil, weakref) where that
    # folder is plain to see; tempfile itself where it is not.
    word = f"{purpose}-" if purpose else ""
    prefix = f"{TMP_PREFIX}{os.getpid()}-n{pid_namespace()}-{word}"
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
    import tempfile  # lazy: tempfile (~6 ms) is not on `gradebox exec`'s path

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


@contextmanager
def scratch_folder(purpose: str = "") -> Iterator[Path]:
    """``new_scratch`` for the length of a ``with``, removed at its end (following no link;
    a killed runner's is its watchdog's, or ``gradebox gc``'s)."""
    path = new_scratch(purpose)
    try:
        yield path
    finally:
        remove_tree(path)
