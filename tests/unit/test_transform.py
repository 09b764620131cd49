"""AgentV 5.x's ``transform`` mapped: ``default_test.options.transform``,
``tests[].options.transform`` and an assertion's ``transform`` (AgentV's parseTransformSpec:
``file://`` modules found from the eval file's folder, inline code as written)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gradebox.errors import ConfigError
from gradebox.graders.assertion import TEST_TRANSFORM, parse_transform
from gradebox.suite import load_suite


def _eval(tmp_path: Path, body: str) -> Path:
    (tmp_path / "scripts").mkdir(exist_ok=True)
    (tmp_path / "scripts" / "t.ts").write_text("export default (o: unknown) => String(o);\n")
    evals = tmp_path / "evals"
    evals.mkdir(exist_ok=True)
    path = evals / "suite.eval.yaml"
    path.write_text(
        "prompts: ['{{ input }}']\nproviders: [{id: mock, label: m, config: {response: hi}}]\n"
        + body
    )
    return path


def test_default_test_transform_is_every_tests(tmp_path):
    path = _eval(
        tmp_path,
        "default_test:\n  options: {transform: file://../scripts/t.ts}\n"
        "tests:\n  - id: a\n    vars: {input: x}\n    assert: [{type: contains, value: hi}]\n"
        "  - id: b\n    vars: {input: y}\n    options: {transform: 'output.toUpperCase()'}\n"
        "    assert: [{type: contains, value: HI}]\n",
    )
    a, b = load_suite(path).tests
    assert a.metadata[TEST_TRANSFORM] == f"file://{(tmp_path / 'scripts/t.ts').resolve()}"
    assert b.metadata[TEST_TRANSFORM] == "output.toUpperCase()"  # the test's own wins


def test_assertion_transform_is_that_graders_only(tmp_path):
    path = _eval(
        tmp_path,
        "tests:\n  - id: a\n    vars: {input: x}\n    assert:\n"
        "      - {type: contains, value: hi, transform: 'file://../scripts/t.ts:fn'}\n"
        "      - {type: llm-rubric, value: Says hi, provider: m, transform: 'output.trim()'}\n"
        "      - {type: contains, value: hi}\n",
    )
    (test,) = load_suite(path).tests
    first, second, third = test.assertions
    assert first.transform == f"file://{(tmp_path / 'scripts/t.ts').resolve()}:fn"
    assert second.transform == "output.trim()"
    assert third.transform is None
    assert TEST_TRANSFORM not in test.metadata


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("42", "transform must be a non-empty string"),
        ("''", "transform must be a non-empty string"),
        ("file://../scripts/missing.ts", "transform file not found: ../scripts/missing.ts"),
        ("file://suite.eval.yaml", "is no JavaScript or TypeScript module"),
    ],
)
def test_a_bad_transform_is_refused_in_one_line(tmp_path, value, says):
    path = _eval(
        tmp_path,
        f"tests:\n  - id: a\n    vars: {{input: x}}\n    options: {{transform: {value}}}\n",
    )
    with pytest.raises(ConfigError) as err:
        load_suite(path)
    text = str(err.value)
    assert says in text and "options.transform" in text and "\n" not in text.strip()


def test_user_metadata_cannot_name_a_transform(tmp_path):
    path = _eval(
        tmp_path,
        f"tests:\n  - id: a\n    vars: {{input: x}}\n    metadata: {{{TEST_TRANSFORM}: evil()}}\n",
    )
    assert TEST_TRANSFORM not in load_suite(path).tests[0].metadata


def test_parse_transform_keeps_inline_code_and_names_the_export(tmp_path):
    (tmp_path / "m.mjs").write_text("export const f = (o) => o;\n")
    assert parse_transform("  output.trim() ", [tmp_path]) == "output.trim()"
    assert parse_transform("file://m.mjs:f", [tmp_path]).endswith("/m.mjs:f")
