"""The ``gradebox`` command (the app itself is in ``cli.app``).

``main`` answers ``--version`` and runs ``exec`` before importing anything else: a short
command, and the hot path of every grader a harness runs through ``gradebox exec``, must not
pay for typer, rich, pydantic and the Docker SDK.

Every command that starts containers first forks its watchdog (``sandbox/watchdog.py``): if
the command is killed with SIGKILL, what it started is removed at once, not at the next
``gradebox gc``.
"""

from __future__ import annotations

import sys

__all__ = ["main"]


# The commands that start containers (and so have something to leave behind).
SANDBOXED = frozenset({"exec", "grade", "run", "batch", "trials", "calibrate", "validate-refs"})


def main() -> None:
    argv = sys.argv[1:]
    if argv in (["--version"], ["-V"]):
        from .._version import __version__

        sys.stdout.write(f"gradebox {__version__}\n")
        return
    dismiss = None
    if _command(argv) in SANDBOXED:  # --help too: a fork (~1 ms), dismissed at once
        from ..sandbox.watchdog import watch

        dismiss = watch()
    try:
        if argv[:1] == ["exec"]:
            from .exec import main as exec_main

            code = exec_main(argv[1:])
        else:
            from .app import main as run

            run()
            return
    finally:
        if dismiss is not None:
            dismiss()
    _exit_now(code)


def _exit_now(code: int) -> None:
    """End ``exec`` without the interpreter's teardown (freeing every module: ~10-20 ms on
    the hot path of each grader a harness runs). Everything is already closed and removed;
    the only atexit handlers are the sandboxes' ``close``, already called."""
    import contextlib
    import os

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
