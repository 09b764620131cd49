"""Run a suite: pick the tests (filter, resume), send them through an executor, write each
result the moment it is back, and sum the run up.

What one test does lives in ``gradebox.lifecycle.testrun``; where tests run is the executor's
(``gradebox.lifecycle.executor``: this machine's threads by default, ``gradebox.cluster`` for a Ray
cluster): this module builds ``TestJob``s and consumes ``Done``s the same way for both.
Each finished test is appended to ``results.jsonl`` at once (flushed and fsynced), so an
interrupted run loses only the tests that were in flight, and ``resume`` runs just what is
missing. A test no executor could run is recorded as an error that says why, never a pass.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import secrets
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._version import __version__
from ..core.atomic import lock_folder, writable_folder, write_atomic
from ..core.jsonl import JsonlWriter, rewrite_jsonl
from ..errors import StorageError
from ..lifecycle.executor import Executor, LocalExecutor, default_workers
from ..lifecycle.jobs import TestJob, Worker
from ..lifecycle.testrun import after_all, not_run, now
from ..protocol.models import (
    RunSummary,
    Status,
    TargetTotals,
    TestResult,
    TrialRecord,
    Usage,
)
from ..protocol.results import read_results  # the one reader (re-exported: callers import it here)
from ..sandbox.base import ImageSource, Sandbox
from ..suite import Suite, Test

__all__ = [
    "PLAN",
    "RunOptions",
    "default_workers",
    "plan_json",
    "read_results",
    "run_suite",
    "selected_tests",
    "summarise",
]

# What a run folder holds from its start, before any test runs: the suite, the run's id and
# the ids of every test it will run, so a reader (``gradebox view``, ``gradebox report``) can
# say "4 of 16" and list the tests that have not run. A run of several files has one at its
# top too, naming each file's folder and tests (``gradebox run`` writes it).
PLAN = "plan.json"

log = logging.getLogger("gradebox.runner")


@dataclass
class RunOptions:
    out_dir: Path
    workers: int | None = None
    filter: str | list[str] | None = None  # globs over test ids; a test matching any runs
    resume: bool = False
    retry_errors: bool = False  # with resume: errored tests run again
    max_ahead: int | None = None  # containers started ahead of their input; default 2/worker
    use_cache: bool = True  # model answers from the response cache when the request repeats
    references: bool = False  # validate-refs: each test's reference answer stands in for the target
    model_calls: int = 4  # model calls in flight at once, for the whole run
    run_id: str | None = None  # a cluster run's (its nodes know it); else a new one


def run_suite(
    suite: Suite,
    box: Sandbox,
    images: ImageSource,
    options: RunOptions,
    on_result: Callable[[TestResult], None] = lambda r: None,
    on_start: Callable[[int, int], None] = lambda total, done: None,
    executor: Executor | None = None,
) -> RunSummary:
    """Run every selected test; append each result to ``out_dir/results.jsonl`` when done.

    Ctrl-C (KeyboardInterrupt) stops the run cleanly: containers are removed, finished tests
    stay in results.jsonl, and the summary records ``interrupted``; the exception propagates.

    ``executor``: where the tests run (default: threads of this process, ``LocalExecutor``;
    ``gradebox.cluster.RayExecutor`` for a Ray cluster's nodes). The results are written here
    the same way whichever it is; a remote executor's each name the node that ran it.
    """
    started, t0 = now(), time.monotonic()
    workers = options.workers or suite.spec.defaults.workers or default_workers()
    out = options.out_dir
    selected = selected_tests(suite, options.filter, references=options.references)
    prints = {t.id: suite.fingerprint(t) for t in selected}
    # The folder is checked and held before anything runs: one that names a file or cannot
    # be written is one line (exit 2), and a second run given it is refused, not interleaved.
    field = "--resume" if options.resume else "--out"
    with ExitStack() as held:
        held.callback(os.close, lock_folder(writable_folder(out, field=field), field=field))
        results_path = out / "results.jsonl"
        reusable = _reusable(results_path, prints, options)
        todo = [t for t in selected if t.id not in reusable]
        run_id = executor.run_id if executor is not None else options.run_id or secrets.token_hex(6)
        plan = {
            "suite": suite.name,
            "file": str(suite.path),
            "run_id": run_id,
            "started_at": started,
            "tests": [t.id for t in selected],
        }
        write_atomic(out / PLAN, plan_json(plan), what="results folder")
        on_start(len(selected), len(selected) - len(todo))
        writer = JsonlWriter(results_path)
        own = executor is None
        if executor is None:
            executor = LocalExecutor(
                Worker(
                    box,
                    images,
                    run_id,
                    suite=suite,
                    threads=workers,
                    max_ahead=options.max_ahead,
                    use_cache=options.use_cache,
                    model_calls=options.model_calls,
                    references=options.references,
                )
            )
        # Only (status, score) per test stays in memory: a 100,000-test run costs what a
        # 100-test one does; the results themselves are on disk.
        wanted = {t.id for t in selected}
        finished = {k: (v.status, v.score) for k, v in reusable.items() if k in wanted}
        reused = len(finished)
        del reusable
        interrupted = False
        full: StorageError | None = None  # the results or scratch folder could not take more
        warnings: list[str] = []
        nodes: Counter[str] = Counter()
        remote_usage: Usage | None = None  # a cluster's calls: each in its test's result
        by_id = {t.id: t for t in todo}
        try:
            for done in executor.map([TestJob(t.id) for t in todo], workers):
                result = done.value
                if result is None:  # no result, no pass: an error that says why
                    result = not_run(by_id[str(done.job)], suite.root, done.error or "not run")
                if done.node is not None or done.attempts is not None:
                    result.node, result.attempts = done.node, done.attempts
                result.fingerprint = prints[result.id]
                result.suite, result.file = suite.name, str(suite.path)  # a run of several files
                _append_or_error(writer, result)
                finished[result.id] = (result.status, result.score)
                if result.node:
                    nodes[result.node] += 1
                if executor.remote and result.usage is not None:
                    remote_usage = remote_usage or Usage()
                    remote_usage.merge(result.usage)
                on_result(result)
        except KeyboardInterrupt:
            interrupted = True
            box.close()  # (the map has closed it too) in-flight runs end; nothing new starts
            raise
        except StorageError as exc:
            # A machine fault, not a test's: the run ends (the map closed the sandbox: in-flight
            # tests are not recorded), what is on disk stays, and --resume continues it.
            interrupted, full = True, exc
            box.close()
            raise StorageError(
                f"{exc}; the run stopped, {len(finished)} finished result(s) are kept in "
                f"{results_path}: make room, then continue with --resume {out}"
            ) from None
        finally:
            try:
                if not interrupted:
                    warnings = after_all(suite, box, images, run_id)
            finally:
                if own:
                    executor.close()
                writer.close()
            summary = summarise(
                suite,
                run_id,
                finished,
                len(selected),
                workers,
                interrupted,
                started,
                time.monotonic() - t0,
                tests=selected,
            )
            summary.reused = reused
            summary.min_mean_score = suite.spec.min_mean_score
            summary.warnings = warnings
            summary.usage = executor.usage()
            if executor.remote:  # the models were called on the nodes: each test's in its result
                summary.usage, summary.nodes = remote_usage, dict(nodes)
            if full is not None:
                summary.warnings.append(f"stopped: {full}")
            try:
                # Whole or not at all: a full folder keeps the previous summary as it was.
                write_atomic(
                    out / "summary.json",
                    summary.model_dump_json(indent=2) + "\n",
                    what="results folder",
                )
            except StorageError:
                if full is None and not interrupted:
                    raise
                log.warning("summary.json not written: the results folder is full")
        return summary


def _reusable(
    results_path: Path, prints: dict[str, str], options: RunOptions
) -> dict[str, TestResult]:
    """The results of a run to resume whose test and everything that grades it are unchanged
    (``prints``); the file is left holding exactly what stands."""
    previous = read_results(results_path) if options.resume else {}
    if not options.resume:
        # Whatever is under the name goes, a dangling link too (``exists`` follows it and
        # would leave it there for the append to follow).
        results_path.unlink(missing_ok=True)
    reusable = {
        k: r
        for k, r in previous.items()
        if k in prints
        and r.fingerprint == prints[k]
        and not (options.retry_errors and r.status is Status.error)
    }
    if any(k in prints and k not in reusable for k in previous):
        # Results of other tests stay, and the reused ones. (Not rewritten when nothing is
        # dropped: a resume after a full disk needs no second copy.)
        rewrite_jsonl(
            results_path, [r for k, r in previous.items() if k not in prints or k in reusable]
        )
    return reusable


def selected_tests(
    suite: Suite, filter: str | list[str] | None, *, references: bool = False
) -> list[Test]:
    """The tests a run of ``suite`` runs: those matching any of the globs (all without one),
    and with ``references`` only those that have a reference answer."""
    patterns = [filter] if isinstance(filter, str) else filter
    return [
        t
        for t in suite.tests
        if (not patterns or any(fnmatch.fnmatchcase(t.id, p) for p in patterns))
        and (not references or t.has_reference())
    ]


def plan_json(plan: dict[str, object]) -> str:
    """A plan file's text: one JSON object, marked as a plan."""
    return json.dumps({"gradebox_plan": 1, **plan}, ensure_ascii=False) + "\n"


def _append_or_error(writer: JsonlWriter, result: TestResult) -> None:
    """Write a result; one that cannot be written (whatever a grader put in it) is written as
    an error of that test instead, and the run goes on."""
    try:
        writer.append(result)
    except (ValueError, TypeError, RecursionError) as exc:
        log.warning("test %s: result could not be written: %s", result.id, exc)
        result.graders, result.transcript, result.details_dropped = [], None, True
        if result.trials:  # each run's answer and graders too: they may hold what failed
            result.trials = [
                TrialRecord(sample=t.sample, status=t.status, score=t.score, error=t.error)
                for t in result.trials
            ]
        result.status, result.passed, result.score = Status.error, False, 0.0
        result.error = (
            f"its result could not be written ({type(exc).__name__}); graders and transcript "
            "dropped"
        )
        writer.append(result)


def summarise(
    suite: Suite,
    run_id: str,
    finished: dict[str, tuple[Status, float]],
    total: int,
    workers: int,
    interrupted: bool,
    started: str,
    seconds: float,
    tests: list[Test] | None = None,
) -> RunSummary:
    return RunSummary(
        **_totals(total, list(finished.values())),
        suite=suite.name,
        run_id=run_id,
        duration_s=round(seconds, 3),
        workers=workers,
        interrupted=interrupted,
        started_at=started,
        finished_at=now(),
        gradebox_version=__version__,
        targets=per_target(suite.tests if tests is None else tests, finished),
    )


def per_target(
    tests: list[Test], finished: dict[str, tuple[Status, float]]
) -> dict[str, TargetTotals] | None:
    """A target matrix's totals, one entry per target (None without a matrix): each of its
    tests ran once per target, so each target's share is a run of the same tests."""
    names: dict[str, list[str]] = {}
    for test in tests:
        if test.target_name is not None:
            names.setdefault(test.target_name, []).append(test.id)
    if not names:
        return None
    return {
        name: TargetTotals(**_totals(len(ids), [finished[i] for i in ids if i in finished]))
        for name, ids in names.items()
    }


def _totals(total: int, got: list[tuple[Status, float]]) -> dict[str, Any]:
    """The counts and rates ``RunSummary`` and ``TargetTotals`` share, of ``total`` tests of
    which ``got`` finished."""
    n = Counter(status for status, _ in got)
    done = len(got)
    return {
        "total": total,
        "passed": n[Status.passed],
        "failed": n[Status.failed],
        "errored": n[Status.error],
        "not_run": total - done,
        "pass_rate": n[Status.passed] / done if done else 0.0,
        "mean_score": sum(score for _, score in got) / done if done else 0.0,
    }
