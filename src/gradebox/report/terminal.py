"""Human-readable rendering of results in a terminal (rich), and JUnit XML for CI."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from rich.console import Console, ConsoleOptions, RenderResult
from rich.markup import escape as _markup_escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from ..protocol.models import RunSummary, Status, TestResult
from .plain import MARK, STYLE, clean

__all__ = ["STYLE", "escape", "junit_xml", "print_run", "xml_text"]

# What XML 1.0 cannot hold at all: a JUnit file with one of these is not XML.
_NOT_XML = re.compile("[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def escape(text: str) -> str:
    """Untrusted text, safe for a terminal through rich: no control sequences, no markup."""
    return _markup_escape(clean(text))


def one_line(text: str) -> str:
    """An untrusted name (a test id, a target), ``escape``d, on one line: a line break in it
    is a mark, so no name can draw a second line (a "✔ PASS") into its row."""
    return escape(text).replace("\n", "⟦U+000A⟧")  # (other controls: escape's U+FFFD)


def xml_text(text: str) -> str:
    """Untrusted text, safe inside XML: characters XML cannot hold become U+FFFD."""
    return _NOT_XML.sub("\ufffd", text)


def slowest(result: TestResult) -> str:
    timed = [g for g in result.graders if g.type != "builtin"]
    if not timed:
        return "-"
    g = max(timed, key=lambda g: g.duration_ms)
    return f"{g.name} ({g.duration_ms} ms)"


def _short(text: str, limit: int = 100) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    line = lines[-1] if lines else ""  # pytest and friends put the verdict last
    return line if len(line) <= limit else line[: limit - 1] + "…"


def reason(result: TestResult) -> str:
    """Why a test did not pass: the target or hook failure, else each failing assertion."""
    if result.error:
        return _short(result.error, 200)
    return "; ".join(f"{g.name}: {_short(g.evidence)}" for g in result.graders if not g.passed)


class _Clamped:
    """Text wrapped to its cell and cut to ``lines`` lines, the last ending in "…": a long
    reason in an 80-column terminal (a cell 10 columns wide) took ~50 lines of the table."""

    def __init__(self, text: str, lines: int = 3) -> None:
        self.text = Text(clean(text))  # a Text: shown as written, markup and all
        self.lines = lines

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.text)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(1, options.max_width)
        lines = self.text.wrap(console, width, overflow="fold")
        if len(lines) > self.lines:
            lines = lines[: self.lines]
            last = lines[-1]
            last.rstrip()
            last.truncate(width - 1)
            last.append("…")
        yield Text("\n").join(lines)


def print_run(
    results: list[TestResult], summary: RunSummary, console: Console, max_rows: int = 50
) -> None:
    """The table at the end of a suite run, then one line of totals."""
    tests = f"{summary.total} test{'' if summary.total == 1 else 's'}"
    table = Table(title=f"{escape(summary.suite)}: {tests}", show_lines=False)
    order = {Status.error: 0, Status.failed: 1, Status.passed: 2}
    ranked = sorted(results, key=lambda r: (order[r.status], r.id))
    # Every test that did not pass is shown; passes fill the table up to `max_rows`.
    shown = [r for r in ranked if r.status is not Status.passed]
    shown += [r for r in ranked if r.status is Status.passed][: max(0, max_rows - len(shown))]
    # At 80 columns every column keeps room: ids of up to 20 characters stay whole (one can
    # copy them into --filter), longer ones fold (a no_wrap id once took the whole width, and
    # the verdicts with it), the grader is cut, the reason is a few lines.
    if max((len(clean(r.id)) for r in shown), default=0) <= 20:
        table.add_column("test", no_wrap=True)
    else:
        table.add_column("test", overflow="fold", min_width=10)
    table.add_column("verdict", no_wrap=True)
    table.add_column("score", justify="right", no_wrap=True)
    table.add_column("slowest grader", max_width=16, no_wrap=True, overflow="ellipsis")
    table.add_column("reason", min_width=14, max_width=70)
    for r in shown:
        table.add_row(
            one_line(r.id),
            f"[{STYLE[r.status]}]{MARK[r.status]}[/]",
            f"{r.score:.2f}",
            escape(slowest(r)),
            _Clamped(reason(r)) if r.status is not Status.passed else "",
        )
    console.print(table)
    if len(shown) < len(ranked):
        console.print(f"[dim]… {len(ranked) - len(shown)} more passed tests in results.jsonl[/]")
    tail = " (interrupted)" if summary.interrupted else ""
    if summary.targets:
        print_targets(summary, console)
    console.print(
        f"[bold green]{summary.passed} passed[/], [bold red]{summary.failed} failed[/], "
        f"[bold yellow]{summary.errored} errored[/]"
        + (f", {summary.not_run} not run" if summary.not_run else "")
        + f" in {summary.duration_s:.1f}s with {summary.workers} workers{tail}"
    )


def print_targets(summary: RunSummary, console: Console) -> None:
    """A target matrix's run, one line per target (every test ran once against each)."""
    table = Table(title="per target", show_lines=False)
    table.add_column("target", no_wrap=True)
    for name in ("passed", "failed", "errored", "not run", "pass rate", "mean score"):
        table.add_column(name, justify="right")
    for name, t in (summary.targets or {}).items():
        table.add_row(
            one_line(name),  # the eval file's text: no markup, no control sequences
            str(t.passed),
            str(t.failed),
            str(t.errored),
            str(t.not_run),
            f"{t.pass_rate:.0%}",
            f"{t.mean_score:.2f}",
        )
    console.print(table)


def junit_xml(results: list[TestResult], summary: RunSummary) -> str:
    """JUnit XML for CI systems: a failing assertion is a <failure>, a grader error <error>."""

    root = ET.Element("testsuites")
    suite = ET.SubElement(
        root,
        "testsuite",
        name=xml_text(summary.suite),
        tests=str(len(results)),
        failures=str(summary.failed),
        errors=str(summary.errored),
        skipped="0",
        time=f"{summary.duration_s:.3f}",
        timestamp=summary.started_at,
    )
    for r in results:
        case = ET.SubElement(
            suite,
            "testcase",
            # Each result's own suite: a run of several files is one JUnit file, and two
            # suites' labelled ids may read alike ("a" + "b: c", "a: b" + "c").
            classname=xml_text(r.suite or summary.suite),
            name=xml_text(r.id),
            time=f"{r.timings_ms.get('total', 0) / 1000:.3f}",
        )
        if r.status is not Status.passed:
            tag = "error" if r.status is Status.error else "failure"
            node = ET.SubElement(case, tag, message=xml_text(reason(r)[:500]), type=r.status.value)
            node.text = xml_text(
                "\n".join(
                    f"[{g.status.value}] {g.name} score={g.score:.2f}: {g.evidence}"
                    for g in r.graders
                )
                or (r.error or "")
            )
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
