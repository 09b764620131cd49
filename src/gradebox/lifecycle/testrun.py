"""One test's lifecycle: a fresh workspace, its hooks, the target (or the reference), the
diff, the graders, and the result they add up to.

``SuiteContext`` is what every test of one run shares wherever it runs (the sandbox, images, the
warm pool, the graders' threads, the model hub, the staged templates); ``TestRun`` is one test
inside it. The executors (``gradebox.lifecycle.executor``: threads here, Ray nodes there) call
``SuiteContext.run_test`` through ``gradebox.lifecycle.jobs.run_job`` and nothing else: how a test
runs is written once, here. This module knows nothing of where it runs, of results files or of
summaries (``gradebox.drivers.runner``)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..core.atomic import out_of_space
from ..core.fstree import copy_tree
from ..core.scratch import new_scratch, scratch_error, scratch_folder
from ..errors import GradeboxError, SandboxClosed, StorageError, WorkspaceError
from ..files.repos import checkout, is_remote, offline, resolve
from ..files.workspace import (
    DEFAULT_DIFF_CAP,
    Baseline,
    Quota,
    Workspace,
    copy_template,
    materialise_repo,
    overlay_mode,
    remove_tree,
)
from ..graders.assertion import (
    TEST_TRANSFORM,
    Assertion,
    AssertSet,
    GraderAssertion,
    HostAssertion,
    LlmGraderAssertion,
    aggregate,
    aggregated,
    fold,
    leaves,
)
from ..graders.run import CONTAINER_WORKSPACE, run_grader
from ..graders.transcript import summary_of, trace_of, transcript_of, vally_input
from ..images import DEFAULT_IMAGE
from ..llm.client import ModelHub
from ..protocol.models import (
    AggregatorInput,
    FileChangesNotes,
    GraderResult,
    Message,
    Payload,
    Status,
    TestResult,
    TraceSummary,
    Usage,
)
from ..sandbox.base import ImageSource, Limits, RunOutcome, Sandbox
from ..sandbox.hardening import run_as_ids
from ..sandbox.labels import LABEL_RUN
from ..suite import Suite, TargetConfig, Test, WorkspaceConfig
from .conversation import run_conversation
from .host_targets import HostAnswer, answer_on_host
from .llm_runtime import LlmRuntime
from .pool import Warm, WarmPool
from .repeat import best_of
from .steps import (
    HOOK_TIMEOUT,
    claims_of,
    hook_input,
    input_text,
    judge_step,
    read_batch_answers,
    run_cli_command,
    run_cli_target,
    run_healthcheck,
    run_in_workspace,
)

__all__ = [
    "SuiteContext",
    "TestRun",
    "after_all",
    "image_for",
    "not_run",
    "now",
    "run_hook",
    "usage_of",
]

log = logging.getLogger("gradebox.runner")


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def image_for(suite: Suite, images: ImageSource, ref: object, source: Path | None) -> str:
    """The image id of ``ref``; none named: the suite's default image."""
    ref = ref or suite.spec.defaults.image or DEFAULT_IMAGE
    return images.resolve(ref, source)  # type: ignore[arg-type]


def run_hook(
    suite: Suite,
    box: Sandbox,
    images: ImageSource,
    run_id: str,
    name: str,
    command: list[str] | str,
    folder: Path,
    labels: dict[str, str],
    test: Test | None = None,
) -> str | None:
    """Run one workspace hook in a container; why it failed, or None."""
    outcome = run_in_workspace(
        command,
        folder,
        box,
        image_id=image_for(suite, images, None, None),
        name=name,
        stdin=hook_input(CONTAINER_WORKSPACE, test, run_id),
        timeout=HOOK_TIMEOUT,
        labels=labels,
        source_dir=suite.root,
    )
    return judge_step(name, outcome, HOOK_TIMEOUT, Limits())[1]


def after_all(suite: Suite, box: Sandbox, images: ImageSource, run_id: str) -> list[str]:
    """Run each workspace's ``after_all`` once, in an empty folder, where the run was started
    (after every test, wherever they ran); a failure is a warning (teardown) recorded in the
    summary, never a change to a verdict."""
    warnings: list[str] = []
    seen: set[str] = set()
    scratch = None
    try:
        for test in suite.tests:
            cfg = test.workspace
            if cfg is None or not cfg.after_all or repr(cfg.after_all) in seen:
                continue
            seen.add(repr(cfg.after_all))
            scratch = scratch or new_scratch()
            folder = copy_template(None, scratch / f"after-all-{len(seen)}", run_as_ids())
            failure = run_hook(
                suite, box, images, run_id, "after_all", cfg.after_all, folder, {LABEL_RUN: run_id}
            )
            if failure:
                log.warning("%s", failure)
                warnings.append(failure)
    finally:
        if scratch is not None:
            remove_tree(scratch)
    return warnings


class SuiteContext:
    """What every test of one run shares: the sandbox, images, the warm pool, the graders'
    executor and the staged templates. Each test runs as a ``TestRun``."""

    def __init__(
        self,
        suite: Suite,
        box: Sandbox,
        images: ImageSource,
        run_id: str,
        workers: int,
        max_ahead: int | None = None,
        use_cache: bool = True,
        model_calls: int = 4,
        references: bool = False,
        scratch: Path | None = None,
    ) -> None:
        self.suite, self.box, self.images, self.run_id = suite, box, images, run_id
        self.references = references
        self.labels = {LABEL_RUN: run_id}
        self.grader_pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="grader")
        self.models = (
            ModelHub(suite.targets, use_cache=use_cache, max_in_flight=model_calls)
            if suite.targets is not None
            else None
        )
        # Containers started ahead wait on their own executor: never behind running graders.
        ahead = 2 * workers if max_ahead is None else max_ahead
        self.warm = WarmPool(box, images, ahead=ahead, models=self.models)
        self.target = suite.spec.target
        # Templates staged once per run (owned by the sandbox user), each test's workspace an
        # overlay over its stage: no copy per test where the kernel allows overlays.
        if scratch is not None:  # a cluster node's: removed with the run's folder there
            scratch.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.scratch = scratch or new_scratch()
        self.closed = False  # the run is over: what a test still meets is its knock-on
        self._staged: dict[object, Path] = {}
        self._stage_failed: dict[object, str] = {}
        self._stage_lock = threading.Lock()
        # Each target's healthcheck result ("" once passed), by target (a matrix has several)
        self._health: dict[int, str] = {}
        self._health_lock = threading.Lock()  # tests wait for the one healthcheck
        # A batching target's one call: its answers by test id, by target (``batch_answer``)
        self._batches: dict[int, tuple[RunOutcome, dict[str, Any] | str]] = {}
        self._batch_locks: dict[int, threading.Lock] = {}

    def _prepared(self, cfg: WorkspaceConfig | None) -> bool:
        return bool(cfg and (cfg.repos or cfg.before_all))

    def lower_for(self, cfg: WorkspaceConfig | None) -> tuple[Path | None, bool]:
        """The folder a test's workspace starts from when the run prepared one (staged once,
        owned by the sandbox user): ``(folder, True)`` to mount it as the overlay's lower
        layer, ``(folder, False)`` to copy it; ``(None, False)``: start from the template.

        Raises ``GradeboxError`` when ``before_all`` (or a repository) failed: every test of
        that workspace is then an error, for the same reason."""
        template = self.suite.template_dir(cfg)
        prepared = self._prepared(cfg)
        overlay = os.geteuid() == 0 and overlay_mode() != "copy"
        if not prepared and (template is None or not overlay):
            return None, False
        key = (template, repr(cfg.repos), repr(cfg.before_all)) if prepared and cfg else template
        with self._stage_lock:
            if key in self._stage_failed:
                raise GradeboxError(self._stage_failed[key])
            if key not in self._staged:
                stage = self.scratch / f"template-{len(self._staged) + len(self._stage_failed)}"
                try:
                    try:
                        self._stage(stage, template, cfg if prepared else None)
                    except OSError as exc:
                        remove_tree(stage)  # never half a template for the next test to meet
                        if out_of_space(exc):
                            raise scratch_error(exc) from None  # the run ends
                        raise WorkspaceError(f"staging {template}: {exc}") from None
                except GradeboxError as exc:
                    if not isinstance(exc, StorageError):
                        self._stage_failed[key] = str(exc)
                    raise
                self._staged[key] = stage
            return self._staged[key], overlay

    def _stage(self, stage: Path, template: Path | None, cfg: WorkspaceConfig | None) -> None:
        copy_template(template, stage, run_as_ids())
        if cfg is None:
            return
        for repo in cfg.repos:
            if is_remote(repo.source):
                # Fetched (and resolved) before the run by preflight; a node of a cluster, or
                # a library caller, resolves it here, once per process.
                fetched = resolve(
                    repo.source, repo._commit or repo.ref, offline_run=repo._offline or offline()
                )
                repo._commit = fetched.commit
                checkout(fetched, stage, repo.path, run_as_ids())
                continue
            materialise_repo(self.suite.root, repo.source, stage, repo.path, repo.ref, run_as_ids())
        if cfg.before_all:
            failure = run_hook(
                self.suite,
                self.box,
                self.images,
                self.run_id,
                "before_all",
                cfg.before_all,
                stage,
                self.labels,
            )
            if failure:
                raise GradeboxError(failure)

    def image_for(self, ref: object, source: Path | None) -> str:
        return image_for(self.suite, self.images, ref, source)

    def run_test(self, test: Test) -> TestResult:
        if test.case.repeat > 1:
            runs = [TestRun(self, test, sample=i).run() for i in range(test.case.repeat)]
            return best_of(runs, test.case.repeat_strategy)
        return TestRun(self, test).run()

    def healthcheck(self, target: TargetConfig | None = None) -> str | None:
        """A target's healthcheck (the suite's by default), run once (the first test that
        needs it runs it); why it failed, or None."""
        target = target or self.target
        if target is None or target.healthcheck is None:
            return None
        with self._health_lock:
            if id(target) not in self._health:
                self._health[id(target)] = (
                    run_healthcheck(
                        target.healthcheck,
                        target,
                        self.box,
                        image_id=self.image_for(target.image, self.suite.root),
                        labels=self.labels,
                        source_dir=self.suite.root,
                    )
                    or ""
                )
            return self._health[id(target)] or None

    def batch_answer(
        self, target: TargetConfig, test: Test, image: str, env: dict[str, str]
    ) -> tuple[RunOutcome, dict[str, Any] | str]:
        """A batching cli target's answer to ``test`` (AgentV v4's ``provider_batching``):
        the first test that needs it makes the one call for every test of this run with that
        target; the others wait for it. Its outcome is each test's; a test the batch does not
        answer is an error. The call runs in an empty workspace of its own, as each test's
        starts (``batches``: a test with a template runs on its own): what it writes is no
        one test's, so no test's diff, nor its graders, shows the whole batch's files
        (AgentV's batch has no workspace)."""
        with self._health_lock:
            lock = self._batch_locks.setdefault(id(target), threading.Lock())
        with lock:
            if id(target) not in self._batches:
                batched = [t for t in self.suite.tests if self.batches(t, target)]
                files = [f for t in batched for f in t.case.input_files]
                ids = [t.target_id for t in batched]
                with scratch_folder("batch") as scratch:
                    workspace = Workspace.create(scratch / "workspace", owner=run_as_ids())
                    try:
                        self._batches[id(target)] = run_cli_command(
                            target,
                            "",  # AgentV's batch request: no question; it reads its tests
                            workspace.path,
                            self.box,
                            test_id="batch",
                            input_files=files,
                            image_id=image,
                            env={**env, "GRADEBOX_TEST_ID": "batch"},
                            labels=self.labels,
                            source_dir=self.suite.root,
                            name="target-batch",
                            network=target.network,
                            read=lambda path: read_batch_answers(path, ids),
                        )
                    finally:
                        workspace.close()
            outcome, answers = self._batches[id(target)]
        if isinstance(answers, str):
            return outcome, answers
        return outcome, answers.get(test.target_id, "target: the batch did not include it")

    def batches(self, test: Test, target: TargetConfig | None = None) -> bool:
        """Is ``test`` answered by its target's one batch call? A repeated test is asked on
        its own, as AgentV does when trials > 1; so is a test with a workspace, as AgentV
        turns batching off for workspace evals: the agent then works in the test's own
        workspace, and the test's diff is what it did there."""
        own = test.target or self.target
        return (
            own is not None
            and own._batch
            and (target is None or own is target)
            and own.provider == "cli"
            and test.case.repeat == 1
            and test.workspace is None
        )

    def close(self) -> None:
        self.closed = True
        self.warm.close()
        self.grader_pool.shutdown(wait=False, cancel_futures=True)
        remove_tree(self.scratch)


class TestRun:
    """One test: workspace and baseline, containers started ahead, target, diff, graders,
    hooks, and the result they add up to."""

    def __init__(self, run: SuiteContext, test: Test, sample: int = 0) -> None:
        self.run_, self.test, self.sample = run, test, sample
        self.labels = {**run.labels, "gradebox.test": test.id[:60]}
        self.ws_cfg = test.workspace
        self.timings: dict[str, int] = {}
        self.payload = _payload_of(test, run.suite.root)
        self.result = _unfinished(test, self.payload)
        self.warm: dict[int, Warm] = {}
        self.target_usage = Usage()  # a model target's calls

    def run(self) -> TestResult:
        t0 = time.monotonic()
        try:
            scratch = new_scratch()
        except OSError as exc:
            raise scratch_error(exc) from None
        result = self.result
        try:
            self._in_scratch(scratch)
        except (SandboxClosed, StorageError):
            # interrupted, or the machine's disk is full: this test is not finished and must
            # not be recorded; the run ends
            raise
        except GradeboxError as exc:
            result.status, result.error = Status.error, str(exc)
        except Exception as exc:  # a bug must cost one test, not the run
            if out_of_space(exc):
                raise scratch_error(exc) from None  # the cause, not its knock-on errors
            if self.run_.closed:  # the run ended under it (its staged folders are gone)
                raise SandboxClosed() from None
            log.exception("test %s", self.test.id)
            result.status = Status.error
            result.error = f"internal error: {type(exc).__name__}: {exc}"
        finally:
            for warm in self.warm.values():
                warm.discard()  # started ahead and not used (the target failed)
            remove_tree(scratch)
        self.timings["total"] = int((time.monotonic() - t0) * 1000)
        result.timings_ms = self.timings
        result.finished_at = now()
        return result

    def _in_scratch(self, scratch: Path) -> None:
        run, cfg = self.run_, self.ws_cfg
        t = time.monotonic()
        template = run.suite.template_dir(cfg)
        start, overlay = run.lower_for(cfg)
        fetched = {
            r.path: f"{r.source}@{r._commit}" for r in (cfg.repos if cfg else ()) if r._commit
        }
        if fetched:
            self.result.repos = fetched  # the commits this workspace holds
        if start is not None and not overlay:
            template = start  # the prepared folder, copied
        workspace = Workspace.create(
            scratch / "workspace",
            None if overlay else template,
            owner=run_as_ids(),
            quota=cfg.quota() if cfg else Quota(),
            lower=start if overlay else None,
        )
        try:
            if cfg and cfg.before_each:
                failure = self._hook("before_each", cfg.before_each, workspace.path)
                if failure:
                    self.result.error = failure
                    return
            baseline = None
            if cfg is not None or (self.test.target or run.target) is not None:
                baseline = Baseline.take(
                    workspace.path,
                    include_ignored=bool(cfg and cfg.include_ignored),
                    store=scratch / "baseline",
                )
            self.timings["workspace"] = int((time.monotonic() - t) * 1000)
            # Start the graders' containers now, while the target works: at release they only
            # need their input. Whatever is not used (the target failed) is discarded. (A
            # conversation grades each part when its turn comes: nothing to start ahead.)
            ahead = self.test.assertions if self.test.case.conversation is None else []
            for idx, assertion in enumerate(leaves(ahead)):
                if isinstance(assertion, GraderAssertion):
                    self.warm[idx] = run.warm.start(
                        assertion.grader,
                        workspace.path,
                        labels=self.labels,
                        file=str(run.suite.path),
                    )
            if self.test.case.conversation is not None:
                run_conversation(self, workspace.path)
            elif self._target(workspace):
                self._grade_and_finish(workspace, baseline)
        finally:
            workspace.close()

    def _hook(self, name: str, command: list[str] | str, ws: Path) -> str | None:
        run = self.run_
        return run_hook(
            run.suite, run.box, run.images, run.run_id, name, command, ws, self.labels, self.test
        )

    def _target(self, workspace: Workspace) -> bool:
        """Run the agent, if the suite has one; False when the test ends here (an error)."""
        run, payload, result = self.run_, self.payload, self.result
        target = self.test.target or run.target  # a matrix's test has its own
        if run.references:
            return self._reference(workspace)
        if target is None:
            return True
        t = time.monotonic()
        if target.on_host:
            answer = answer_on_host(
                target, payload, self.test, run.suite, run.models, sample=self.sample
            )
            return self.take_answer(answer, t)
        failure = run.healthcheck(target)
        if failure:
            result.error = failure
            return False
        image = run.image_for(target.image, run.suite.root)
        result.images["target"] = image
        env = {**target.env, "GRADEBOX_TEST_ID": self.test.id}
        if run.batches(self.test):
            outcome, answer = run.batch_answer(target, self.test, image, env)
        elif target.provider == "cli":
            outcome, answer = run_cli_target(
                target,
                payload,
                self.test,
                workspace.path,
                run.box,
                image_id=image,
                env=env,
                labels=self.labels,
                source_dir=run.suite.root,
                attempt=self.sample,
            )
        else:
            outcome = run_in_workspace(
                target.command,
                workspace.path,
                run.box,
                image_id=image,
                name=f"target-{self.test.id}",
                stdin=input_text(payload),
                timeout=target.timeout,
                network=target.network,
                env=env,
                limits=target.limits,
                labels=self.labels,
                source_dir=run.suite.root,
            )
            answer = None
        self.timings["target"] = int((time.monotonic() - t) * 1000)
        result.target, failure = judge_step("target", outcome, target.timeout, target.limits)
        payload.duration_ms = outcome.duration_ms
        if answer is not None:
            if isinstance(answer, str) and not failure:
                failure = answer  # the cli target wrote no readable answer
                answer = None
            elif not isinstance(answer, str):
                result.target.claimed, result.target.warnings = claims_of(answer, outcome)
                for key, value in answer.items():
                    if key != "duration_ms":  # a claim never replaces what was measured
                        setattr(payload, key, value)
        else:
            payload.output = outcome.stdout.decode("utf-8", errors="replace")
        result.output = payload.output
        over = workspace.exceeded()
        if over:
            result.error = f"target: {over}; its changes are not graded"
            return False
        if failure:
            result.error = failure
            return False
        return True

    def take_answer(self, answer: HostAnswer | str, started: float) -> bool:
        """An answer from the host (a model, mock or replay target) into the payload; False
        when there is none (the test is an error, with why)."""
        self.timings["target"] = self.timings.get("target", 0) + int(
            (time.monotonic() - started) * 1000
        )
        if isinstance(answer, str):
            self.result.error = answer
            return False
        for key, value in answer.fields.items():
            setattr(self.payload, key, value)
        self.result.output = self.payload.output
        self.target_usage.merge(answer.usage)
        return True

    def _reference(self, workspace: Workspace) -> bool:
        """validate-refs: the test's reference stands in for the agent (its files laid over
        the workspace, its patch applied, its expected answer as the answer)."""
        case, root = self.test.case, self.run_.suite.root
        if case.reference_workspace:
            # The suite author's files, laid over the template's (same names replaced).
            source = (root / case.reference_workspace).resolve()
            try:
                copy_tree(source, workspace.path, run_as_ids(), merge=True)
            except OSError as exc:
                raise WorkspaceError(f"reference workspace {source}: {exc}") from None
        if case.reference_patch:
            patch = (root / case.reference_patch).resolve()
            proc = subprocess.run(
                ["git", "apply", "--whitespace=nowarn", str(patch)],
                cwd=workspace.path,
                capture_output=True,
                text=True,
                check=False,
                timeout=120,
            )
            if proc.returncode != 0:
                tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
                self.result.error = f"reference patch {case.reference_patch}: {tail}"
                return False
        texts = [m.content for m in self.payload.expected_output if isinstance(m.content, str)]
        self.payload.output = self.result.output = "\n".join(texts)
        return True

    def _grade_and_finish(self, workspace: Workspace, baseline: Baseline | None) -> None:
        result, payload, cfg = self.result, self.payload, self.ws_cfg
        if baseline is not None:
            cap = int(cfg.max_diff) if cfg else DEFAULT_DIFF_CAP
            changes = baseline.changes(cap)
            payload.file_changes = changes.text
            result.file_changes_bytes = len(changes.text.encode())
            result.file_changes = changes.text  # the report shows it, with what it cut
            result.file_changes_notes = FileChangesNotes.model_validate(
                changes, from_attributes=True
            )
        t = time.monotonic()
        self._complete_payload()
        graded = self.grade_with(self.payload, self.test.assertions, workspace.path, warm=True)
        self.timings["graders"] = int((time.monotonic() - t) * 1000)
        result.graders = graded
        for g in graded:
            if g.image:
                result.images[g.image.ref] = g.image.id
        if cfg and cfg.after_each:
            failure = self._hook("after_each", cfg.after_each, workspace.path)
            if failure:
                result.error = failure
        status, score, gates = aggregate(
            graded, self.test.threshold, agentv=self.test.semantics == "agentv"
        )
        self.finish(status, score, gates)

    def finish(self, status: Status, score: float, gates: list[str]) -> None:
        """The verdict into the result, with the model calls of its graders and target, and
        the transcript its trace checks read (the report draws it)."""
        result = self.result
        result.transcript = transcript_of(self.payload.messages, result.output)
        if result.error:
            status = Status.error
        result.status, result.score, result.passed = status, score, status is Status.passed
        result.gates_failed = gates
        result.usage = usage_of(result.graders, self.target_usage)

    def _complete_payload(self) -> None:
        """What graders read besides the answer: the transcript (the answer as one assistant
        message when the target reported none), its trace summary, and Vally's shape."""
        payload = self.payload
        if not payload.messages and payload.output is not None:
            payload.messages = [Message(role="assistant", content=payload.output)]
        events = (payload.trace or {}).get("events") if isinstance(payload.trace, dict) else None
        trace = trace_of(payload.messages, events if isinstance(events, list) else None)
        if payload.trace_summary is None:
            payload.trace_summary = TraceSummary.model_validate(summary_of(trace))
        vally = vally_input(payload, trace, CONTAINER_WORKSPACE)
        payload.trajectory, payload.stimulus = vally["trajectory"], vally["stimulus"]

    def grade_with(
        self, payload: Payload, assertions: list[Assertion], ws: Path, *, warm: bool = False
    ) -> list[GraderResult]:
        """Results of ``assertions`` over ``payload`` (host checks here, graders in
        containers, LLM graders through the hub); ``warm``: use the containers started ahead
        for the test's own assertions."""
        run = self.run_
        slots: list[GraderResult | Future[GraderResult] | None] = []
        flat = list(leaves(assertions))
        runtime = LlmRuntime(run.models, run.box, run.image_for, run.suite.root, self.labels, ws)
        if self.test.semantics == "agentv":  # AgentV's options.transform: what graders see
            runtime.test_transform = self.test.metadata.get(TEST_TRANSFORM)
        later = {id(s.program) for s in aggregated(assertions)}
        for idx, assertion in enumerate(flat):
            if id(assertion) in later:  # an aggregator: it runs on its children's results
                slots.append(None)
                continue
            seen = runtime.payload_for(assertion, payload)
            if isinstance(seen, GraderResult):  # its transform failed
                slots.append(seen)
                continue
            if isinstance(assertion, HostAssertion):
                slots.append(assertion.evaluate(seen))
                continue
            if isinstance(assertion, LlmGraderAssertion):
                try:
                    slots.append(
                        run.grader_pool.submit(
                            assertion.llm.grade, seen, runtime, assertion.display_name()
                        )
                    )
                except RuntimeError:
                    raise SandboxClosed() from None
                continue
            body = seen
            if assertion.config:
                body = body.model_copy(update={"config": assertion.config})
            started = self.warm.pop(idx, None) if warm else None
            try:
                slots.append(run.grader_pool.submit(self._run, assertion.grader, body, ws, started))
            except RuntimeError:  # the executor was shut down: the run is being interrupted
                if started is not None:
                    started.discard()
                raise SandboxClosed() from None
        done = {
            id(a): s if isinstance(s, GraderResult) else s.result()
            for a, s in zip(flat, slots, strict=True)
            if s is not None
        }
        index = {id(a): i for i, a in enumerate(flat)}
        for group in aggregated(assertions):  # innermost first
            assert group.program is not None
            started = self.warm.pop(index[id(group.program)], None) if warm else None
            done[id(group.program)] = self._aggregate(group, done, payload, ws, runtime, started)
        return [fold(a, done) for a in assertions]

    def _aggregate(
        self,
        group: AssertSet,
        done: dict[int, GraderResult],
        payload: Payload,
        ws: Path,
        runtime: LlmRuntime,
        started: Any,
    ) -> GraderResult:
        """A composite's aggregator over its children's results (AgentV v4's
        ``CompositeGrader.aggregate``): a program in the sandbox reads them on stdin, an LLM
        grader in its prompt. A child with no verdict leaves the set with none: not run."""
        program = group.program
        children = [fold(c, done) for c in group.children]
        if any(r.status is Status.error for r in children):
            if started is not None:
                started.discard()
            why = "a child assertion gave no verdict"
            return GraderResult.errored(group.display_name(), "assert-set", why)
        results = {r.name: _v4_score(r) for r in children}
        if isinstance(program, LlmGraderAssertion):
            # The members' evidence quotes the answer: it reaches the judge fenced as the
            # answer does, never as prompt text of ours (nor as placeholders to fill).
            text = json.dumps(results, indent=2, ensure_ascii=False)
            prompt = (program.llm.prompt or "").replace(
                "{{EVALUATOR_RESULTS_JSON}}", "{{evaluator_results_json}}"
            )
            llm = dataclasses.replace(
                program.llm, prompt=prompt, agent_data={"evaluator_results_json": text}
            )
            return llm.grade(payload, runtime, program.display_name())
        assert isinstance(program, GraderAssertion)
        return self._run(program.grader, AggregatorInput(results=results), ws, started)

    def _run(self, grader: Any, body: Any, ws: Path, started: Any) -> GraderResult:
        """One grader of this test: in its container started ahead (the warm pool's), else in
        one started now."""
        if started is not None:
            return started.run(body)  # type: ignore[no-any-return]
        run = self.run_
        return run_grader(
            grader,
            body,
            ws,
            run.box,
            images=run.images,
            labels=self.labels,
            file=str(run.suite.path),
            models=run.models,
        )


def _v4_score(result: GraderResult) -> dict[str, Any]:
    """A result as AgentV v4's ``EvaluationScore`` (what its aggregators read)."""
    checks = [
        {"text": c.text, "passed": c.passed, **({"evidence": c.evidence} if c.evidence else {})}
        for c in result.checks
    ]
    if not checks and result.evidence:
        checks = [{"text": result.evidence, "passed": result.passed}]
    return {
        "score": result.score,
        "verdict": "pass" if result.passed else "fail",
        "assertions": checks,
        "expectedAspectCount": len(checks) or 1,
    }


def _payload_of(test: Test, root: Path) -> Payload:
    """What a test's graders read before the target has answered."""
    case = test.case
    return Payload(
        input=case.input,
        expected_output=case.expected_output,
        output=case.output,
        # The reference helper fails on a null criteria: a test without one has "".
        criteria=case.criteria or "",
        hint=case.hint,
        metadata=test.metadata,
        input_files=[_relative(f, root) for f in case.input_files],
    )


def _unfinished(test: Test, payload: Payload) -> TestResult:
    """A test's result before anything ran: an error until it is graded."""
    return TestResult(
        id=test.id,
        status=Status.error,
        passed=False,
        score=0.0,
        input=payload.input,
        expected_output=payload.expected_output,
        output=payload.output,
        metadata=test.metadata,
        target_name=test.target_name,
        started_at=now(),
        threshold=test.threshold,
    )


def not_run(test: Test, root: Path, why: str) -> TestResult:
    """The result of a test that could not run at all (its node refused it, or was lost)."""
    result = _unfinished(test, _payload_of(test, root))
    result.error, result.finished_at = why, result.started_at
    return result


def usage_of(results: list[GraderResult], target: Usage | None = None) -> Usage | None:
    """The model calls of a test: every grader's, sets' children included, and a model
    target's."""
    total, seen = Usage(), False
    if target is not None and target.calls:
        total.merge(target)
        seen = True
    stack = list(results)
    while stack:
        r = stack.pop()
        stack.extend(r.children)
        if r.usage is not None:
            total.merge(r.usage)
            seen = True
    return total if seen else None


def _relative(path: str, root: Path) -> str:
    try:
        return Path(path).relative_to(root).as_posix()
    except ValueError:
        return Path(path).name
