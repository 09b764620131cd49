"""The `assert` list is declared: one model per assertion kind (graders.entries), told apart by
`type`; the exported suite schema checks entries with them, and a gradebox suite that loads is
one the schema takes."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from gradebox.cli.schemas import schema_documents
from gradebox.errors import ConfigError
from gradebox.graders.assertion import LLM_TYPES
from gradebox.graders.builtin import BUILTINS
from gradebox.graders.entries import known_types
from gradebox.graders.trace import TRACE_TYPES
from gradebox.suite import load_suite
from gradebox.suite.detect import detect_format
from tests.conftest import compile_context, write

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(
    p for p in (ROOT / "examples").rglob("*.yaml")
    if detect_format(p, yaml.safe_load(p.read_text())) in (None, "gradebox")
    and "tests" in (yaml.safe_load(p.read_text()) or {})
)  # fmt: skip


@functools.cache
def validator(customs: tuple[str, ...] | None = None) -> jsonschema.Draft202012Validator:
    schema = schema_documents(list(customs) if customs is not None else None)["suite.schema.json"]
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def errors(entry: Any, customs: tuple[str, ...] | None = None) -> list[str]:
    suite = {"tests": [{"id": "a", "output": "x", "assert": [entry]}]}
    return [e.message for e in validator(customs).iter_errors(suite)]


def test_the_committed_schema_is_the_exported_one() -> None:
    committed = json.loads((ROOT / "schemas" / "suite.schema.json").read_text())
    assert committed == json.loads(json.dumps(schema_documents()["suite.schema.json"]))
    assert committed["$defs"]["TestCase"]["properties"]["assert"]["items"] != {}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_example_suite_loads_and_the_schema_takes_it(path: Path) -> None:
    assert len(EXAMPLES) >= 4
    load_suite(path)
    assert list(validator().iter_errors(yaml.safe_load(path.read_text()))) == []


def test_every_kind_the_loader_knows_has_a_model() -> None:
    known = known_types()
    builtins = {n for b in BUILTINS for n in (b, f"not-{b}")}
    assert builtins | TRACE_TYPES | LLM_TYPES <= known
    assert {"program", "script", "code-grader", "assert-set", "pytest", "field-accuracy"} <= known


@pytest.mark.parametrize(
    "entry",
    [
        {"type": "contains", "value": "x", "weight": "heavy"},  # wrong field type
        {"type": "contains", "value": "x", "valeu": "y"},  # a misspelt key
        {"type": "contains-any", "value": "x"},  # a list wanted
        {"type": "regex", "value": "^a", "flags": 3},
        {"type": "script", "command": 5},
        {"type": "program", "args": ["x.py"]},  # no program
        {"type": "assert-set", "assert": []},
        {"type": "llm-rubric", "value": ["polite"], "threshold": 2},
        {"type": "latency", "max_ms": "fast"},
        {"type": "pytest", "files": "t.py", "timeout": 60},  # a duration needs its unit
        {"type": "pytest", "files": "t.py", "image": {"bild": "."}},  # no image build
        {"type": "min-words", "timeout": 60},  # a custom assertion's: the same
        {"type": "g-eval", "value": "x"},  # refused by name, so no custom either
        {"type": "assert-set", "assert": [{"type": "equals", "value": "x", "negate": "yes"}]},
        {"value": "x"},  # no type
        3,
    ],
)
def test_the_schema_refuses_a_malformed_entry(entry: Any) -> None:
    assert errors(entry)


def test_a_misspelt_type_is_refused_once_the_custom_assertions_are_named() -> None:
    # Without a project's names, any other name may be a custom assertion's file...
    assert errors({"type": "min-words", "min": 5}) == []
    assert errors({"type": "contians", "value": "x"}) == []
    # ...with them (gradebox schemas --assertions-from FOLDER), a misspelt type is refused.
    assert errors({"type": "min-words", "min": 5}, ("min-words",)) == []
    assert errors({"type": "contians", "value": "x"}, ("min-words",))
    assert errors({"type": "contains", "value": "x"}, ("min-words",)) == []


def test_a_suite_the_schema_refuses_does_not_load(tmp_path: Path) -> None:
    # A judge's threshold out of 0..1: refused at its line (by the loader's own check of
    # thresholds, or by the entry's model: one or the other, never neither).
    path = write(
        tmp_path / "suite.yaml",
        "tests:\n  - id: a\n    output: x\n    assert:\n"
        "      - {type: llm-rubric, value: [polite], threshold: 2, target: m}\n",
    )
    write(tmp_path / ".gradebox" / "targets.yaml",
          "targets:\n  - {name: m, provider: openai, model: gpt-4o-mini, "
          "api_key_env: GB_NO_KEY}\n")  # fmt: skip
    with pytest.raises(ConfigError) as caught:
        load_suite(path)
    assert "suite.yaml:5: tests.0.assert.0.threshold: " in str(caught.value), str(caught.value)


def test_agentv_spellings_are_mapped_before_validation(tmp_path: Path) -> None:
    path = write(
        tmp_path / "evals" / "x.eval.yaml",
        "tests:\n  - id: a\n    input: hi\n    expected_output: '{\"a\": 1}'\n    assertions:\n"
        "      - {type: is_json}\n"
        "      - {type: field_accuracy, fields: [{path: a, match: exact}]}\n"
        "      - {type: token_usage, max_total: 10}\n",
    )
    suite = load_suite(path)
    kinds = [a.check.type for a in suite.tests[0].assertions]  # type: ignore[union-attr]
    assert kinds == ["is-json", "field-accuracy", "token-usage"]


@pytest.mark.parametrize(
    "entry",
    [
        {"type": "script", "command": ["python3", "check.py"], "weight": 0.5, "config": {"k": 1}},
        {"type": "code-grader", "command": ["python3", "check.py"], "required": True},
        {"type": "program", "program": "python3", "args": ["check.py"], "negate": True},
        {"type": "pytest", "files": "test_x.py", "timeout": "30s"},
        {"type": "min-words", "min": 3, "name": "long enough"},
        {"type": "not-trajectory:tool-used", "value": "bash", "weight": 2},
        {"type": "latency", "max_ms": 500},
        {"type": "contains", "value": "x", "negate": True},
        {"type": "field-accuracy", "fields": [{"path": "a", "match": "exact"}]},
        {"type": "llm-rubric", "value": ["is polite"], "target": "m", "weight": 3},
        {"type": "assert-set", "assert": [{"type": "equals", "value": "x"}], "weight": 0},
        {"type": "skill-used", "value": "pdf", "negate": True},
        {"type": "tool-trajectory", "mode": "any_order", "minimums": {"search": 1}},
        {"type": "skill-trigger", "skill": "pdf", "should_trigger": False, "weight": 2},
        {"type": "composite", "name": "c", "aggregator": {"type": "threshold", "threshold": 1},
         "assertions": [{"name": "x", "type": "contains", "value": "x"}]},
    ],
    ids=lambda e: e["type"],
)  # fmt: skip
@pytest.mark.parametrize("flavor", ["gradebox", "agentv"])
def test_an_entry_is_validated_once_and_compiled_from_its_record(
    entry: dict[str, Any], flavor: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One validation by the entry's model (which the schema is made from), whichever format
    # the entry came in: no second pass over the same entry, nor a check of its modifiers on
    # their own, nor what runs validated on its own (AgentV's trace checks once were).
    from gradebox.graders import assertion, entries
    from gradebox.graders.trace import TraceAssertion
    from gradebox.graders.trajectory import SkillTrigger, ToolTrajectory

    write(tmp_path / "test_x.py", "def test_x():\n    pass\n")
    write(tmp_path / ".gradebox" / "assertions" / "min-words.py", "print('{}')\n")
    write(tmp_path / ".gradebox" / "targets.yaml",
          "targets:\n  - {name: m, provider: openai, model: gpt-4o-mini, "
          "api_key_env: GB_NO_KEY}\n")  # fmt: skip
    calls: list[Any] = []
    check = entries.check_entry
    monkeypatch.setattr(assertion, "check_entry", lambda e, **kw: calls.append(e) or check(e, **kw))
    for runs in (entries.Entry, TraceAssertion, ToolTrajectory, SkillTrigger):
        monkeypatch.setattr(runs, "model_validate", classmethod(lambda *a, **kw: 1 / 0))
    ctx = compile_context(tmp_path, flavor)
    compiled = assertion.compile_assertion(entry, ctx, ("tests", "0", "assert", "0"))
    members = entry.get("assert", entry.get("assertions", []))
    assert len(calls) == 1 + len(members) and calls[0]["type"] == entry["type"]
    assert compiled.weight == entry.get("weight", 1.0)
    assert compiled.negate == (entry.get("negate", False) ^ entry["type"].startswith("not-"))


@pytest.mark.parametrize(
    "entry",
    [
        "{type: skill-used, value: pdf, mode: exact}",  # what runs took `mode`: it checks nothing
        "{type: latency, max_ms: 5, value: 3}",
        "{type: trajectory:tool-used, value: search, metrics: {calls: 1}}",
        "{type: not-trajectory:tool-sequence, value: {steps: []}}",
        "{type: llm-rubric, value: [{outcome: polite, weight: -1}]}",
        "{type: llm-rubric, rubrics: [{outcome: polite, operatr: correctness}]}",
        "{type: llm-rubric, value: [{score_ranges: [{score_range: [a], outcome: bad}]}]}",
        "{type: tool-trajectory, mode: in_order}",
        "{type: composite, aggregator: {type: threshold, threshold: 0},"
        " assertions: [{name: a, type: contains, value: x}]}",
        "{type: composite, aggregator: {type: code-grader, path: 'a \"b'},"
        " assertions: [{name: a, type: contains, value: x}]}",
    ],
)
def test_an_agentv_entry_is_refused_as_the_same_entry_of_a_gradebox_suite(
    entry: str, tmp_path: Path
) -> None:
    # One model per kind: the same mistake, the same one-line error at the same place.
    body = f"    assert:\n      - {entry}\n"
    ours = write(tmp_path / "suite.yaml", "tests:\n  - id: a\n    output: x\n" + body)
    agentv = write(tmp_path / "evals" / "x.eval.yaml", "tests:\n  - id: a\n    vars: {}\n" + body)
    errors = []
    for path in (ours, agentv):
        with pytest.raises(ConfigError) as caught:
            load_suite(path)
        errors.append(caught.value)
    ours_error, agentv_error = ((e.line, e.field, e.message) for e in errors)
    assert ours_error == agentv_error and ours_error[0] == 5, (ours_error, agentv_error)
    assert ours_error[1].startswith("tests.0.assert.0") and "\n" not in str(errors[1])


def test_agentv_v4_kinds_are_kinds_of_the_suite(tmp_path: Path) -> None:
    # v4's checks and composite: in the schema, spelt as v4 spells them (tool_trajectory).
    assert errors({"type": "tool-trajectory", "mode": "any_order", "minimums": {"a": 1}}) == []
    members = [{"name": "a", "type": "contains", "value": "x"}]
    composite = {"aggregator": {"type": "threshold", "threshold": 1}, "assertions": members}
    assert errors({"type": "composite", **composite}) == []
    assert errors({"type": "skill-trigger", "skil": "pdf"})
    path = write(
        tmp_path / "evals" / "x.eval.yaml",
        "tests:\n  - id: a\n    input: hi\n    criteria: c\n    assertions:\n"
        "      - {type: tool_trajectory, mode: exact, expected: [{tool: search}]}\n"
        "      - {type: skill_trigger, skill: pdf}\n",
    )
    checks = [a.check for a in load_suite(path).tests[0].assertions]  # type: ignore[union-attr]
    assert [type(c).__name__ for c in checks] == ["ToolTrajectory", "SkillTrigger"]


def test_rubric_items_are_validated_once_by_their_model(tmp_path: Path) -> None:
    # AgentV's item keys (operator, score_ranges as a list or a map, min_score) in either
    # format; the judge's items compiled from the record.
    write(tmp_path / ".gradebox" / "targets.yaml",
          "targets:\n  - {name: m, provider: openai, model: gpt-4o-mini, "
          "api_key_env: GB_NO_KEY}\n")  # fmt: skip
    path = write(
        tmp_path / "suite.yaml",
        "tests:\n  - id: a\n    output: x\n    assert:\n"
        "      - type: llm-rubric\n        target: m\n        rubrics:\n"
        "          - {id: r1, outcome: ' polite ', operator: correctness, weight: 2}\n"
        "          - {id: r2, score_ranges: {0: bad, 8-10: good}, min_score: 0.8}\n"
        "          - {score_ranges: [{score_range: [8, 10], outcome: good}]}\n",
    )
    (judge,) = load_suite(path).tests[0].assertions
    items = judge.llm.rubrics  # type: ignore[union-attr]
    assert [(i.text.splitlines()[0], i.weight, i.required, i.id) for i in items] == [
        ("polite", 2.0, False, "r1"),
        ("r2: the answer reaches a score of 8 or more on this 0-10 scale:", 1.0, True, "r2"),
        (
            "criterion: the answer reaches a score of 8 or more on this 0-10 scale:",
            1.0,
            False,
            None,
        ),
    ]
    assert items[1].text.splitlines()[1:] == ["  0: bad", "  8: good"]
