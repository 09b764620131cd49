"""The ``gradebox`` command (the app itself is in ``cli.app``).

``main`` answers ``--version`` and runs ``exec`` before importing anything else: a short
command, and the hot path of every grader a harness runs through ``gradebox exec``, must not
pay for typer, rich, pydantic and the Docker SDK.
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> None:
    if sys.argv[1:2] == ["exec"]:
        from .exec import main as exec_main

        sys.exit(exec_main(sys.argv[2:]))
    if sys.argv[1:] in (["--version"], ["-V"]):
        from .._version import __version__

        sys.stdout.write(f"gradebox {__version__}\n")
        return
    from .app import main as run

    run()
