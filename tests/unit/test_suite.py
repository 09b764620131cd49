"""Suite files: validation with file:line: field errors, assertions compiled, customs found."""

import logging
from pathlib import Path

import pytest

from gradebox.errors import ConfigError
from gradebox.graders.assertion import aggregate
from gradebox.graders.builtin import BuiltinAssertion, refuse_vacuous
from gradebox.graders.custom import discover
from gradebox.protocol.models import GraderResult, Status
from gradebox.suite import GraderAssertion, load_suite
from tests.conftest import write

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart" / "suite.yaml"


def suite(tmp_path: Path, text: str, name: str = "suite.yaml"):
    return load_suite(write(tmp_path / name, text))


def test_quickstart_loads():
    s = load_suite(QUICKSTART)
    assert [t.id for t in s.tests] == ["fix-add", "meaning-of-life", "purposeful-failures"]
    assert "min-words" in s.customs
    kinds = [type(a).__name__ for a in s.tests[0].assertions]
    assert kinds == ["GraderAssertion", "GraderAssertion", "HostAssertion", "GraderAssertion"]
    custom = s.tests[0].assertions[3]
    assert custom.config == {"min": 5} and custom.grader.command == ["python3", "min-words.py"]


def test_defaults_and_metadata_are_inherited(tmp_path):
    s = suite(
        tmp_path,
        """
metadata: {team: a, level: 1}
defaults: {timeout: 5s, image: shell, limits: {memory: 256MiB}}
tests:
  - id: t
    metadata: {level: 2}
    assert:
      - {type: script, command: "true"}
      - {type: script, command: "true", timeout: 9s, image: python}
""",
    )
    t = s.tests[0]
    assert t.metadata == {"team": "a", "level": 2}
    a, b = (x.grader for x in t.assertions)
    assert (a.timeout, a.image, int(a.limits.memory)) == (5, "shell", 256 << 20)
    assert (b.timeout, b.image) == (9, "python")


@pytest.mark.parametrize(
    ("text", "line", "field", "words"),
    [
        (
            "tests:\n  - id: a\n    assert:\n      - Is polite\n",
            4,
            "tests.0.assert.0",
            "needs a model target",
        ),
        (
            "tests:\n  - id: a\n    assert:\n      - type: nope\n",
            4,
            "tests.0.assert.0.type",
            "unknown assertion type 'nope'",
        ),
        (
            "tests:\n  - id: a\n    assert:\n      - type: contains\n",
            4,
            "tests.0.assert.0",
            "needs a 'value'",
        ),
        (
            "tests:\n  - id: a\n    assert:\n      - {type: regex, value: '('}\n",
            4,
            "tests.0.assert.0",
            "invalid regex",
        ),
        (
            "tests:\n  - id: a\n    assert:\n      - type: script\n        comand: x\n",
            5,
            "tests.0.assert.0.comand",
            "unknown field",
        ),
        ("tests:\n  - id: a\n  - id: a\n", 1, "tests", "duplicate test id"),
        ("tests: []\n", 1, "tests", ""),
        ("tests:\n  - id: a\n    inptu: x\n", 3, "tests.0.inptu", "unknown field"),
        (
            "workspace:\n  template: ./missing\ntests:\n  - id: a\n",
            2,
            "workspace.template",
            "does not exist",
        ),
        ("target:\n  command: x\n  timeout: 10\ntests:\n  - id: a\n", 3, "target.timeout", "unit"),
    ],
)
def test_errors_name_file_line_and_field(tmp_path, text, line, field, words):
    with pytest.raises(ConfigError) as err:
        suite(tmp_path, text)
    e = err.value
    assert (e.line, e.field) == (line, field), str(e)
    assert e.file.endswith("suite.yaml") and words in str(e)
    assert "\n" not in str(e)


def test_custom_assertions_found_walking_up(tmp_path, caplog):
    write(tmp_path / ".agentv" / "assertions" / "far.py", "")
    write(tmp_path / ".gradebox" / "assertions" / "shadowed.sh", "")
    write(tmp_path / "a" / ".gradebox" / "assertions" / "shadowed.py", "")
    write(tmp_path / "a" / ".gradebox" / "assertions" / "contains.py", "")
    write(tmp_path / "a" / ".gradebox" / "assertions" / "tool.js", "")
    write(tmp_path / "a" / ".gradebox" / "assertions" / "notes.txt", "")
    with caplog.at_level(logging.WARNING):
        found = discover(tmp_path / "a" / "b" / "c")
    assert sorted(found) == ["far", "shadowed", "tool"]
    assert found["shadowed"].path.suffix == ".py"  # the nearest wins
    assert found["tool"].image() == "node" and found["tool"].command() == ["node", "tool.js"]
    assert "named like the built-in" in caplog.text


@pytest.mark.parametrize(
    ("kind", "value", "output", "passed"),
    [
        ("contains", "42", "is 42.", True),
        ("not-contains", "42", "is 42.", False),
        ("icontains", "HELLO", "hello there", True),
        ("contains-any", ["x", "there"], "hello there", True),
        ("contains-all", ["hello", "x"], "hello there", False),
        ("equals", "42", " 42\n", True),
        ("not-equals", "42", "43", True),
        ("starts-with", "The", "The end", True),
        ("regex", r"\d{3}", "abc 123", True),
        ("is-json", None, '{"a": 1}', True),
        ("is-json", None, "{a: 1}", False),
        ("contains-json", None, 'Here: {"a": [1, 2]} done', True),
        ("contains-json", None, "no json {here", False),
        ("not-is-json", None, "plain", True),
    ],
)
def test_builtins(kind, value, output, passed):
    result = BuiltinAssertion(type=kind, value=value).evaluate(output)
    assert result.passed is passed and result.score == (1.0 if passed else 0.0)
    assert result.type == "builtin"


def _r(status: Status, score: float, weight: float = 1.0) -> GraderResult:
    return GraderResult(
        name="g", status=status, passed=status is Status.passed, score=score, weight=weight
    )


def test_aggregate_weighted_mean_all_pass_and_error():
    assert aggregate([_r(Status.passed, 1), _r(Status.passed, 0.5)], None) == (
        Status.passed,
        0.75,
        [],
    )
    status, score, _ = aggregate([_r(Status.passed, 1, 3), _r(Status.failed, 0)], None)
    assert status is Status.failed and score == 0.75
    assert aggregate([_r(Status.passed, 1), _r(Status.error, 0)], None)[0] is Status.error


def test_container_assertions_know_their_source_dir(tmp_path):
    s = suite(tmp_path, "tests:\n  - id: a\n    assert:\n      - {type: program, program: x}\n")
    a = s.tests[0].assertions[0]
    assert isinstance(a, GraderAssertion) and a.grader.source_dir == tmp_path.resolve()


def test_default_workers_follow_the_measured_setting(monkeypatch):
    from gradebox.drivers.runner import default_workers

    monkeypatch.setenv("GRADEBOX_WORKERS", "3")
    assert default_workers() == 3
    monkeypatch.delenv("GRADEBOX_WORKERS")
    assert default_workers() >= 2


@pytest.mark.parametrize("answer", ["NaN", "Infinity", "-Infinity", '{"a": NaN}', "[1, Infinity]"])
def test_is_json_is_json_as_every_other_parser_reads_it(answer):
    # Python's json reads NaN and Infinity; JSON (and AgentV's JSON.parse) does not: an answer
    # of "NaN" is no JSON, and must not pass is-json (nor fail not-is-json).
    assert BuiltinAssertion(type="is-json").evaluate(answer).status is Status.failed
    assert BuiltinAssertion(type="not-is-json").evaluate(answer).status is Status.passed
    if answer.startswith(("{", "[")):
        found = BuiltinAssertion(type="contains-json").evaluate(f"here: {answer}")
        assert found.status is Status.failed


@pytest.mark.parametrize(
    "answer", ["[" * 200_000, "[" * 50_000 + "]" * 50_000, '{"a": "' + "\\" * 300_000]
)
def test_is_json_on_a_hostile_answer_is_a_verdict_never_a_crash(answer):
    # Nesting past the interpreter's recursion limit, or an unterminated 600 KB string: the
    # agent's answer decides is-json's verdict, never the run's fate.
    assert BuiltinAssertion(type="is-json").evaluate(answer).status is Status.failed
    assert BuiltinAssertion(type="not-is-json").evaluate(answer).status is Status.passed


@pytest.mark.parametrize("kind", ["is-json", "not-is-json", "contains-json"])
def test_a_json_schema_given_to_is_json_is_refused_not_dropped(tmp_path, kind):
    # promptfoo's is-json takes a JSON schema as its value: silently dropped, any JSON at all
    # would pass a check its author meant to hold the answer to a shape.
    from gradebox.errors import UnsupportedFeature

    path = write(
        tmp_path / "suite.yaml",
        f"name: s\ntests:\n  - id: t\n    output: '{{}}'\n    assert:\n      - type: {kind}\n"
        "        value: {type: object, required: [answer]}\n",
    )
    with pytest.raises(UnsupportedFeature, match="schema"):
        load_suite(path)


@pytest.mark.parametrize(
    ("kind", "value"),
    [("contains", ""), ("icontains", ""), ("not-contains", ""), ("starts-with", " "),
     ("ends-with", ""), ("contains-all", []), ("icontains-all", []), ("not-contains-any", []),
     ("contains-any", ["x", ""])],
)  # fmt: skip
def test_a_builtin_that_every_answer_holds_is_refused(tmp_path, kind, value):
    # `contains: "{{ answer }}"` with a var that rendered to nothing, a CSV cell left empty,
    # `contains-all: []`: every answer holds it (negated: none), so it would pass any agent.
    with pytest.raises(ValueError, match="empty value holds for every answer"):
        refuse_vacuous(kind, value, None)
    path = write(tmp_path / "suite.yaml", "name: s\ntests:\n  - id: t\n    output: x\n"
                 f"    assert: [{{type: {kind}, value: {value!r}}}]\n")  # fmt: skip
    with pytest.raises(ConfigError, match="empty value"):
        load_suite(path)


@pytest.mark.parametrize("weight", [".nan", ".inf", "-1"])
def test_a_weight_is_a_finite_number(tmp_path, weight):
    # A NaN weight is neither > 0 nor < 0: the failing child of an assert-set weighed by it
    # went unseen ("every child of nonzero weight passed") and the test passed with score NaN.
    path = write(
        tmp_path / "suite.yaml",
        "name: s\ntests:\n  - id: t\n    output: wrong\n    assert:\n      - type: assert-set\n"
        f"        assert:\n          - {{type: contains, value: right, weight: {weight}}}\n"
        "          - {type: contains, value: wrong}\n",
    )
    with pytest.raises(ConfigError, match="weight must be a finite number >= 0"):
        load_suite(path)
