"""The ``gradebox`` command (the app itself is in ``cli.app``).

``main`` answers ``--version`` before importing anything else: a short command must not pay
for typer, pydantic and the Docker SDK.
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> None:
    if sys.argv[1:] in (["--version"], ["-V"]):
        from .._version import __version__

        sys.stdout.write(f"gradebox {__version__}\n")
        return
    from .app import main as run

    run()
