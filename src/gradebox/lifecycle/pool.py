"""The local executor's concurrency (run, batch, trials): one interruptible map, one warm pool.

``imap_interruptible`` runs a function over items on a few threads and yields results as they
finish. On Ctrl-C or SIGTERM (a ``KeyboardInterrupt`` in the main thread) it cancels what is
still queued, closes the sandbox (which kills what runs and refuses anything new) and
re-raises at once: no queue is ever run out.

``WarmPool`` holds containers started ahead of their input. At most ``ahead`` wait at once;
they are prepared on an executor of their own, so preparing never queues behind running
graders (and under load something is always being prepared). A warm container is used once
or discarded; its slot is given back either way, and ``stats`` counts both.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ..errors import SandboxClosed
from ..graders.config import GraderConfig
from ..graders.run import GraderRun, prepare_grader
from ..protocol.models import GraderResult, InlinePayload, Payload
from ..sandbox.base import Sandbox

__all__ = ["Warm", "WarmPool", "imap_interruptible"]

T = TypeVar("T")
R = TypeVar("R")


def imap_interruptible(
    fn: Callable[[T], R],
    items: Iterable[T],
    workers: int,
    *,
    box: Sandbox,
    name: str = "work",
) -> Iterator[tuple[T, Future[R]]]:
    """``(item, finished future)`` pairs in the order they finish.

    Futures go through a queue and are dropped once yielded, so a run of 100,000 items holds
    only what is in flight. Waits are short, so Ctrl-C is prompt on every platform. Leaving
    the loop early (an exception in its body) stops everything, as an interruption does."""
    pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix=name)
    done: queue.SimpleQueue[tuple[T, Future[R]]] = queue.SimpleQueue()
    interrupted = False
    try:
        count = 0
        for item in items:
            fut = pool.submit(fn, item)
            fut.add_done_callback(lambda f, item=item: done.put((item, f)))
            count += 1
        for _ in range(count):
            while True:
                try:
                    pair = done.get(timeout=0.5)
                    break
                except queue.Empty:
                    continue
            yield pair
    except (KeyboardInterrupt, GeneratorExit):
        interrupted = True
        pool.shutdown(wait=False, cancel_futures=True)
        box.close()  # kills what runs; nothing new starts
        raise
    finally:
        pool.shutdown(wait=not interrupted, cancel_futures=True)


@dataclass
class PoolStats:
    prepared: int = 0
    used: int = 0
    discarded: int = 0
    waiting: int = 0
    most_waiting: int = 0


@dataclass
class Warm:
    """One grader's container, being prepared (or not: the pool was full) for one use."""

    pool: WarmPool
    grader: GraderConfig
    workspace: Path
    labels: dict[str, str]
    file: str | None
    future: Future[GraderRun] | None = None
    _done: bool = field(default=False, repr=False)

    def run(self, payload: Payload | InlinePayload) -> GraderResult:
        """Release the grader with its input (prepared now if it could not be ahead)."""
        if self._done:
            raise RuntimeError("a warm grader runs once")
        self._done = True
        if self.future is None:
            return self.pool._cold(self).run(payload)
        try:
            prepared = self.future.result()
        except BaseException:
            self.pool._give_back(used=False)
            raise
        try:
            return prepared.run(payload)
        finally:
            self.pool._give_back(used=True)

    def discard(self) -> None:
        """Not needed after all (its test failed early, or the run stops)."""
        if self._done:
            return
        self._done = True
        if self.future is not None:
            self.future.add_done_callback(self.pool._discard_prepared)


class WarmPool:
    """Containers started ahead of their input, shared by run, batch and trials.

    Example::

        pool = WarmPool(box, images, ahead=8)
        warm = pool.start(grader, workspace)      # while the agent still works
        result = warm.run(payload)                # the agent is done
        pool.close()
    """

    def __init__(
        self,
        box: Sandbox,
        images: Any,
        ahead: int,
        threads: int | None = None,
        models: Any = None,
    ) -> None:
        self.box, self.images, self.models = box, images, models
        self.ahead = max(0, ahead)
        self._slots = threading.BoundedSemaphore(max(1, self.ahead))
        self._executor = ThreadPoolExecutor(
            max(1, threads or min(self.ahead, 4)), thread_name_prefix="warm"
        )
        self._lock = threading.Lock()
        self.stats = PoolStats()

    def start(
        self,
        grader: GraderConfig,
        workspace: Path,
        *,
        labels: dict[str, str] | None = None,
        file: str | None = None,
    ) -> Warm:
        warm = Warm(self, grader, workspace, labels or {}, file)
        if self.ahead and self._slots.acquire(blocking=False):
            with self._lock:
                self.stats.waiting += 1
                self.stats.most_waiting = max(self.stats.most_waiting, self.stats.waiting)
            try:
                warm.future = self._executor.submit(self._prepare, warm)
            except RuntimeError:  # the pool was closed: the run is being interrupted
                self._give_back(used=False)
                raise SandboxClosed() from None
        return warm

    def _prepare(self, warm: Warm) -> GraderRun:
        prepared = self._cold(warm, ahead=True)
        with self._lock:
            self.stats.prepared += 1
        return prepared

    def _cold(self, warm: Warm, *, ahead: bool = False) -> GraderRun:
        """``warm``'s grader prepared, its container started now (``ahead``) or at release."""
        return prepare_grader(
            warm.grader.to_record(),
            warm.workspace,
            self.box,
            images=self.images,
            labels=warm.labels,
            file=warm.file,
            warm=ahead,
            models=self.models,
        )

    def _give_back(self, *, used: bool) -> None:
        with self._lock:
            self.stats.waiting -= 1
            if used:
                self.stats.used += 1
            else:
                self.stats.discarded += 1
        self._slots.release()

    def _discard_prepared(self, fut: Future[GraderRun]) -> None:
        if not fut.cancelled() and fut.exception() is None:
            fut.result().discard()
        self._give_back(used=False)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
