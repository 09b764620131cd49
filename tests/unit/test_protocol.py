import math

import pytest

from gradebox.graders.verdict import read_result
from gradebox.protocol.models import (
    OutputShapeError,
    Payload,
    json_objects_in,
    load_untrusted_json,
)


def test_string_input_and_expected_output_become_messages():
    p = Payload(input="What is 2+2?", expected_output="4")
    assert [m.model_dump() for m in p.input] == [{"role": "user", "content": "What is 2+2?"}]
    assert p.expected_output[0].role == "assistant" and p.expected_output[0].content == "4"


def test_inline_input_list_of_strings():
    p = Payload(input=["a", "b"])
    assert [m.content for m in p.input] == ["a", "b"]


def test_unknown_fields_pass_through():
    p = Payload.model_validate({"output": "x", "my_field": {"k": 1}})
    assert p.model_dump(mode="json")["my_field"] == {"k": 1}


def test_every_reference_field_is_present():
    fields = set(Payload.model_fields)
    names = (
        "input input_files output expected_output messages criteria trace trace_summary "
        "token_usage cost_usd duration_ms start_time end_time file_changes workspace_path "
        "output_path metadata config hint trajectory"
    )
    for name in names.split():  # noqa: SIM905
        assert name in fields, name


@pytest.mark.parametrize(
    ("data", "passed", "score"),
    [
        ({"pass": True, "score": 1.0, "reason": "ok", "checks": []}, True, 1.0),  # script
        ({"name": "n", "passed": True, "score": 0.85, "evidence": "e", "kind": "code"}, True, 0.85),
        ({"pass": False, "score": 0.2, "reasoning": "r"}, False, 0.2),  # inline
        ({"score": 0.7, "assertions": [{"text": "a", "passed": True}]}, True, 0.7),  # assertion
        ({"pass": True}, True, 1.0),  # score follows pass
        ({"pass": False}, False, 0.0),
        ({"score": 0.4}, False, 0.4),  # pass derived from score
        ({"score": 0.5}, True, 0.5),
        ({"score": 7}, True, 1.0),  # clamped
        ({"score": -1}, False, 0.0),
        (
            {"assertions": [{"text": "a", "passed": True}, {"text": "b", "passed": False}]},
            True,
            0.5,
        ),
    ],
)
def test_dialects_normalise(data, passed, score):
    got_passed, got_score, _, _, _ = read_result(data)
    assert (got_passed, got_score) == (passed, score)


def test_non_finite_scores_are_off_schema():
    # Infinity (or 1e999, which parses to it) clamped to 1.0 would be a pass no grader meant.
    for bad in (math.nan, math.inf, -math.inf):
        for data in ({"score": bad}, {"pass": True, "score": bad},
                     {"checks": [{"text": "a", "score": bad}]}):  # fmt: skip
            with pytest.raises(OutputShapeError, match="finite"):
                read_result(data)


def test_checks_keep_text_verdict_and_evidence():
    _, _, evidence, checks, details = read_result(
        {
            "pass": True,
            "score": 1,
            "reason": "1/1",
            "checks": [{"text": "has 42", "pass": True, "reason": "found"}],
            "details": {"k": 1},
        }
    )
    assert evidence == "1/1" and details == {"k": 1}
    assert checks[0] == {"text": "has 42", "passed": True, "score": None, "evidence": "found"}


@pytest.mark.parametrize(
    "data",
    [
        {"hello": "world"},
        {"pass": "yes"},
        {"score": "high"},
        [1, 2],
        {"pass": True, "passed": False},
        {"checks": "nope"},
        {"Pass": False, "score": 1},  # reads as a verdict, is none: never silently ignored
        {"pass": True, " score": 0},
        {"passed\u200b": False, "score": 0.9},
    ],
)
def test_off_schema(data):
    with pytest.raises(OutputShapeError):
        read_result(data)


@pytest.mark.parametrize("where", ["checks", "assertions"])
@pytest.mark.parametrize("reason", [5, {}, ["found"], True])
def test_a_check_reason_off_schema_is_refused_beside_its_evidence(where, reason):
    # The old reader (GraderOutput) refused a check whose reason is no string, evidence or
    # not: a result off-schema in any field is an error, never the pass it claims.
    data = {where: [{"text": "a", "pass": True, "evidence": "seen", "reason": reason}]}
    with pytest.raises(OutputShapeError, match=rf"{where}\.0\.reason"):
        read_result(data)


def test_a_repeated_key_is_refused_at_any_depth():
    for text in ('{"pass": false, "pass": true}', '{"checks": [{"pass": false, "pass": true}]}'):
        with pytest.raises(OutputShapeError, match="appears twice"):
            load_untrusted_json(text)
    assert load_untrusted_json('[{"a": 1}, {"a": 2}]') == [{"a": 1}, {"a": 2}]


def test_nesting_is_bounded_in_a_thread_and_with_a_raised_recursion_limit():
    import subprocess
    import sys
    import threading

    failures = []

    def parse() -> None:
        for text in ("[" * 1_000_000, '{"a":' * 200_000, "[" * 65 + "]" * 65):
            try:
                load_untrusted_json(text)
            except OutputShapeError as exc:
                failures.append(str(exc))

    worker = threading.Thread(target=parse)
    worker.start()
    worker.join()
    assert len(failures) == 3 and all("nested deeper" in f for f in failures)
    # Where something raised the recursion limit far, the C parser could reach the end of the
    # stack (a segfault, not an exception): such input is refused before it is parsed.
    script = (
        "import sys, threading\n"
        "sys.setrecursionlimit(1_000_000)\n"
        "from gradebox.protocol.models import OutputShapeError, load_untrusted_json\n"
        "def f():\n"
        "    try:\n"
        "        load_untrusted_json('[' * 2_000_000)\n"
        "    except OutputShapeError as exc:\n"
        "        print('refused:', exc)\n"
        "t = threading.Thread(target=f); t.start(); t.join()\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert out.returncode == 0 and out.stdout.startswith("refused:"), out


def test_objects_in_free_text():
    text = 'Sure. ```json\n{"score": 0.1}\n``` and {"score": 1, "x": {"y": 2}} {broken {"a": [1]}'
    found = json_objects_in(text)
    assert [v for _, _, v in found] == [{"score": 0.1}, {"score": 1, "x": {"y": 2}}, {"a": [1]}]
    assert all(text[s:e].startswith("{") and text[s:e].endswith("}") for s, e, _ in found)
    long = '{"a": "' + "x" * 100_000 + '"}'  # longer than the first window
    assert json_objects_in("see " + long)[0][2] == {"a": "x" * 100_000}
    assert json_objects_in('{"a": tru') == [] and json_objects_in("no braces") == []


def test_objects_in_hostile_text_cost_a_bounded_parse_or_give_up():
    from gradebox.protocol import models as protocol

    read = []
    real = protocol._object_at

    def counting(text, pos, *decoder):
        value, end, cost = real(text, pos, *decoder)
        read.append(max(cost, 0))
        return value, end, cost

    protocol._object_at = counting
    try:
        hostile = ("{\n" * 50_000, '{"a":' * 20_000, '{"a":[\n' * 20_000, '{"\n' * 50_000,
                   '{"' * 50_000, "[" * 100_000, '{"a": 1}' * 20_000)  # fmt: skip
        for text in hostile:
            for arrays in (False, True):
                read.clear()
                json_objects_in(text, arrays=arrays)  # a list, or None (gave up)
                assert sum(read) <= 4 * len(text) + 4096 + 4 * len(text), text[:8]
                assert len(read) <= (4 * len(text) + 4096) // 256 + 1, text[:8]
    finally:
        protocol._object_at = real
    # With arrays, any JSON value is found, however it nests.
    for text in ("[[[[1]", 'x [ {"a": 1}', "[[]]", "a [1, 2] b", "f() { return {}; }"):
        assert json_objects_in(text, arrays=True, first=True), text
    for text in ("[" * 100_000, "{ not json }", "[x]"):
        assert json_objects_in(text, arrays=True, first=True) == [], text


def test_a_check_with_only_a_score_passes_at_the_graders_own_pass_score():
    # AgentV's script graders pass at 0.8: a result of checks that each scored 0.6 is no pass
    # there (AgentV reads such a check as failed), never a 1.0 from "every check passed".
    data = {"assertions": [{"text": "a", "score": 0.6}, {"text": "b", "score": 0.6}]}
    passed, score, _, checks, _ = read_result(data, pass_score=0.8)
    assert (passed, score) == (False, 0.0) and not any(c["passed"] for c in checks)
    passed, score, _, checks, _ = read_result(data)  # our own 0.5
    assert (passed, score) == (True, 1.0) and all(c["passed"] for c in checks)
