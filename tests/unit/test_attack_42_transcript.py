"""Red-team checks of what a result keeps of a hostile transcript (``transcript_of``): the
agent writes it, and a result that cannot be written small, or read back, costs the whole
run's report (``read_results`` refuses a file with a line it cannot parse)."""

from __future__ import annotations

import json

from gradebox.graders.trajectory import ToolTrajectory
from gradebox.graders.transcript import MAX_CALLS, TRANSCRIPT_CAP, transcript_of
from gradebox.protocol.models import Message, Payload, Status, TestResult


def _result(messages: list[Message]) -> TestResult:
    kept = transcript_of(messages, "done")
    return TestResult(id="t", status=Status.failed, passed=False, score=0.0, transcript=kept)


def test_arguments_nested_past_what_a_results_file_reads_back_are_kept_as_text():
    # An OpenAI-style arguments string is parsed whatever its depth (the answer file's depth
    # bound sees one string): 199 levels inside a result passed pydantic's 200 on reading.
    deep = "[" * 199 + "]" * 199
    call = {"function": {"name": "edit", "arguments": deep}}
    line = _result([Message.model_validate({"role": "assistant", "tool_calls": [call]})])
    back = TestResult.model_validate_json(line.model_dump_json())  # the report's reader
    (step,) = back.transcript.steps[0].tool_calls
    assert step.name == "edit" and isinstance(step.args, str) and step.args.startswith("[[[")


def test_a_message_of_a_million_tool_calls_keeps_a_bounded_result():
    # 15 MB of answer ({"name": "a"} a million times) made a 100 MB result line: each call
    # kept cost no text, so TRANSCRIPT_CAP never counted it.
    n = 1_000_000
    raw = json.dumps({"role": "assistant", "content": "x", "tool_calls": [{"name": "a"}] * n})
    result = _result([Message.model_validate_json(raw)])
    kept = result.transcript
    assert kept.tool_calls == n  # counted whole
    calls = [c for s in kept.steps for c in s.tool_calls]
    assert len(calls) == MAX_CALLS and calls[-1].position == MAX_CALLS - 1
    assert f"kept the first {MAX_CALLS:,} of {n:,} tool calls" in kept.cut
    assert len(result.model_dump_json()) < 2 * TRANSCRIPT_CAP


def test_a_flood_of_text_first_leaves_later_calls_their_names():
    # 1 MiB of text in the first messages spent the budget every text shared, names too: the
    # calls after it were drawn nameless ("⚙  call #120"), whatever the agent ran.
    flood = [Message.model_validate({"role": "assistant", "content": "f" * 10_000})] * 120
    late = Message.model_validate(
        {"role": "assistant", "tool_calls": [{"name": "rm_tests", "args": {"path": "tests"}}]}
    )
    kept = transcript_of([*flood, late], "done")
    (call,) = kept.steps[-1].tool_calls
    assert call.name == "rm_tests"
    long = Message.model_validate({"role": "assistant", "tool_calls": [{"name": "n" * 5000}]})
    (call,) = transcript_of([long], "done").steps[0].tool_calls
    assert len(call.name) <= 200  # a name is a name: cut short, whatever is left


def test_a_duration_past_any_float_is_left_out_not_a_crash_of_the_test():
    # A duration of 10**400 (JSON has no bound on an integer) failed ToolStep's and
    # TranscriptStep's validation inside the test's finish: its verdict became an
    # "internal error", whatever its graders had found.
    huge = 10**400
    message = Message.model_validate(
        {"role": "assistant", "content": "x", "durationMs": huge,
         "tool_calls": [{"name": "a", "durationMs": huge}, {"name": "b", "durationMs": 12}]}
    )  # fmt: skip
    (step,) = transcript_of([message], "done").steps
    assert step.duration_ms is None
    assert [c.duration_ms for c in step.tool_calls] == [None, 12]


def test_a_latency_check_over_a_duration_past_any_float_fails_plainly():
    # The same duration, read by a latency bound: "took {:g}ms" raised OverflowError.
    calls = [{"name": "a", "durationMs": 10**400}]
    payload = Payload(output="x", messages=[Message(role="assistant", tool_calls=calls)])
    check = ToolTrajectory.model_validate(
        {"type": "tool-trajectory", "mode": "in_order",
         "expected": [{"tool": "a", "max_duration_ms": 5}]}
    )  # fmt: skip
    result = check.evaluate(payload)
    assert result.status in ("passed", "failed")  # a verdict, not an internal error


def test_an_arguments_string_holding_a_lone_surrogate_leaves_a_result_that_can_be_written():
    # The answer file's strings are made writable as it is read; an OpenAI-style arguments
    # string is parsed after that, and its "\\ud800" came back a lone surrogate: the result
    # could not be written, so its graders (and what they found) were dropped and the test
    # made an error: a failing agent's way to hide why it failed.
    raw = json.dumps({"role": "assistant", "content": "x", "tool_calls": [
        {"function": {"name": "edit", "arguments": '{"k": "\\ud800", "deep": ' + "[" * 300
                      + "]" * 300 + "}"}},
        {"function": {"name": "edit", "arguments": '{"k": "\\ud800"}'}},
    ]})  # fmt: skip
    result = _result([Message.model_validate_json(raw)])
    back = TestResult.model_validate_json(result.model_dump_json())
    first, second = back.transcript.steps[0].tool_calls
    assert set(second.args["k"]) == {"\ufffd"}  # as the answer file's own strings are made
    assert isinstance(first.args, str)  # too deep to parse: the text as the agent wrote it
