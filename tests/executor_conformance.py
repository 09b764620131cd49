"""What every executor (``gradebox.lifecycle.executor.Executor``) must do, as checks run
against each implementation: ``tests/docker/test_executor.py`` (``LocalExecutor``) and
``tests/docker/test_ray.py`` (``RayExecutor`` on a real local cluster). A new executor passes
these with a harness of its own.

A harness builds an executor for a suite file or a grader file (``for_suite``,
``for_grader``) and says which of its containers are left (``left``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Protocol

from gradebox.lifecycle.executor import Executor
from gradebox.lifecycle.jobs import GradeJob, Record, TestJob, TrialJob
from gradebox.protocol.models import GraderResult, Status, TestResult
from tests.conftest import write

GRADER = """\
import json, os, sys, time
d = json.load(sys.stdin)
time.sleep(float(d["metadata"].get("sleep", 0)))
ok = d["output"] == "good" and os.path.exists(os.environ["EVALUATE_WORKSPACE"] + "/a.txt")
sys.exit(0 if ok else 1)
"""

JUDGE = (
    "import json, sys\nd = json.load(sys.stdin)\n"
    "print(json.dumps({'pass': 'yes' in d['output'], 'score': 1.0 if 'yes' in d['output'] "
    "else 0.0, 'reasoning': 'checked'}))\n"
)


class Harness(Protocol):
    def for_suite(self, suite_file: Path) -> Executor: ...

    def for_grader(self, grader_file: Path, images: tuple[str, ...]) -> Executor: ...

    def image_id(self, name: str) -> str: ...

    def left(self) -> list[str]: ...


def make_suite(root: Path, sleeps: list[float], bad: tuple[int, ...] = ()) -> Path:
    """One test per sleep, graded in a container by a grader file next to the suite, over a
    template: both must reach wherever the test runs."""
    write(root / "g.py", GRADER)
    write(root / "tpl" / "a.txt", "from the template\n")
    lines = ["name: seam", "workspace: {template: ./tpl}", "tests:"]
    for i, sleep in enumerate(sleeps):
        lines += [
            f"  - id: t-{i:02d}",
            f"    output: {'bad' if i in bad else 'good'}",
            f"    metadata: {{sleep: {sleep}}}",
            "    assert: [{type: script, command: [python3, g.py]}]",
        ]
    return write(root / "suite.yaml", "\n".join(lines) + "\n")


def normalised(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Results without what differs between any two runs (times, durations) or names where
    they ran (node, attempts), sorted by id: the rest must be equal wherever they ran."""
    varying = {"started_at", "finished_at", "timings_ms", "duration_ms", "node", "attempts"}

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in varying}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return sorted((strip(r) for r in results), key=lambda r: r["id"])


def check_every_job_once_in_the_order_they_finish(h: Harness, tmp_path: Path) -> None:
    # The slow one sleeps long enough that a cold worker (a Ray node's first task builds its
    # process's context) still finishes the others first.
    suite = make_suite(tmp_path / "suite", [12, 0, 0, 0], bad=(2,))
    with h.for_suite(suite) as ex:
        jobs = [TestJob(f"t-{i:02d}") for i in range(4)]
        done = list(ex.map(jobs, in_flight=4))
    assert sorted(str(d.job) for d in done) == [str(j) for j in jobs]  # each once
    assert str(done[-1].job) == "t-00"  # the slow one last: as they finish, not as sent
    for d in done:
        assert isinstance(d.value, TestResult) and d.value.id == str(d.job) and d.error is None
    assert {str(d.job): d.value.status for d in done} == {
        "t-00": Status.passed, "t-01": Status.passed, "t-02": Status.failed,
        "t-03": Status.passed,
    }  # fmt: skip
    assert h.left() == []


def check_records_and_trials(h: Harness, tmp_path: Path) -> None:
    grader = write(tmp_path / "g" / "judge.py", JUDGE)
    records = [Record(id=f"p{i}", input="q", output="yes" if i % 2 else "no") for i in range(4)]
    with h.for_grader(grader, ("python", "shell")) as ex:
        graded = {d.job.line: d.value for d in ex.map(  # type: ignore[union-attr]
            [GradeJob(i + 1, r) for i, r in enumerate(records)], in_flight=4)}  # fmt: skip
        shell = h.image_id("shell")
        trials = [TrialJob(i + 1, r, "echo yes", shell) for i, r in enumerate(records[:2])]
        answers = {d.job.index: d.value for d in ex.map(trials, in_flight=2)}  # type: ignore[union-attr]
    assert sorted(graded) == [1, 2, 3, 4]
    assert all(isinstance(v, GraderResult) for v in graded.values())
    assert [graded[n].passed for n in (1, 2, 3, 4)] == [False, True, False, True]
    assert all(isinstance(v, Record) for v in answers.values())
    assert {i: (a.id, a.output) for i, a in answers.items()} == {1: ("p0", "yes\n"),
                                                              2: ("p1", "yes\n")}  # fmt: skip
    assert h.left() == []


def check_leaving_early_cancels_what_is_in_flight(h: Harness, tmp_path: Path) -> None:
    suite = make_suite(tmp_path / "suite", [0, 60, 60, 60])
    t0 = time.monotonic()
    with h.for_suite(suite) as ex:
        for d in ex.map([TestJob(f"t-{i:02d}") for i in range(4)], in_flight=4):
            assert str(d.job) == "t-00"
            break  # leave with three tests in flight
    assert time.monotonic() - t0 < 50, "the tests in flight were waited for, not cancelled"
    assert h.left() == []


CHECKS = [
    check_every_job_once_in_the_order_they_finish,
    check_records_and_trials,
    check_leaving_early_cancels_what_is_in_flight,
]


def results_of(out: Path) -> list[dict[str, Any]]:
    path = out / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
