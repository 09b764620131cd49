"""``terminal.print_result``'s lines without rich, where they are the bytes rich writes.

Off a terminal rich writes plain text, wrapped at its width. ``result_text`` gives those
lines for a result whose text needs nothing of rich: no checks table, printable ASCII, no
line past the width, nothing rich reads as an emoji code (``:name:``). For anything else it
returns None and rich prints (``gradebox grade``'s lean path then imports it: a terminal,
a table, wide text). ``tests/unit/test_grade_lean.py`` holds it to rich, byte for byte.

Standard library only.
"""

from __future__ import annotations

import os
import re
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["fits", "result_text", "width"]

MARK = {"passed": "✔ PASS", "failed": "✘ FAIL", "error": "! ERROR"}  # terminal.MARK
# Printable ASCII but the backslash (rich reads one before a `[` as an escape).
_PLAIN = re.compile(r"[\x20-\x5b\x5d-\x7e\n]*")
_EMOJI = re.compile(r":[^\s:]*:")  # what rich may replace: `:name:` (rich._emoji_replace)


def width(stderr: bool = False) -> int | None:
    """The width rich wraps at when it writes plain text to stdout (``stderr``: to stderr);
    None when it would write to a terminal (styles, not plain text)."""
    stream = sys.stderr if stderr else sys.stdout
    env = os.environ
    if "FORCE_COLOR" in env or "TTY_COMPATIBLE" in env:
        return None
    try:
        if stream.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    size = None
    for fd in (0, 1, 2):  # as rich's Console.size: the first standard stream that is a tty
        try:
            size = os.get_terminal_size(fd).columns
        except (AttributeError, ValueError, OSError):
            continue
        break
    columns = env.get("COLUMNS")
    if columns is not None and columns.isdigit():
        size = int(columns)
    return size or 80


def _plain(text: str, limit: int) -> bool:
    return (
        _PLAIN.fullmatch(text) is not None
        and _EMOJI.search(text) is None
        and all(len(line) <= limit for line in text.split("\n"))
    )


def fits(line: str, stderr: bool = False) -> bool:
    """Would rich write ``line`` (no markup in it) as it is?"""
    limit = width(stderr)
    return limit is not None and _plain(line, limit)


def result_text(fields: dict[str, Any]) -> str | None:
    """What ``print_result`` writes off a terminal for a result with these fields
    (``graders.verdict.verdict``'s, with image and duration), or None."""
    limit = width()
    if limit is None or fields.get("checks"):
        return None
    image = fields.get("image")
    shown = f" on {image['ref']} ({image['id'][7:19]})" if image else ""
    score = float(fields["score"])
    head = f"{fields['name']}  score {score:.2f}  {fields['duration_ms']} ms{shown}"
    mark = MARK[fields["status"]]
    if not _plain(head, limit - len(mark) - 1):
        return None
    lines = [f"{mark} {head}"]
    evidence = fields.get("evidence")
    if evidence:
        lines.append(f"  {evidence}")
    for label in ("stdout", "stderr"):
        tail = fields.get(f"{label}_tail")
        if tail:
            lines += [f"  {label} (tail):", tail]
    text = "\n".join(lines[1:])
    if lines[1:] and not _plain(text, limit):
        return None
    return "\n".join(lines) + "\n"
