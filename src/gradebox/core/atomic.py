"""Files gradebox writes for its users, whole or not at all.

Every report, summary, lock and schema goes through ``write_atomic``: the bytes go to a
temporary name in the same folder, are fsynced and renamed over the target, so a failed write
(a full disk, a kill) leaves the previous version whole, never an empty or half file. A
results line is appended by ``jsonl.JsonlWriter`` (one ``os.write``, truncated back on
failure). Scratch files the sandbox reads (payloads, bundles) are not reports and do not
come here.

A write that fails for want of space, or because the folder cannot be written, is a
``StorageError`` naming the folder and the error (``storage_error``): the machine's fault,
which ends a run. ``writable_folder`` checks a folder the operator named before anything runs,
and refuses one another local user could swap or plant links in (``untrusted.unshared``):
gradebox often runs as root on a machine others share.

Nothing here writes through a link: a temporary file is made with ``O_EXCL | O_NOFOLLOW`` and
renamed over the target (a link there is replaced, not followed), results are appended through
``untrusted.open_append`` (``O_NOFOLLOW``), and the lock is opened ``O_NOFOLLOW``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

from ..errors import ConfigError, GradeboxError, StorageError
from .untrusted import unshared

__all__ = [
    "DISK_ERRORS",
    "lock_folder",
    "out_of_space",
    "storage_error",
    "writable_folder",
    "write_atomic",
    "write_error",
]

# No room left to write: no space or no inodes (ENOSPC), no quota (EDQUOT).
_NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT})
# Errors that say the folder, not the data, is at fault: no room, a file past the size limit,
# a read-only or failing filesystem.
DISK_ERRORS = _NO_ROOM | {errno.EFBIG, errno.EROFS, errno.EIO}


def out_of_space(exc: BaseException) -> bool:
    """Whether ``exc`` says the filesystem had no room left (space, inodes or quota): the
    machine's fault, which ends a run, not the data's or the test's. The one spelling of it."""
    return isinstance(exc, OSError) and exc.errno in _NO_ROOM


def storage_error(exc: OSError, folder: Path | str, what: str) -> StorageError:
    """One line naming the folder and the error: ``results folder /x/out: no space left on
    device (ENOSPC)``."""
    code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    reason = (exc.strerror or str(exc)).lower()
    return StorageError(f"{what} {folder}: {reason} ({code})")


def write_atomic(path: Path, data: bytes | str, *, what: str = "folder") -> None:
    """Replace ``path`` with ``data`` (text is UTF-8): a temporary file in the same folder,
    fsynced, then renamed over it. On failure the temporary file is removed and the previous
    ``path`` is untouched; the error is a ``StorageError`` naming ``what`` and the folder when
    the disk is at fault (no space, read-only), else a ``ConfigError`` naming ``path``."""
    body = data.encode("utf-8") if isinstance(data, str) else data
    folder = path.parent
    tmp = folder / f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o644)
        try:
            view = memoryview(body)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise write_error(exc, path, what) from None
    except BaseException:  # Ctrl-C or SIGTERM mid-write: no temporary file outlives the run
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _sync_folder(folder)


def write_error(exc: OSError, path: Path, what: str = "folder") -> GradeboxError:
    """Why ``path`` could not be written: the disk's fault (no space, read-only) is a
    ``StorageError`` naming its folder; a path the operator chose that cannot be a file here
    (a folder, no permission) a ``ConfigError`` naming it."""
    if exc.errno in DISK_ERRORS:
        return storage_error(exc, path.parent, what)
    reason = (exc.strerror or str(exc)).lower()
    if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a link (someone else's, maybe)
        reason = "it is a link, which gradebox does not write through"
    return ConfigError(f"cannot write: {reason}", file=str(path))


def _sync_folder(folder: Path) -> None:
    """Make the rename itself durable (best effort: some filesystems refuse a folder fsync)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def writable_folder(path: Path, *, field: str, what: str = "results folder") -> Path:
    """Make ``path`` (and its parents) and prove a file can be created in it, before anything
    runs: a folder that names a file, or cannot be written, is the operator's to fix (a
    ``ConfigError`` on ``field``: exit 2); one already out of space a ``StorageError``.

    One that another local user could change is refused too (``untrusted.unshared``): theirs,
    writable by others, below a folder of theirs or reached through a link of theirs. They
    could swap it, or leave a link for ``results.jsonl``, and have root write agent text into a
    file of their choosing. Checked before anything is made (nothing is made through their
    link) and again once it is there."""
    _ours_alone(path, field, what, missing_ok=True)
    try:
        path.mkdir(mode=0o755, parents=True, exist_ok=True)
    except FileExistsError:
        raise ConfigError(f"{path} is a file, not a folder", field=field) from None
    except NotADirectoryError:
        raise ConfigError(f"{path}: a parent of it is a file, not a folder", field=field) from None
    except OSError as exc:
        raise _refused(exc, path, field, what) from None
    probe = path / f".gradebox-probe-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        probe.unlink()
    except OSError as exc:
        raise _refused(exc, path, field, what) from None
    _ours_alone(path, field, what)
    return path


def _ours_alone(path: Path, field: str, what: str, *, missing_ok: bool = False) -> None:
    why = unshared(path, missing_ok=missing_ok)
    if why is not None:
        raise ConfigError(
            f"{what} {path} could be changed by another user ({why}); give a folder only you "
            "can write",
            field=field,
        )


def _refused(exc: OSError, path: Path, field: str, what: str) -> Exception:
    if out_of_space(exc):
        return storage_error(exc, path, what)
    reason = (exc.strerror or str(exc)).lower()
    return ConfigError(f"{what} {path} cannot be written: {reason}", field=field)


def lock_folder(path: Path, *, field: str, what: str = "results folder") -> int:
    """Hold ``path`` for this process alone (an ``flock`` on ``path/.gradebox.lock``, let go
    when the descriptor closes or the process dies, SIGKILL too): two runs given one results
    folder would delete and interleave each other's results. The second is a ``ConfigError``
    on ``field`` (exit 2: nothing ran). Returns the descriptor to close at the end."""
    lock = path / ".gradebox.lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise _refused(exc, path, field, what) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
            raise ConfigError(
                f"{what} {path} is in use by another run; give each run its own folder",
                field=field,
            ) from None
        raise _refused(exc, path, field, what) from None
    return fd
