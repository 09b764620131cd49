"""One grader's result for people, written once for ``gradebox grade``'s full and lean paths.

``result_lines`` makes its lines from the result's fields (``graders.verdict.verdict``'s, or
a ``GraderResult``'s): the verdict, the evidence, the checks as a table, the output tails
when it did not pass. ``print_result`` writes them as they are off a terminal, and through
rich, styled, on one (only then is rich imported: the lean path must not load it).

Standard library only.
"""

from __future__ import annotations

import os
import re
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["clean", "fits", "print_result", "result_lines", "terminal"]

MARK = {"passed": "✔ PASS", "failed": "✘ FAIL", "error": "! ERROR"}
STYLE = {"passed": "bold green", "failed": "bold red", "error": "bold yellow"}
# Control characters (ESC among them) let text an agent or a grader wrote retitle, clear or
# rewrite a terminal, or set its clipboard; tabs and newlines are all that reach one.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


# Right-to-left overrides and isolates reorder what a reader sees (a test id could read as
# another's): shown as marks, ⟦U+202E⟧, as the HTML report shows them (report.js's BIDI).
_BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def clean(text: str) -> str:
    """Untrusted text, safe for a terminal: no control sequences, no bidirectional controls."""
    text = _CONTROL.sub("\ufffd", text)
    return _BIDI.sub(lambda m: f"⟦U+{ord(m.group()):04X}⟧", text) if _BIDI.search(text) else text


def terminal(stream: Any) -> bool:
    """Does ``stream`` reach a terminal (or is colour forced), as rich decides?"""
    if "FORCE_COLOR" in os.environ or "TTY_COMPATIBLE" in os.environ:
        return True
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def fits(line: str) -> bool:
    """Would rich write ``line`` to stderr as it is (``Output.info``: no terminal, no wrap, no
    markup or emoji code)? Until the command's one output layer writes its lines plainly."""
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() else 80
    return (
        not terminal(sys.stderr)
        and len(line) <= width
        and line.isascii()
        and line.isprintable()
        and not re.search(r"[\\\[]|:[^\s:]*:", line)
    )


def result_lines(fields: Any) -> list[tuple[str, str]]:
    """``(style, text)`` lines of one result (``fields``: a mapping or a ``GraderResult``)."""
    if not isinstance(fields, dict):
        fields = fields.model_dump(mode="json")
    status = str(fields["status"])
    image = fields.get("image")
    shown = f" on {image['ref']} ({image['id'][7:19]})" if image else ""
    head = f"{fields['name']}  score {float(fields['score']):.2f}"
    lines = [(STYLE[status], f"{MARK[status]} {head}  {fields['duration_ms']} ms{shown}")]
    # Only the verdict's line starts at the margin: every line a grader or an agent wrote is
    # indented, and a cell of the checks' table is one line, so no "✔ PASS" they print can
    # stand where the verdict does.
    if fields.get("evidence"):
        lines += [("", f"  {line}") for line in str(fields["evidence"]).splitlines()]
    checks = fields.get("checks") or []
    if checks:
        rows = [("check", "verdict", "score", "evidence")] + [
            (
                _cell(c["text"]),
                "pass" if c["passed"] else "fail",
                "" if c.get("score") is None else f"{c['score']:.2f}",
                _cell(c.get("evidence")),
            )
            for c in checks
        ]
        wide = [max(len(r[i]) for r in rows) for i in range(3)]
        for n, (text, verdict, score, evidence) in enumerate(rows):
            row = f"  {text:<{wide[0]}}  {verdict:<{wide[1]}}  {score:>{wide[2]}}  {evidence}"
            lines.append(("bold" if n == 0 else "", row.rstrip()))
    for label in ("stdout", "stderr"):
        tail = fields.get(f"{label}_tail")
        if tail:
            lines.append(("dim", f"  {label} (tail):"))
            lines += [("dim", f"  | {line}") for line in str(tail).splitlines()]
    return [(style, clean(text)) for style, text in lines]


def _cell(text: object) -> str:
    """One line of a table's cell, whatever a grader wrote in it."""
    return " ".join(str(text or "").splitlines())


def print_result(result: Any, console: Any = None) -> None:
    """Write one result's lines: plain to ``console``'s file (else stdout), styled by rich
    (``console``, else one of its own) when that is a terminal."""
    lines = result_lines(result)
    stream = console.file if console is not None else sys.stdout
    if not (console.is_terminal if console is not None else terminal(stream)):
        stream.write("".join(text + "\n" for _, text in lines))
        stream.flush()
        return
    # lazy: rich (~40 ms) only on a terminal; grade's lean path writes plain lines without it
    from rich.console import Console
    from rich.padding import Padding
    from rich.text import Text

    console = console or Console(highlight=False)
    for n, (style, text) in enumerate(lines):
        # Wrapped to the terminal's width, a line's continuation would start at the margin
        # (a grader's "... ✔ PASS" wrapped there): every line but the verdict's is padded,
        # its continuations too.
        body = text if n == 0 else text.removeprefix("  ")
        console.print(Padding(Text(body, style=style), (0, 0, 0, 2 if n else 0), expand=False))
