"""The one seam between what to run and where it runs.

``run``, ``batch``, ``trials`` and ``validate-refs`` build jobs (``gradebox.lifecycle.jobs``: plain
data) and hand them to an ``Executor``, which yields a ``Done`` for each as it finishes, in the
order they finish, whichever executor it is. Two implementations:

- ``LocalExecutor``: threads of this process, each job run by ``jobs.run_job`` in one
  ``jobs.Worker`` (the sandbox, the warm pool, the suite's context). Ctrl-C or SIGTERM cancels
  what is queued and closes the sandbox (``pool.imap_interruptible``).
- ``gradebox.cluster.RayExecutor``: each job a Ray task on a node, which runs it with the same
  ``run_job`` in a ``Worker`` of its own; nodes checked first, lost work sent again, Ctrl-C
  cancels the tasks, ``close`` sweeps every node.

A third (a process pool, Kubernetes Jobs) is one class with ``map`` (and ``close``), held to
``tests/executor_conformance.py``. An executor must yield every job exactly once: its result
(``value``), or why it has none (``error``: the caller records that job as an error, never a
pass). It must not write results files nor judge them: that is the callers'.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import settings
from ..protocol.models import Usage
from .jobs import Job, Worker, run_job
from .pool import imap_interruptible

__all__ = ["Done", "Executor", "LocalExecutor", "default_workers"]


def default_workers() -> int:
    """$GRADEBOX_WORKERS (what `make bench` measured best on this machine), else 2 per core:
    a grader container spends much of its life waiting on the engine."""
    return settings.current().workers or max(2, 2 * (os.cpu_count() or 1))


@dataclass
class Done:
    """One job back: its result, or why there is none; where it ran and how often it was sent
    (``None`` for an executor without nodes)."""

    job: Job
    value: Any
    error: str | None = None
    node: str | None = None
    attempts: int | None = None


class Executor(ABC):
    """Runs jobs; yields each one's ``Done`` as it finishes.

    Example::

        with LocalExecutor(Worker(box, images, run_id, suite=suite), threads=4) as ex:
            for done in ex.map([TestJob(t.id) for t in suite.tests], in_flight=4):
                print(done.job, done.value.status)
    """

    run_id: str
    remote: bool = False  # jobs run in other processes: results name their node

    @abstractmethod
    def map(self, jobs: Sequence[Job], in_flight: int) -> Iterator[Done]:
        """Every job run, at most ``in_flight`` at once, in the order they finish. Leaving the
        loop early (an exception, Ctrl-C) cancels what is in flight."""

    def usage(self) -> Usage | None:
        """The model calls made for the run, when this executor can count them (None: they
        are counted from the results)."""
        return None

    def close(self) -> None:
        """The run is over: release what the executor holds."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalExecutor(Executor):
    """Jobs on threads of this process, run in one ``Worker`` (its warm pool, its suite)."""

    def __init__(self, worker: Worker) -> None:
        self.worker, self.run_id = worker, worker.run_id

    def map(self, jobs: Sequence[Job], in_flight: int) -> Iterator[Done]:
        jobs = list(jobs)
        self.worker.expect(jobs)
        name = type(jobs[0]).__name__.lower().removesuffix("job") if jobs else "work"
        run = self.worker

        def one(job: Job) -> Any:
            return run_job(run, job)

        for job, fut in imap_interruptible(one, jobs, in_flight, box=run.box, name=name):
            yield Done(job, fut.result())

    def usage(self) -> Usage | None:
        return self.worker.usage()

    def close(self) -> None:
        self.worker.close()
