"""Red-team: every text the issue-42 page draws that a run, its agent or its graders wrote
(run folder names, suite names in the unrelated warning, grader names that collide with the
"name #2" the side-by-side view makes, each trial's answer and evidence, the transcript's
roles, tool names, arguments and results, the diff notes' names) stays text: no script, no
request, no element of theirs, no CSP report."""

from __future__ import annotations

from pathlib import Path

from gradebox.lifecycle.repeat import best_of
from gradebox.protocol.models import (
    ChangedFileNote,
    FileChangesNotes,
    GraderResult,
    RunSummary,
    Status,
    TestResult,
    ToolStep,
    Transcript,
    TranscriptStep,
)
from tests.browser.test_report_runs import report

EVIL = (
    "</script><img src=x onerror=alert(1)><svg onload=alert(2)>"
    "\u202e\" style='x' data-x=\"</style><style>*{background:url(//evil.example/c)}</style>"
)
NAME = "run\u202e<img src=x onerror=alert(3)>"  # a folder name: no / in it


def _g(name: str, passed: bool, **kw) -> GraderResult:
    status = Status.passed if passed else Status.failed
    return GraderResult(name=name, status=status, passed=passed, score=float(passed), **kw)


def _result(passed: bool, graders: list[GraderResult]) -> TestResult:
    status = Status.passed if passed else Status.failed
    calls = [ToolStep(position=0, name=EVIL, args={EVIL: [EVIL]}, output=EVIL, cut=True)]
    steps = [TranscriptStep(role=EVIL, text=EVIL, tool_calls=calls)]
    quoted = "b/" + EVIL
    diff = (
        f'diff --git "a/{quoted[2:]}" "{quoted}"\n--- /dev/null\n+++ "{quoted}"\n'
        f"@@ -0,0 +1 @@\n+{EVIL}\n"
    )
    notes = FileChangesNotes(
        size=len(diff), cap=1 << 20, paths=1, file_bytes=1, file_lines=1,
        files=[ChangedFileNote(path=EVIL, quoted=EVIL, cut="size", size=7)],
    )  # fmt: skip
    return TestResult(
        id=f"t {EVIL}", status=status, passed=passed, score=float(passed), output=EVIL,
        graders=graders, file_changes=diff, file_changes_notes=notes,
        transcript=Transcript(steps=steps, messages=1, tool_calls=1, cut=[EVIL]),
    )  # fmt: skip


def _run(folder: Path, suite: str, result: TestResult) -> Path:
    folder.mkdir(parents=True)
    (folder / "results.jsonl").write_text(result.model_dump_json() + "\n")
    (folder / "summary.json").write_text(
        RunSummary(
            suite=suite, run_id=EVIL, total=1, passed=int(result.passed),
            failed=1 - int(result.passed), errored=0, pass_rate=float(result.passed),
            mean_score=0.5, duration_s=1.0, workers=1, started_at="2026-01-01T00:00:00Z",
            finished_at="2026-01-01T00:00:01Z",
        ).model_dump_json()
    )  # fmt: skip
    return folder


def test_hostile_names_runs_trials_and_steps_stay_text(tmp_path, open_page):
    ev = {"evidence": EVIL, "calls": [0, 5]}
    # Graders named so the "#2" a second one is given meets a real one of that name.
    a = [_g(f"{EVIL} #2", True, type="trace", **ev), _g(EVIL, True), _g(EVIL, True)]
    runs = [_result(i % 2 == 0, [_g(EVIL, i % 2 == 0, type="trace", **ev)]) for i in range(3)]
    b = best_of(runs)
    b.graders = [_g(EVIL, False, type="trace", **ev), _g(EVIL, False)]
    first = _run(tmp_path / NAME, EVIL, _result(True, a))
    second = _run(tmp_path / f"{NAME}2", f"other {EVIL}", b)
    w = open_page(report([first, second], tmp_path / "r.html"), ("file://",))
    page = w.page
    assert page.query_selector("header .warning.unrelated") is not None
    page.click("button.toggle")
    for tab in page.locator("td.detail [role=tab]").all():
        tab.click()
    for d in page.locator("td.detail details").all():
        d.evaluate("d => { d.open = true; }")
    for link in page.locator("button.call-link").all():
        link.click()
    # the other way round: the hostile run alone, as one run's detail
    alone = open_page(report([second], tmp_path / "r1.html"), ("file://",))
    alone.page.click("button.toggle")
    for tab in alone.page.locator("td.detail [role=tab]").all():
        tab.click()
    for p in (page, alone.page):
        assert p.locator("img, svg[onload], style:not(head style), [data-x]").count() == 0
        assert p.evaluate("document.querySelectorAll('style').length") <= 1
    w.assert_clean()
    alone.assert_clean()
