"""The runner's warm pool, discards and interruption, driven with a scripted in-memory sandbox:
no Docker, no runtime. Workspaces and baselines are real (host folders and git)."""

import threading
from pathlib import Path

import pytest

from gradebox.drivers.runner import RunOptions, run_suite
from gradebox.errors import SandboxClosed
from gradebox.sandbox.base import Prepared, RunOutcome, Sandbox, SandboxSpec
from gradebox.suite import load_suite
from tests.conftest import write

IMAGE = "sha256:" + "0" * 64


class _Images:
    def resolve(self, ref, source_dir=None):
        return IMAGE


class ScriptedSandbox(Sandbox):
    """Targets whose test id starts with ``fail`` exit 1; every grader passes. Counts every
    container prepared, run and discarded, and the most that waited at once."""

    name = "scripted"

    def __init__(self):
        self.lock = threading.Lock()
        self.prepared = self.executed = self.discarded = self.waiting = 0
        self.ahead = self.most_ahead = 0
        self.closed = False
        self.live: set = set()
        self.by_test: dict[str, list[str]] = {}

    def images(self, *, locked=False, build_network=False):
        return _Images()

    def resolve_image(self, ref):
        return IMAGE

    def run(self, spec: SandboxSpec) -> RunOutcome:
        if self.closed:
            raise SandboxClosed()
        if spec.name.startswith("target-"):
            return RunOutcome(exit_code=1 if spec.name.startswith("target-fail") else 0,
                              stdout=b"answer")  # fmt: skip
        return RunOutcome(exit_code=0, stdout=b'{"pass": true}')

    def prepare(self, spec: SandboxSpec, *, warm: bool = True) -> Prepared:
        with self.lock:
            if self.closed:
                raise SandboxClosed()
            self.prepared += 1
            self.waiting += 1
            if warm:  # started ahead of its input (a cold one is prepared at its release)
                self.ahead += 1
                self.most_ahead = max(self.most_ahead, self.ahead)
            handle = _Scripted(self, spec, warm)
            self.live.add(handle)
        return handle

    def close(self):
        # As every backend does: closing destroys whatever is still prepared and waiting.
        with self.lock:
            self.closed = True
            live = list(self.live)
        for handle in live:
            handle.discard()


class _Scripted(Prepared):
    backend = "scripted"

    def __init__(self, box, spec, warm):
        self.box, self.spec, self.warm, self.done = box, spec, warm, False
        self.test = spec.labels.get("gradebox.test", "?")

    def _end(self, how):
        with self.box.lock:
            if self.done:
                return
            self.done = True
            self.box.live.discard(self)
            self.box.waiting -= 1
            self.box.ahead -= self.warm
            setattr(self.box, how, getattr(self.box, how) + 1)
            self.box.by_test.setdefault(self.test, []).append(how)

    def execute(self, stdin=None):
        out = self.box.run(self.spec)
        self._end("executed")
        return out

    def discard(self):
        self._end("discarded")


def _suite(tmp_path: Path, ids: list[str]) -> Path:
    tests = "".join(
        f"  - id: {i}\n    input: go\n    assert:\n"
        "      - {type: script, command: 'true'}\n      - {type: script, command: 'true'}\n"
        for i in ids
    )
    return write(tmp_path / "suite.yaml", f"target: {{command: 'agent'}}\ntests:\n{tests}")


def test_warm_pool_accounting(tmp_path):
    box = ScriptedSandbox()
    suite = load_suite(_suite(tmp_path, [f"ok-{i:02d}" for i in range(30)]))
    summary = run_suite(
        suite, box, box.images(), RunOptions(tmp_path / "out", workers=2, max_ahead=3)
    )
    assert summary.passed == 30
    assert 0 < box.most_ahead <= 3  # containers were started ahead, never more than allowed
    assert box.waiting == 0  # every container was used or discarded
    assert box.prepared == box.executed + box.discarded
    assert box.executed == 60 and box.discarded == 0  # 2 graders x 30 tests, all used


def test_containers_of_a_test_whose_target_failed_are_discarded(tmp_path):
    box = ScriptedSandbox()
    ids = [f"{'fail' if i % 3 == 0 else 'ok'}-{i:02d}" for i in range(12)]
    suite = load_suite(_suite(tmp_path, ids))
    summary = run_suite(suite, box, box.images(), RunOptions(tmp_path / "out", workers=2))
    assert (summary.passed, summary.errored) == (8, 4)
    for test, ends in box.by_test.items():
        if test.startswith("fail"):
            assert set(ends) == {"discarded"}, (test, ends)  # prepared ahead, never released
    assert box.waiting == 0 and box.prepared == box.executed + box.discarded


def test_interruption_stops_queued_work_and_leaves_nothing_waiting(tmp_path):
    box = ScriptedSandbox()
    suite = load_suite(_suite(tmp_path, [f"ok-{i:02d}" for i in range(40)]))
    seen = []

    def on_result(result):
        seen.append(result.id)
        if len(seen) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_suite(suite, box, box.images(), RunOptions(tmp_path / "out", workers=2),
                  on_result=on_result)  # fmt: skip
    assert box.closed  # in-flight runs were ended through the sandbox
    assert box.waiting == 0, "a container started ahead was left waiting"
    assert box.executed < 80  # the queue was not run out
    lines = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    assert len(lines) == 3  # exactly the finished tests were recorded
    import json

    assert json.loads((tmp_path / "out" / "summary.json").read_text())["interrupted"] is True


def test_a_remote_run_sums_its_usage_without_reading_its_results_back(tmp_path, monkeypatch):
    """A cluster's model calls are counted from the results as they come in: results.jsonl
    (100,000 lines for a large run) is not read again once the run is over."""
    from gradebox.core import jsonl
    from gradebox.drivers import runner
    from gradebox.lifecycle.executor import Done, Executor
    from gradebox.protocol.models import Status, TestResult, Usage

    class Remote(Executor):
        run_id, remote = "r1", True

        def map(self, jobs, in_flight):
            for n, job in enumerate(jobs, 1):
                result = TestResult(id=job.test_id, status=Status.passed, passed=True, score=1.0,
                                    usage=Usage(calls=n, input_tokens=10 * n))  # fmt: skip
                yield Done(job, result, node=f"node-{n}")

    read: list[Path] = []
    real = jsonl.read_jsonl

    def counted(path, model):
        read.append(path)
        return real(path, model)

    monkeypatch.setattr(runner, "read_jsonl", counted, raising=False)  # if it came back
    box = ScriptedSandbox()
    suite = load_suite(_suite(tmp_path, ["a", "b", "c"]))
    summary = run_suite(suite, box, box.images(), RunOptions(tmp_path / "out"),
                        executor=Remote())  # fmt: skip
    assert summary.usage is not None
    assert (summary.usage.calls, summary.usage.input_tokens) == (6, 60)
    assert summary.nodes == {"node-1": 1, "node-2": 1, "node-3": 1}
    assert read == []
