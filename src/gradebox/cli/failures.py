"""Library errors as the one line and exit code every command gives them (docs/cli.md).

``app.handled`` wraps each typer command with it, and ``grade``'s lean path (``grade_lean``),
which runs before typer exists, uses the same table. Standard library only.
"""

from __future__ import annotations

import tempfile

from ..core.atomic import out_of_space
from ..errors import ConfigError, GradeboxError, ImageError, StorageError

__all__ = ["EXIT_STORAGE", "failure"]

EXIT_STORAGE = 5  # a folder we write ran out of space or failed mid-run (errors.StorageError)


def failure(exc: BaseException) -> tuple[str, int] | None:
    """``(message, exit code)`` for an error of ours; None for one that is a bug (raised on,
    with its traceback)."""
    if isinstance(exc, ConfigError | ImageError):
        return str(exc), 2
    if isinstance(exc, StorageError):  # out of space: a code of its own (5), so CI can tell
        return str(exc), EXIT_STORAGE
    if isinstance(exc, GradeboxError):
        return str(exc), 4
    if out_of_space(exc):
        # Out of space where no step named its folder: still one line and exit 5.
        where = exc.filename or f"{tempfile.gettempdir()} ($TMPDIR) or the results folder"
        reason = (exc.strerror or str(exc)).lower()
        return f"out of space: {where}: {reason}", EXIT_STORAGE
    return None
