"""Nothing outlives a command: every command the CLI registers, killed (SIGKILL) while its
grader runs, leaves no container, no mount and no scratch folder behind within seconds; a
SIGTERM ends a run within seconds and leaves nothing either, and a SIGKILL that follows it
finds the watchdog still on guard (issue 30, classes 6 and 9)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gradebox.cli import UNSANDBOXED
from tests.conftest import leftovers_of, write
from tests.fake_models import FakeModel

pytestmark = pytest.mark.docker
BACKENDS = ["docker", "oci"]
# Commands that start no container at all (besides UNSANDBOXED, which are not even watched):
# there is no grader to kill them in the middle of.
NO_CONTAINER = {"validate"}
SLOW_SCRIPT = "import time\ntime.sleep(600)\n"
SLOW_GRADER = "{type: script, command: 'sleep 600', timeout: 600s}"


def _registered() -> set[str]:
    from gradebox.cli.app import app

    names = {c.name or c.callback.__name__ for c in app.registered_commands}
    return names | {g.name for g in app.registered_groups}


def _scratch_of(pid: int, tmp: Path | None = None) -> list[Path]:
    return list((tmp or Path(tempfile.gettempdir())).glob(f"gradebox-{pid}-*"))


def _mounts_of(pid: int) -> list[str]:
    return [m for m in Path("/proc/self/mountinfo").read_text().splitlines()
            if f"/gradebox-{pid}-" in m]  # fmt: skip


def _left_by(engine, pid: int, tmp: Path | None = None) -> list[str]:
    """Its containers, its mounts, and its scratch folders (with ``tmp``, the runner's own
    TMPDIR: anything at all left there, a folder no sweep knows as its included)."""
    folders = [p.name for p in tmp.iterdir()] if tmp else map(str, _scratch_of(pid))
    return leftovers_of(engine, pid) + [*folders] + _mounts_of(pid)


def _settle(engine, pid: int, timeout: float = 60, tmp: Path | None = None) -> list[str]:
    """What the runner ``pid`` left, once its watchdog had the time of its sweeps (generous:
    the machine is shared); an empty list as soon as nothing is left."""
    deadline = time.monotonic() + timeout
    while (left := _left_by(engine, pid, tmp)) and time.monotonic() < deadline:
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
    quick = write(tmp / "quick.sh", 'cat >/dev/null; echo \'{"pass": false, "score": 0}\'\n')
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
                  f"    assert:\n      - {SLOW_GRADER}\n")  # fmt: skip
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
    if command == "exec":  # exec mounts the current folder: one open to the sandbox user
        folder = tmp / "grader"
        folder.mkdir(mode=0o755)
        folder.chmod(0o755)
        return lines[command], folder
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
    tmp = tmp_path / "tmpdir"  # the runner's own: whatever it leaves there is seen
    tmp.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gradebox", *argv], cwd=cwd, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "TMPDIR": str(tmp)},
    )  # fmt: skip
    _wait_running(engine, proc)
    assert _scratch_of(proc.pid, tmp), "no scratch folder named after the runner"
    proc.kill()
    proc.communicate(timeout=60)
    assert _settle(engine, proc.pid, tmp=tmp) == []


SLOW_SUITE = """
workspace:
  template: ./template
tests:
"""
JUDGED = """  - id: judged{i}
    input: q
    output: x
    assert:
      - {{type: llm-rubric, value: is it good, target: judge}}
"""
SLOW_TEST = """  - id: t{i}
    input: q
    output: x
    assert:
      - {{type: script, command: 'sleep 600', timeout: 600s}}
"""


def _slow_model(body: dict) -> str:
    time.sleep(120)  # a judge that takes its time: its call is in flight at the signal
    return '{"score": 1, "reasoning": "ok"}'


@contextlib.contextmanager
def _slow_run(tmp_path: Path, backend: str, engine) -> Iterator[subprocess.Popen]:
    """A run with four slow tests in flight, each in a workspace of its own (mounted, as
    root): two judged by a model that takes two minutes, two by graders that sleep; yields
    once they are all under way. (The judges' threads are what kept the run alive.)"""
    write(tmp_path / "template" / "f.txt", "1\n")
    tests = [JUDGED.format(i=i) for i in range(2)] + [SLOW_TEST.format(i=i) for i in range(6)]
    suite = write(tmp_path / "suite.yaml", SLOW_SUITE + "".join(tests))
    with FakeModel(default=_slow_model) as fake:
        judge = f"{{name: judge, model: m, base_url: '{fake.base_url}'}}"
        write(tmp_path / ".gradebox" / "targets.yaml", f"targets:\n  - {judge}\n")
        proc = subprocess.Popen(
            [sys.executable, "-m", "gradebox", "run", str(suite), "--out",
             str(tmp_path / "out"), "--workers", "4", "--sandbox", backend],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, "OPENAI_API_KEY": "test-key"},
        )  # fmt: skip
        try:
            _wait_running(engine, proc, count=2)
            deadline = time.monotonic() + 60
            while len(fake.requests) < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert len(fake.requests) == 2, "the judges were never called"
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


@pytest.mark.parametrize("backend", BACKENDS)
def test_sigterm_ends_a_run_within_seconds_and_leaves_nothing(tmp_path, engine, backend):
    """SIGTERM with slow tests in flight: exit 130 at once (it was still alive 60 s later,
    waiting for its grader threads), and no container, mount or scratch folder left."""
    with _slow_run(tmp_path, backend, engine) as proc:
        if os.geteuid() == 0:
            assert _mounts_of(proc.pid), "no workspace mounted: the test would prove less"
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=45)  # the judges answer after 120 s
        except subprocess.TimeoutExpired:
            raise AssertionError("SIGTERM did not end the run") from None
        assert proc.returncode == 130, err
        assert _settle(engine, proc.pid) == []


def _said(proc: subprocess.Popen, words: bytes, timeout: float = 60) -> bytes:
    """Read the runner's stderr until it says ``words`` (or ends); what it said."""
    import select

    assert proc.stderr is not None
    said, deadline = b"", time.monotonic() + timeout
    while words not in said and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 0.5)
        if ready:
            chunk = os.read(proc.stderr.fileno(), 1 << 16)
            if not chunk:
                break
            said += chunk
    return said


@pytest.mark.parametrize("backend", BACKENDS)
def test_sigkill_after_sigterm_still_leaves_nothing(tmp_path, engine, backend):
    """A harness that sends SIGTERM, then SIGKILL once the run said it was interrupted: the
    watchdog was not told "normal end" by the interruption (it was, while the judges'
    threads still ran, and the SIGKILL left their workspaces and scratch), so it sweeps."""
    with _slow_run(tmp_path, backend, engine) as proc:
        proc.send_signal(signal.SIGTERM)
        assert b"interrupted" in _said(proc, b"interrupted")
        time.sleep(0.5)  # the old runner had dismissed its watchdog by now, and hung on
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.communicate(timeout=60)
        assert _settle(engine, proc.pid) == []


AGENT = """import os
test = os.environ["GRADEBOX_TEST_ID"]
line = b"y" * 63 + b"\\n"
if test == "flood":  # 20 files of 4 MiB of text, each under the bounds of one file: 83 MB
    for i in range(20):
        open(f"f{i}.txt", "wb").write(line * 65000)
elif test == "links":  # 16 MiB of text under 20,000 names: one file to the quota
    open("big.txt", "wb").write(line * (1 << 18))
    os.mkdir("l")
    for i in range(20000):
        os.link("big.txt", f"l/{i}")
else:
    open("small.txt", "w").write("hello\\n")
print("done")
"""
BOUNDED_SUITE = """
workspace:
  template: ./template
target:
  image: python
  command: [python3, agent.py]
  timeout: 300s
tests:
  - id: flood
    input: q
    assert: [{type: script, command: "true"}]
  - id: links
    input: q
    assert: [{type: script, command: "grep -q 'another name (hard link)'"}]
  - id: small
    input: q
    assert: [{type: script, command: "grep -q hello"}]
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_hostile_workspace_is_one_tests_error_and_the_run_goes_on(tmp_path, backend):
    """An agent's workspace past the diff's bounds makes its test an error that names the
    bound; a file under 20,000 names is diffed once (and graded); the other test passes."""
    write(tmp_path / "template" / "agent.py", AGENT)
    suite = write(tmp_path / "suite.yaml", BOUNDED_SUITE)
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "gradebox", "run", str(suite), "--out", str(out),
                        "--sandbox", backend, "--workers", "3"],
                       capture_output=True, text=True)  # fmt: skip
    assert p.returncode == 3, p.stderr
    results = {}
    for line in (out / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        results[r["id"]] = r
    assert results["flood"]["status"] == "error"
    assert "past the limit of 67,108,864 bytes a diff may compare" in results["flood"]["error"]
    assert results["links"]["status"] == "passed", results["links"]["error"]
    assert results["small"]["status"] == "passed", results["small"]["error"]
