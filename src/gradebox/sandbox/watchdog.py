"""The runner's watchdog: what a runner killed with SIGKILL started does not outlive it.

A runner removes its containers on success, error, timeout, SIGTERM and Ctrl-C; SIGKILL
(a harness's hard timeout, a CI job cancelled, the OOM killer) leaves it no chance. Its
containers would go on running, past the timeout only the runner enforces, until a later
``gradebox gc``. So the ``gradebox`` command forks a small watcher first: it holds the read end
of a pipe whose write end only the runner holds. A runner that ends normally says so on the
pipe and the watcher exits (the command says so only at its real end, once every thread of
it has finished; an interrupted one never does: see ``gradebox.cli``); end of file without
that word means the runner died, and the watcher removes that runner's containers (every
backend's) and scratch folders, as ``gradebox gc`` would, at once.

The watcher is a fork, not a new interpreter (no import cost, ~1 ms), made before any thread,
in a session of its own (a harness that kills our process group leaves it to do its work),
with none of the runner's files open (a harness waiting for our stdout to close is not kept
waiting). A process that already runs threads (a Ray worker: gRPC's, Ray's own) cannot fork
one safely (a lock another thread held stays held in the child), so ``watch_from_outside``
starts the same watcher as a new interpreter (~100 ms, once per worker process).

Must not: touch another runner's leftovers; outlive the runner by more than its sweeps
(a few seconds).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable

__all__ = ["watch", "watch_from_outside"]

DISMISSED = b"."


def watch() -> Callable[[], None]:
    """Fork the watcher of this process; returns the call that dismisses it (a normal end).
    Where no watcher can be made, the dismissal does nothing and ``gradebox gc`` remains."""
    owner = os.getpid()
    try:
        read_fd, write_fd = os.pipe()  # both close-on-exec: no runtime we start holds them
    except OSError:
        return _nothing
    try:
        child = os.fork()
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        return _nothing
    if child == 0:  # the watcher
        try:
            _watch(read_fd, write_fd, owner)
        finally:
            os._exit(0)  # never the runner's atexit handlers or finally blocks
    os.close(read_fd)
    return _dismissal(write_fd, child)


def watch_from_outside() -> Callable[[], None]:
    """``watch`` for a process that runs threads: the watcher is a new interpreter
    (``python -m gradebox.sandbox.watchdog OWNER FD``) holding the pipe's read end."""
    import subprocess  # lazy: ~5 ms, off `gradebox exec`'s path (it forks its watcher)

    owner = os.getpid()
    try:
        read_fd, write_fd = os.pipe()
    except OSError:
        return _nothing
    try:
        subprocess.Popen(
            [sys.executable, "-m", "gradebox.sandbox.watchdog", str(owner), str(read_fd)],
            pass_fds=(read_fd,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:
        os.close(write_fd)
        return _nothing
    finally:
        os.close(read_fd)
    return _dismissal(write_fd)


def _dismissal(write_fd: int, child: int | None = None) -> Callable[[], None]:
    """The runner's word to its watcher: it ended normally, there is nothing to sweep."""

    def dismiss() -> None:
        with contextlib.suppress(OSError):
            os.write(write_fd, DISMISSED)
            os.close(write_fd)
        if child is not None:
            with contextlib.suppress(ChildProcessError, OSError):
                # It exits as soon as it reads the word; not waited for (~2 ms on the hot
                # path of `exec`): the runner ends next, and init reaps it.
                os.waitpid(child, os.WNOHANG)

    return dismiss


def _nothing() -> None:
    return None


def _watch(read_fd: int, write_fd: int, owner: int) -> None:
    os.close(write_fd)
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(3, read_fd)
    os.closerange(read_fd + 1, 1 << 16)
    _await(read_fd, owner)


def _await(read_fd: int, owner: int) -> None:
    """Wait for the runner's word or its end; sweep what it left if it died."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        said = os.read(read_fd, 1)
    except OSError:
        said = b""
    if said == DISMISSED:
        return
    _sweep(owner)


# Seconds between sweeps: a call the runner had in flight when it died (an engine's create,
# a `runc run` not yet started) may still land a moment later, and its container with it.
SWEEPS = (0.0, 1.0, 3.0)


def _sweep(owner: int) -> None:
    """Remove what the runner ``owner`` left: containers first (their mounts live in the
    scratch folders), then the folders; again after a while, for what was still landing."""
    # lazy: only the watcher, once its runner is gone, sweeps (the backends, the engine)
    from ..core.scratch import collect_scratch
    from . import collect_garbage

    for pause in SWEEPS:
        time.sleep(pause)
        with contextlib.suppress(Exception):
            collect_garbage(engine_timeout=30, need_engine=False, owner=owner)
        with contextlib.suppress(Exception):
            collect_scratch(owner=owner)


if __name__ == "__main__":  # watch_from_outside's watcher: OWNER FD
    import sys

    _await(int(sys.argv[2]), owner=int(sys.argv[1]))
