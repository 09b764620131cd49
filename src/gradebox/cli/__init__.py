"""The ``gradebox`` command (the app itself is in ``cli.app``).

``main`` answers ``--version`` and runs ``exec`` before importing anything else: a short
command, and the hot path of every grader a harness runs through ``gradebox exec``, must not
pay for typer, rich, pydantic and the Docker SDK. ``grade`` gets the same chance
(``grade_lean``: a grader file validated before), and the full command when it cannot.

Every command but the few that never start a container (``UNSANDBOXED``) first forks its
watchdog (``sandbox/watchdog.py``): if the command is killed with SIGKILL, what it started is
removed at once, not at the next ``gradebox gc``. A command added later is watched unless it
is listed there, and ``tests/docker/test_lifecycle.py`` kills every command the app registers.

Only a real end dismisses the watchdog: the command returned and every other thread of ours
has finished (a grader thread still starting a container would otherwise land one nobody
sweeps). An interrupted command (Ctrl-C, SIGTERM: exit 130) has removed its containers; it gives its
threads a moment (``GRACE``) to remove their own scratch, then ends without waiting for what
is still in flight (a judge's model call), and leaves the rest to its watchdog.

May import: core, protocol, engine, images, files, sandbox, llm, graders, suite, formats,
lifecycle, drivers, cluster, report.
"""

from __future__ import annotations

import atexit
import os
import sys
import time

from .._version import __version__
from ..core.programs import absolute_path

TYPE_CHECKING = False  # typing itself stays off exec's hot path (~10 ms)

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["main"]


# The commands that never start a container (gc is the sweep itself). Every other is watched.
UNSANDBOXED = frozenset({"gc", "schemas", "compare", "images", "report", "view", "doctor"})
INTERRUPTED = 130  # Ctrl-C or SIGTERM, as documented in docs/cli.md


def main() -> None:
    absolute_path()  # no program of ours is found in the current folder (a grader pack's)
    argv = sys.argv[1:]
    if argv in (["--version"], ["-V"]):
        sys.stdout.write(f"gradebox {__version__}\n")
        return
    dismiss = None
    command = _command(argv)
    if command is not None and command not in UNSANDBOXED:  # --help too: a fork (~1 ms)
        from ..sandbox.watchdog import watch  # lazy: contextlib, off `gradebox --version`

        dismiss = watch()
    try:
        code = _dispatch(argv)
    except KeyboardInterrupt:  # a second signal while the first was handled
        code = INTERRUPTED
    if code == INTERRUPTED:
        _grace()
        _exit_now(code)  # never dismissed: the watchdog sweeps what threads still had
    if argv[:1] == ["exec"] or _lean["ran"]:  # one container, in this thread: it is over
        if dismiss is not None:
            dismiss()
        _exit_now(code)
    if dismiss is not None:
        # Exit handlers run once the interpreter has joined every thread that keeps it
        # alive (a grader thread, a judge's call): only then has the command really ended.
        atexit.register(_when_alone, dismiss)
    sys.exit(code)


_lean = {"ran": False}  # grade's lean path answered (it runs as exec does: one thread)


def _dispatch(argv: list[str]) -> int:
    """Run the command; its exit code."""
    if argv[:1] == ["exec"]:
        from .exec import main as exec_main  # lazy: each command loads its own modules only

        return exec_main(argv[1:])
    if argv[:1] == ["grade"]:
        from .grade_lean import main as grade_lean  # lazy: as exec above

        code = grade_lean(argv[1:])  # None: the full command answers (typer, pydantic)
        if code is not None:
            _lean["ran"] = True
            return code
    from .app import main as run  # lazy: typer, rich, pydantic: none on exec's or grade's path

    try:
        run()
    except SystemExit as exc:
        code = exc.code
        if code is None or isinstance(code, int):
            return code or 0
        sys.stderr.write(f"{code}\n")
        return 1
    return 0


# Seconds an interrupted command gives its threads to finish their own clean-up (a test's
# workspace unmounted, its scratch removed) before it ends; the watchdog has the rest.
GRACE = 3.0


def _grace() -> None:
    threading = sys.modules.get("threading")
    if threading is None:  # exec's hot path never started one
        return
    deadline = time.monotonic() + GRACE
    me = threading.current_thread()
    try:
        for thread in threading.enumerate():
            if thread is not me and not thread.daemon:
                thread.join(max(0.0, deadline - time.monotonic()))
    except KeyboardInterrupt:  # asked again: end now
        return


def _when_alone(dismiss: Callable[[], None]) -> None:
    """Dismiss the watchdog if no thread of ours is left (one still running after the
    interpreter's join, a signal cut it short: that is no normal end)."""
    import threading  # lazy: ~2 ms, off `gradebox --version`'s path

    me = threading.current_thread()
    if not any(t is not me and t.is_alive() and not t.daemon for t in threading.enumerate()):
        dismiss()


def _exit_now(code: int) -> None:
    """End without the interpreter's teardown: ``exec``'s (freeing every module: ~10-20 ms
    on the hot path of each grader a harness runs; everything is already closed and removed,
    the only atexit handlers are the sandboxes' ``close``, already called), and an
    interrupted command's (which would wait for threads still in flight)."""
    import contextlib  # lazy: ~1 ms, off `gradebox --version`'s path

    for stream in (sys.stdout, sys.stderr):
        # A harness that closed its end of the pipe: there is nothing more to say.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


# The root's options that take a value (``--runtime crun``); ``--debug`` and ``-v`` take none.
_VALUED = frozenset({"--runtime"})


def _command(args: list[str]) -> str | None:
    """The command ``args`` name: the first word that is no option and no root option's
    value (the root's options may come before it)."""
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == "--":
            return None
        if arg in _VALUED:
            skip = True
            continue
        if not arg.startswith("-"):
            return arg
    return None
