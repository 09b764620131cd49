"""``gradebox compare``: two runs, side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ..core.atomic import write_atomic
from ..protocol.results import results_file
from ..report import escape
from ..report.compare import compare_runs, load_run, markdown, unrelated
from ..report.html import read_summary
from ._common import JsonOpt, Output


def _suite(path: Path) -> str | None:
    """The suite the summary.json beside a run's results names (as the report reads it);
    none for a run without one (still running, a bare file)."""
    summary = read_summary(results_file(path).parent)
    return summary.suite if summary else None


def compare(
    run_a: Annotated[
        Path, typer.Argument(help="The baseline: results.jsonl, its folder, or a batch output.")
    ],
    run_b: Annotated[Path, typer.Argument(help="The candidate, in the same form.")],
    markdown_out: Annotated[
        Path | None, typer.Option("--markdown", help="Also write a Markdown report (a PR comment).")
    ] = None,
    fail_on_regression: Annotated[
        bool, typer.Option("--fail-on-regression", help="Exit 1 when B is significantly worse.")
    ] = False,
    alpha: Annotated[float, typer.Option("--alpha", help="Significance level.")] = 0.05,
    seed: Annotated[int, typer.Option("--seed", help="Bootstrap seed.")] = 0,
    resamples: Annotated[int, typer.Option("--resamples", help="Bootstrap resamples.")] = 2000,
    as_json: JsonOpt = False,
) -> None:
    """Compare run B with run A, test by test: flips (pass->fail, fail->pass), pass-rate and
    mean-score deltas with bootstrap confidence intervals, an exact McNemar test on the flips,
    per-grader deltas.

    Exit codes: 0, or 1 with --fail-on-regression when B has more pass->fail than fail->pass
    flips and McNemar's p is below --alpha; 2 unreadable input.
    """
    out = Output(as_json)
    a, b = load_run(run_a), load_run(run_b)
    warning = unrelated(str(run_a), a.keys(), _suite(run_a), str(run_b), b.keys(), _suite(run_b))
    if warning:
        # One line whatever the terminal's width (rich would wrap it): a script greps it.
        out.err.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
    report = compare_runs(a, b, seed=seed, resamples=resamples, confidence=1 - alpha)
    worse = report.significantly_worse(alpha)
    if markdown_out is not None:
        write_atomic(markdown_out, markdown(report, str(run_a), str(run_b), alpha, warning))
    if as_json:
        out.document(
            report.to_json() | {"significantly_worse": worse, "alpha": alpha, "unrelated": warning}
        )
    else:
        table = Table(title=f"{run_a} -> {run_b} ({report.tests} tests)")
        for col in ("", "A", "B", "delta", f"{int((1 - alpha) * 100)}% CI"):
            table.add_column(col)
        table.add_row(
            "pass rate",
            f"{report.pass_rate_a:.1%}",
            f"{report.pass_rate_b:.1%}",
            f"{report.pass_rate_delta * 100:+.1f} pp",
            f"[{report.pass_rate_ci[0] * 100:+.1f}, {report.pass_rate_ci[1] * 100:+.1f}]",
        )
        table.add_row(
            "mean score",
            f"{report.mean_score_a:.3f}",
            f"{report.mean_score_b:.3f}",
            f"{report.mean_score_delta:+.3f}",
            f"[{report.mean_score_ci[0]:+.3f}, {report.mean_score_ci[1]:+.3f}]",
        )
        for g in report.graders:
            table.add_row(
                f"  {g.name}",
                f"{g.pass_rate_a:.1%}",
                f"{g.pass_rate_b:.1%}",
                f"{g.delta * 100:+.1f} pp",
                "",
            )
        out.console.print(table)
        for label, ids, colour in (
            ("pass -> fail", report.regressions, "red"),
            ("fail -> pass", report.fixes, "green"),
        ):
            if ids:
                out.console.print(f"[{colour}]{label}[/] ({len(ids)}): {', '.join(ids[:30])}")
        verdict = "[red]significantly worse[/]" if worse else "no significant regression"
        out.console.print(f"McNemar exact p = {report.p_value:.4f}: {verdict} at {alpha}")
    raise typer.Exit(1 if fail_on_regression and worse else 0)
