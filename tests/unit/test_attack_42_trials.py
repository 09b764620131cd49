"""Red-team checks of what a test run many times keeps of each run (``repeat.best_of``):
each run's answer and diff are capped as one result's are, so a test of ``repeat: 100``
kept 100 of them in one results line, past what the results reader takes (1 GiB) for a
whole run: one hostile test made the run's report, view, compare and --resume refuse it."""

from __future__ import annotations

from gradebox.files.baseline import DEFAULT_DIFF_CAP
from gradebox.lifecycle.repeat import TRIALS_TEXT, best_of
from gradebox.lifecycle.steps import MAX_CLI_OUTPUT
from gradebox.protocol.models import (
    ChangedFileNote,
    FileChangesNotes,
    GraderResult,
    Status,
    TestResult,
)

NOTES = FileChangesNotes(
    size=1, cap=1, paths=1, file_bytes=1, file_lines=1,
    files=[ChangedFileNote(path=f"f{i:06}", cut="binary", size=1) for i in range(40_000)],
)  # fmt: skip


def _run(i: int, answer: str, diff: str) -> TestResult:
    return TestResult(
        id="t",
        status=Status.failed if i % 2 else Status.passed,
        passed=not i % 2,
        score=0.0 if i % 2 else 1.0,
        output=answer,
        file_changes=diff,
        file_changes_bytes=len(diff),
        file_changes_notes=NOTES,
        graders=[GraderResult(name="g", status="passed", passed=True, score=1.0)],
    )


def test_a_hundred_runs_of_the_largest_answers_keep_a_bounded_result():
    answer = "a" * MAX_CLI_OUTPUT  # one object, shared: the runs cost no memory of their own
    diff = ("+" + "d" * 99 + "\n") * (DEFAULT_DIFF_CAP // 100)
    runs = [_run(i, answer, diff) for i in range(100)]
    result = best_of(runs)
    trials = result.trials
    assert len(trials) == 100 and [t.status for t in trials] == [r.status for r in runs]
    kept = sum(len(t.output or "") + len(t.file_changes or "") for t in trials)
    assert kept <= 2 * TRIALS_TEXT + 100 * 200  # the marks that say a text was cut
    names = sum(len(f.path) for t in trials for f in t.file_changes_notes.files)
    assert names <= TRIALS_TEXT
    # Never silently: each cut says so, and what the notes leave out is counted.
    assert "[gradebox: trial output cut at" in trials[0].output
    assert "[gradebox: file_changes truncated at" in trials[0].file_changes
    notes = trials[0].file_changes_notes
    assert len(notes.files) + notes.more == len(NOTES.files)
    assert result.output == answer  # the test's own answer is the best run's, whole


def test_a_few_runs_of_ordinary_answers_keep_them_whole():
    runs = [_run(i, f"answer {i}", "+x\n") for i in range(3)]
    trials = best_of(runs).trials
    assert [t.output for t in trials] == ["answer 0", "answer 1", "answer 2"]
    assert all(t.file_changes == "+x\n" and t.file_changes_notes == NOTES for t in trials)


def test_a_hundred_runs_of_graders_printing_their_largest_details_keep_a_bounded_result():
    # A grader prints up to limits.output (1 MiB) of details: ten of them, a hundred runs,
    # kept whole in each trial, made a line of a GiB; each trial now keeps its share.
    details = {"log": "z" * 200_000}  # one object: the runs cost no memory of their own
    runs = []
    for i in range(100):
        run = _run(i, "answer", "+x\n")
        run.graders = [
            GraderResult(name=f"g{k}", status="failed", passed=False, score=0.0,
                         evidence="e" * 20_000, details=details, stdout_tail="s" * 4000)
            for k in range(10)
        ]  # fmt: skip
        runs.append(run)
    trials = best_of(runs).trials
    share = TRIALS_TEXT // 100
    assert all(
        sum(len(g.model_dump_json()) for g in t.graders) <= share + 10 * 3000 for t in trials
    )
    g = trials[0].graders[3]
    # each verdict is kept, with the start of its evidence, and why the rest is not
    assert (g.name, g.status, g.passed) == ("g3", "failed", False) and g.evidence
    assert g.details is None and any("share" in w for w in g.warnings)
    assert best_of(runs).graders[0].details == details  # the test's own graders: whole
