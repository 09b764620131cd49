"""Checks that hold for every answer in AgentV v4's constructs and in trace checks, beyond the
table of tests/unit/test_vacuous.py: a ``tool-trajectory`` whose minimums of 0 make up its
pass mark, and a trace check whose ``{{ var }}`` renders to nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from gradebox.errors import ConfigError
from gradebox.graders.trajectory import ToolTrajectory
from gradebox.protocol.models import Payload
from gradebox.suite import load_suite
from tests.conftest import write


def _run(*tools: str, args: dict | None = None) -> Payload:
    calls = [{"name": t, "input": args or {}} for t in tools]
    return Payload(
        output="done", messages=[{"role": "assistant", "content": "done", "tool_calls": calls}]
    )


ZEROS = {f"t{i}": 0 for i in range(4)}


@pytest.mark.parametrize(
    ("minimums", "run"),
    [
        ({"search": 1, **ZEROS}, _run()),  # v4: 4 of 5 "met" by calling nothing: 0.8
        ({"search": 1, **ZEROS}, _run("rm")),
        ({**ZEROS, "search": 2}, _run("search")),  # one call short of its one requirement
        ({"search": 1, "fetch": 1, **ZEROS, "t8": 0, "t9": 0}, _run("search")),  # v4: 0.875
        ({"search": 1, "t0": 0.0}, _run("rm", "rm")),
    ],
)
def test_a_minimum_of_zero_is_no_requirement_met(minimums, run):
    """A minimum of 0 requires nothing: counted as met, four of them give any run v4's pass
    mark (0.8) with the one real requirement missed. The score is the share of what is
    required, and the zeros are named in the evidence as no requirement."""
    result = ToolTrajectory(mode="any_order", minimums=minimums).evaluate(run)
    assert result.status.value == "failed", result
    assert result.score < 0.8 and "no requirement" in result.evidence, result


@pytest.mark.parametrize(
    ("minimums", "run", "score"),
    [
        ({"search": 1, **ZEROS}, _run("search"), 1.0),
        (
            {"search": 2, "fetch": 1, "a": 1, "b": 1, "c": 1},
            _run("search", "search", "fetch", "a", "b"),
            0.8,
        ),
        ({"search": 1, "fetch": 1, **ZEROS}, _run("fetch"), 0.5),
    ],
)
def test_control_minimums_above_zero_score_as_v4_does(minimums, run, score):
    result = ToolTrajectory(mode="any_order", minimums=minimums).evaluate(run)
    assert result.score == score and result.passed == (score >= 0.8), result


def _eval(tmp_path: Path, vars_: str, entry: str) -> Path:
    return write(
        tmp_path / "evals" / "e.eval.yaml",
        f"tests:\n  - id: t\n    input: q\n    vars: {vars_}\n    assertions:\n      - {entry}\n",
    )


# (the check, a run it fails once its vars are set: the vacuity is the var's, not the check's)
BLANK = [
    ('{type: trajectory:tool-sequence, value: {steps: ["{{ first }}", search]}}', _run("search")),
    ('{type: not-trajectory:tool-sequence, value: ["{{ first }}"]}', _run("plan")),
    (
        '{type: trajectory:tool-args-match, value: {name: search, args: {q: "{{ query }}"}}}',
        _run("search", args={"q": ""}),
    ),
    (
        '{type: not-trajectory:tool-args-match, value: {name: "{{ tool }}", args: {}}}',
        _run("fetch"),
    ),
    ('{type: trajectory:tool-used, value: {pattern: "^{{ tool }}"}}', _run("rm")),
    ('{type: not-skill-used, value: {name: "{{ skill }}"}}', _run("Skill", args={"skill": "pdf"})),
    ('{type: tool-trajectory, mode: subset, expected: [{tool: "{{ tool }}"}]}', _run("rm")),
    (
        "{type: tool-trajectory, mode: in_order, expected: [{tool: search, "
        'args: {q: "{{ query }}"}}]}',
        _run("search", args={"q": ""}),
    ),
    (
        '{type: skill-trigger, skill: "pdf-{{ variant }}", should_trigger: false}',
        _run("Read", args={"file_path": "/s/skills/pdf-x/SKILL.md"}),
    ),
    (
        '{type: composite, assertions: [{name: a, type: contains, value: "Answer: {{ answer }}"}],'
        " aggregator: {type: weighted_average}}",
        _run(),
    ),
]


@pytest.mark.parametrize(
    "vars_",
    [
        "{first: '', query: '', tool: '', skill: '', variant: '', answer: ''}",
        "{first: ' ', query: ' ', tool: '  ', skill: ' ', variant: ' ', answer: \"\\t\"}",
        "{}",
    ],
)
@pytest.mark.parametrize(("entry", "run"), BLANK)
def test_a_trace_check_whose_var_renders_to_nothing_is_refused(tmp_path, vars_, entry, run):
    """Only built-ins were refused: a trace check (and a v4 one, and a built-in inside a
    composite) with a var that renders to nothing loaded and passed a run it was written to
    fail. Refused at load, naming the file and the field."""
    path = _eval(tmp_path, vars_, entry)
    with pytest.raises(ConfigError, match="renders to nothing") as info:
        load_suite(path)
    assert info.value.file == str(path) and info.value.field, info.value
    assert info.value.field.startswith("tests.0.assert"), info.value


@pytest.mark.parametrize(("entry", "run"), BLANK)
def test_control_the_same_check_with_its_vars_set_loads_and_fails_that_run(tmp_path, entry, run):
    from gradebox.graders.assertion import fold, leaves

    good = "{first: plan, query: cats, tool: fetch, skill: pdf, variant: x, answer: '4'}"
    (check,) = load_suite(_eval(tmp_path, good, entry)).tests[0].assertions
    results = {id(leaf): leaf.evaluate(run) for leaf in leaves([check])}
    assert fold(check, results).status.value == "failed", entry
