"""PID 1 of every container: the host's static tini, sealed so that no grader can touch it.

Docker ships tini as ``docker-init``; both backends bind it read-only at ``INIT_PATH`` and
start the gate under it. tini reaps zombies and says how the command ended, so it must be out
of the grader's reach, yet it runs with the grader's uid. The copy bound is execute-only
(mode 0111): a process started from a file it cannot read is made non-dumpable by the kernel,
and a non-dumpable process cannot be ptraced, nor its memory read or written through
``/proc/1/mem``, nor its environment read, by anyone without ``CAP_SYS_PTRACE`` (a grader has
no capabilities). Before, on Docker a grader could ``ptrace`` it (Docker's default profile
allows ptrace from kernel 4.8), and on both backends write into it through ``/proc/1/mem``,
which no seccomp profile sees.

Must not: write anywhere but its own folder of the cache; change the host's tini.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from pathlib import Path

from ..core.log import LazyLogger
from ..core.private_cache import cache_dir
from ..core.programs import which

__all__ = ["INIT_PATH", "init_binary", "sealed_init"]

log = LazyLogger("gradebox.sandbox")  # logging loads on first use: not on exec's path

INIT_PATH = "/sbin/gradebox-init"
"""Where the sealed tini is bound, read-only, as the container's PID 1."""

SEALED_MODE = 0o111  # execute, never read: the kernel makes the process non-dumpable


def init_binary() -> Path | None:
    """The host's static tini, which Docker ships as ``docker-init``."""
    for name in ("docker-init", "tini-static"):
        found = which(name)
        if found:
            return Path(found).resolve()
    return None


def sealed_init(source: Path | None = None) -> Path | None:
    """An execute-only copy of ``source`` (default: the host's tini) in the cache, named by
    its content; None when there is no tini on this host or the copy cannot be made (then
    the caller falls back to a plain, traceable init, and ``init_is_out_of_reach`` fails)."""
    source = source or init_binary()
    if source is None:
        return None
    try:
        return _sealed(source)
    except OSError as exc:
        log.warning("no execute-only init (%s): PID 1 is the plain tini", exc)
        return None


def _sealed(source: Path) -> Path:
    # Named after the source file's identity (device, inode, size, modification time), as
    # make knows a file has changed: a new tini (a package upgrade replaces the file) gets a
    # copy of its own, and the run that finds the copy made reads and hashes nothing (reading
    # and hashing the 1 MB binary cost every `exec` ~6 ms).
    src = os.stat(source)
    folder = cache_dir() / "init"
    path = folder / f"tini-{src.st_dev:x}-{src.st_ino:x}-{src.st_size:x}-{src.st_mtime_ns:x}"
    with contextlib.suppress(FileNotFoundError):
        st = os.stat(path, follow_symlinks=False)
        if (
            stat.S_ISREG(st.st_mode)
            and stat.S_IMODE(st.st_mode) == SEALED_MODE
            and st.st_size == src.st_size
            and st.st_uid == os.geteuid()
        ):
            return path
    data = source.read_bytes()
    if len(data) != src.st_size:
        raise OSError(f"{source} changed while it was copied")
    folder.mkdir(parents=True, exist_ok=True)
    # Written beside it, then renamed into place: concurrent runs never see half a file.
    partial = folder / f".{path.name}.{os.getpid()}.{threading.get_ident()}"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, SEALED_MODE)
        finally:
            os.close(fd)
        os.replace(partial, path)
    except BaseException:
        # A full disk (or a signal) mid-copy: the partial copy goes too, or each start on
        # that disk left one more of up to the binary's size in the cache.
        with contextlib.suppress(OSError):
            partial.unlink()
        raise
    return path
