"""Assertion modifiers, sets, gates, trace checks, the cli answer and Vally's sub-results."""

from __future__ import annotations

import json

import pytest

from gradebox.graders.assertion import AssertSet, HostAssertion, aggregate, fold
from gradebox.graders.builtin import BuiltinAssertion
from gradebox.graders.trace import TraceAssertion, trace_of, vally_input
from gradebox.graders.verdict import read_result
from gradebox.lifecycle.steps import read_cli_answer, render_cli_command
from gradebox.protocol.models import GraderResult, Message, Payload, Status


def _host(kind: str, value: object = None, **scoring: object) -> HostAssertion:
    return HostAssertion(check=BuiltinAssertion(type=kind, value=value), **scoring)  # type: ignore[arg-type]


def _results(*assertions: HostAssertion, output: str) -> dict[int, GraderResult]:
    return {id(a): a.evaluate(Payload(output=output)) for a in assertions}


def test_negate_swaps_a_verdict_but_never_an_error():
    a = _host("contains", "x", negate=True)
    r = fold(a, _results(a, output="abc"))
    assert r.passed and r.score == 1.0 and r.negated
    err = GraderResult(name="g", status=Status.error, passed=False, score=0.0)
    r = fold(a, {id(a): err})
    assert r.status is Status.error and not r.passed


def test_negate_never_turns_a_crash_into_a_pass():
    from gradebox.graders.verdict import judge
    from gradebox.sandbox.base import Limits, RunOutcome

    def negated(dialect: str, code: int, stdout: bytes = b"", stderr: bytes = b"") -> GraderResult:
        a = _host("contains", "x", negate=True)  # stands for a grader with `negate: true`
        outcome = RunOutcome(exit_code=code, stdout=stdout, stderr=stderr)
        result = judge(dialect, "g", outcome, timeout=5, limits=Limits())
        return fold(a, {id(a): result})

    traceback = b"Traceback (most recent call last):\n  ...\nZeroDivisionError: division by zero\n"
    for r in (
        negated("program", 1, stderr=traceback),
        negated("program", 1, stdout=traceback),  # a crash sent to stdout (2>&1)
        negated("program", 2, stdout=b"oops", stderr=b"warning"),
        negated("script", 1, stderr=traceback),
        negated("assertion", 1, stderr=b"node:internal/modules/cjs/loader:1080"),
        # A wrapper that sends the traceback to stdout (`exec python3 check.py 2>&1`): on a
        # script's stdout it reads like check text, and is no verdict either.
        negated("script", 1, stdout=traceback),
        negated("assertion", 1, stdout=traceback),
        negated("script", 1, stdout=b"found TODO in 3 files"),  # a crash? cannot be told apart
    ):
        assert r.status is Status.error and not r.passed and r.score == 0.0, r
        assert r.evidence.startswith(("negate needs a verdict", "Grader failed with exit code"))
    # Controls: a verdict the grader gave is negated as before.
    assert negated("program", 1).status is Status.passed  # a silent fail by exit code
    assert negated("script", 1).status is Status.passed  # silent: the exit-code convention
    assert negated("script", 1, stdout=b'{"pass": false}').status is Status.passed
    assert negated("program", 1, stdout=b'{"passed": false}').status is Status.passed
    assert negated("script", 0, stdout=b'{"pass": false, "score": 0.2}').score == 0.8
    assert negated("program", 0).status is Status.failed
    # And without negate the crash is the failure it always was.
    crash = judge("program", "g", RunOutcome(exit_code=1, stderr=traceback), timeout=5,
                  limits=Limits())  # fmt: skip
    assert crash.status is Status.failed


def test_threshold_and_required_gates():
    ok = [
        GraderResult(name=f"a{i}", status=Status.passed, passed=True, score=1.0) for i in range(4)
    ]
    bad = GraderResult(name="madrid", status=Status.failed, passed=False, score=0.0)
    status, score, gates = aggregate([*ok, bad], 0.8)
    assert status is Status.passed and score == pytest.approx(0.8) and not gates
    assert aggregate([*ok, bad], None)[0] is Status.failed  # our default: every one passes
    bad.required = 0.8
    status, score, gates = aggregate([*ok, bad], 0.8)
    assert status is Status.failed and gates == ["madrid scored 0.00 < required 0.8"]
    assert aggregate([*ok[:3], bad], 0.5)[0] is Status.failed


def test_assert_set_threshold_all_children_and_weights():
    paris, lyon = _host("contains", "Paris"), _host("contains", "Lyon", weight=3.0)
    loose = AssertSet(children=[paris, lyon], threshold=0.25, name="loose")
    strict = AssertSet(children=[paris, lyon], name="strict")
    done = _results(paris, lyon, output="Paris")
    r = fold(loose, done)
    assert r.passed and r.score == 0.25 and [c.name for c in r.children] == [
        "contains 'Paris'", "contains 'Lyon'",
    ]  # fmt: skip
    assert not fold(strict, done).passed
    free = _host("contains", "Lyon", weight=0.0)
    zero = AssertSet(children=[paris, free])
    assert fold(zero, _results(paris, free, output="Paris")).passed  # weight 0 does not count


def _traced(*calls: tuple[str, dict], **extra: object) -> Payload:
    tool_calls = [{"tool": n, "input": a} for n, a in calls]
    return Payload(
        output="done", messages=[Message(role="assistant", content="", tool_calls=tool_calls)],
        **extra,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "passed"),
    [
        ({"type": "trajectory:tool-used", "value": "search"}, True),
        ({"type": "trajectory:tool-used", "value": {"name": "search", "min": 3}}, False),
        ({"type": "trajectory:tool-used", "value": {"pattern": "^fe", "max": 1}}, True),
        ({"type": "trajectory:tool-sequence", "value": {"steps": ["search", "write"]}}, True),
        (
            {
                "type": "trajectory:tool-sequence",
                "value": {"mode": "exact", "steps": ["search", "write"]},
            },
            False,
        ),
        (
            {
                "type": "trajectory:tool-args-match",
                "value": {"name": "write", "args": {"path": "a.md"}},
            },
            True,
        ),
        (
            {
                "type": "trajectory:tool-args-match",
                "value": {"name": "write", "args": {"path": "b.md"}},
            },
            False,
        ),
        ({"type": "trajectory:step-count", "value": {"type": "tool", "min": 1, "max": 3}}, True),
        ({"type": "execution-metrics", "max_tool_calls": 2}, False),
        ({"type": "execution-metrics", "max_tokens": 200, "max_cost_usd": 0.01}, True),
        ({"type": "latency", "max_ms": 100}, False),
        ({"type": "token-usage", "max_input": 100}, True),
    ],
)
def test_trace_assertions(spec, passed):
    payload = _traced(
        ("search", {"q": "x"}), ("fetch", {}), ("write", {"path": "a.md"}),
        token_usage={"input": 100, "output": 50}, cost_usd=0.002, duration_ms=900,
    )  # fmt: skip
    result = TraceAssertion.model_validate(spec).evaluate(payload)
    assert result.passed is passed, result.evidence


def test_missing_metrics_fail_as_agentv_does():
    result = TraceAssertion.model_validate({"type": "cost", "max_usd": 1}).evaluate(Payload())
    assert not result.passed and "not reported" in result.evidence


def test_openai_tool_calls_and_vally_shape():
    calls = [{"id": "1", "type": "function",
              "function": {"name": "grep", "arguments": '{"pattern": "x"}'}}]  # fmt: skip
    trace = trace_of([Message(role="assistant", content=None, tool_calls=calls)])
    assert trace.tool_calls[0].name == "grep" and trace.tool_calls[0].args == {"pattern": "x"}
    vally = vally_input(Payload(input="hi", output="ok"), trace, "/workspace")
    assert vally["trajectory"]["metrics"]["toolCallCount"] == 1
    assert vally["trajectory"]["events"][0]["data"]["toolName"] == "grep"
    assert vally["stimulus"]["prompt"] == "hi"


def test_vally_details_list_becomes_checks():
    passed, score, _, checks, details = read_result({
        "name": "summary", "kind": "code", "passed": False, "score": 0.5,
        "details": [{"name": "exists", "kind": "code", "passed": True, "score": 1,
                     "evidence": "there"}, {"name": "count", "passed": False, "score": 0}],
    })  # fmt: skip
    assert not passed and score == 0.5 and details is None
    assert [(c["text"], c["passed"], c["evidence"]) for c in checks] == [
        ("exists", True, "there"), ("count", False, None),
    ]  # fmt: skip


def test_a_vally_sub_result_without_a_verdict_is_a_schema_error():
    from gradebox.protocol.models import OutputShapeError

    with pytest.raises(OutputShapeError):
        read_result({"passed": True, "details": [{"name": "x"}]})


def test_render_cli_command_mounts_named_files_and_quotes_the_prompt(tmp_path):
    (tmp_path / "agent.py").write_text("")
    (tmp_path / "fixtures").mkdir()
    (tmp_path / "fixtures" / "t1.txt").write_text("")
    command, named = render_cli_command(
        "python3 agent.py --p {PROMPT} --out {OUTPUT_FILE} && cat fixtures/{EVAL_ID}.txt",
        test_id="t1", prompt_text="it's agent.py; rm -rf /", files=[], files_format="{path}",
        cwd=tmp_path,
    )  # fmt: skip
    assert named == ["agent.py", "fixtures/t1.txt"]
    # The prompt is no part of the command: a reference to what the runner sets.
    assert command.startswith('python3 /grader/agent.py --p "${GRADEBOX_PROMPT}" --out ')
    assert "/run/gradebox-io/output" in command and "cat /grader/fixtures/t1.txt" in command


def test_cli_answer_shapes(tmp_path):
    out = tmp_path / "output"
    assert isinstance(read_cli_answer(out), str)  # nothing written: an error
    out.write_text("plain answer\n")
    assert read_cli_answer(out) == {"output": "plain answer\n"}
    out.write_text(json.dumps({
        "output": [{"role": "assistant", "content": "x", "tool_calls": [{"tool": "t"}]},
                   {"role": "assistant", "content": "final"}],
        "token_usage": {"input": 1, "output": 2}, "cost_usd": 0.1, "duration_ms": 5,
    }))  # fmt: skip
    answer = read_cli_answer(out)
    assert isinstance(answer, dict) and answer["output"] == "final"
    assert len(answer["messages"]) == 2 and answer["cost_usd"] == 0.1
    out.write_text(json.dumps({"text": "t", "cost_usd": "free"}))
    assert "wrong shape" in str(read_cli_answer(out))
    out.unlink()
    out.symlink_to("/etc/passwd")
    assert isinstance(read_cli_answer(out), str)  # never followed


def test_typescript_on_an_image_without_a_runtime_is_refused_before_it_runs(tmp_path):
    from gradebox.errors import ConfigError
    from gradebox.graders.config import ScriptGrader
    from gradebox.suite.plan import check_runtime

    on_python = ScriptGrader(command=["bun", "check.ts"], image="python")
    with pytest.raises(ConfigError, match="no TypeScript runtime; use image: node"):
        check_runtime(on_python, file="s.yaml", field="tests.0.assert.0")
    check_runtime(ScriptGrader(command=["bun", "check.ts"], image="node"), file=None, field=None)
    check_runtime(ScriptGrader(command=["python3", "x.py"]), file=None, field=None)


def test_javascript_commands_default_to_the_node_image(tmp_path):
    from gradebox.graders.assertion import infer_image

    assert infer_image(["bun", "../scripts/check.ts"]) == "node"
    assert infer_image(["node", "x.js"]) == "node"
    assert infer_image("bun run judge.ts") == "node"
    assert infer_image(["python3", "x.py"]) is None


def test_files_placeholder_lists_mounted_input_files(tmp_path):
    command, named = render_cli_command(
        "agent {FILES} > {OUTPUT_FILE}", test_id="x", prompt_text="", cwd=tmp_path,
        files=["/run/gradebox-io-files/0/a b.md"], files_format="--file={path}",
    )  # fmt: skip
    assert command == "agent '--file=/run/gradebox-io-files/0/a b.md' > /run/gradebox-io/output"
    assert named == []


def test_a_tool_name_cannot_hang_the_run_through_the_suites_pattern():
    payload = _traced(("a" * 40 + "!", {}))
    spec = {"type": "trajectory:tool-used", "value": {"pattern": "^(a|aa)+$"}}
    result = TraceAssertion.model_validate(spec).evaluate(payload)
    assert result.status.value == "error" and "regex took over" in result.evidence


def test_cli_answer_special_files_and_size(tmp_path):
    import os

    from gradebox.lifecycle.steps import MAX_CLI_OUTPUT

    fifo = tmp_path / "output"
    os.mkfifo(fifo)
    assert "not a regular file" in str(read_cli_answer(fifo))  # never blocks on a FIFO
    fifo.unlink()
    with open(fifo, "wb") as f:
        f.truncate(MAX_CLI_OUTPUT + 1)
    assert "MiB" in str(read_cli_answer(fifo))


def test_a_regex_graders_name_reads_as_its_suite_wrote_it():
    # The quickstart's `value: "answer is \\d+"` was named `regex 'answer is \\\\d+'` (repr's
    # doubled backslash) in the results, the report and the terminal.
    assert BuiltinAssertion(type="regex", value=r"answer is \d+").display_name() == (
        r"regex 'answer is \d+'"
    )
    # A newline or a quote is still shown escaped: a name stays one line.
    assert BuiltinAssertion(type="contains", value="a\nb").display_name() == r"contains 'a\nb'"
    assert BuiltinAssertion(type="equals", value="it's").display_name() == 'equals "it\'s"'
    trace = TraceAssertion(type="trajectory:tool-args-match", value={"name": r"C:\tmp", "args": {}})
    assert trace.display_name() == r"trajectory:tool-args-match 'C:\tmp'"
