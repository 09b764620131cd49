import json

import pytest

from gradebox.graders.verdict import judge
from gradebox.protocol.models import Status
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


# --- Output that looks like a result is a result or an error, never the exit-code pass -------

BROKEN = b'{"pass": false, "reason": "wrong answer"}'


@pytest.mark.parametrize(
    "prefix",
    [
        "\ufeff",  # UTF-8 BOM
        "\u200b",  # zero-width space
        "\u2060\u200d",  # word joiner, zero-width joiner
        "\x00",  # NUL
        "\x1b[0m",  # ANSI reset
        "\x1b[1;31m\x1b[0m",  # colour, then reset
        "\x1b]0;title\x07",  # OSC: a terminal title
        "\x1b[{",  # an escape cut short
        "\u3164",  # Hangul filler (renders blank)
        "\u202e",  # right-to-left override
        "\x7f\x85",  # DEL, NEL
        "\U000e0041",  # a tag character
        "\xa0\u3000\ufeff",  # no-break and ideographic spaces, then a BOM
    ],
    ids=repr,
)
def test_a_result_behind_invisible_characters_is_an_error(prefix):
    for dialect in ("script", "assertion"):
        for before in (b"", b"debug: loading\n"):
            stdout = before + prefix.encode() + BROKEN
            r = run(dialect, 0, stdout=stdout)
            assert r.status is Status.error and not r.passed, (dialect, stdout)
    assert run("program", 0, stdout=prefix.encode() + BROKEN).status is Status.error


def test_a_result_behind_invisible_characters_control():
    # Whitespace in front (a no-break space too) is no disguise: the object is the result.
    for before in (b"", b"debug: loading\n", b"  \n\t", b"progress 50%\r", b"\xc2\xa0"):
        r = run("script", 0, stdout=before + BROKEN)
        assert r.status is Status.failed and r.evidence == "wrong answer", before


def test_a_verdict_glued_to_other_text_is_an_error():
    # An answer echoed without its newline glues the grader's verdict onto it.
    for stdout in (
        b'the answer is 41{"pass": false}',
        b'debug\nnote[INFO  tini (7)] x{"score": 0.1, "pass": false}',
        b'{"checks": [{"text": "a", "pass": false}]} trailing',
        b'x {"reason": "no", "passed" : false}\nmore words',
        b'[{"pass": false, "reason": "wrong"}]',  # a result in an array
        b'"{\\"pass\\": false}"',  # a result encoded as a JSON string
        b'log: "{\\"score\\": 0}"',
    ):
        r = run("script", 0, stdout=stdout)
        assert r.status is Status.error and not r.passed, stdout
    r = run("script", 0, stdout='{"pass": false}'.encode("utf-16"))  # NULs in between
    assert r.status is Status.error
    # A verdict on the wrong stream is no exit-code pass either.
    for dialect in ("program", "script"):
        r = run(dialect, 0, stderr=b'loading\n{"pass": false, "reason": "wrong"}\n')
        assert r.status is Status.error and "on stderr" in r.evidence, dialect
    assert run("program", 0, stderr=b'DEBUG {"score": 0.5}\ndone').status is Status.passed
    # Free text that names no verdict field is still check text.
    assert run("script", 0, stdout=b'sent {"id": 3} ok').status is Status.passed
    assert run("script", 0, stdout=b"pass: yes").status is Status.passed
    assert run("script", 0, stdout=b'[1, "pass"]').status is Status.passed
    assert run("script", 0, stdout=b'"all good"').status is Status.passed


def test_a_result_spliced_or_misspelled_is_an_error():
    for body in (
        b'{"pass": false, "reason": "x", "pass": true}',  # a repeated key: json keeps the last
        b'{"Pass": false, "score": 1}',
        b'{"pass\\u200b": false, "score": 1}',
        b'{"pass": true, "Score": 0}',
        b'{"PASSED": false, "score": 1.0}',
    ):
        assert run("script", 0, stdout=body).status is Status.error, body


def test_result_found_across_lines_and_strings():
    cases = {
        b'debug {\n{"a": "}}]]", "pass": false}': Status.failed,  # brackets inside strings
        b'log\n{"r": "quote \\" and {", "pass": false}': Status.failed,
        b'log\n{"r": "ends in a backslash \\\\",\n "pass": false}': Status.failed,
        b'x\r\n{\r\n "pass": false,\r\n "checks": [\r\n  {"text": "a", "pass": false}\r\n ]\r\n}': (
            Status.failed
        ),
        b'log ]]]\n{"pass": false,\n "details": {"a": [[1], {"b": 2}]}}': Status.failed,
        b'{"pass": true}\n{"pass": false}': Status.failed,
        b'{"a": [\n{"pass": true}\n]}': Status.error,  # one object: not a result
    }
    for stdout, status in cases.items():
        assert run("script", 0, stdout=stdout).status is status, stdout


def test_find_result_reads_each_line_once():
    # Every `{` line used to be parsed to the end of stdout: a square of the output.
    from gradebox.graders import verdict

    seen = []
    real = verdict.load_untrusted_json

    def counting(text):
        seen.append(len(text))
        return real(text)

    for stdout in ("{\n" * 20_000, '{"a":[\n' * 20_000, '{"a": 1}\n' * 20_000 + "x"):
        seen.clear()
        original, verdict.load_untrusted_json = verdict.load_untrusted_json, counting
        try:
            verdict.find_result(stdout, trailing=True)
        finally:
            verdict.load_untrusted_json = original
        assert sum(seen) <= 2 * len(stdout), (stdout[:10], len(seen))


def test_the_invisible_class_covers_every_control_format_and_space_character():
    import re
    import sys
    import unicodedata

    from gradebox.graders.verdict import _INVISIBLE

    invisible = re.compile(f"[{_INVISIBLE}\n\r\x1b]")
    missing = [
        hex(c)
        for c in range(sys.maxunicode + 1)
        if unicodedata.category(chr(c)) in ("Cc", "Cf", "Zs", "Zl", "Zp")
        and not invisible.match(chr(c))
    ]
    assert missing == []


def test_hostile_stdout_of_a_mebibyte_is_judged_at_once():
    # Each took from seconds to hours (a quadratic pre-scan and re-scan); each must be linear.
    import subprocess
    import sys

    script = (
        "from gradebox.graders.verdict import judge\n"
        "from gradebox.sandbox.base import Limits, RunOutcome\n"
        "n = 1 << 20\n"
        "for text in ['\"' + '\\\\\"' * (n // 2), '{\"a\": \"' + '\\\\\"' * (n // 2),\n"
        "             '{\\n' * (n // 2), '{\"a\":[\\n' * (n // 7), '{\"a\":' * (n // 5),\n"
        "             '[' * n, '{\"a\": 1}\\n' * (n // 9), '\\u200b' * (n // 3) + '{}']:\n"
        "    judge('script', 'g', RunOutcome(exit_code=0, stdout=text.encode()),\n"
        "          timeout=1, limits=Limits())\n"
    )
    # Generous: these take milliseconds; before, the first alone ran for hours.
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)


# --- negate never turns a crash into a pass --------------------------------------------------


def test_a_non_zero_exit_that_may_be_a_crash_is_no_verdict():
    crash = run("program", 1, stderr=b"Traceback (most recent call last):\nValueError: x\n")
    assert crash.status is Status.failed and crash.no_verdict
    assert run("program", 1, stdout=b"Traceback ...\nValueError").no_verdict  # 2>&1
    assert run("program", 1).no_verdict is None  # a silent fail: the exit-code convention
    assert run("script", 1).no_verdict is None
    # A script's stdout beside a non-zero exit may be its check text or a traceback a wrapper
    # sent there (`exec python3 check.py 2>&1`): the two cannot be told apart, so both may be
    # a crash, in every dialect that has an exit-code mode.
    for dialect in ("script", "assertion"):
        assert run(dialect, 1, stdout=b"Traceback ...\nKeyError: 'x'").no_verdict
        assert run(dialect, 1, stdout=b"3 pages, 5 expected").no_verdict
        assert run(dialect, 1, stdout=FAIL).no_verdict is None  # it reported its failure
    assert run("program", 1, stdout=FAIL).no_verdict is None  # it reported its failure
    assert run("program", 0).no_verdict is None
