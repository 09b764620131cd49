import math

import pytest

from gradebox.protocol import OutputShapeError, Payload, clamp_score, parse_grader_output


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
    got_passed, got_score, _, _, _ = parse_grader_output(data)
    assert (got_passed, got_score) == (passed, score)


def test_nan_scores_zero():
    assert clamp_score(math.nan) == 0.0
    passed, score, *_ = parse_grader_output({"score": math.nan})
    assert (passed, score) == (False, 0.0)


def test_checks_keep_text_verdict_and_evidence():
    _, _, evidence, checks, details = parse_grader_output(
        {
            "pass": True,
            "score": 1,
            "reason": "1/1",
            "checks": [{"text": "has 42", "pass": True, "reason": "found"}],
            "details": {"k": 1},
        }
    )
    assert evidence == "1/1" and details == {"k": 1}
    assert checks[0].text == "has 42" and checks[0].passed and checks[0].evidence == "found"


@pytest.mark.parametrize(
    "data",
    [
        {"hello": "world"},
        {"pass": "yes"},
        {"score": "high"},
        [1, 2],
        {"pass": True, "passed": False},
        {"checks": "nope"},
    ],
)
def test_off_schema(data):
    with pytest.raises(OutputShapeError):
        parse_grader_output(data)
