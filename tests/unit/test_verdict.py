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
    k = run("program", 137, signal=9)
    assert k.status is Status.error and "SIGKILL" in k.evidence
    s = run("program", None, start_error="nope: command not found")
    assert s.status is Status.error
    assert s.evidence == "Failed to start grader program: nope: command not found"
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


def test_a_grader_cannot_fake_a_start_failure_or_a_kill():
    # Start failures and kills are what the backend reports, not what the grader prints.
    r = run("program", 127, stderr=b"[gradebox] cannot enter /workspace/x\n")
    assert r.status is Status.failed and r.evidence == "Grader exited with exit code 127"
    r = run("program", 137, stderr=b"[INFO  tini (1)] Main child exited with signal\n")
    assert r.status is Status.failed
    r = run("program", 130)  # exit(130) of its own accord: a plain failure
    assert r.status is Status.failed and r.exit_code == 130


# The dialect table (see gradebox.graders.verdict), row by row.

PASS = json.dumps({"pass": True, "score": 1.0}).encode()
FAIL = json.dumps({"pass": False, "score": 0.3}).encode()


def test_debug_line_before_a_failing_result_is_not_a_pass():
    for dialect in ("script", "assertion"):
        r = run(dialect, 0, stdout=b"debug: loading\n" + FAIL)
        assert (r.status, r.score) == (Status.failed, 0.3), dialect
    r = run("script", 0, stdout=b'debug\n{\n  "pass": false,\n  "score": 0\n}\n')
    assert r.status is Status.failed
    # Two objects: the one that ends stdout is the result.
    r = run("script", 0, stdout=PASS + b"\n" + FAIL)
    assert r.status is Status.failed


def test_script_output_that_looks_like_a_broken_result_is_an_error():
    r = run("script", 0, stdout=b'{"pass": tru')
    assert r.status is Status.error and "unparseable" in r.evidence
    r = run("script", 0, stdout=b'note\n{"pass": true}\ntrailing words')
    assert r.status is Status.error
    r = run("script", 0, stdout=b"{'pass': True}")  # a Python dict, not JSON
    assert r.status is Status.error


def test_program_is_strict_about_stdout():
    assert run("program", 0, stdout=b"debug\n" + PASS).status is Status.error
    assert run("program", 0, stdout=b"").status is Status.passed


def test_inline_requires_json():
    assert run("inline", 0).status is Status.error
    assert run("inline", 0, stdout=b"looks fine").status is Status.error
    assert run("inline", 0, stdout=b"[1]").status is Status.error
    assert run("inline", 1, stdout=PASS).status is Status.error
    assert run("inline", 0, stdout=PASS).status is Status.passed
    r = run(
        "inline", 0, stdout=json.dumps({"pass": False, "score": 0.2, "reasoning": "no"}).encode()
    )
    assert (r.status, r.score, r.evidence) == (Status.failed, 0.2, "no")


def test_nonzero_exit_keeps_a_score_only_when_the_report_says_it_failed():
    for dialect in ("program", "script"):
        r = run(dialect, 1, stdout=json.dumps({"passed": True, "score": 0.9}).encode())
        assert (r.status, r.passed, r.score) == (Status.failed, False, 0.0), dialect
        r = run(dialect, 1, stdout=FAIL)
        assert (r.status, r.score) == (Status.failed, 0.3), dialect


def test_untrusted_output_is_bounded_and_writable():
    deep = b'{"pass": false, "details": ' + b'{"a": ' * 400 + b"1" + b"}" * 400 + b"}"
    r = run("script", 0, stdout=deep)
    assert r.status is Status.error and "nested deeper" in r.evidence
    arrays = b"[" * 100_000 + b"]" * 100_000
    assert run("program", 0, stdout=arrays).status is Status.error
    lone = b'{"pass": true, "reason": "\\ud800 ok", "checks": [{"text": "\\udfff", "pass": true}]}'
    r = run("script", 0, stdout=lone)
    assert r.status is Status.passed
    r.model_dump_json()  # writable: no surrogate survives
    assert "\ud800" not in r.evidence and r.evidence.endswith(" ok")
