"""The gradebox command, end to end, as a user runs it."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import leftovers_of, write

pytestmark = pytest.mark.docker
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "reference"


def gradebox(*args, env=None, **kw):
    return subprocess.run(
        [sys.executable, "-m", "gradebox", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        **kw,
    )


def test_passed_json_is_one_document(tmp_path, workspace):
    g = write(tmp_path / "g.yaml", "type: program\nprogram: 'true'\n")
    p = gradebox("grade", g, "--workspace", workspace, "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["status"] == "passed" and doc["image"]["id"].startswith("sha256:")
    assert set(doc) >= {
        "name",
        "type",
        "status",
        "passed",
        "score",
        "evidence",
        "checks",
        "details",
        "exit_code",
        "duration_ms",
        "image",
    }


@pytest.mark.parametrize(("program", "code"), [("'false'", 1), ("no-such-thing", 3)])
def test_exit_codes(tmp_path, workspace, program, code):
    g = write(tmp_path / "g.yaml", f"type: program\nprogram: {program}\n")
    p = gradebox("grade", g, "--workspace", workspace)
    assert p.returncode == code, p.stdout + p.stderr


def test_human_output(tmp_path, workspace):
    g = write(
        tmp_path / "g.yaml", "type: program\nprogram: sh\nargs: ['-c', 'echo boom >&2; exit 1']\n"
    )
    p = gradebox("grade", g, "--workspace", workspace)
    assert p.returncode == 1 and "FAIL" in p.stdout and "boom" in p.stdout


def test_config_error_is_one_line_exit_2_and_runs_nothing(tmp_path, workspace, engine):
    g = write(
        tmp_path / "grader.yaml", "type: program\nprogram: x\nenv:\n  Evaluate_Grader_Input: x\n"
    )
    p = gradebox("grade", g, "--workspace", workspace)
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "Traceback" not in p.stderr
    assert "grader.yaml:4: env.Evaluate_Grader_Input: reserved name" in p.stderr


def test_bad_payload_names_the_file(tmp_path, workspace):
    g = write(tmp_path / "g.yaml", "type: program\nprogram: 'true'\n")
    bad = write(tmp_path / "payload.json", '{"output": 5}')
    p = gradebox("grade", g, "--input", bad, "--workspace", workspace)
    assert p.returncode == 2 and "payload.json: output:" in p.stderr


def test_unreachable_engine_is_one_clear_line(tmp_path, workspace):
    # On docker: grade on oci with a locked, unpacked image never reaches the engine, as exec
    # (tests/docker/test_grade_lean.py).
    g = write(tmp_path / "g.yaml", "type: program\nprogram: 'true'\n")
    p = gradebox(
        "grade", g, "--workspace", workspace, "--sandbox", "docker",
        env={"DOCKER_HOST": f"unix://{tmp_path}/no.sock"},
    )  # fmt: skip
    assert p.returncode == 4
    assert f"cannot reach the Docker engine at unix://{tmp_path}/no.sock" in p.stderr
    assert p.stderr.strip().count("\n") == 0


def _wait_for_container(engine, pid, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        mine = leftovers_of(engine, pid, running=True)
        if mine:
            return mine
        time.sleep(0.2)
    raise AssertionError("the runner never started its container")


def _sleeping_runner(tmp_path, workspace, engine, backend):
    """A `gradebox grade` process whose grader sleeps; returns once its container runs."""
    g = write(tmp_path / "g.yaml", "type: program\nprogram: sleep\nargs: ['600']\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gradebox", "grade", str(g), "--workspace", str(workspace),
         "--sandbox", backend],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    _wait_for_container(engine, proc.pid)
    return proc


@pytest.mark.parametrize("backend", ["docker", "oci"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_interrupt_removes_the_container(tmp_path, workspace, engine, backend, sig):
    proc = _sleeping_runner(tmp_path, workspace, engine, backend)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert leftovers_of(engine, proc.pid) == []


def _watchdogs_of(pid: int) -> list[int]:
    """The runner's watchdog: its forked child running the runner's own command line (not
    its cgroup slot's server, forked too but inside a slot: sandbox/slots.py)."""
    me = Path(f"/proc/{pid}/cmdline").read_bytes()
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    found = []
    for child in map(int, children):
        try:
            cgroups = Path(f"/proc/{child}/cgroup").read_text()
            in_slot = any(f"/gradebox-{pid}-" in line for line in cgroups.splitlines())
            if Path(f"/proc/{child}/cmdline").read_bytes() == me and not in_slot:
                found.append(child)
        except OSError:
            pass
    return found


@pytest.mark.parametrize("backend", ["docker", "oci"])
def test_sigkilled_runner_is_cleaned_by_gc(tmp_path, workspace, engine, backend):
    """The runner and its watchdog killed together (a cgroup or pod killed whole): what they
    left stays until `gradebox gc`, which knows it by the dead pid."""
    proc = _sleeping_runner(tmp_path, workspace, engine, backend)
    watchdogs = _watchdogs_of(proc.pid)
    assert len(watchdogs) == 1, watchdogs
    os.kill(watchdogs[0], signal.SIGKILL)
    proc.kill()
    proc.wait()
    assert _wait_for_container(engine, proc.pid, timeout=5)  # orphaned, still there
    p = gradebox("gc", "--json")
    assert p.returncode == 0, p.stderr
    assert leftovers_of(engine, proc.pid) == []
    assert json.loads(p.stdout)["containers"]
    assert not list(Path("/tmp").glob(f"gradebox-{proc.pid}-*"))


def test_version_and_help():
    assert gradebox("--version").stdout.startswith("gradebox ")
    for cmd in ([], ["grade"], ["gc"], ["schemas"], ["images"], ["images", "build"]):
        p = gradebox(*cmd, "--help")
        assert p.returncode == 0 and "Usage" in p.stdout


def test_schemas_command(tmp_path):
    p = gradebox("schemas", tmp_path / "s")
    assert p.returncode == 0
    names = {x.name for x in (tmp_path / "s").iterdir()}
    assert {
        "payload.schema.json",
        "grader.schema.json",
        "result.schema.json",
        "grader-output.schema.json",
        "suite.schema.json",
        "test-result.schema.json",
    } <= names


@pytest.mark.parametrize(
    ("folder", "payload", "score"),
    [
        ("check-answer", "payload.json", 1.0),
        ("line-count", None, 1.0),
        ("program-score", None, 0.85),
    ],
)
def test_reference_examples_run_as_written(folder, payload, score):
    args = [
        "grade",
        EXAMPLES / folder / "grader.yaml",
        "--workspace",
        EXAMPLES / folder / "workspace",
        "--json",
    ]
    if payload:
        args += ["--input", EXAMPLES / folder / payload]
    p = gradebox(*args)
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads(p.stdout)["score"] == score


@pytest.mark.parametrize("backend", ["docker", "oci"])
@pytest.mark.parametrize("user", ["00", "+0"])
def test_root_spelled_otherwise_is_still_root(tmp_path, workspace, backend, user):
    """``security.user: "00"`` ran the grader as uid 0 on both backends, with no ``allow:
    [root]`` asked for: it is refused before anything runs, as "0" is."""
    script = 'echo "{\\"score\\": 1, \\"evidence\\": \\"uid=$(id -u)\\"}"'
    g = write(tmp_path / "g.yaml", "type: program\nprogram: sh\n"
              f"args: ['-c', '{script}']\nsecurity:\n  user: '{user}'\n")  # fmt: skip
    p = gradebox("grade", g, "--workspace", workspace, "--sandbox", backend, "--json")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "security.user" in p.stderr and "uid=0" not in p.stdout


@pytest.mark.parametrize("entry", ["", "."])
def test_no_program_of_ours_runs_from_the_current_folder(tmp_path, workspace, entry):
    """With an empty (or ".") entry in $PATH, a grader pack's own ``./crun`` ran on the host,
    as the runner (root here), handed the whole bundle: programs are looked up in absolute
    folders only."""
    pack = tmp_path / "pack"
    g = write(pack / "g.yaml", "type: program\nprogram: 'true'\n")
    mark = tmp_path / "ran"
    for name in ("crun", "runc", "busctl", "tar", "nsenter", "docker-init", "tini-static"):
        write(pack / name, f"#!/bin/sh\necho {name} >> {mark}\nexit 1\n").chmod(0o755)
    path = f"{entry}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    p = gradebox("grade", g, "--workspace", workspace, "--sandbox", "oci", "--json",
                 env={"PATH": path}, cwd=pack)  # fmt: skip
    assert not mark.exists(), mark.read_text()
    assert p.returncode == 0, p.stdout + p.stderr
