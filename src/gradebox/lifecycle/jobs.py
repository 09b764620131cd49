"""Jobs: what to run, as plain data, and the one function that runs a job where it lands.

A job is a test of the run's suite (``TestJob``), a record graded by the run's grader (``GradeJob``)
or a trial of a target command (``TrialJob``). It is small and picklable: an executor
(``gradebox.lifecycle.executor``) sends it to a thread here or to a Ray node there. Where it lands,
``run_job(worker, job)`` runs it in that process's ``Worker``: the sandbox, images, and the run's
suite context (``lifecycle.SuiteContext``) or grader with its warm pool, built once per process. The
local executor and a cluster node call this same function, so a job runs the same way wherever it
runs.

``encode``/``decode`` carry a result across a process boundary as JSON text (the form it is
written in), so a result read back is the result written, byte for byte.

This module must not know where jobs run (threads, Ray), nor write results files.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ..core.scratch import scratch_folder
from ..files.workspace import Workspace
from ..graders.config import GraderConfig
from ..protocol.models import GraderResult, InlinePayload, TestResult, Usage
from ..sandbox.base import ImageSource, RunOutcome, Sandbox
from ..sandbox.hardening import run_as_ids
from ..suite import Suite
from .pool import Warm, WarmPool
from .steps import run_in_workspace
from .testrun import SuiteContext

__all__ = [
    "GradeJob",
    "Job",
    "Record",
    "TestJob",
    "TrialJob",
    "Worker",
    "decode",
    "encode",
    "run_job",
    "run_target_once",
]


class Record(InlinePayload):
    """One line of a records file: an agent's answer to one prompt (the inline-grader input,
    plus the prompt's ``id``)."""

    id: str
    target_error: str | None = Field(
        default=None,
        description="set by `trials --target`: why the target's answer is not graded (it timed "
        "out, was killed or failed); the trial is then an error, never graded as an answer",
    )

    def payload(self) -> InlinePayload:
        return InlinePayload.model_validate(self.model_dump(exclude={"id", "target_error"}))


@dataclass(frozen=True)
class TestJob:
    """One test of the run's suite, by id."""

    __test__ = False  # not a pytest class
    test_id: str

    def __str__(self) -> str:
        return self.test_id


@dataclass(frozen=True)
class GradeJob:
    """One record (line ``line`` of its file), graded by the run's grader."""

    line: int
    record: Record

    def __str__(self) -> str:
        return f"record {self.line}"


@dataclass(frozen=True)
class TrialJob:
    """Trial ``index``: ``command`` with the record's prompt on stdin, in image ``image_id``."""

    index: int
    record: Record
    command: str
    image_id: str
    timeout: float = 300.0

    def __str__(self) -> str:
        return f"trial {self.index} of {self.record.id!r}"


Job = TestJob | GradeJob | TrialJob


class Worker:
    """What one worker process holds for a run: the sandbox, the images, and either the
    suite's context (``TestJob``) or the grader, its workspace and a warm pool (``GradeJob``);
    a ``TrialJob`` needs only the sandbox. ``threads``: jobs this process runs at once."""

    def __init__(
        self,
        box: Sandbox,
        images: ImageSource,
        run_id: str,
        *,
        suite: Suite | None = None,
        grader: GraderConfig | None = None,
        workspace: Path | None = None,
        threads: int = 4,
        max_ahead: int | None = None,
        use_cache: bool = True,
        model_calls: int = 4,
        references: bool = False,
        scratch: Path | None = None,
    ) -> None:
        self.box, self.images, self.run_id = box, images, run_id
        self.suite = suite
        self.context = (
            SuiteContext(
                suite,
                box,
                images,
                run_id,
                threads,
                max_ahead,
                use_cache,
                model_calls,
                references,
                scratch,
            )
            if suite is not None
            else None
        )
        self.tests = {t.id: t for t in suite.tests} if suite is not None else {}
        self.grader, self.workspace = grader, workspace
        # Every record runs the same grader on the same workspace: containers are started
        # ahead for whichever record comes next, so each is ready when a slot frees.
        self.warm = WarmPool(box, images, ahead=threads) if grader is not None else None
        self.threads = threads
        self._lock = threading.Lock()
        self._spare: list[Warm] = []
        self._started, self._coming = 0, 0

    def expect(self, jobs: list[Job]) -> None:
        """The jobs this process will run (when it knows them): start the grader's containers
        ahead, one per record, never more."""
        coming = sum(1 for j in jobs if isinstance(j, GradeJob))
        if self.warm is None or not coming:
            return
        with self._lock:
            self._coming += coming
            while len(self._spare) < self.threads and self._started < self._coming:
                self._spare.append(self._start())

    def _start(self) -> Warm:
        assert self.warm is not None and self.grader is not None and self.workspace is not None
        self._started += 1
        return self.warm.start(self.grader, self.workspace)

    def grade(self, record: Record) -> GraderResult:
        if record.target_error is not None:
            # As plaited's trials: a target that did not finish gave no answer to grade (what
            # it printed before a timeout could pass a grader it never earned).
            assert self.grader is not None
            why = f"no answer to grade: {record.target_error}"
            return GraderResult.errored(self.grader.display_name(), self.grader.type, why)
        with self._lock:
            warm = self._spare.pop() if self._spare else None
            if self._started < self._coming:
                self._spare.append(self._start())  # a later record's, ahead
        if warm is None:
            assert self.warm is not None and self.grader is not None
            warm = self.warm.start(self.grader, self.workspace)  # type: ignore[arg-type]
        return warm.run(record.payload())

    def usage(self) -> Usage | None:
        """The model calls this process made for the run (None: no model hub here)."""
        if self.context is None or self.context.models is None:
            return None
        return self.context.models.usage()

    def close(self) -> None:
        for warm in self._spare:
            warm.discard()
        self._spare = []
        if self.warm is not None:
            self.warm.close()
        if self.context is not None:
            self.context.close()


def run_job(worker: Worker, job: Job) -> TestResult | GraderResult | Record:
    """Run one job in ``worker`` (this process's): the local executor's threads and a cluster
    node's tasks both call this, and nothing else."""
    if isinstance(job, TestJob):
        if worker.context is None:
            raise TypeError("a TestJob needs a worker built with a suite")
        return worker.context.run_test(worker.tests[job.test_id])
    if isinstance(job, GradeJob):
        if worker.warm is None:
            raise TypeError("a GradeJob needs a worker built with a grader")
        return worker.grade(job.record)
    if isinstance(job, TrialJob):
        return run_target_once(
            job.record, job.command, job.image_id, worker.box, timeout=job.timeout
        )
    raise TypeError(f"not a job: {job!r}")


def run_target_once(
    record: Record, command: str, image_id: str, box: Sandbox, *, timeout: float = 300.0
) -> Record:
    """One trial: ``command`` with the prompt on stdin, in a fresh, empty, size-limited
    workspace; the record with its answer, or with why it has none (``target_error``)."""
    text = record.input if isinstance(record.input, str) else json.dumps(record.input)
    with scratch_folder() as scratch:
        ws = Workspace.create(scratch / "workspace", owner=run_as_ids())
        try:
            outcome = run_in_workspace(
                command,
                ws.path,
                box,
                image_id=image_id,
                name=f"target-{record.id}",
                stdin=text.encode(),
                timeout=timeout,
            )
        finally:
            ws.close()
    answer = outcome.stdout.decode("utf-8", errors="replace")
    return record.model_copy(update={"output": answer, "target_error": _failure(outcome)})


def _failure(outcome: RunOutcome) -> str | None:
    """Why a target's run gave no answer to grade; None when it finished (exit 0)."""
    if outcome.start_error:
        return f"the target did not start: {outcome.start_error}"
    if outcome.timed_out:
        return "the target timed out"
    if outcome.oom_killed:
        return "the target was killed: out of memory"
    if outcome.stdout_dropped:
        return "the target's output passed its cap and was cut"
    if outcome.exit_code != 0:
        return f"the target exited with {outcome.exit_code}"
    return None


_RESULT: dict[type, type[BaseModel]] = {
    TestJob: TestResult,
    GradeJob: GraderResult,
    TrialJob: Record,
}


def encode(job: Job, value: BaseModel) -> str:
    """A job's result as JSON text, to cross a process boundary."""
    return value.model_dump_json(by_alias=isinstance(job, TrialJob))


def decode(job: Job, text: Any) -> Any:
    """The result ``encode`` wrote, read back as its model."""
    return _RESULT[type(job)].model_validate_json(text)
