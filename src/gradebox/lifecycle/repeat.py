"""A test run several times (``repeat: N``, AgentV's ``evaluate_options.repeat``): one result
from the runs, by AgentV's strategies (its ``trials.ts``). Pure logic.

The score is the best run's (``pass_any``, the default), the lowest (``pass_all``), the mean
(``mean``) or the lower bound of the mean's 95% confidence interval (``confidence_interval``);
the test passes when that score reaches its threshold (without one: ``pass_any`` when a run
passed, the others when every run passed). A run that errored or failed a required gate
counts with a score of 0, whatever its graders' weighted score: it earned none. The
best-scoring run stands for the test (its graders and answer); ``trials`` lists every run,
each with its own answer, diff and graders (a failing run is what a reader opens).
``pass_any`` is an error only when every run errored, the others when any did. Each run has a
fresh workspace and its own sample index, so a model target is asked again (the response
cache keys each sample on its own).
"""

from __future__ import annotations

import math
import statistics

from ..core.scores import reaches
from ..files.baseline import truncate_diff
from ..protocol.models import (
    FileChangesNotes,
    GraderResult,
    Status,
    TestResult,
    TrialRecord,
    Usage,
)

__all__ = ["TRIALS_TEXT", "best_of", "trial"]

# Characters of answers a test's trials keep together, and of diffs (and of the names their
# notes list): each run's are capped as one result's are (an answer file of 16 MiB, a diff of
# workspace.max_diff), so ``repeat: 100`` kept 100 of each in one results line, past the 1 GiB
# the results reader takes for a whole run. Each trial keeps its share; the test's own answer
# and diff (the best run's) stay whole. Its graders too (each prints up to limits.output of
# details): past its share, each keeps its verdict and the start of its evidence.
TRIALS_TEXT = 16 << 20
_SLIM_EVIDENCE = 1000  # characters of evidence a slimmed grader keeps

# Two-tailed 95% t critical values for 1..29 degrees of freedom (AgentV's T_TABLE_95); 1.96 after.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045)  # fmt: skip


def _score(scores: list[float], strategy: str) -> float:
    if strategy == "pass_all":
        return min(scores)
    if strategy == "pass_any":
        return max(scores)
    mean = sum(scores) / len(scores)
    if strategy == "mean" or len(scores) < 2:
        return mean
    t = _T95[len(scores) - 2] if len(scores) - 1 <= len(_T95) else 1.96
    margin = t * statistics.stdev(scores) / math.sqrt(len(scores))
    return min(1.0, max(0.0, mean - margin))


def earned(run: TestResult) -> float:
    """The score a run counts with: 0 when it gave no verdict (an error keeps the weighted
    score of the graders that did answer) or failed a required gate (a gate fails the run
    whatever its weighted score), else its score."""
    if run.status is Status.error or run.gates_failed:
        return 0.0
    return run.score


def trial(sample: int, run: TestResult, share: int = TRIALS_TEXT) -> TrialRecord:
    """One run as a trial of its test: its verdict, answer, diff and graders, as it wrote
    them, its answer and diff each cut at ``share`` characters (a cut said in the text)."""
    output = run.output
    if output is not None and len(output) > share:
        output = (
            f"{output[:share]}\n[gradebox: trial output cut at {share:,} of "
            f"{len(output):,} characters]"
        )
    diff = run.file_changes
    if diff is not None and len(diff) > share:
        diff = truncate_diff(diff, share)
    return TrialRecord(
        sample=sample,
        status=run.status,
        score=run.score,
        error=run.error,
        output=output,
        file_changes=diff,
        file_changes_bytes=run.file_changes_bytes,
        file_changes_notes=_noted(run.file_changes_notes, share),
        graders=_graders(run.graders, share),
        gates_failed=run.gates_failed,
    )


def _graders(graders: list[GraderResult], share: int) -> list[GraderResult]:
    """``graders`` whole when their JSON fits in ``share``, else each slimmed (``_slim``)."""
    size = sum(len(g.model_dump_json()) for g in graders)
    if size <= share:
        return graders
    why = (
        f"this trial's graders wrote {size:,} characters, over its share of {share:,}: "
        "their verdicts and the start of each one's evidence are kept"
    )
    return [_slim(g, why) for g in graders]


def _slim(g: GraderResult, why: str) -> GraderResult:
    """A grader's verdict without its bulk (checks, details, tails, raw answer)."""
    evidence = g.evidence
    if len(evidence) > _SLIM_EVIDENCE:
        evidence = evidence[:_SLIM_EVIDENCE] + "…"
    return g.model_copy(
        update={
            "evidence": evidence,
            "checks": [],
            "details": None,
            "stdout_tail": None,
            "stderr_tail": None,
            "raw_response": None,
            "warnings": [why],
            "calls": [],
            "children": [_slim(c, why) for c in g.children],
        }
    )


def _noted(notes: FileChangesNotes | None, share: int) -> FileChangesNotes | None:
    """``notes`` listing files up to ``share`` characters of names; the rest counted."""
    if notes is None:
        return None
    kept, used = 0, 0
    for f in notes.files:
        used += len(f.path) + len(f.quoted or "")
        if used > share:
            break
        kept += 1
    if kept == len(notes.files):
        return notes
    more = notes.more + len(notes.files) - kept
    return notes.model_copy(update={"files": notes.files[:kept], "more": more})


def best_of(runs: list[TestResult], strategy: str = "pass_any") -> TestResult:
    """One result for the runs of one test."""
    scores = [earned(r) for r in runs]
    best = max(
        range(len(runs)),
        key=lambda i: (
            scores[i],
            runs[i].status is Status.passed,
            runs[i].status is not Status.error,
            -i,
        ),
    )
    result = runs[best].model_copy(deep=True)
    statuses = [r.status for r in runs]
    result.score = round(_score(scores, strategy), 6)
    threshold = result.threshold
    some = any if strategy == "pass_any" else all
    errored = (all if strategy == "pass_any" else any)(s is Status.error for s in statuses)
    if threshold is None:
        ok = some(s is Status.passed for s in statuses)
    else:
        ok = reaches(result.score, threshold)
    if errored:
        result.status = Status.error
    else:
        result.status = Status.passed if ok else Status.failed
    result.passed = result.status is Status.passed
    share = TRIALS_TEXT // len(runs)
    result.trials = [trial(i, r, share) for i, r in enumerate(runs)]
    usage, seen = Usage(), False
    for r in runs:
        if r.usage is not None:
            usage.merge(r.usage)
            seen = True
    result.usage = usage if seen else None
    result.started_at = runs[0].started_at
    result.timings_ms = {"total": sum(r.timings_ms.get("total", 0) for r in runs)}
    return result
