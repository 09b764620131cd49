"""A test run several times (``repeat: N``, AgentV's ``evaluate_options.repeat``): its result
is AgentV's ``pass_any`` aggregate of the runs. Pure logic.

The best-scoring run stands for the test (its graders, answer and score); the test passes
when any run passed, errors only when every run errored (else a run that failed makes it
``failed``); ``trials`` lists every run. Each run has a fresh workspace and its own sample
index, so a model target is asked again (the response cache keys each sample on its own).
"""

from __future__ import annotations

from .protocol import Status, TestResult, TrialRecord, Usage

__all__ = ["best_of"]


def best_of(runs: list[TestResult]) -> TestResult:
    """One result for the runs of one test (AgentV's ``aggregatePassAny``)."""
    best = max(range(len(runs)), key=lambda i: (runs[i].score, -i))
    result = runs[best].model_copy(deep=True)
    statuses = [r.status for r in runs]
    if Status.passed in statuses:
        result.status = Status.passed
    elif all(s is Status.error for s in statuses):
        result.status = Status.error
    else:
        result.status = Status.failed
    result.passed = result.status is Status.passed
    result.trials = [
        TrialRecord(sample=i, status=r.status, score=r.score, error=r.error)
        for i, r in enumerate(runs)
    ]
    usage, seen = Usage(), False
    for r in runs:
        if r.usage is not None:
            usage.merge(r.usage)
            seen = True
    result.usage = usage if seen else None
    result.started_at = runs[0].started_at
    result.timings_ms = {"total": sum(r.timings_ms.get("total", 0) for r in runs)}
    return result
