"""Human-readable rendering of results (rich). Machines get ``--json`` instead, never this."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .protocol import GraderResult, Status

__all__ = ["STYLE", "print_result"]

STYLE = {Status.passed: "bold green", Status.failed: "bold red", Status.error: "bold yellow"}
MARK = {Status.passed: "✔ PASS", Status.failed: "✘ FAIL", Status.error: "! ERROR"}


def print_result(result: GraderResult, console: Console) -> None:
    """One grader's verdict, its checks, and (when it did not pass) the output tails."""
    style = STYLE[result.status]
    image = f" on {result.image.ref} ({result.image.id[7:19]})" if result.image else ""
    console.print(
        f"[{style}]{MARK[result.status]}[/] {escape(result.name)}  "
        f"score {result.score:.2f}  [dim]{result.duration_ms} ms{escape(image)}[/]"
    )
    if result.evidence:
        console.print(f"  {escape(result.evidence)}")
    if result.checks:
        table = Table(show_header=True, header_style="bold", box=None, padding=(0, 2))
        table.add_column("check")
        table.add_column("verdict")
        table.add_column("score", justify="right")
        table.add_column("evidence")
        for check in result.checks:
            table.add_row(
                escape(check.text),
                "[green]pass[/]" if check.passed else "[red]fail[/]",
                "" if check.score is None else f"{check.score:.2f}",
                escape(check.evidence or ""),
            )
        console.print(table)
    for label, tail in (("stdout", result.stdout_tail), ("stderr", result.stderr_tail)):
        if tail:
            console.print(f"  [dim]{label} (tail):[/]")
            console.print(escape(tail), style="dim", highlight=False)
