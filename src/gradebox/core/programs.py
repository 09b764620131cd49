"""``which``: ``shutil.which`` for the programs the backends drive, without importing shutil
(which loads bz2, lzma and zlib: ~2 ms of every ``gradebox exec``)."""

from __future__ import annotations

import os

__all__ = ["absolute_path", "search_path", "which"]

FALLBACK = "/usr/local/bin:/usr/bin:/bin"


def search_path() -> list[str]:
    """The folders of ``$PATH`` (else ``os.defpath``) a program is looked up in: the absolute
    ones. An empty entry (``PATH=:/usr/bin``, a trailing ``:``) or a relative one names the
    current folder, a grader pack's: its ``./crun`` would run on the host, as the runner."""
    text = os.environ.get("PATH") or os.defpath
    return [folder for folder in text.split(os.pathsep) if os.path.isabs(folder)]


def absolute_path() -> None:
    """Drop ``$PATH``'s relative entries for this process and what it starts (``tar``,
    ``git``... run by their bare names): called first by ``gradebox.cli.main``."""
    os.environ["PATH"] = os.pathsep.join(search_path()) or FALLBACK


def which(name: str) -> str | None:
    """The path ``name`` runs from (``search_path``), or None."""
    if os.sep in name:
        return name if _runnable(name) else None
    for folder in search_path():
        path = os.path.join(folder, name)
        if _runnable(path):
            return path
    return None


def _runnable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)
