"""Trials of one prompt and the unbiased pass@k and pass^k estimators.

For a prompt with ``n`` trials of which ``c`` passed, and ``k <= n``:

    pass@k = 1 - C(n - c, k) / C(n, k)    the chance that at least one of k trials passes
    pass^k = C(c, k) / C(n, k)            the chance that all k trials pass

(both drawn without replacement from the n observed trials: the unbiased estimators of
Chen et al. 2021 for pass@k, and its counterpart for pass^k). ``overall`` averages each figure
over the prompts that have at least k trials.
"""

from __future__ import annotations

import secrets
from collections import defaultdict
from contextlib import ExitStack
from math import comb

from pydantic import BaseModel, Field

from ..errors import ClusterError
from ..lifecycle.executor import Executor, LocalExecutor
from ..lifecycle.jobs import Record, TrialJob, Worker
from ..sandbox.base import Sandbox
from .batch import GradedRecord

__all__ = [
    "PromptStats",
    "TrialsReport",
    "pass_at_k",
    "pass_hat_k",
    "run_target_trials",
    "summarise_trials",
]


def _check(n: int, c: int, k: int) -> None:
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k) / C(n, k). Example: ``pass_at_k(5, 2, 2) == 0.7``."""
    _check(n, c, k)
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """C(c, k) / C(n, k). Example: ``pass_hat_k(5, 2, 2) == 0.1``."""
    _check(n, c, k)
    return comb(c, k) / comb(n, k)


class PromptStats(BaseModel):
    id: str
    n: int
    c: int
    pass_rate: float
    pass_at_k: dict[str, float] = Field(description="keyed by k")
    pass_hat_k: dict[str, float] = Field(description="keyed by k")


class Overall(BaseModel):
    prompts: int
    trials: int
    pass_rate: float
    pass_at_k: dict[str, float]
    pass_hat_k: dict[str, float]


class TrialsReport(BaseModel):
    k: int
    prompts: list[PromptStats]
    overall: Overall


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _mean_by_k(figures: list[dict[str, float]], k: int) -> dict[str, float]:
    """Each k's mean over the prompts that have it (those with at least k trials)."""
    by_k = {str(j): [f[str(j)] for f in figures if str(j) in f] for j in range(1, k + 1)}
    return {j: _mean(values) for j, values in by_k.items() if values}


def summarise_trials(records: list[GradedRecord], k: int) -> TrialsReport:
    """Group graded records by ``id`` and compute every figure for k = 1..K (k <= n)."""
    groups: dict[str, list[GradedRecord]] = defaultdict(list)
    for r in records:
        groups[r.id].append(r)
    prompts = []
    for pid, trials in groups.items():
        n, c = len(trials), sum(1 for t in trials if t.pass_)
        ks = range(1, min(k, n) + 1)
        prompts.append(
            PromptStats(
                id=pid,
                n=n,
                c=c,
                pass_rate=c / n,
                pass_at_k={str(j): pass_at_k(n, c, j) for j in ks},
                pass_hat_k={str(j): pass_hat_k(n, c, j) for j in ks},
            )
        )

    overall = Overall(
        prompts=len(prompts),
        trials=len(records),
        pass_rate=_mean([p.pass_rate for p in prompts]),
        pass_at_k=_mean_by_k([p.pass_at_k for p in prompts], k),
        pass_hat_k=_mean_by_k([p.pass_hat_k for p in prompts], k),
    )
    return TrialsReport(k=k, prompts=prompts, overall=overall)


def run_target_trials(
    records: list[tuple[int, Record]],
    command: str,
    image_id: str,
    k: int,
    box: Sandbox,
    *,
    workers: int,
    executor: Executor | None = None,
    timeout: float = 300.0,
) -> list[tuple[int, Record]]:
    """Run ``command`` K times per prompt (``jobs.run_target_once``); the answers become
    trials (numbered in order). Ctrl-C and SIGTERM stop the queue at once. ``executor``: where
    each trial runs (default: threads of this process); a trial that could not run stops the
    command (ClusterError): a trial that never ran is never graded as one."""
    prompts = (r for _, r in records for _ in range(k))  # K numbered trials per prompt, in order
    jobs = [TrialJob(i, r, command, image_id, timeout) for i, r in enumerate(prompts, 1)]
    done: dict[int, Record] = {}
    with ExitStack() as stack:
        if executor is None:
            worker = Worker(box, None, secrets.token_hex(6), threads=workers)  # type: ignore[arg-type]
            executor = stack.enter_context(LocalExecutor(worker))
        for fin in executor.map(jobs, workers):
            job = fin.job
            assert isinstance(job, TrialJob)
            if fin.value is None:  # no answer is no trial: never graded as one
                raise ClusterError(f"{job} could not run: {fin.error}")
            done[job.index] = fin.value
    return [(j.index, done[j.index]) for j in jobs]
