"""The table at the end of a run in an 80-column terminal (issue 42): a long reason is cut to
a few lines with an ellipsis (it took ~50 lines), every column keeps room, a test id's
bidirectional controls are shown as marks (as the HTML report shows them), "1 test"."""

from __future__ import annotations

from rich.console import Console

from gradebox.protocol.models import GraderResult, RunSummary, Status, TestResult
from gradebox.report.plain import clean
from gradebox.report.terminal import print_run

LONG_ID = "agentv-corpus-evals-coding.eval.yaml: rename-the-module-and-update-every-import"


def _failed(key: str, evidence: str) -> TestResult:
    g = GraderResult(name="llm-rubric", status=Status.failed, passed=False, score=0.0,
                     evidence=evidence, duration_ms=1200, type="llm")  # fmt: skip
    return TestResult(id=key, status=Status.failed, passed=False, score=0.0, graders=[g])


def _summary(total: int) -> RunSummary:
    return RunSummary(
        suite="s", run_id="r", total=total, passed=0, failed=total, errored=0, pass_rate=0.0,
        mean_score=0.0, duration_s=0.1, workers=1, started_at="x", finished_at="y",
    )  # fmt: skip


def _table(results: list[TestResult], width: int = 80) -> list[str]:
    console = Console(width=width, record=True, force_terminal=False)
    print_run(results, _summary(len(results)), console)
    return console.export_text(styles=False).splitlines()


def test_a_long_reason_is_a_few_lines_at_80_columns():
    lines = _table([_failed(LONG_ID, "the answer misses the point " * 3)])
    rows = [line for line in lines if line.startswith("│")]
    assert len(rows) <= 6, "\n".join(lines)  # the id folds to 5; the reason: 3, then …
    assert all(len(line) <= 80 for line in lines), "\n".join(lines)
    head = next(line for line in lines if "test" in line and "reason" in line)
    for column in ("verdict", "score", "slowest grader", "reason"):
        assert column in head, head  # every column keeps room beside a long id
    assert any("✘ FAIL" in row for row in rows)
    reason = [row.rstrip(" │").rsplit("│", 1)[-1].strip() for row in rows]
    assert reason[0].startswith("llm-rubric:") and any(r.endswith("…") for r in reason)
    # A short reason is shown whole, without an ellipsis.
    short = _table([_failed("t", "wrong total")])
    assert any(line.endswith("│ llm-rubric: wrong total │") for line in short), short


def test_bidi_controls_in_an_id_are_shown_as_marks():
    evil = "passed-\u202etset\u2066x\u2069"
    lines = "\n".join(_table([_failed(evil, "no")], width=200))
    assert "\u202e" not in lines and "\u2066" not in lines and "\u2069" not in lines
    assert "passed-⟦U+202E⟧tset⟦U+2066⟧x⟦U+2069⟧" in lines
    assert clean("a\u200fb\x1b") == "a⟦U+200F⟧b\ufffd"  # the one door of terminal text


def test_one_test_is_one_test():
    assert _table([_failed("t", "no")])[0].strip() == "s: 1 test"
    assert _table([_failed("t", "no"), _failed("u", "no")])[0].strip() == "s: 2 tests"


def test_an_id_of_20_characters_stays_whole_and_the_table_fits_80_columns():
    lines = _table([_failed("purposeful-failures", "equals 'A precise answer.': not met " * 3)])
    assert any("│ purposeful-failures │" in line for line in lines), "\n".join(lines)
    rows = [line for line in lines if line.startswith(("│", "┃", "┏", "└"))]
    assert all(len(line) <= 80 and line[-1] in "│┃┓┘" for line in rows), "\n".join(lines)


def test_an_id_holding_a_line_break_stays_on_its_row():
    lines = "\n".join(_table([_failed("evil\n✔ PASS", "no")], width=200))
    assert "evil⟦U+000A⟧✔ PASS" in lines, lines
    assert "✔ PASS" not in lines.replace("evil⟦U+000A⟧✔ PASS", ""), lines
