"""Graders that misbehave on purpose. Each must end as a result, never hurt the host."""

import resource
import time

import pytest

from gradebox.graders import load_grader, run_grader
from gradebox.protocol import Payload, Status
from tests.conftest import write

pytestmark = pytest.mark.docker


def run(tmp_path, workspace, box, text):
    return run_grader(load_grader(write(tmp_path / "g.yaml", text)), Payload(), workspace, box)


def test_sleeping_past_the_timeout(tmp_path, workspace, box):
    started = time.monotonic()
    r = run(tmp_path, workspace, box, "type: program\nprogram: sleep\nargs: ['600']\ntimeout: 2s\n")
    assert r.status is Status.error and r.timed_out
    assert r.evidence == "Grader timed out after 2s"
    assert time.monotonic() - started < 20
    assert box.leftovers() == []


def test_child_ignoring_sigterm_dies_with_the_container(tmp_path, workspace, box):
    script = (
        "import os, signal, time\\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
        "if os.fork() == 0:\\n    time.sleep(600)\\n"
        "time.sleep(600)\\n"
    )
    r = run(
        tmp_path,
        workspace,
        box,
        f'type: program\nprogram: python3\nargs: ["-c", "{script}"]\ntimeout: 1s\n',
    )
    assert r.status is Status.error and r.timed_out
    assert box.leftovers() == []


def test_fork_bomb_is_contained(tmp_path, workspace, box):
    started = time.monotonic()
    r = run(
        tmp_path,
        workspace,
        box,
        "type: program\nprogram: sh\n"
        "args: ['-c', 'b() { b | b & }; b; sleep 30']\ntimeout: 5s\nlimits:\n  pids: 64\n",
    )
    # The bomb hits the pids limit ("Cannot fork"); whether the shell then fails or the
    # timeout fires first, it is never a pass, and every process is gone with the container.
    assert r.status in (Status.failed, Status.error) and not r.passed
    assert r.timed_out or "fork" in (r.stderr_tail or "").lower()
    assert time.monotonic() - started < 30
    assert box.leftovers() == []


def test_allocating_3_gib_is_oom_killed(tmp_path, workspace, box):
    r = run(
        tmp_path,
        workspace,
        box,
        "type: program\nprogram: python3\nargs: ['-c', 'x = bytearray(3 << 30); print(\"{}\")']\n",
    )
    assert r.status is Status.error and r.oom_killed
    assert r.evidence == "Grader was killed: out of memory (limit 1 GiB)"


def test_printing_a_gigabyte_is_capped(tmp_path, workspace, box):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    r = run(
        tmp_path,
        workspace,
        box,
        "type: program\nprogram: sh\nargs: ['-c', 'head -c 1073741824 /dev/zero']\n",
    )
    grew_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert r.status is Status.error and r.output_truncated
    assert "cap on stdout" in r.evidence
    assert grew_mib < 64, f"runner grew by {grew_mib:.0f} MiB"
    assert time.monotonic() - started < 30


def test_writing_into_the_workspace_fails_and_host_is_untouched(tmp_path, workspace, box):
    r = run(
        tmp_path,
        workspace,
        box,
        "type: program\nprogram: sh\nargs: ['-c', 'echo x > /workspace/answer.txt']\n",
    )
    assert r.status is Status.failed and "Read-only file system" in r.stderr_tail
    assert (workspace / "answer.txt").read_text() == "42\n"


def test_network_interfaces_are_loopback_only(tmp_path, workspace, box):
    r = run(
        tmp_path,
        workspace,
        box,
        "type: script\ncommand: \"tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '\"\n",
    )
    assert r.status is Status.passed and r.evidence == "lo"


def test_uid_capabilities_and_root_fs(tmp_path, workspace, box):
    r = run(
        tmp_path,
        workspace,
        box,
        "type: script\ncommand: "
        '"id -u; grep CapEff /proc/self/status | cut -f2; touch /usr/x 2>&1 | cut -d: -f3"\n',
    )
    uid, caps, rofs = r.evidence.splitlines()
    assert uid != "0" and caps == "0000000000000000" and rofs.strip() == "Read-only file system"


def test_grader_killed_by_sigkill(tmp_path, workspace, box):
    r = run(tmp_path, workspace, box, "type: program\nprogram: sh\nargs: ['-c', 'kill -9 $$']\n")
    assert r.status is Status.error and "SIGKILL" in r.evidence and not r.passed


def test_unparseable_and_off_schema_stdout(tmp_path, workspace, box):
    r = run(tmp_path, workspace, box, "type: program\nprogram: echo\nargs: ['not json']\n")
    assert r.status is Status.error
    assert r.evidence.startswith("Grader returned unparseable JSON output on stdout:")
    r = run(tmp_path, workspace, box, "type: program\nprogram: echo\nargs: ['{\"verdict\": 1}']\n")
    assert r.status is Status.error and r.evidence.startswith("Grader output did not match schema:")


def test_missing_program_is_a_failed_start(tmp_path, workspace, box):
    r = run(tmp_path, workspace, box, "type: program\nprogram: no-such-program\n")
    assert r.status is Status.error
    assert r.evidence.startswith("Failed to start grader program:")


def test_failing_pytest_is_failed_not_error(tmp_path, workspace, box):
    write(
        workspace / "test_x.py", "def test_ok():\n    assert 1\n\ndef test_bad():\n    assert 0\n"
    )
    r = run(
        tmp_path,
        workspace,
        box,
        "type: program\nprogram: python3\nargs: [-m, pytest, -q, -p, no:cacheprovider]\n",
    )
    assert r.status is Status.failed and "1 failed, 1 passed" in (r.stdout_tail or "")
