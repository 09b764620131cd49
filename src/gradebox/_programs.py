"""``which``: ``shutil.which`` for the programs the backends drive, without importing shutil
(which loads bz2, lzma and zlib: ~2 ms of every ``gradebox exec``)."""

from __future__ import annotations

import os

__all__ = ["which"]


def which(name: str) -> str | None:
    """The path ``name`` runs from (``$PATH``, else ``os.defpath``), or None."""
    if os.sep in name:
        return name if _runnable(name) else None
    for folder in (os.environ.get("PATH") or os.defpath).split(os.pathsep):
        path = os.path.join(folder or ".", name)
        if _runnable(path):
            return path
    return None


def _runnable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)
