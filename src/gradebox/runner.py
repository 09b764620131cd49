"""Run a suite: for each test a fresh workspace, a baseline, the target, the diff, the graders.

Tests run in parallel (``workers``), the graders of one test concurrently. Each finished test is
appended to ``results.jsonl`` at once (flushed and fsynced), so an interrupted run loses only
the tests that were in flight, and ``resume`` runs just what is missing.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import queue
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from .errors import GradeboxError, SandboxClosed
from .graders.builtin import BuiltinAssertion
from .graders.run import (
    PreparedGrader,
    new_scratch,
    prepare_grader,
    run_grader,
    run_in_workspace,
)
from .graders.verdict import judge, tail_text
from .images import DEFAULT_IMAGE, ImageResolver
from .jsonl import JsonlWriter, read_jsonl, rewrite_jsonl
from .protocol import (
    GraderResult,
    Payload,
    RunSummary,
    Status,
    StepRecord,
    TestResult,
)
from .sandbox.base import Limits, RunOutcome, Sandbox
from .sandbox.hardening import run_as
from .sandbox.labels import LABEL_RUN
from .suite import GraderAssertion, Suite, Test, WorkspaceConfig
from .workspace import DEFAULT_DIFF_CAP, Baseline, Quota, Workspace, overlay_mode, safe_copy

__all__ = [
    "RunOptions",
    "default_workers",
    "read_results",
    "run_suite",
]

log = logging.getLogger("gradebox.runner")

HOOK_TIMEOUT = 300.0  # before_each / after_each


def default_workers() -> int:
    """$GRADEBOX_WORKERS (what `make bench` measured best on this machine), else 2 per core:
    a grader container spends much of its life waiting on the engine."""
    env = os.environ.get("GRADEBOX_WORKERS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return max(2, 2 * (os.cpu_count() or 1))


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass
class RunOptions:
    out_dir: Path
    workers: int | None = None
    filter: str | None = None
    resume: bool = False
    retry_errors: bool = False  # with resume: errored tests run again
    max_ahead: int | None = None  # containers started ahead of their input; default 2/worker


def read_results(path: Path) -> dict[str, TestResult]:
    """Finished tests of an earlier run, by id (a later line for the same id wins)."""
    return {r.id: r for r in read_jsonl(path, TestResult)}


def _input_text(payload: Payload) -> bytes:
    """What a target reads on stdin: the user's text, or the message list as JSON."""
    if len(payload.input) == 1 and isinstance(payload.input[0].content, str):
        return payload.input[0].content.encode()
    return json.dumps([m.model_dump(mode="json") for m in payload.input]).encode()


def _step(
    what: str, outcome: RunOutcome, timeout: float, limits: Limits
) -> tuple[StepRecord, str | None]:
    """A target or hook run: its record, and why it failed (None when it exited 0)."""
    record = StepRecord(
        exit_code=outcome.exit_code,
        duration_ms=outcome.duration_ms,
        timed_out=outcome.timed_out,
        stderr_tail=tail_text(outcome.stderr),
    )
    if outcome.exit_code == 0 and not outcome.timed_out and not outcome.oom_killed:
        return record, None
    # Timeouts, OOM, signals and failed starts read the same as for a grader.
    verdict = judge("program", what, outcome, timeout=timeout, limits=limits)
    if verdict.status is Status.error:
        return record, f"{what}: {verdict.evidence}"
    tail = (record.stderr_tail or "").splitlines()
    return record, f"{what} exited with code {outcome.exit_code}" + (
        f": {tail[-1]}" if tail else ""
    )


def aggregate(results: list[GraderResult], weights: list[float]) -> tuple[Status, float]:
    """Weighted mean score; passed when every assertion passed; error when any errored."""
    total = sum(weights)
    score = (
        sum(r.score * w for r, w in zip(results, weights, strict=True)) / total
        if total
        else (1.0 if all(r.passed for r in results) else 0.0)
    )
    if any(r.status is Status.error for r in results):
        return Status.error, score
    return (Status.passed if all(r.passed for r in results) else Status.failed), score


class _SuiteRun:
    def __init__(
        self,
        suite: Suite,
        box: Sandbox,
        images: ImageResolver,
        run_id: str,
        workers: int,
        max_ahead: int | None = None,
    ) -> None:
        self.suite = suite
        self.box = box
        self.images = images
        self.run_id = run_id
        self.labels = {LABEL_RUN: run_id}
        self.grader_pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="grader")
        # How many containers may wait, started, for their input at once.
        self.ahead = threading.BoundedSemaphore(max_ahead or 2 * workers)
        spec = suite.spec
        self.target = spec.target
        self.default_image = spec.defaults.image or DEFAULT_IMAGE
        # Templates staged once per run (owned by the sandbox user), each test's workspace an
        # overlay over its stage: no copy per test where the kernel allows overlays.
        self.scratch = new_scratch()
        self._staged: dict[Path, Path] = {}
        self._stage_lock = threading.Lock()

    def lower_for(self, template: Path | None) -> Path | None:
        if template is None or os.geteuid() != 0 or overlay_mode() == "copy":
            return None
        with self._stage_lock:
            if template not in self._staged:
                stage = self.scratch / f"template-{len(self._staged)}"
                safe_copy(template, stage, run_as_ids())
                self._staged[template] = stage
            return self._staged[template]

    def image_for(self, ref: object, source: Path | None) -> str:
        return self.images.resolve(ref or self.default_image, source)  # type: ignore[arg-type]

    def run_test(self, test: Test) -> TestResult:
        started, t0 = _now(), time.monotonic()
        timings: dict[str, int] = {}
        scratch = new_scratch()
        case = test.case
        payload = Payload(
            input=case.input,
            expected_output=case.expected_output,
            output=case.output,
            criteria=case.criteria,
            hint=case.hint,
            metadata=test.metadata,
        )
        result = TestResult(
            id=test.id,
            status=Status.error,
            passed=False,
            score=0.0,
            input=payload.input,
            expected_output=payload.expected_output,
            output=case.output,
            metadata=test.metadata,
            started_at=started,
        )
        try:
            self._run(test, payload, scratch, result, timings)
        except SandboxClosed:
            raise  # interrupted: this test is not finished and must not be recorded
        except GradeboxError as exc:
            result.status, result.error = Status.error, str(exc)
        except Exception as exc:  # a bug must cost one test, not the run
            log.exception("test %s", test.id)
            result.status, result.error = (
                Status.error,
                f"internal error: {type(exc).__name__}: {exc}",
            )
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        timings["total"] = int((time.monotonic() - t0) * 1000)
        result.timings_ms = timings
        result.finished_at = _now()
        return result

    def _hook(
        self, name: str, command: list[str] | str, ws: Path, labels: dict[str, str]
    ) -> str | None:
        outcome = run_in_workspace(
            command,
            ws,
            self.box,
            image_id=self.image_for(None, None),
            name=name,
            timeout=HOOK_TIMEOUT,
            labels=labels,
            source_dir=self.suite.root,
        )
        return _step(name, outcome, HOOK_TIMEOUT, Limits())[1]

    def _run(
        self,
        test: Test,
        payload: Payload,
        scratch: Path,
        result: TestResult,
        timings: dict[str, int],
    ) -> None:
        labels = {**self.labels, "gradebox.test": test.id[:60]}
        ws_cfg = test.workspace
        t = time.monotonic()
        template = self.suite.template_dir(ws_cfg)
        lower = self.lower_for(template)
        ws = Workspace.create(
            scratch / "workspace",
            None if lower else template,
            owner=run_as_ids(),
            quota=ws_cfg.quota() if ws_cfg else Quota(),
            lower=lower,
        )
        try:
            self._in_workspace(test, payload, ws, ws_cfg, scratch, result, timings, labels, t)
        finally:
            ws.close()

    def _in_workspace(
        self,
        test: Test,
        payload: Payload,
        workspace: Workspace,
        ws_cfg: WorkspaceConfig | None,
        scratch: Path,
        result: TestResult,
        timings: dict[str, int],
        labels: dict[str, str],
        t: float,
    ) -> None:
        ws = workspace.path
        has_ws = ws_cfg is not None or self.target is not None
        if ws_cfg and ws_cfg.before_each:
            failure = self._hook("before_each", ws_cfg.before_each, ws, labels)
            if failure:
                result.error = failure
                return
        baseline = (
            Baseline.take(
                ws,
                include_ignored=bool(ws_cfg and ws_cfg.include_ignored),
                store=scratch / "baseline",
            )
            if has_ws
            else None
        )
        timings["workspace"] = int((time.monotonic() - t) * 1000)
        # Start the graders' containers now, while the target works: at release they only
        # need their input. Whatever is not used (the target failed) is discarded.
        ready = self._prepare_ahead(test, ws, labels)
        try:
            self._finish(test, payload, workspace, ws_cfg, baseline, ready, labels, result, timings)
        finally:
            for fut in ready.values():
                fut.add_done_callback(self._discard_prepared)

    def _prepare_ahead(
        self, test: Test, ws: Path, labels: dict[str, str]
    ) -> dict[int, Future[PreparedGrader]]:
        ready: dict[int, Future[PreparedGrader]] = {}
        for idx, assertion in enumerate(test.assertions):
            if isinstance(assertion, GraderAssertion) and self.ahead.acquire(blocking=False):
                try:
                    ready[idx] = self.grader_pool.submit(self._prepare, assertion, ws, labels)
                except RuntimeError:  # the pool was shut down: the run is being interrupted
                    self.ahead.release()
                    raise SandboxClosed() from None
        return ready

    def _prepare(
        self, assertion: GraderAssertion, ws: Path, labels: dict[str, str]
    ) -> PreparedGrader:
        try:
            return prepare_grader(
                assertion.grader,
                ws,
                self.box,
                images=self.images,
                labels=labels,
                file=str(self.suite.path),
                warm=True,
            )
        except BaseException:
            self.ahead.release()
            raise

    def _discard_prepared(self, fut: Future[PreparedGrader]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        fut.result().discard()
        self.ahead.release()

    def _finish(
        self,
        test: Test,
        payload: Payload,
        workspace: Workspace,
        ws_cfg: WorkspaceConfig | None,
        baseline: Baseline | None,
        ready: dict[int, Future[PreparedGrader]],
        labels: dict[str, str],
        result: TestResult,
        timings: dict[str, int],
    ) -> None:
        ws = workspace.path
        if self.target is not None:
            t = time.monotonic()
            target = self.target
            image = self.image_for(target.image, self.suite.root)
            result.images["target"] = image
            outcome = run_in_workspace(
                target.command,
                ws,
                self.box,
                image_id=image,
                name=f"target-{test.id}",
                stdin=_input_text(payload),
                timeout=target.timeout,
                network=target.network,
                env={**target.env, "GRADEBOX_TEST_ID": test.id},
                limits=target.limits,
                labels=labels,
                source_dir=self.suite.root,
            )
            timings["target"] = int((time.monotonic() - t) * 1000)
            result.target, failure = _step("target", outcome, target.timeout, target.limits)
            answer = outcome.stdout.decode("utf-8", errors="replace")
            result.output = payload.output = answer
            payload.duration_ms = outcome.duration_ms
            over = workspace.exceeded()
            if over:
                result.error = f"target: {over}; its changes are not graded"
                return
            if failure:
                result.error = failure
                return

        if baseline is not None:
            cap = int(ws_cfg.max_diff) if ws_cfg else DEFAULT_DIFF_CAP
            payload.file_changes = baseline.diff(cap)
            result.file_changes_bytes = len(payload.file_changes.encode())

        t = time.monotonic()
        graded = self._grade(test, payload, ws, labels, ready)
        timings["graders"] = int((time.monotonic() - t) * 1000)
        result.graders = graded
        for g in graded:
            if g.image:
                result.images[g.image.ref] = g.image.id

        if ws_cfg and ws_cfg.after_each:
            failure = self._hook("after_each", ws_cfg.after_each, ws, labels)
            if failure:
                result.error = failure
        weights = [a.weight for a in test.assertions]
        status, score = aggregate(graded, weights) if graded else (Status.passed, 1.0)
        if result.error:
            status = Status.error
        result.status, result.score, result.passed = status, score, status is Status.passed

    def _grade(
        self,
        test: Test,
        payload: Payload,
        ws: Path,
        labels: dict[str, str],
        ready: dict[int, Future[PreparedGrader]],
    ) -> list[GraderResult]:
        slots: list[GraderResult | Future[GraderResult]] = []
        for idx, assertion in enumerate(test.assertions):
            if isinstance(assertion, BuiltinAssertion):
                slots.append(assertion.evaluate(payload.output))
                continue
            prepared = ready.pop(idx, None)
            if prepared is not None:
                # Waited for here, in the test's thread, never inside the pool: a pool task
                # waiting on a queued pool task could wait forever.
                slots.append(
                    self.grader_pool.submit(self._release, assertion, payload, prepared.result())
                )
            else:
                slots.append(self.grader_pool.submit(self._one, assertion, payload, ws, labels))
        return [s if isinstance(s, GraderResult) else s.result() for s in slots]

    @staticmethod
    def _body(assertion: GraderAssertion, payload: Payload) -> Payload:
        if assertion.config:
            return payload.model_copy(update={"config": assertion.config})
        return payload

    def _release(
        self, assertion: GraderAssertion, payload: Payload, prepared: PreparedGrader
    ) -> GraderResult:
        try:
            return prepared.run(self._body(assertion, payload))
        finally:
            self.ahead.release()

    def _one(
        self, assertion: GraderAssertion, payload: Payload, ws: Path, labels: dict[str, str]
    ) -> GraderResult:
        return run_grader(
            assertion.grader,
            self._body(assertion, payload),
            ws,
            self.box,
            images=self.images,
            labels=labels,
            file=str(self.suite.path),
        )

    def close(self) -> None:
        self.grader_pool.shutdown(wait=False, cancel_futures=True)
        shutil.rmtree(self.scratch, ignore_errors=True)


def run_as_ids() -> tuple[int, int]:
    from .sandbox.base import Security

    uid, _, gid = run_as(Security()).partition(":")
    return int(uid), int(gid or uid)


def run_suite(
    suite: Suite,
    box: Sandbox,
    images: ImageResolver,
    options: RunOptions,
    on_result: Callable[[TestResult], None] = lambda r: None,
    on_start: Callable[[int, int], None] = lambda total, done: None,
) -> RunSummary:
    """Run every selected test; append each result to ``out_dir/results.jsonl`` when done.

    Ctrl-C (KeyboardInterrupt) stops the run cleanly: containers are removed, finished tests
    stay in results.jsonl, and the summary records ``interrupted``; the exception propagates.
    """
    started, t0 = _now(), time.monotonic()
    workers = options.workers or suite.spec.defaults.workers or default_workers()
    out = options.out_dir
    results_path = out / "results.jsonl"
    selected = [
        t
        for t in suite.tests
        if options.filter is None or fnmatch.fnmatchcase(t.id, options.filter)
    ]
    prints = {t.id: suite.fingerprint(t) for t in selected}
    previous = read_results(results_path) if options.resume else {}
    if not options.resume and results_path.exists():
        results_path.unlink()
    # Reuse a result only when the test and everything that grades it are unchanged.
    reusable = {
        k: r
        for k, r in previous.items()
        if k in prints
        and r.fingerprint == prints[k]
        and not (options.retry_errors and r.status is Status.error)
    }
    if options.resume:
        # The file says exactly what stands: results of other tests, and the reused ones.
        rewrite_jsonl(
            results_path, [r for k, r in previous.items() if k not in prints or k in reusable]
        )
    todo = [t for t in selected if t.id not in reusable]
    run_id = secrets.token_hex(6)
    on_start(len(selected), len(selected) - len(todo))
    writer = JsonlWriter(results_path)
    state = _SuiteRun(suite, box, images, run_id, workers, options.max_ahead)
    # Only (status, score) per test stays in memory: a 100,000-test run costs what a
    # 100-test one does; the results themselves are on disk.
    wanted = {t.id for t in selected}
    finished: dict[str, tuple[Status, float]] = {
        k: (v.status, v.score) for k, v in reusable.items() if k in wanted
    }
    reused = len(finished)
    del previous, reusable
    interrupted = False
    pool = ThreadPoolExecutor(workers, thread_name_prefix="test")
    # Completed futures go through a queue and are dropped once written, so finished results
    # are not all held until the end (as_completed would hold every future it was given).
    done_q: queue.SimpleQueue[Future[TestResult]] = queue.SimpleQueue()
    try:
        for t in todo:
            pool.submit(state.run_test, t).add_done_callback(done_q.put)
        for _ in range(len(todo)):
            while True:  # short waits keep Ctrl-C prompt on every platform
                try:
                    fut = done_q.get(timeout=0.5)
                    break
                except queue.Empty:
                    continue
            result = fut.result()
            del fut
            result.fingerprint = prints[result.id]
            _append_or_error(writer, result)
            finished[result.id] = (result.status, result.score)
            on_result(result)
    except KeyboardInterrupt:
        interrupted = True
        box.close()  # ends in-flight runs at once; no container starts after this
        raise
    finally:
        pool.shutdown(wait=not interrupted, cancel_futures=True)
        state.close()
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
        )
        summary.reused = reused
        (out / "summary.json").write_text(summary.model_dump_json(indent=2) + "\n")
    return summary


def _append_or_error(writer: JsonlWriter, result: TestResult) -> None:
    """Write a result; one that cannot be written (whatever a grader put in it) is written as
    an error of that test instead, and the run goes on."""
    try:
        writer.append(result)
    except (ValueError, TypeError, RecursionError) as exc:
        log.warning("test %s: result could not be written: %s", result.id, exc)
        result.graders, result.details_dropped = [], True
        result.status, result.passed, result.score = Status.error, False, 0.0
        result.error = f"its result could not be written ({type(exc).__name__}); graders dropped"
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
) -> RunSummary:
    counts = {s: sum(1 for st, _ in finished.values() if st is s) for s in Status}
    done = len(finished)
    return RunSummary(
        suite=suite.name,
        run_id=run_id,
        total=total,
        passed=counts[Status.passed],
        failed=counts[Status.failed],
        errored=counts[Status.error],
        not_run=total - done,
        pass_rate=counts[Status.passed] / done if done else 0.0,
        mean_score=sum(sc for _, sc in finished.values()) / done if done else 0.0,
        duration_s=round(seconds, 3),
        workers=workers,
        interrupted=interrupted,
        started_at=started,
        finished_at=_now(),
    )
