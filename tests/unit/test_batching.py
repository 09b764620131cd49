"""Batching providers: AgentV v4's ``provider_batching`` cli target answers every test in one
call, JSONL keyed by test id in {OUTPUT_FILE} (``CliProvider.invokeBatch`` and
``parseJsonlBatchOutput`` in ``providers/cli.ts``: ``{id, output | output_messages | text,
token_usage, cost_usd, duration_ms}``). The file is the agent's: each test gets its line's
answer or an error, never another's answer, never a pass without one. No containers."""

from __future__ import annotations

import json
import os

import pytest

from gradebox.lifecycle import steps
from gradebox.lifecycle.steps import read_batch_answers
from gradebox.suite import load_suite
from tests.conftest import write

IDS = ["a", "b"]


def _jsonl(tmp_path, *lines: object) -> os.PathLike:
    path = tmp_path / "out.jsonl"
    text = "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines)
    path.write_text(text + "\n")
    return path


def test_each_line_answers_its_test(tmp_path):
    path = _jsonl(
        tmp_path,
        {"id": "b", "text": "bee", "cost_usd": 0.5},
        "",  # blank lines are skipped, as AgentV's filter does
        {"id": "a", "output": [{"role": "assistant", "content": "ay"}], "duration_ms": 3},
        {"id": "zz", "text": "not in this run"},  # ignored, as AgentV ignores it
    )
    got = read_batch_answers(path, IDS)
    assert got["a"]["output"] == "ay" and got["a"]["duration_ms"] == 3.0
    assert got["b"]["output"] == "bee" and got["b"]["cost_usd"] == 0.5


def test_text_that_is_not_a_string_is_its_json_and_output_messages_are_read(tmp_path):
    path = _jsonl(
        tmp_path,
        {"id": "a", "text": {"decision": "CLEAR"}},
        {"id": "b", "output_messages": [{"role": "assistant", "content": "old"}]},
    )
    got = read_batch_answers(path, IDS)
    assert json.loads(got["a"]["output"]) == {"decision": "CLEAR"}  # JSON.stringify
    assert got["b"]["output"] == "old"


def test_a_test_missing_from_the_batch_is_an_error(tmp_path):
    got = read_batch_answers(_jsonl(tmp_path, {"id": "a", "text": "ay"}), IDS)
    assert got["a"]["output"] == "ay"
    assert isinstance(got["b"], str) and "no line for this test" in got["b"]


def test_a_test_answered_twice_is_an_error_the_others_stand(tmp_path):
    path = _jsonl(tmp_path, {"id": "a", "text": "1"}, {"id": "b", "text": "x"}, {"id": "a"})
    got = read_batch_answers(path, IDS)
    assert isinstance(got["a"], str) and "twice" in got["a"]
    assert got["b"]["output"] == "x"


def test_a_line_of_the_wrong_shape_is_its_tests_error(tmp_path):
    path = _jsonl(tmp_path, {"id": "a", "text": "ay", "cost_usd": -1}, {"id": "b", "text": "x"})
    got = read_batch_answers(path, IDS)
    assert isinstance(got["a"], str) and "wrong shape" in got["a"]  # a negative cost passes
    assert got["b"]["output"] == "x"  # every budget: never an answer


@pytest.mark.parametrize(
    "garbage",
    ["not json", "[1, 2]", json.dumps({"text": "no id"}), json.dumps({"id": 7}),
     '{"id": "a", "id": "b"}', "[" * 100_000],
)  # fmt: skip
def test_a_line_that_names_no_test_fails_the_whole_batch(tmp_path, garbage):
    # Whose answer it was cannot be told: as AgentV (it throws), every test is an error.
    got = read_batch_answers(_jsonl(tmp_path, {"id": "a", "text": "ay"}, garbage), IDS)
    assert isinstance(got, str) and "line 2" in got


def test_an_oversized_missing_or_linked_file_is_every_tests_error(tmp_path, monkeypatch):
    monkeypatch.setattr(steps, "MAX_BATCH_OUTPUT", 64)
    big = _jsonl(tmp_path, {"id": "a", "text": "x" * 100})
    assert "over" in read_batch_answers(big, IDS)
    assert "wrote nothing" in read_batch_answers(tmp_path / "none.jsonl", IDS)
    link = tmp_path / "link.jsonl"
    link.symlink_to(big)
    assert "not a regular file" in read_batch_answers(link, IDS)
    os.mkfifo(tmp_path / "fifo")
    assert "not a regular file" in read_batch_answers(tmp_path / "fifo", IDS)


def test_provider_batching_marks_a_cli_target_only(tmp_path):
    write(
        tmp_path / ".agentv" / "targets.yaml",
        "targets:\n"
        "  - {name: b, provider: cli, provider_batching: true, command: 'run {OUTPUT_FILE}'}\n"
        "  - {name: m, provider: mock, provider_batching: true}\n",
    )
    test = "tests:\n  - {id: t, input: hi, criteria: x}\n"
    batched = load_suite(write(tmp_path / "b.eval.yaml", "execution: {target: b}\n" + test))
    assert batched.spec.target._batch
    # AgentV asks a provider without batch support per test (supportsBatch: false)
    single = load_suite(write(tmp_path / "m.eval.yaml", "execution: {target: m}\n" + test))
    assert not single.spec.target._batch
