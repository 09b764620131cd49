"""Imports inside functions only where they save something, each saying what.

An import belongs at the top of its module. One inside a function is kept only when it keeps a
cost off a hot path (``gradebox --version``, ``gradebox exec``, the lean ``grade``, a sandbox's
per-grader path), keeps an optional extra lazy, or keeps the Docker SDK unloaded until an engine
connects; it then carries a comment naming what it saves, on its own line or on the line
directly above (a comment directly above a group of consecutive imports covers the group).
Run ``python tests/unit/test_function_imports.py [ROOT]`` for the count.
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "gradebox"

_IMPORTS = (ast.Import, ast.ImportFrom)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
# A comment for a tool says nothing to a reader about why the import waits.
_PRAGMA = re.compile(r"\s*(type:|noqa|pragma|fmt:|mypy:)")


def _says_something(comment: str) -> bool:
    """A comment with words for a reader, not only a tool's (``# type: ignore  # why`` has)."""
    return any(part.strip() and not _PRAGMA.match(part) for part in comment.split("#"))


def function_imports(source: str) -> list[tuple[ast.stmt, bool]]:
    """Every import inside a function body, with whether a comment says why it is there."""
    tree = ast.parse(source)
    comments: set[int] = set()  # lines holding a comment
    alone: set[int] = set()  # lines holding only a comment
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and _says_something(tok.string):
            comments.add(tok.start[0])
            if not tok.line[: tok.start[1]].strip():
                alone.add(tok.start[0])
    found: list[tuple[ast.stmt, bool]] = []

    def visit(node: ast.AST, inside: bool) -> None:
        for field in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(node, field, None)
            if isinstance(block, list):
                _block(block, inside)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt | ast.excepthandler | ast.match_case):
                continue  # statements are walked block by block above
            visit(child, inside or isinstance(child, _FUNCTIONS))
        if isinstance(node, ast.Match):
            for case in node.cases:
                _block(case.body, inside)

    def _block(block: list, inside: bool) -> None:
        covered = False  # the previous statement is an import covered by a comment above it
        previous_end = -1
        for stmt in block:
            if isinstance(stmt, _IMPORTS):
                lines = range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1)
                above = stmt.lineno - 1 in alone
                grouped = covered and previous_end == stmt.lineno - 1
                covered = above or grouped
                if inside:
                    found.append((stmt, covered or any(n in comments for n in lines)))
                previous_end = stmt.end_lineno or stmt.lineno
            else:
                covered = False
                if isinstance(stmt, ast.excepthandler):
                    _block(stmt.body, inside)
                    continue
                visit(stmt, inside or isinstance(stmt, _FUNCTIONS))

    _block(tree.body, False)
    return found


def uncommented(src: Path = SRC) -> tuple[int, list[str]]:
    """(imports inside functions, ``file:line`` of those no comment explains) under ``src``."""
    total, bad = 0, []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        for stmt, ok in function_imports(path.read_text(encoding="utf-8")):
            total += 1
            if not ok:
                bad.append(f"{rel}:{stmt.lineno}")
    return total, bad


def test_every_import_inside_a_function_says_why() -> None:
    _, bad = uncommented()
    assert not bad, (
        "imports inside functions without a comment naming what they save "
        "(move them to the top of the module, or say why they must wait):\n  " + "\n  ".join(bad)
    )


def test_the_check_can_fail(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(
        "import os\n\n\ndef f():\n    import json\n\n    return json, os\n", encoding="utf-8"
    )
    total, bad = uncommented(tmp_path)
    assert (total, bad) == (1, ["bad.py:5"])


def test_comments_that_count(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text(
        "def f():\n"
        "    import json  # lazy: reason\n"
        "    # lazy: a reason for the group\n"
        "    import csv\n"
        "    from os import path\n"
        "\n"
        "    import re\n"  # a blank line ends the group
        "    x = 1  # a comment on a statement is not one above an import\n"
        "    import glob\n"
        "    import shlex  # type: ignore[import]\n"
        "    import pwd  # type: ignore[import]  # lazy: reason\n"
        "    class C:\n"
        "        def g(self):\n"
        "            if True:\n"
        "                import shlex\n"
        "    return json, csv, path, re, x, glob, C, shlex, pwd\n",
        encoding="utf-8",
    )
    total, bad = uncommented(tmp_path)
    assert (total, bad) == (8, ["good.py:7", "good.py:9", "good.py:10", "good.py:15"])


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else SRC
    total, bad = uncommented(root)
    print(f"imports inside functions: {total}; without a comment: {len(bad)}")
    for where in bad:
        print(f"  {where}")
