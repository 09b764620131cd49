"""Red team (issue 39): checks that were written and silently graded nothing, and bad config
that ended in a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gradebox.errors import ConfigError
from gradebox.graders import assertion
from gradebox.suite import load_suite
from tests.conftest import compile_context, write


def _compile(tmp_path: Path, src: str, flavor: str = "agentv") -> assertion.Assertion:
    write(tmp_path / ".gradebox" / "targets.yaml",
          "targets:\n  - {name: m, provider: openai, model: gpt-4o-mini, "
          "api_key_env: GB_NO_KEY}\ndefault_grader: m\n")  # fmt: skip
    ctx = compile_context(tmp_path, flavor)
    return assertion.compile_assertion(yaml.safe_load(src), ctx, ("tests", "0", "assert", "0"))


@pytest.mark.parametrize("flavor", ["agentv", "gradebox"])
@pytest.mark.parametrize(
    "entry",
    [
        "{type: llm-rubric, value: {outcome: cites the source, required: true}}",
        "{type: llm-grader, value: {criteria: cites the source}}",
        "{type: rubrics, value: {goal: cite the source}}",
    ],
)
def test_an_llm_graders_mapping_value_is_not_dropped(tmp_path, entry, flavor):
    """A mapping is trajectory:goal-success's ``value`` ({goal}); any other LLM grader's
    mapping was read as no rubric at all, and the judge graded the test's criteria by the
    default prompt: the item written (here a required one) checked nothing."""
    with pytest.raises(ConfigError) as info:
        _compile(tmp_path, entry, flavor)
    assert info.value.field == "tests.0.assert.0.value", info.value


def test_control_a_goal_and_rubric_items_still_compile(tmp_path):
    goal = _compile(tmp_path, "{type: trajectory:goal-success, value: {goal: book a flight}}")
    assert "book a flight" in goal.llm.rubrics[0].text
    items = _compile(tmp_path, "{type: llm-rubric, value: [{outcome: cites the source}]}")
    assert [r.text for r in items.llm.rubrics] == ["cites the source"]
    one = _compile(tmp_path, "{type: llm-rubric, rubrics: {outcome: cites the source}}")
    assert [r.text for r in one.llm.rubrics] == ["cites the source"]


@pytest.mark.parametrize("memory", ["inf", "1e400", "-inf"])
def test_a_docker_size_past_any_number_is_one_line(tmp_path, memory):
    """``memory: inf`` was an OverflowError's traceback, not the file's error."""
    path = write(
        tmp_path / "evals" / "e.eval.yaml",
        f"workspace:\n  docker: {{image: python:3.11-slim, memory: {memory}}}\n"
        "tests:\n  - id: a\n    input: hi\n    criteria: says hi\n",
    )
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    assert info.value.field == "workspace.docker.memory" and info.value.line == 2, info.value


# A threshold every score reaches passes every answer. Scores are compared within
# core.scores.TOLERANCE, so 1e-10 was such a threshold though only 0 was refused: a composite
# whose members all failed, or an assert-set, passed. One rule now, in every model that takes
# a threshold.
_TINY = "0.0000000001"


@pytest.mark.parametrize("flavor", ["agentv", "gradebox"])
@pytest.mark.parametrize(
    "entry, field",
    [
        (f"{{type: assert-set, threshold: {_TINY}, assert: [{{type: contains, value: x}}]}}",
         "threshold"),
        (f"{{type: llm-rubric, threshold: {_TINY}, value: [cites the source]}}", "threshold"),
    ],
)  # fmt: skip
def test_a_threshold_every_score_reaches_is_refused(tmp_path, entry, field, flavor):
    with pytest.raises(ConfigError) as info:
        _compile(tmp_path, entry, flavor)
    assert info.value.field == f"tests.0.assert.0.{field}", info.value
    assert "holds for every answer" in info.value.message


def test_a_composite_threshold_every_score_reaches_is_refused(tmp_path):
    entry = (
        "{type: composite, aggregator: {type: threshold, threshold: " + _TINY + "}, "
        "assertions: [{name: a, type: contains, value: x}]}"
    )
    with pytest.raises(ConfigError) as info:
        _compile(tmp_path, entry)
    assert info.value.field.startswith("tests.0.assert.0.aggregator"), info.value
    assert "holds for every answer" in info.value.message


@pytest.mark.parametrize(
    "suite",
    [
        f"threshold: {_TINY}\ntests:\n  - id: t\n    assert: [{{type: contains, value: x}}]\n",
        f"tests:\n  - id: t\n    threshold: {_TINY}\n    assert: [{{type: contains, value: x}}]\n",
        "tests:\n  - id: t\n    assert:\n      - {type: script, command: [python3, g.py], "
        f"pass_score: {_TINY}}}\n",
    ],
)
def test_a_suite_or_script_threshold_every_score_reaches_is_refused(tmp_path, suite):
    write(tmp_path / "g.py", "print('{}')\n")
    write(tmp_path / "suite.yaml", suite)
    with pytest.raises(ConfigError) as info:
        load_suite(tmp_path / "suite.yaml")
    assert "holds for every answer" in info.value.message, info.value


def test_the_tolerance_is_the_one_the_verdicts_compare_within():
    from gradebox.core.scores import TOLERANCE, passing_threshold, reaches

    assert reaches(0.7999999999999999, 0.8) and not reaches(0.79, 0.8)
    assert passing_threshold(2 * TOLERANCE) == 2 * TOLERANCE
    with pytest.raises(ValueError):
        passing_threshold(TOLERANCE)


@pytest.mark.parametrize("flavor", ["agentv", "gradebox"])
@pytest.mark.parametrize(
    "modifiers, field",
    [(f"required: {_TINY}", "required"), (f"required: true, min_score: {_TINY}", "min_score")],
)
def test_a_required_gate_every_score_reaches_is_refused(tmp_path, modifiers, field, flavor):
    """A gate is compared as a threshold is (``reaches``): at 1e-10 it closed on no score,
    though only 0 was refused, so ``required`` required nothing."""
    with pytest.raises(ConfigError) as info:
        _compile(tmp_path, f"{{type: contains, value: x, {modifiers}}}", flavor)
    assert info.value.field == f"tests.0.assert.0.{field}", info.value
    assert "never closes" in info.value.message
