"""`gradebox run` end to end, on real containers."""

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gradebox.drivers.runner import RunOptions, read_results, run_suite
from gradebox.images import ImageResolver
from gradebox.suite import load_suite
from tests.conftest import leftovers_of, write

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]


def gradebox(*args, **kw):
    return subprocess.run(
        [sys.executable, "-m", "gradebox", *map(str, args)], capture_output=True, text=True, **kw
    )


def test_quickstart(tmp_path):
    out = tmp_path / "out"
    p = gradebox(
        "run",
        ROOT / "examples/quickstart/suite.yaml",
        "--out",
        out,
        "--junit",
        tmp_path / "junit.xml",
        "--workers",
        "2",
    )
    assert p.returncode == 1, p.stdout + p.stderr  # purposeful failures, nothing errored
    results = read_results(out / "results.jsonl")
    assert {k: r.status.value for k, r in results.items()} == {
        "fix-add": "passed",
        "meaning-of-life": "passed",
        "purposeful-failures": "failed",
    }
    fix = results["fix-add"]
    assert fix.output.startswith("I fixed add()") and fix.file_changes_bytes > 0
    assert {g.name: g.status.value for g in fix.graders} == {
        "pytest": "passed",
        "notes-and-diff": "passed",
        "contains 'fixed'": "passed",
        "min-words": "passed",
    }
    assert fix.images and all(v.startswith("sha256:") for v in fix.images.values())
    assert {"workspace", "target", "graders", "total"} <= set(fix.timings_ms)
    bad = results["purposeful-failures"]
    assert bad.score == pytest.approx(0.5 / 2.5)
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["passed"], summary["failed"], summary["errored"]) == (2, 1, 0)
    suite_xml = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert suite_xml.get("tests") == "3" and suite_xml.get("failures") == "1"
    assert "purposeful-failures" in p.stdout and "FAIL" in p.stdout


def test_reference_examples_suite(tmp_path):
    p = gradebox("run", ROOT / "examples/reference/suite.yaml", "--out", tmp_path, "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    assert doc["summary"]["passed"] == 3
    scores = {r.id: r.score for r in read_results(tmp_path / "results.jsonl").values()}
    assert scores["program-score"] == 0.85


SUITE = """
name: features
workspace:
  template: ./tpl
  before_each: "echo prepared > prepared.txt"
  after_each: [sh, -c, "echo cleanup >&2"]
target:
  command: [python3, agent.py]
  timeout: 20s
tests:
  - id: writer
    input: write
    assert:
      - type: script
        name: payload
        command: [python3, show.py]
  - id: reader
    input: read
    assert:
      - type: script
        name: payload
        command: [python3, show.py]
"""

AGENT = """import os, pathlib, socket, sys
task = sys.stdin.read()
names = sorted(os.listdir("."))
if task == "write":
    pathlib.Path("written.txt").write_text("by writer\\n")
ifaces = [l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]]
print(f"task={task} saw={names} ifaces={ifaces} id={os.environ['GRADEBOX_TEST_ID']}")
"""

SHOW = """import json, os, sys
d = json.load(sys.stdin)
print(json.dumps({"pass": True, "reason": d["workspace_path"],
                  "details": {"file_changes": d["file_changes"], "output": d["output"],
                              "cwd_files": sorted(os.listdir("."))}}))
"""


def test_workspace_target_hooks_and_payload(tmp_path, box, engine):
    write(tmp_path / "tpl" / "seed.txt", "seed\n")
    write(tmp_path / "agent.py", AGENT)
    write(tmp_path / "show.py", SHOW)
    suite = load_suite(write(tmp_path / "suite.yaml", SUITE))
    summary = run_suite(suite, box, ImageResolver(engine), RunOptions(tmp_path / "out", workers=2))
    assert summary.passed == 2, read_results(tmp_path / "out" / "results.jsonl")
    results = read_results(tmp_path / "out" / "results.jsonl")
    writer, reader = results["writer"], results["reader"]
    # before_each ran in the workspace before the target and the baseline.
    assert "prepared.txt" in writer.output and "seed.txt" in writer.output
    # Fresh template per test: the reader never sees the writer's file.
    assert "written.txt" not in reader.output
    # The target runs with the network off.
    assert "ifaces=['lo']" in writer.output and "id=writer" in writer.output
    details = writer.graders[0].details
    assert details["output"] == writer.output
    assert (
        "+++ b/written.txt" in details["file_changes"] and "prepared" not in details["file_changes"]
    )
    assert writer.graders[0].evidence == "/workspace"
    assert "written.txt" in details["cwd_files"]
    assert reader.graders[0].details["file_changes"] == ""


def test_failing_target_is_an_error_and_the_run_goes_on(tmp_path, box, engine):
    write(
        tmp_path / "suite.yaml",
        """
target:
  command: "case $(cat) in boom) echo dying >&2; exit 3;; *) echo fine;; esac"
tests:
  - id: boom
    input: boom
    assert:
      - {type: contains, value: fine}
      - {type: script, name: never-released, command: "true"}
  - id: ok
    input: calm
    assert: [{type: contains, value: fine}]
""",
    )
    suite = load_suite(tmp_path / "suite.yaml")
    summary = run_suite(suite, box, ImageResolver(engine), RunOptions(tmp_path / "out"))
    results = read_results(tmp_path / "out" / "results.jsonl")
    assert results["boom"].status.value == "error"
    assert results["boom"].error == "target exited with code 3: dying"
    assert results["boom"].graders == []  # its grader was started ahead, then discarded
    assert box.leftovers() == []
    assert results["ok"].status.value == "passed"
    assert (summary.errored, summary.passed) == (1, 1)


def test_filter_and_validate(tmp_path):
    suite = write(
        tmp_path / "suite.yaml",
        "tests:\n"
        + "".join(
            f"  - id: t{i}\n    output: x\n    assert: [{{type: equals, value: x}}]\n"
            for i in range(5)
        ),
    )
    p = gradebox("run", suite, "--filter", "t[13]", "--out", tmp_path / "o", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["summary"]["total"] == 2
    assert gradebox("validate", suite).returncode == 0
    bad = write(tmp_path / "bad.yaml", "tests:\n  - id: a\n    assert:\n      - Be nice\n")
    p = gradebox("validate", bad)
    assert p.returncode == 2 and "bad.yaml:4: tests.0.assert.0:" in p.stderr


def test_80_tests_with_several_workers(tmp_path, box, engine):
    """Docker's engine path, 4 workers at once: each test recorded once, its own verdict.
    (Throughput at 200 and 1,000 tests is the bench's: bench/run.py.)"""
    tests = "".join(
        f"  - id: t{i:03d}\n    output: 'answer {i}'\n    assert:\n"
        f"      - {{type: contains, value: 'answer'}}\n"
        f"      - {{type: script, command: 'test {i} -ne 13'}}\n"
        for i in range(80)
    )
    suite = load_suite(write(tmp_path / "suite.yaml", f"tests:\n{tests}"))
    summary = run_suite(suite, box, ImageResolver(engine), RunOptions(tmp_path / "o", workers=4))
    assert (summary.total, summary.passed, summary.failed, summary.errored) == (80, 79, 1, 0)
    lines = (tmp_path / "o" / "results.jsonl").read_text().splitlines()
    assert len(lines) == 80 and len({json.loads(x)["id"] for x in lines}) == 80
    assert box.leftovers() == []


def _no_scratch_of(pid):
    import tempfile

    left = list(Path(tempfile.gettempdir()).glob(f"gradebox-{pid}-*"))
    mounts = [
        m for m in Path("/proc/self/mountinfo").read_text().splitlines() if f"gradebox-{pid}-" in m
    ]
    return left == [] and mounts == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_interrupt_then_resume(tmp_path, engine, sig):
    tests = "".join(
        f"  - id: t{i:02d}\n    output: x\n    assert:\n"
        f"      - {{type: script, command: 'sleep 1'}}\n"
        for i in range(16)
    )
    suite = write(tmp_path / "suite.yaml", f"tests:\n{tests}")
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gradebox", "run", str(suite), "--out", str(out), "--workers", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    results = out / "results.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if results.exists() and len(results.read_text().splitlines()) >= 3:
            break
        time.sleep(0.1)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert _no_scratch_of(proc.pid)
    done = len(read_results(results))
    assert 3 <= done < 16
    left = [
        c
        for c in engine.containers({"gradebox.owner": None})
        if c["Labels"]["gradebox.owner"].endswith(f":{proc.pid}")
    ]
    assert left == []
    assert json.loads((out / "summary.json").read_text())["interrupted"] is True

    p = gradebox("run", suite, "--resume", out, "--workers", "4", "--json")
    assert p.returncode == 0, p.stderr
    assert f"reused {done} results" in p.stderr
    final = read_results(results)
    assert len(final) == 16
    assert json.loads(p.stdout)["summary"]["passed"] == 16
    # Only the missing tests ran again: each id appears once per run that finished it.
    ids = [json.loads(x)["id"] for x in results.read_text().splitlines() if x.strip()]
    assert len(ids) == 16
    assert os.path.exists(out / "summary.json")


AHEAD_SUITE = """
target:
  command: "sleep 30; echo done"
  timeout: 60s
tests:
  - id: slow
    input: go
    assert:
      - {type: script, name: one, command: "true"}
      - {type: script, name: two, command: "true"}
"""


def _mine(engine, pid, running=False):
    return leftovers_of(engine, pid, running=running)


def _wait_for(predicate, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("condition never held")


@pytest.mark.parametrize("backend", ["docker", "oci"])
@pytest.mark.parametrize("how", ["sigint", "sigterm", "sigkill"])
def test_containers_started_ahead_are_never_left_behind(tmp_path, engine, how, backend):
    suite = write(tmp_path / "suite.yaml", AHEAD_SUITE)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gradebox", "run", str(suite), "--out", str(tmp_path / "out"),
         "--sandbox", backend],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        # While the target works, both graders' containers are already started and waiting.
        _wait_for(lambda: len(_mine(engine, proc.pid, running=True)) >= 3)
    except AssertionError:
        proc.kill()
        raise
    if how in ("sigint", "sigterm"):
        proc.send_signal(signal.SIGINT if how == "sigint" else signal.SIGTERM)
        proc.communicate(timeout=60)
        assert proc.returncode == 130
        assert _no_scratch_of(proc.pid)
    else:
        # A SIGKILLed runner cannot clean up; its watchdog does, at once and without gc (an
        # engine call it had in flight may still land a moment later: swept again).
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 30
        while (_mine(engine, proc.pid) or not _no_scratch_of(proc.pid)) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.2)
        assert _no_scratch_of(proc.pid)  # the workspace mount and scratch are gone too
    assert _mine(engine, proc.pid) == []


RESUME_SUITE = """
tests:
  - id: a
    output: alpha
    assert: [{type: script, command: [python3, g.py]}]
  - id: b
    output: beta
    assert: [{type: script, command: [python3, g.py]}]
"""


def test_resume_reuses_only_unchanged_tests(tmp_path):
    suite = write(tmp_path / "suite.yaml", RESUME_SUITE)
    write(tmp_path / "g.py", 'import json; print(json.dumps({"pass": True}))\n')
    out = tmp_path / "out"
    assert gradebox("run", suite, "--out", out).returncode == 0
    # Unchanged: both reused, nothing runs.
    p = gradebox("run", suite, "--resume", out, "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["summary"]["reused"] == 2, p.stderr
    # The grader file changed: every verdict it gave is stale and is graded again.
    write(tmp_path / "g.py", 'import json; print(json.dumps({"pass": False}))\n')
    p = gradebox("run", suite, "--resume", out, "--json")
    assert p.returncode == 1 and json.loads(p.stdout)["summary"]["reused"] == 0, p.stderr
    # One test changed: only that one runs again; the file holds one line per test.
    write(tmp_path / "suite.yaml", RESUME_SUITE.replace("beta", "gamma"))
    p = gradebox("run", suite, "--resume", out, "--json")
    assert json.loads(p.stdout)["summary"]["reused"] == 1, p.stderr
    lines = (out / "results.jsonl").read_text().splitlines()
    assert sorted(json.loads(x)["id"] for x in lines) == ["a", "b"]
    assert read_results(out / "results.jsonl")["b"].output == "gamma"


def test_resume_retries_errors_on_request_and_refuses_a_damaged_file(tmp_path):
    suite = write(tmp_path / "suite.yaml", RESUME_SUITE)
    write(tmp_path / "g.py", "import sys; sys.exit('boom')\n")  # stderr + exit 1: error
    out = tmp_path / "out"
    assert gradebox("run", suite, "--out", out).returncode == 3
    p = gradebox("run", suite, "--resume", out, "--json")
    assert json.loads(p.stdout)["summary"]["reused"] == 2  # errors are results too...
    p = gradebox("run", suite, "--resume", out, "--retry-errors", "--json")
    assert json.loads(p.stdout)["summary"]["reused"] == 0  # ...until asked to retry them
    text = (out / "results.jsonl").read_text().splitlines()
    (out / "results.jsonl").write_text("not json\n" + "\n".join(text) + "\n")
    p = gradebox("run", suite, "--resume", out)
    assert p.returncode == 2 and "results.jsonl:1" in p.stderr and "not a valid result" in p.stderr
    # A torn last line (a killed writer) is tolerated.
    (out / "results.jsonl").write_text("\n".join(text) + '\n{"id": "a", "sta')
    assert gradebox("run", suite, "--resume", out).returncode == 3


def test_auto_says_which_sandbox_and_a_missing_image_runs_nothing(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "GRADEBOX_SANDBOX"}
    suite = write(
        tmp_path / "suite.yaml",
        "target: {command: 'echo hi'}\ntests:\n  - id: t\n    input: go\n    assert:\n"
        "      - {type: script, command: 'true', image: gradebox/no-such-image}\n",
    )
    out = tmp_path / "out"
    p = gradebox("run", suite, "--out", out, env=env)
    assert p.returncode == 2, p.stderr
    assert "sandbox: oci" in p.stderr  # auto chose, and said so
    assert "no-such-image" in p.stderr
    assert not (out / "results.jsonl").exists()  # the plan failed: not even the target ran


HOOKS_SUITE = """name: hooks
workspace:
  template: ./tpl
  repos:
    - {path: ./repo, source: ./src-repo, ref: first}
  before_all: [sh, -c, "cat repo/v.txt > staged.txt"]
  after_all: [sh, -c, "exit 3"]
tests:
  - id: a
    output: x
    assert:
      - {type: program, program: sh, args: [-c, "grep -qx one $EVALUATE_WORKSPACE/staged.txt"]}
"""


def _git(cwd, *args):
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


def test_repos_at_a_ref_before_all_and_a_failing_after_all(tmp_path, box, engine):
    src = tmp_path / "src-repo"
    src.mkdir()
    _git(src, "init", "-q")
    write(src / "v.txt", "one\n")
    _git(src, "add", ".")
    _git(src, "commit", "-qm", "1")
    _git(src, "tag", "first")
    write(src / "v.txt", "two\n")
    _git(src, "commit", "-qam", "2")
    write(tmp_path / "tpl" / "keep.txt", "k\n")
    suite = load_suite(write(tmp_path / "suite.yaml", HOOKS_SUITE))
    summary = run_suite(suite, box, ImageResolver(engine), RunOptions(tmp_path / "o"))
    result = read_results(tmp_path / "o" / "results.jsonl")["a"]
    assert result.passed, (result.error, [g.evidence for g in result.graders])
    assert summary.warnings == ["after_all exited with code 3"]


def test_a_failing_before_all_makes_every_test_an_error(tmp_path, box, engine):
    write(tmp_path / "tpl" / "keep.txt", "k\n")
    body = HOOKS_SUITE.replace(
        "  repos:\n    - {path: ./repo, source: ./src-repo, ref: first}\n", ""
    ).replace("cat repo/v.txt > staged.txt", "exit 7")
    body += "  - id: b\n    output: y\n    assert: [{type: contains, value: y}]\n"
    suite = load_suite(write(tmp_path / "suite.yaml", body))
    summary = run_suite(suite, box, ImageResolver(engine), RunOptions(tmp_path / "o"))
    results = read_results(tmp_path / "o" / "results.jsonl")
    assert summary.errored == 2
    assert all(r.error == "before_all exited with code 7" for r in results.values())
