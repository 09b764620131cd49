"""``--help`` reads as written: every command's help, at a narrow and a wide terminal, breaks
lines only where the terminal is full (a docstring's own line breaks used to show through)."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from gradebox.cli.app import app


def _commands() -> list[list[str]]:
    root = typer.main.get_command(app)
    found: list[list[str]] = [[]]

    def walk(group: Any, prefix: list[str]) -> None:
        for name, command in group.commands.items():
            if name == "exec":  # dispatched before the app loads; its help is argparse's
                continue
            found.append([*prefix, name])
            if hasattr(command, "commands"):  # a group (typer vendors its own click)
                walk(command, [*prefix, name])

    walk(root, [])
    return found


def broken_lines(text: str, width: int) -> list[str]:
    """Lines of prose that continue a sentence although the line before had room for the
    continuation's first word (outside the option boxes, which rich wraps itself)."""
    bad = []
    lines = text.splitlines()
    for before, line in zip(lines, lines[1:], strict=False):
        if before.lstrip()[:1] in "╭│╰" or line.lstrip()[:1] in "╭│╰":
            continue
        words = line.split()
        if not words or not before.strip() or not words[0][0].islower():
            continue
        if len(before.rstrip()) + 1 + len(words[0]) < width - 1:
            bad.append(f"{before.rstrip()!r} / {line.rstrip()!r}")
    return bad


@pytest.mark.parametrize("width", [80, 200])
@pytest.mark.parametrize("argv", _commands(), ids=lambda a: " ".join(a) or "gradebox")
def test_help_has_no_line_broken_mid_sentence(argv: list[str], width: int) -> None:
    result = CliRunner().invoke(app, [*argv, "--help"], env={"COLUMNS": str(width)})
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.output.splitlines()) <= width
    assert broken_lines(result.output, width) == []


def test_the_check_sees_a_broken_line() -> None:
    # the help of `run` before prose was reflowed, at 200 columns
    text = (
        " Reads gradebox suites and AgentV eval files (YAML, or JSONL cases with a YAML sidecar),\n"
        " told apart by their shape or by --format.\n"
    )
    assert broken_lines(text, 200)
    assert broken_lines(text.replace("\n told", " told"), 200) == []
