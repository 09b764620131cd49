import json

from gradebox.graders.verdict import judge
from gradebox.protocol import Status
from gradebox.sandbox.base import Limits, RunOutcome


def run(kind, code, stdout=b"", stderr=b"", **kw):
    outcome = RunOutcome(exit_code=code, stdout=stdout, stderr=stderr, **kw)
    return judge(kind, "g", outcome, timeout=2.0, limits=Limits())


def test_exit_code_mode_program():
    ok = run("program", 0)
    assert (ok.status, ok.passed, ok.score, ok.evidence) == (
        Status.passed,
        True,
        1.0,
        "Grader exited successfully",
    )
    bad = run("program", 1, stderr=b"FAILED test_x")
    assert (bad.status, bad.score, bad.evidence) == (
        Status.failed,
        0.0,
        "Grader exited with exit code 1",
    )
    assert bad.stderr_tail == "FAILED test_x"


def test_program_nonzero_with_stderr_is_a_failure_not_an_error():
    # A failing pytest run: non-zero exit and plenty on stderr.
    assert run("program", 1, stderr=b"E   assert 1 == 2").status is Status.failed


def test_script_nonzero_with_stderr_is_an_execution_error():
    r = run("script", 2, stderr=b"Traceback...\nKeyError: 'x'")
    assert r.status is Status.error and "KeyError" in r.evidence


def test_script_exit_code_mode_stdout_is_check_text():
    r = run("script", 0, stdout=b"PDF has 7 pages\n")
    assert r.status is Status.passed and r.checks[0].text == "PDF has 7 pages"
    r = run("script", 1, stdout=b"PDF has 2 pages\n")
    assert r.status is Status.failed and r.checks[0].passed is False


def test_program_unparseable_stdout():
    r = run("program", 0, stdout=b"all good!")
    assert r.status is Status.error
    assert r.evidence.startswith("Grader returned unparseable JSON output on stdout: ")


def test_program_off_schema_stdout():
    r = run("program", 0, stdout=json.dumps({"hello": 1}).encode())
    assert r.status is Status.error and r.evidence.startswith("Grader output did not match schema:")
    r = run("program", 0, stdout=b"[1, 2]")
    assert r.status is Status.error and "did not match schema" in r.evidence


def test_program_json_result():
    body = {"name": "x", "passed": True, "score": 0.85, "evidence": "14 of 16", "kind": "code"}
    r = run("program", 0, stdout=json.dumps(body).encode())
    assert (r.status, r.score, r.evidence) == (Status.passed, 0.85, "14 of 16")


def test_nonzero_exit_is_never_a_pass():
    r = run("program", 1, stdout=json.dumps({"pass": True, "score": 1}).encode())
    assert r.passed is False and r.status is Status.failed


def test_timeout_oom_signal_start_and_overflow_are_errors():
    t = run("program", None, timed_out=True)
    assert t.status is Status.error and t.evidence == "Grader timed out after 2s" and t.timed_out
    o = run("program", 137, oom_killed=True)
    assert o.status is Status.error and "out of memory" in o.evidence and o.oom_killed
    k = run("program", 137)
    assert k.status is Status.error and "SIGKILL" in k.evidence
    s = run("program", 127, stderr=b"[FATAL tini (7)] exec nope failed: No such file or directory")
    assert s.status is Status.error
    assert s.evidence == "Failed to start grader program: No such file or directory"
    f = run("program", None, stdout=b"x" * 10, stdout_dropped=5)
    assert f.status is Status.error and "cap on stdout" in f.evidence and f.output_truncated
    for r in (t, o, k, s, f):
        assert r.passed is False and r.score == 0.0


def test_tails_only_when_not_passed():
    assert run("program", 0, stderr=b"noise").stderr_tail is None


def test_program_nonzero_with_text_on_stdout_is_failed():
    r = run("program", 1, stdout=b"F.\n1 failed, 1 passed in 0.01s\n")
    assert r.status is Status.failed and r.evidence == "Grader exited with exit code 1"
    assert "1 failed" in r.stdout_tail


def test_gate_start_failures_are_errors():
    r = run("program", 127, stderr=b"gradebox-gate: 1: exec: nosuch: not found\n")
    assert r.status is Status.error
    assert r.evidence == "Failed to start grader program: nosuch: not found"
    r = run("program", 127, stderr=b"[gradebox] cannot enter /workspace/x\n")
    assert r.evidence == "Failed to start grader program: cannot enter /workspace/x"
