"""Fuzzed input never crashes us: the crashes a mutation fuzzer found, each pinned by a test,
then the fuzzer itself (``tests/fuzzing.py``) over the example suites, the example grader files
and AgentV's eval files, for a bounded count (``GRADEBOX_FUZZ_COUNT`` runs more)."""

from __future__ import annotations

import collections
import os
from pathlib import Path

import pytest

from gradebox.errors import ConfigError
from gradebox.suite import load_suite
from tests import fuzzing

EVAL = """\
description: a tiny AgentV eval
providers:
  - id: cli
    label: echo
    config:
      command: "printf '%s' {PROMPT} > {OUTPUT_FILE}"
tests:
  - id: one
    input: say hello
    criteria: greets
    assert:
      - type: contains
        value: hello
"""


def _eval(tmp_path: Path, text: str, name: str = "x.eval.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _one_line(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    assert "\n" not in str(info.value)
    return info.value


def test_the_tiny_eval_loads(tmp_path):
    """The control: each crash below is this file with one thing changed."""
    suite = load_suite(_eval(tmp_path, EVAL))
    assert [t.id for t in suite.tests] == ["one"]


def test_a_hex_name_of_3600_digits(tmp_path):
    """Was ValueError (int too large to print) where the suite's name is made."""
    error = _one_line(_eval(tmp_path, f"name: 0x{'f' * 3600}\n{EVAL}"))
    assert error.line == 1 and "4,300 digits" in error.message


@pytest.mark.parametrize("key", ["~", "1", "null", "true", "1.5"])
def test_a_key_that_is_no_string_in_a_test(tmp_path, key):
    """Was TypeError in ``Where.error`` (joining a None or an int into the field's name)."""
    error = _one_line(
        _eval(tmp_path, EVAL.replace("    input: say", f"    {key}: 1\n    input: say"))
    )
    assert error.field is not None and error.field.startswith("tests.0.")
    assert error.line == 9


def test_two_keys_that_do_not_compare(tmp_path):
    """Was TypeError sorting the unknown keys (None < 1) to name the first."""
    error = _one_line(
        _eval(tmp_path, EVAL.replace("    input: say", "    ~: 1\n    1: x\n    input: say"))
    )
    assert error.field in ("tests.0.1", "tests.0.None")


def test_tests_naming_a_file_too_long_for_any_filesystem(tmp_path):
    """Was OSError (File name too long) looking for the case file."""
    text = EVAL.split("tests:")[0] + f"tests: {'a' * 300}\n"
    error = _one_line(_eval(tmp_path, text))
    assert "not found" in error.message and error.field == "tests"


@pytest.mark.parametrize(
    "extra",
    [
        "environment: {type: host, workdir: LONG}",
        "environment: {type: host, setup: {command: [bash, ./LONG.sh]}}",
        "workspace: {repos: [{path: r, source: {type: local, path: LONG}}]}",
        "defaults: file://LONG",
        "scenarios: [file://LONG]",
        "tests: [{include: LONG}]",
    ],
)
def test_names_too_long_for_any_filesystem_elsewhere(tmp_path, extra):
    """Each was OSError (File name too long) where the name was looked up."""
    text = EVAL.split("tests:")[0] + extra.replace("LONG", "c" * 300) + "\n"
    if not extra.startswith("tests:"):
        text += "tests:" + EVAL.split("tests:")[1]
    try:
        load_suite(_eval(tmp_path, text))
    except ConfigError as exc:  # one line per error, each naming a file
        assert all(line.startswith(str(tmp_path)) for line in str(exc).splitlines())


@pytest.mark.parametrize(
    "extra",
    [
        "workspace: {template: ./LONG}",
        "tests: [{id: t, output: x, assert: [{type: pytest, files: [LONG.py]}]}]",
        "tests: [{id: t, output: x, assert: [{type: script, command: [x, LONG.py], cwd: LONG}]}]",
        "tests: [{id: t, output: x, assert: [{type: llm-grader, prompt: file://LONG.md}]}]",
    ],
)
def test_names_too_long_in_a_gradebox_suite(tmp_path, extra):
    """Each was OSError (File name too long) where the suite was compiled."""
    text = "name: s\n" + extra.replace("LONG", "c" * 300) + "\n"
    if "tests:" not in extra:
        text += "tests: [{id: t, output: x, assert: [contains]}]\n"
    suite = tmp_path / "suite.yaml"
    suite.write_text(text)
    try:
        load_suite(suite)
    except ConfigError as exc:  # one line per error, each naming the file
        assert all(line.startswith(f"{suite}:") for line in str(exc).splitlines())


@pytest.mark.parametrize("pattern", ["'**a'", "'a/**b/*.yaml'"])
def test_tests_naming_a_glob_pattern_glob_refuses(tmp_path, pattern):
    """Was ValueError (Invalid pattern: '**' can only be an entire path component)."""
    error = _one_line(_eval(tmp_path, EVAL.split("tests:")[0] + f"tests: {pattern}\n"))
    assert "not found" in error.message and error.field == "tests"


def test_an_alias_inside_its_own_anchor(tmp_path):
    """Was RecursionError when the environment was interpolated into the structure."""
    error = _one_line(_eval(tmp_path, EVAL + "metadata: &m {a: *m}\n"))
    assert "inside its own anchor" in error.message


def _jsonl(tmp_path: Path, line: bytes) -> Path:
    path = tmp_path / "cases.jsonl"
    path.write_bytes(b'{"id": "a", "input": "hi", "criteria": "says hi"}\n' + line + b"\n")
    return path


def test_jsonl_cases_control(tmp_path):
    suite = load_suite(_jsonl(tmp_path, b'{"id": "b", "input": "yo", "criteria": "says yo"}'))
    assert len(suite.tests) == 2


def test_jsonl_cases_with_a_latin1_byte(tmp_path):
    """Was UnicodeDecodeError."""
    error = _one_line(_jsonl(tmp_path, b'{"id": "caf\xe9", "input": "x"}'))
    assert error.file.endswith("cases.jsonl") and "cannot read" in error.message


@pytest.mark.parametrize("depth", [200, 1000, 100_000])
def test_jsonl_cases_nested_deep(tmp_path, depth):
    """1,000 deep was RecursionError (in json, or later walking the case)."""
    line = b'{"id": "b", "input": "x", "vars": ' + b"[" * depth + b"]" * depth + b"}"
    error = _one_line(_jsonl(tmp_path, line))
    assert error.line == 2 and "nested more than" in error.message


def test_jsonl_cases_with_a_nul(tmp_path):
    """As in a YAML file (a raw NUL is no JSON already)."""
    error = _one_line(_jsonl(tmp_path, b'{"id": "b", "input_files": ["a\\u0000"]}'))
    assert error.line == 2 and "NUL" in error.message


@pytest.mark.parametrize(
    "extra",
    [
        'workspace: {template: "./a\\0b"}',
        'environment: {type: host, workdir: "a\\0b"}',
        'tests: "a\\0b"',
        'scenarios: ["file://a\\0"]',
    ],
)
def test_a_nul_in_an_eval_file(tmp_path, extra):
    """Was ValueError (embedded null byte) resolving the path."""
    text = EVAL.split("tests:")[0] + extra + "\n"
    if not extra.startswith("tests:"):
        text += "tests:" + EVAL.split("tests:")[1]
    error = _one_line(_eval(tmp_path, text))
    assert error.line == 7 and "NUL" in error.message


def _csv(tmp_path: Path, row: bytes) -> Path:
    path = tmp_path / "cases.csv"
    path.write_bytes(b"id,input,__expected\na,hi,contains:hi\n" + row + b"\n")
    (tmp_path / "x.eval.yaml").write_text(EVAL.split("tests:")[0] + "tests: ./cases.csv\n")
    return tmp_path / "x.eval.yaml"


def test_csv_cases_control(tmp_path):
    assert len(load_suite(_csv(tmp_path, b"b,yo,contains:yo")).tests) == 2


def test_csv_cases_with_a_latin1_byte(tmp_path):
    """Was UnicodeDecodeError."""
    error = _one_line(_csv(tmp_path, b"b,caf\xe9,contains:x"))
    assert error.file.endswith("cases.csv") and "cannot read" in error.message


def test_csv_column_nesting_past_the_limit(tmp_path):
    """A ``vars.a.a.a...`` column makes nested vars: as deep as YAML may nest, no deeper."""
    path = tmp_path / "cases.csv"
    path.write_text("id,input,vars." + "a." * 1000 + "z\na,hi,1\n")
    (tmp_path / "x.eval.yaml").write_text(EVAL.split("tests:")[0] + "tests: ./cases.csv\n")
    error = _one_line(tmp_path / "x.eval.yaml")
    assert error.file.endswith("cases.csv") and error.line == 2 and "nests more" in error.message


@pytest.mark.parametrize("key", ['"a\\nb"', '"\\e]0;owned\\a\\e[2J"', '"x\\u2028y"'])
def test_a_key_with_control_characters_stays_on_one_line(tmp_path, key):
    """Was an error of two lines (or an escape sequence sent to the user's terminal)."""
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"name: s\n{key}: 1\ntests: [{{id: t, output: x, assert: [contains]}}]\n")
    with pytest.raises(ConfigError) as info:
        load_suite(suite)
    text = str(info.value)
    assert "\n" not in text and "\x1b" not in text and "\u2028" not in text
    assert text.startswith(f"{suite}:2: ") and "unknown field" in text


@pytest.mark.parametrize(
    "entry",
    [
        "{type: assert-set, assert: [contains], 1.5: x}",
        "{type: assert-set, assert: [contains], ~: x, 1: y}",
        "{type: llm-grader, prompt: p, 1: x, ~: y}",
        "{type: pytest, files: [t.py], 1: x, ~: y}",
    ],
)
def test_a_key_that_is_no_string_in_an_assertion(tmp_path, entry):
    """Was TypeError naming the field (joining a float) or sorting None against 1."""
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"name: s\ntests:\n  - id: t\n    output: x\n    assert:\n      - {entry}\n")
    with pytest.raises(ConfigError) as info:
        load_suite(suite)
    assert str(info.value).startswith(f"{suite}:6: tests.0.assert.0.")
    assert "unknown field" in str(info.value)


@pytest.mark.parametrize("kind", ["{a: 1}", "[script]", "*t", "1"])
def test_a_grader_type_that_is_no_string(tmp_path, kind):
    """A mapping or list as a grader file's type was TypeError (unhashable)."""
    from gradebox.graders.config import load_grader

    grader = tmp_path / "grader.yaml"
    grader.write_text(f"t: &t {{x: 1}}\ntype: {kind}\ncommand: [python3, g.py]\n")
    with pytest.raises(ConfigError) as info:
        load_grader(grader)
    assert str(info.value).startswith(f"{grader}:2: type: unknown grader type")


# --------------------------------------------------------------------------------------------
# The fuzzer.

COUNT = int(os.environ.get("GRADEBOX_FUZZ_COUNT", "300"))
SEED = int(os.environ.get("GRADEBOX_FUZZ_SEED", "34"))


@pytest.fixture(scope="module")
def all_seeds(agentv_checkout: Path) -> list[fuzzing.Seed]:
    found = fuzzing.seeds([agentv_checkout / "examples"])
    kinds = collections.Counter(s.command for s in found)
    assert kinds["grader"] >= 1 and kinds["validate"] >= 100  # the corpus is there
    return found


def test_fuzzed_files_give_exit_0_or_one_error_line(all_seeds, tmp_path):
    """Every mutant: exit 0, or exit 2 with ``gradebox: error: file: ...`` lines; never a
    traceback, a hang past the per-mutant limit, or memory past its limit."""
    bad = []
    for mutant in fuzzing.mutants(all_seeds, COUNT, seed=SEED):
        outcome = fuzzing.check(mutant, tmp_path)
        if not outcome.ok:
            bad.append(f"{mutant.seed.name}/{mutant.file} {mutant.mutation}: {outcome.why}")
    assert bad == [], "\n".join(bad)


def test_fuzzed_files_through_the_command(all_seeds, tmp_path):
    """A few mutants through the ``gradebox`` command itself, in a process of bounded memory."""
    hostile = ("alias_bomb", "deep", "huge_number", "binary", "odd_key")
    picked = [m for m in fuzzing.mutants(all_seeds, 400, seed=SEED + 1) if m.mutation in hostile]
    bad = []
    for mutant in picked[:5]:
        outcome = fuzzing.check_cli(mutant, tmp_path)
        if not outcome.ok:
            bad.append(f"{mutant.seed.name}/{mutant.file} {mutant.mutation}: {outcome.why}")
    assert bad == [], "\n".join(bad)


def test_the_fuzzer_finds_what_it_looks_for(tmp_path, monkeypatch):
    """The fuzzer's own control: a crash, a hang and a traceback are each reported."""
    seed = fuzzing.Seed("t", tmp_path, Path("x.eval.yaml"), (Path("x.eval.yaml"),))
    _eval(tmp_path, EVAL)
    mutant = fuzzing.Mutant(seed, Path("x.eval.yaml"), "none", EVAL.encode())
    assert fuzzing.check(mutant, tmp_path / "w").ok

    import gradebox.formats.agentv as agentv

    def crash(*args, **kwargs):
        raise TypeError("boom")

    monkeypatch.setattr(agentv, "build_suite", crash)
    outcome = fuzzing.check(mutant, tmp_path / "w")
    assert not outcome.ok and "TypeError: boom" in outcome.why

    def spin(*args, **kwargs):
        while True:
            pass

    monkeypatch.setattr(agentv, "build_suite", spin)
    outcome = fuzzing.check(mutant, tmp_path / "w", seconds=1)
    assert not outcome.ok and outcome.why.startswith("hang")
