"""Byte counts as people read them (``1 MiB``). Standard library only: the verdict of every
grader names its caps with it, on ``gradebox grade``'s lean path too."""

from __future__ import annotations

__all__ = ["format_bytes"]


def format_bytes(size: int) -> str:
    """Bytes -> ``1 MiB`` style, exact when it can be."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor:
            value = size / factor
            return f"{value:g} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{size} B"
