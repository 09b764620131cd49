"""Nothing outlives a command: every command the CLI registers, killed (SIGKILL) while its
grader runs, leaves no container, no mount and no scratch folder behind within seconds; a
SIGTERM ends a run within seconds and leaves nothing either, and a SIGKILL that follows it
finds the watchdog still on guard (issue 30, classes 6 and 9)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from gradebox.cli import UNSANDBOXED
from tests.conftest import leftovers_of, write

pytestmark = pytest.mark.docker
BACKENDS = ["docker", "oci"]
# Commands that start no container at all (besides UNSANDBOXED, which are not even watched):
# there is no grader to kill them in the middle of.
NO_CONTAINER = {"validate"}
SLOW_SCRIPT = "import time\ntime.sleep(600)\n"


def _registered() -> set[str]:
    from gradebox.cli.app import app

    names = {c.name or c.callback.__name__ for c in app.registered_commands}
    return names | {g.name for g in app.registered_groups}


def _scratch_of(pid: int) -> list[Path]:
    return list(Path(tempfile.gettempdir()).glob(f"gradebox-{pid}-*"))


def _mounts_of(pid: int) -> list[str]:
    return [m for m in Path("/proc/self/mountinfo").read_text().splitlines()
            if f"/gradebox-{pid}-" in m]  # fmt: skip


def _left_by(engine, pid: int) -> list[str]:
    return leftovers_of(engine, pid) + [str(p) for p in _scratch_of(pid)] + _mounts_of(pid)


def _settle(engine, pid: int, timeout: float = 60) -> list[str]:
    """What the runner ``pid`` left, once its watchdog had the time of its sweeps (generous:
    the machine is shared); an empty list as soon as nothing is left."""
    deadline = time.monotonic() + timeout
    while (left := _left_by(engine, pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _wait_running(engine, proc: subprocess.Popen, count: int = 1, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(leftovers_of(engine, proc.pid, running=True)) >= count:
            return
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    out, err = proc.communicate()
    raise AssertionError(f"no grader of {proc.args} ever ran: {proc.returncode} {err!r}")


def _batch_output(tmp: Path, records: Path, backend: str) -> Path:
    """A graded file for calibrate, made by a quick batch."""
    quick = write(tmp / "quick.sh", "cat >/dev/null; echo '{\"pass\": false, \"score\": 0}'\n")
    out = tmp / "graded.jsonl"
    p = subprocess.run([sys.executable, "-m", "gradebox", "batch", str(records), "-g",
                        str(quick), "-o", str(out), "--sandbox", backend],
                       capture_output=True, text=True)  # fmt: skip
    assert p.returncode == 1, p.stderr
    return out


def _scenario(command: str, tmp: Path, backend: str) -> tuple[list[str], Path]:
    """The command line of ``command`` with one grader that sleeps, and where to run it."""
    slow = write(tmp / "slow.py", SLOW_SCRIPT)
    records = tmp / "r.jsonl"
    records.write_text(json.dumps({"id": "a", "input": "q", "output": "x", "hint": "x"}) + "\n")
    suite = write(tmp / "suite.yaml", "tests:\n  - id: a\n    input: q\n    expected_output: x\n"
                  "    assert:\n      - {type: script, command: 'sleep 600', timeout: 600s}\n")  # fmt: skip
    (tmp / "ws").mkdir(exist_ok=True)
    sb = ["--sandbox", backend]
    lines = {
        "grade": ["grade", str(slow), "--workspace", str(tmp / "ws"), *sb],
        "run": ["run", str(suite), "--out", str(tmp / "out"), *sb],
        "validate-refs": ["validate-refs", str(suite), *sb],
        "batch": ["batch", str(records), "-g", str(slow), "-o", str(tmp / "o.jsonl"), *sb],
        "trials": ["trials", str(records), "-g", str(slow), "-k", "1", *sb],
        "assert": ["assert", "slow", "--agent-output", "x", *sb],
        "exec": ["exec", *sb, "--timeout", "600s", "--", "sleep", "600"],
    }
    if command == "assert":
        write(tmp / ".gradebox" / "graders" / "slow.py", SLOW_SCRIPT)
    if command == "calibrate":
        graded = _batch_output(tmp, records, backend)
        return ["calibrate", str(graded), "-n", "1", "-g", str(slow), *sb], tmp
    return lines[command], tmp


SCENARIOS = ["assert", "batch", "calibrate", "exec", "grade", "run", "trials", "validate-refs"]


def test_every_registered_command_has_a_kill_scenario_here():
    """A command added to the CLI fails this until it is killed in the middle of its grader
    below (or is listed as starting no container)."""
    assert _registered() == set(SCENARIOS) | NO_CONTAINER | UNSANDBOXED


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("command", SCENARIOS)
def test_every_command_killed_mid_grader_leaves_nothing(tmp_path, engine, backend, command):
    argv, cwd = _scenario(command, tmp_path, backend)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gradebox", *argv], cwd=cwd, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    _wait_running(engine, proc)
    assert _scratch_of(proc.pid), "no scratch folder named after the runner"
    proc.kill()
    proc.communicate(timeout=60)
    assert _settle(engine, proc.pid) == []


SLOW_SUITE = """
workspace:
  template: ./template
tests:
"""
SLOW_TEST = """  - id: t{i}
    input: q
    output: x
    assert:
      - {{type: script, command: 'sleep 600', timeout: 600s}}
"""


def _slow_run(tmp_path: Path, backend: str, engine) -> subprocess.Popen:
    """A run with four slow tests in flight (each in a workspace of its own, mounted as
    root), returned once their graders run."""
    write(tmp_path / "template" / "f.txt", "1\n")
    suite = write(tmp_path / "suite.yaml",
                  SLOW_SUITE + "".join(SLOW_TEST.format(i=i) for i in range(8)))  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "gradebox", "run", str(suite), "--out", str(tmp_path / "out"),
         "--workers", "4", "--sandbox", backend],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    _wait_running(engine, proc, count=4)
    return proc


@pytest.mark.parametrize("backend", BACKENDS)
def test_sigterm_ends_a_run_within_seconds_and_leaves_nothing(tmp_path, engine, backend):
    """SIGTERM with slow tests in flight: exit 130 at once (it was still alive 60 s later,
    waiting for its grader threads), and no container, mount or scratch folder left."""
    proc = _slow_run(tmp_path, backend, engine)
    if os.geteuid() == 0:
        assert _mounts_of(proc.pid), "no workspace mounted: the test would prove less"
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=45)  # the graders sleep 600 s
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError("SIGTERM did not end the run") from None
    assert proc.returncode == 130, err
    assert _settle(engine, proc.pid) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_sigkill_after_sigterm_still_leaves_nothing(tmp_path, engine, backend):
    """A harness that sends SIGTERM and then SIGKILL while the run is cleaning up: the
    watchdog was not told "normal end" by the interruption, so it sweeps what is left."""
    proc = _slow_run(tmp_path, backend, engine)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)  # the run is in the middle of removing its containers
    proc.kill()
    proc.communicate(timeout=60)
    assert _settle(engine, proc.pid) == []
