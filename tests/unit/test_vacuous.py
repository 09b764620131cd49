"""Checks that hold for every answer (or, negated, for none) are refused before anything runs:
one table over every built-in assertion type, each with the inputs that make it vacuous and
a control that is a real check. A new built-in type fails this test until it has its row."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gradebox.errors import ConfigError
from gradebox.graders.builtin import BUILTINS, refuse_vacuous
from gradebox.graders.trace import TRACE_TYPES
from gradebox.suite import load_suite
from tests.conftest import write

TARGETS = "default_grader: judge\ntargets:\n  - {name: judge, model: m, base_url: http://127.0.0.1:9/v1}\n"

# type -> (vacuous entries, a control that is a real check). Entries are YAML flow (JSON).
TABLE: dict[str, tuple[list[dict], dict]] = {
    "contains": ([{"value": ""}], {"value": "4"}),
    "icontains": ([{"value": ""}], {"value": "4"}),
    "contains-any": ([{"value": []}, {"value": ["4", ""]}], {"value": ["4", "four"]}),
    "contains-all": ([{"value": []}, {"value": [""]}], {"value": ["4"]}),
    "icontains-any": ([{"value": []}], {"value": ["four"]}),
    "icontains-all": ([{"value": []}], {"value": ["four"]}),
    "starts-with": ([{"value": ""}, {"value": "  "}], {"value": "The"}),
    "ends-with": ([{"value": ""}, {"value": "\n"}], {"value": "."}),
    # Negated (a CSV `not-equals:` cell) an empty value holds for every answer that says
    # anything.
    "equals": ([{"value": ""}, {"value": " \n"}], {"value": "4"}),
    # A regex found in every answer: it matches the empty string wherever it is searched.
    "regex": (
        [{"value": v} for v in ("", ".*", "a*", "x?", "^", "$", "(?:)", "(a|)", "[\\s\\S]*")]
        + [{"value": "   ", "flags": "x"}],  # verbose mode: whitespace is nothing
        {"value": "^\\s*$"},  # needs an empty answer: a real check (this is how to ask)
    ),
    "is-json": ([], {}),  # takes no value: nothing can make it vacuous
    "contains-json": ([], {}),
    "trajectory:tool-used": (
        [
            {"value": []},
            {"value": {"name": "search", "min": 0}},
            {"value": {"name": ""}},
            {"value": [{"name": "a"}, {"name": "b", "min": 0}]},
        ],
        {"value": {"name": "search", "min": 0, "max": 2}},
    ),  # fmt: skip
    # A blank tool is one no run calls: negated, the check holds for every run.
    "trajectory:tool-sequence": (
        [
            {"value": []},
            {"value": {"steps": []}},
            {"value": [""]},
            {"value": ["a", " "]},
            {"value": {"steps": [{"tool": ""}]}},
        ],
        {"value": ["a"]},
    ),
    "trajectory:tool-args-match": (
        [{"value": {"name": "", "args": {}}}, {"value": {"name": " ", "args": {"q": 1}}}],
        {"value": {"name": "search", "args": {}}},
    ),
    "trajectory:step-count": (
        [{"value": {}}, {"value": {"min": 0}}, {"value": {"type": "message"}}],
        {"value": {"min": 1}},
    ),
    "execution-metrics": (
        [{"max_duration_ms": ".inf"}, {"max_tool_calls": -1}, {"exploration_tolerance": 0.2}],
        {"max_tool_calls": 0},
    ),
    "latency": ([{"max_ms": ".inf"}, {"threshold": -5}], {"max_ms": 1000}),
    "cost": ([{"max_usd": ".inf"}, {"budget": -1}], {"max_usd": 0.5}),
    "token-usage": ([{"max_total": ".inf"}, {"max_input": -1}], {"max_output": 100}),
    "skill-used": (
        [{"value": {"name": "pdf", "min": 0}}, {"value": {"name": " "}}, {"value": [" "]}],
        {"value": {"name": "pdf", "max": 0}},
    ),
    "not-skill-used": (
        [{"value": {"name": " "}}, {"value": {"pattern": ""}}, {"value": ""}],
        {"value": "pdf"},
    ),
    "field-accuracy": (
        [
            {"fields": []},
            {"fields": [{"path": "n", "match": "numeric_tolerance", "tolerance": ".inf"}]},
        ],
        {"fields": [{"path": "n", "match": "numeric_tolerance", "tolerance": 0.5}]},
    ),  # fmt: skip
    "assert-set": (
        [
            {"assert": []},
            {"assert": [{"type": "contains", "value": "4"}], "threshold": 0},
            {"assert": [{"type": "contains", "value": "5", "weight": 0}]},
        ],
        {"assert": [{"type": "contains", "value": "4"}], "threshold": 0.5},
    ),
    "llm-grader": ([{"rubrics": ["is right"], "threshold": 0}], {"rubrics": ["is right"]}),
    "llm-rubric": ([{"value": "is right", "threshold": 0}], {"value": "is right"}),
    "script": (
        [{"command": ["true"], "pass_score": 0}],
        {"command": ["true"], "pass_score": 0.5},
    ),
    # The other spellings of each kind: each is refused on its own, not by its twin's row.
    **{
        k: ([{"command": ["true"], "pass_score": 0}], {"command": ["true"], "pass_score": 0.5})
        for k in ("code-grader", "code-judge", "code_judge")
    },
    **{
        k: (
            [{"rubrics": ["is right"], "threshold": 0}, {"rubrics": []}, {"value": ""}],
            {"rubrics": ["is right"]},
        )
        for k in ("llm-judge", "llm_judge")
    },
    "rubric": ([{"value": "is right", "threshold": 0}, {"value": " "}], {"value": "is right"}),
    "rubrics": ([{"value": ["is right"], "threshold": 0}], {"value": ["is right"]}),
    "trajectory:goal-success": (
        [{"value": {"goal": "x"}, "threshold": 0}, {"value": {"goal": " "}}],
        {"value": {"goal": "fix it"}},
    ),
    "program": ([{"program": ""}], {"program": "true"}),
    "pytest": ([{"files": []}], {"files": "checks/test_x.py"}),
    "node-test": ([{"files": []}], {"files": "checks/x.test.js"}),
    # AgentV v4's kinds (graders.trajectory, and composite's groups in graders.assertion).
    "tool-trajectory": (
        [
            {"mode": "any_order", "minimums": {}},
            {"mode": "any_order", "minimums": {"search": 0}},
            {"mode": "in_order", "expected": []},
            {"mode": "exact", "expected": []},
            {"mode": "superset", "expected": []},
            # A blank tool is called by no run: negated, or allowed (subset), every run holds.
            {"mode": "in_order", "expected": [{"tool": ""}]},
            {"mode": "subset", "expected": [{"tool": " "}]},
            {"mode": "any_order", "minimums": {" ": 1}},
        ],
        {"mode": "in_order", "expected": [{"tool": "search"}]},
    ),
    "skill-trigger": (
        [{"skill": ""}, {"skill": "  "}, {"skill": "  ", "should_trigger": False}],
        {"skill": "pdf"},
    ),
    "composite": (
        [
            {"assertions": []},
            {
                "assertions": [{"name": "a", "type": "contains", "value": "4"}],
                "aggregator": {"type": "threshold", "threshold": 0},
            },
            {
                "assertions": [{"name": "a", "type": "contains", "value": ""}],
                "aggregator": {"type": "weighted_average"},
            },
        ],
        {
            "assertions": [{"name": "a", "type": "contains", "value": "4"}],
            "aggregator": {"type": "weighted_average"},
        },
    ),
}
# Modifiers any assertion takes: a gate at 0 requires nothing.
MODIFIERS: tuple[list[dict], dict] = (
    [{"required": 0}, {"required": True, "min_score": 0}],
    {"required": True, "min_score": 0.5},
)


def _entry(kind: str, body: dict) -> str:
    text = json.dumps({"type": kind, **body})
    return re.sub(r'"(\.inf)"', r"\1", text)  # YAML's infinity, unquoted


def _suite(tmp_path: Path, entry: str) -> Path:
    write(tmp_path / ".gradebox" / "targets.yaml", TARGETS)
    write(tmp_path / "checks" / "test_x.py", "def test_x():\n    assert True\n")  # verifiers'
    write(tmp_path / "checks" / "x.test.js", "")
    return write(
        tmp_path / "suite.yaml",
        f"name: s\ntests:\n  - id: t\n    output: '4'\n    assert:\n      - {entry}\n",
    )


def test_the_table_covers_every_built_in_type():
    assert set(BUILTINS) <= set(TABLE)
    assert set(TRACE_TYPES) <= set(TABLE)


def test_the_table_covers_every_kind_v4s_too():
    """Every ``type`` a suite may name (each spelling of each kind's model, AgentV v4's kinds,
    promptfoo's negations aside) has its row: a kind added without one fails here."""
    from gradebox.graders.entries import known_types

    kinds = {k.removeprefix("not-") for k in known_types()}
    assert {"tool-trajectory", "skill-trigger", "composite"} <= kinds  # v4's: kinds too
    assert kinds - set(TABLE) == set()


CASES = [(k, body) for k, (bad, _) in TABLE.items() for body in bad]
NEGATED = [(f"not-{k}", body) for k, body in CASES if k in BUILTINS]


@pytest.mark.parametrize(("kind", "body"), CASES + NEGATED)
def test_a_check_that_every_answer_holds_is_refused_naming_its_line(tmp_path, kind, body):
    path = _suite(tmp_path, _entry(kind, body))
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    assert info.value.file == str(path) and info.value.line is not None, info.value
    # The same check with negate: true is refused too (it would hold for no answer).
    path = _suite(tmp_path, _entry(kind, {**body, "negate": True}))
    with pytest.raises(ConfigError):
        load_suite(path)


@pytest.mark.parametrize("kind", list(TABLE))
def test_control_a_real_check_of_each_type_loads(tmp_path, kind):
    load_suite(_suite(tmp_path, _entry(kind, TABLE[kind][1])))
    if kind in BUILTINS:
        load_suite(_suite(tmp_path, _entry(f"not-{kind}", TABLE[kind][1])))


@pytest.mark.parametrize("body", MODIFIERS[0])
def test_a_required_gate_at_zero_is_refused(tmp_path, body):
    with pytest.raises(ConfigError, match="never closes"):
        load_suite(_suite(tmp_path, _entry("contains", {"value": "4", **body})))
    load_suite(_suite(tmp_path, _entry("contains", {"value": "4", **MODIFIERS[1]})))


ONE = "[{type: contains, value: '5'}]"


@pytest.mark.parametrize(
    ("suite", "name"),
    [
        (f"defaults: {{threshold: 0}}\ntests:\n  - {{id: t, output: '4', assert: {ONE}}}\n",
         "suite.yaml"),
        (f"tests:\n  - {{id: t, output: '4', threshold: 0, assert: {ONE}}}\n", "suite.yaml"),
        (f"threshold: 0\ntests:\n  - {{id: t, input: q, assert: {ONE}}}\n", "evals/e.eval.yaml"),
        (f"tests:\n  - {{id: t, input: q, threshold: 0, assert: {ONE}}}\n", "evals/e.eval.yaml"),
    ],
)  # fmt: skip
def test_a_test_threshold_of_zero_is_refused(tmp_path, suite, name):
    # Every weighted score reaches 0: the test would pass whatever its checks found.
    with pytest.raises(ConfigError):
        load_suite(write(tmp_path / name, suite))
    load_suite(write(tmp_path / name, suite.replace("threshold: 0", "threshold: 0.5")))


@pytest.mark.parametrize(
    ("cell", "refused"),
    [("regex:", True), ("not-equals:", True), ("contains:", True), ("regex:.*", True),
     ("regex:^4$", False), ("not-equals:5", False)],
)  # fmt: skip
def test_agentv_csv_cells_that_hold_for_every_answer_are_refused(tmp_path, cell, refused):
    write(tmp_path / "evals" / "cases.csv", f"id,input,__expected\nx,q,{cell}\n")
    path = write(tmp_path / "evals" / "e.eval.yaml", "tests: [file://cases.csv]\n")
    if refused:
        with pytest.raises(ConfigError) as info:
            load_suite(path)
        assert info.value.file == str(tmp_path / "evals" / "cases.csv"), info.value
    else:
        load_suite(path)


def test_a_vacuous_regex_holds_for_answers_of_every_kind():
    # What "vacuous" means, shown on the checks themselves: a refused pattern is found in any
    # answer at all; the anchored control is not.
    answers = ["", "4", "no", "a\nb", "{}", "\u00e9t\u00e9", " ", "x" * 1000]
    for pattern in ("", ".*", "a*", "x?", "^", "$"):
        assert all(re.search(pattern, a) for a in answers)
    assert not all(re.search("^\\s*$", a) for a in answers)
    with pytest.raises(ValueError, match="holds for every answer"):
        refuse_vacuous("regex", ".*", None)


@pytest.mark.parametrize(
    ("vars_", "value"),
    [("{answer: ''}", "\\\\b{{ answer }}\\\\b"), ("{}", "\\\\b{{ answer }}\\\\b"),
     ("{answer: ''}", "Answer: {{ answer }}"), ("{other: x}", "^{{ vars.answer }}\\\\.")],
)  # fmt: skip
def test_a_check_whose_var_renders_to_nothing_is_refused(tmp_path, vars_, value):
    """A var that renders to nothing inside a pattern leaves a check no vacuity rule can tell
    from a real one: ``\\b\\b`` holds for any answer with a word in it, ``Answer: `` for any
    answer in the expected form. The control: the same check with the var set loads, and a
    wrong answer fails it."""
    kind = "regex" if "\\\\" in value else "contains"
    text = (f"tests:\n  - id: t\n    input: q\n    vars: {vars_}\n"
            f'    assert:\n      - {{type: {kind}, value: "{value}"}}\n')  # fmt: skip
    path = write(tmp_path / "evals" / "e.eval.yaml", text)
    with pytest.raises(ConfigError, match="renders to nothing") as info:
        load_suite(path)
    assert info.value.file == str(path) and info.value.field == "tests.0.assert.0.value"
    good = text.replace(f"vars: {vars_}", "vars: {answer: '4'}")
    (check,) = load_suite(write(path, good)).tests[0].assertions
    assert check.check.evaluate("Answer: 5").status.value == "failed"


@pytest.mark.parametrize("value", [0, 0.0])
def test_a_v4_composite_threshold_of_zero_is_refused(tmp_path, value):
    """AgentV v4's ``threshold`` aggregator passes when the share of members that passed
    reaches it: 0 is reached when none did. The control (0.5) loads, and fails a wrong answer."""
    text = ("tests:\n  - id: t\n    input: q\n    assertions:\n      - name: comp\n"
            "        type: composite\n        assertions:\n"
            "          - {name: a, type: contains, value: '4'}\n"
            f"        aggregator: {{type: threshold, threshold: {value}}}\n")  # fmt: skip
    path = write(tmp_path / "evals" / "e.eval.yaml", text)
    with pytest.raises(ConfigError, match="holds for every answer") as info:
        load_suite(path)
    assert info.value.field == "tests.0.assertions.0.aggregator.threshold", info.value
    from gradebox.graders.assertion import fold

    (comp,) = load_suite(write(path, text.replace(f"threshold: {value}}}", "threshold: 0.5}"))
                         ).tests[0].assertions  # fmt: skip
    (child,) = comp.children
    assert fold(comp, {id(child): child.check.evaluate("5")}).status.value == "failed"


@pytest.mark.parametrize(
    "body",
    ["mode: any_order, minimums: {}", "mode: any_order, minimums: {search: 0}",
     "mode: in_order, expected: []", "mode: exact, expected: []",
     "mode: superset, expected: []"],
)  # fmt: skip
def test_a_v4_tool_trajectory_every_run_holds_is_refused(tmp_path, body):
    """v4 scores a tool-trajectory with nothing to require 1.0: every run, one calling only
    ``rm`` included, would pass. The controls (a minimum of 1; one expected tool; subset with
    none expected, which allows no call) load and fail that run."""
    from gradebox.protocol.models import Payload

    def suite(entry: str) -> Path:
        return write(tmp_path / "evals" / "e.eval.yaml", "tests:\n  - id: t\n    input: q\n"
                     f"    assertions:\n      - {{type: tool-trajectory, {entry}}}\n")  # fmt: skip

    with pytest.raises(ConfigError, match="holds for every run") as info:
        load_suite(suite(body))
    assert info.value.line is not None, info.value
    run = Payload(output="x", messages=[{"role": "assistant", "content": "x",
                                         "tool_calls": [{"name": "rm"}]}])  # fmt: skip
    control = (body.replace("{}", "{search: 1}").replace("search: 0", "search: 1")
               .replace("[]", "[{tool: search}]"))  # fmt: skip
    for entry in (control, "mode: subset, expected: []"):
        (check,) = load_suite(suite(entry)).tests[0].assertions
        assert check.check.evaluate(run).status.value == "failed", entry


@pytest.mark.parametrize(
    "entry",
    ['{type: contains, value: !!binary ""}', '{type: not-equals, value: !!binary ""}',
     '{type: starts-with, value: !!binary "IA=="}', '{type: contains-any, value: [!!binary ""]}',
     '{type: contains-any, value: !!set {"": null}}',
     '{type: icontains-all, value: !!set {"": null, "x": null}}',
     '{type: regex, value: ".*", flags: !!binary ""}'],
)  # fmt: skip
def test_a_check_vacuous_only_once_its_model_has_read_it_is_refused(tmp_path, entry):
    """YAML's !!binary and !!set give bytes and sets, which the entry's model reads as the
    text and the list that run: a check judged on what it was given, not on what runs, would
    be ``contains ""`` (or a vacuous regex) in disguise, passing every answer. The loader now
    refuses those tags at their line (``_yaml``); the model's second look stays, for values
    that reach it another way."""
    with pytest.raises(ConfigError, match="holds for every answer|the tag !!"):
        load_suite(_suite(tmp_path, entry))
    with pytest.raises(ConfigError):  # negated, it holds for none
        load_suite(_suite(tmp_path, entry[:-1] + ", negate: true}"))
