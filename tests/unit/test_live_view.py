"""`gradebox view` at a run's edges (issue 42, item 8), without a browser: what it refuses,
what it says the run is doing (waiting, running, finished, interrupted, stale), the plan's
total, and a run of several files read as one."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest

from gradebox.errors import ConfigError
from gradebox.protocol.models import GraderResult, RunSummary, Status, TestResult
from gradebox.report.view import ViewServer, lock_held


def result(key: str, passed: bool = True) -> str:
    status = Status.passed if passed else Status.failed
    g = GraderResult(name="g", status=status, passed=passed, score=float(passed))
    r = TestResult(id=key, status=status, passed=passed, score=float(passed), graders=[g])
    return r.model_dump_json() + "\n"


def summary(run_id: str = "r1", *, interrupted: bool = False, total: int = 4) -> str:
    return RunSummary(
        suite="s", run_id=run_id, total=total, passed=1, failed=0, errored=0,
        not_run=total - 1, pass_rate=1.0, mean_score=1.0, duration_s=1.0, workers=1,
        interrupted=interrupted, started_at="2026-01-01T00:00:00Z",
        finished_at="2026-01-01T00:00:01Z",
    ).model_dump_json()  # fmt: skip


def plan(folder: Path, ids: list[str], run_id: str = "r1") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"gradebox_plan": 1, "suite": "s", "run_id": run_id, "tests": ids}
    (folder / "plan.json").write_text(json.dumps(doc))


class Held:
    """The run lock as `gradebox run` holds it, for as long as the block lasts."""

    def __init__(self, folder: Path) -> None:
        self.fd = os.open(folder / ".gradebox.lock", os.O_RDWR | os.O_CREAT, 0o644)

    def __enter__(self) -> Held:
        fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


def served(view: ViewServer) -> dict:
    return view.since("0", "", "")


def test_a_path_that_is_no_run_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="add --wait"):
        ViewServer(tmp_path / "not-yet")
    (tmp_path / "empty").mkdir()  # one `gradebox run --out` is about to write: waited for
    view = ViewServer(tmp_path / "empty")
    assert served(view)["state"]["state"] == "waiting"
    view.shutdown()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("x")
    with pytest.raises(ConfigError, match="not a run folder"):
        ViewServer(tmp_path / "notes", wait=True)  # something else is there: never a run
    (tmp_path / "runs" / "a").mkdir(parents=True)
    (tmp_path / "runs" / "a" / "results.jsonl").write_text(result("t"))
    with pytest.raises(ConfigError, match=r"run folder\(s\): a.*gradebox view"):
        ViewServer(tmp_path / "runs")


def test_waiting_then_running_then_finished(tmp_path: Path) -> None:
    run = tmp_path / "pr-42"
    view = ViewServer(run, wait=True)
    try:
        assert view.name == "pr-42"  # its own name, not its parent's
        assert served(view)["state"]["state"] == "waiting"
        plan(run, [f"t{i}" for i in range(16)])
        (run / "results.jsonl").write_text("".join(result(f"t{i}") for i in range(4)))
        with Held(run):
            assert lock_held(run) is True
            got = served(view)
            assert got["state"]["state"] == "running"
            assert len(got["rows"]) == 4 and len(got["plan"]) == 16
            assert "plan" not in view.since("0", "", got["plan_tag"])  # sent once
            (run / "summary.json").write_text(summary())
            assert served(view)["state"]["state"] == "running"  # its process still holds it
        assert lock_held(run) is False
        assert served(view)["state"]["state"] == "finished"
    finally:
        view.shutdown()


def test_interrupted_and_stale(tmp_path: Path) -> None:
    plan(tmp_path, ["a", "b"])
    (tmp_path / "results.jsonl").write_text(result("a"))
    view = ViewServer(tmp_path)
    try:
        # no process holds it and it wrote no summary: killed
        assert served(view)["state"]["state"] == "stale"
        # a summary of an earlier run (a --resume killed before its own): still stale
        (tmp_path / "summary.json").write_text(summary("older"))
        assert served(view)["state"]["state"] == "stale"
        (tmp_path / "summary.json").write_text(summary(interrupted=True))
        assert served(view)["state"]["state"] == "interrupted"
    finally:
        view.shutdown()


def test_a_run_of_several_files_is_one_run(tmp_path: Path) -> None:
    folders = [
        {"folder": f"{x}.yaml", "suite": name, "file": f"{x}.yaml", "tests": ["t1"]}
        for x, name in (("a", "first"), ("b", "second"))
    ]
    doc = {"gradebox_plan": 1, "suite": "2 suites", "folders": folders}
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    for f in ("a.yaml", "b.yaml"):
        (tmp_path / f).mkdir()
        (tmp_path / f / "results.jsonl").write_text(result("t1"))
    (tmp_path / "summary.json").write_text(summary(total=2))
    view = ViewServer(tmp_path)
    try:
        got = served(view)
        assert sorted(r["id"] for r in got["rows"]) == ["first: t1", "second: t1"]
        assert got["plan"] == ["first: t1", "second: t1"]
        assert got["state"]["state"] == "finished"
        # an append to one file: only it is read again
        with (tmp_path / "b.yaml" / "results.jsonl").open("a") as f:
            f.write(result("t2", False))
        more = view.since(got["offset"], got["file"], got["plan_tag"])
        assert not more["reset"] and [r["id"] for r in more["rows"]] == ["second: t2"]
    finally:
        view.shutdown()
    # A run of several written before plans were: its folders with results, its summary
    (tmp_path / "plan.json").unlink()
    view = ViewServer(tmp_path)
    try:
        assert len(served(view)["rows"]) == 3
    finally:
        view.shutdown()


def test_a_linked_part_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "results.jsonl").write_text(result("secret"))
    run = tmp_path / "run"
    run.mkdir()
    folders = [{"folder": "a", "suite": "first", "tests": ["t"]}]
    (run / "plan.json").write_text(json.dumps({"gradebox_plan": 1, "folders": folders}))
    (run / "a").symlink_to(elsewhere)
    view = ViewServer(run)
    try:
        assert served(view)["rows"] == []
    finally:
        view.shutdown()
