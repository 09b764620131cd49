"""Targets answered from the host, run through the runner against the scripted loopback model
servers: a model (OpenAI-compatible, Azure, Anthropic, Gemini), mock, replay, conversations
and repeats. None of them starts a container."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gradebox.drivers.runner import RunOptions, read_results, run_suite
from gradebox.errors import ConfigError
from gradebox.sandbox.base import Prepared, RunOutcome, Sandbox, SandboxSpec
from gradebox.suite import load_suite
from tests.conftest import write
from tests.fake_models import FakeModel

KEY = "sk-host-only-7f3a9"


class NoContainers(Sandbox):
    """A sandbox that refuses to start anything: these targets must not need one."""

    name = "none"

    def images(self, *, locked=False, build_network=False):
        return self

    def resolve(self, ref, source=None):
        return "sha256:" + "0" * 64

    def resolve_image(self, ref):
        return self.resolve(ref)

    def run(self, spec: SandboxSpec) -> RunOutcome:
        raise AssertionError(f"a container was started: {spec.name}")

    def prepare(self, spec: SandboxSpec, *, warm: bool = True) -> Prepared:
        raise AssertionError(f"a container was prepared: {spec.name}")

    def close(self):
        pass


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path):
    monkeypatch.setenv("GRADEBOX_LLM_BACKOFF", "0.01")
    monkeypatch.setenv("GRADEBOX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GB_KEY", KEY)


def _suite(tmp_path: Path, provider: str, tests: str, prompts: str = "['{{ q }}']") -> Path:
    write(tmp_path / ".agentv" / "providers.yaml", provider)
    return write(tmp_path / "evals" / "e.eval.yaml",
                 f"providers: [agent]\nprompts: {prompts}\ntests:\n{tests}")  # fmt: skip


def _run(path: Path, out: Path, **options) -> dict:
    suite = load_suite(path)
    summary = run_suite(suite, NoContainers(), NoContainers(), RunOptions(out, **options))
    return {"summary": summary, "results": read_results(out / "results.jsonl")}


def _openai(url: str, kind: str = "openai") -> str:
    return (f"- id: {kind}\n  label: agent\n  base_url: '{url}'\n"
            "  api_key: '{{ env.GB_KEY }}'\n  model: m1\n  temperature: 0\n")  # fmt: skip


ONE = "  - id: a\n    vars: {q: 'What is 6*7?'}\n    assert: [{type: contains, value: '42'}]\n"


@pytest.mark.parametrize("kind", ["openai", "gemini", "openrouter"])
def test_a_model_answers_through_the_hub_retrying_a_429(tmp_path, kind):
    with FakeModel(answers=[429, "It is 42."]) as fake:
        path = _suite(tmp_path, _openai(fake.base_url, kind),
                      ONE, prompts="[[{role: system, content: Be brief.}, "
                      "{role: user, content: '{{ q }}'}]]")  # fmt: skip
        ran = _run(path, tmp_path / "out")
    result = ran["results"]["a"]
    assert result.status.value == "passed" and result.output == "It is 42.", result.error
    assert len(fake.requests) == 2  # the 429, then the answer
    assert fake.requests[1]["messages"] == [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 6*7?"},
    ]  # fmt: skip
    assert fake.requests[1]["temperature"] == 0
    assert fake.headers[1]["authorization"] == f"Bearer {KEY}"
    assert result.usage.calls == 1 and result.usage.input_tokens == 100
    written = (tmp_path / "out" / "results.jsonl").read_text()
    written += (tmp_path / "out" / "summary.json").read_text()
    assert KEY not in written and ran["summary"].usage.calls == 1


def test_azure_speaks_the_responses_api_with_its_key_header(tmp_path, monkeypatch):
    monkeypatch.setenv("GB_DEPLOYMENT", "dep-7")
    with FakeModel("azure", default="42 it is") as fake:
        provider = (f"- id: azure\n  label: agent\n  endpoint: '{fake.base_url}'\n"
                    "  api_key: '{{ env.GB_KEY }}'\n  model: '{{ env.GB_DEPLOYMENT }}'\n"
                    "  version: 2025-04-01-preview\n")  # fmt: skip
        ran = _run(_suite(tmp_path, provider, ONE), tmp_path / "out")
    assert ran["results"]["a"].status.value == "passed"
    assert fake.paths == ["/openai/v1/responses?api-version=2025-04-01-preview"]
    assert fake.headers[0]["api-key"] == KEY and "authorization" not in fake.headers[0]
    assert fake.requests[0]["model"] == "dep-7"


def test_anthropic(tmp_path):
    with FakeModel("anthropic", default="42.") as fake:
        provider = (f"- id: anthropic\n  label: agent\n  base_url: '{fake.base_url}'\n"
                    "  api_key: '{{ env.GB_KEY }}'\n  model: claude-x\n")  # fmt: skip
        ran = _run(_suite(tmp_path, provider, ONE), tmp_path / "out")
    assert ran["results"]["a"].status.value == "passed"
    sent = fake.headers[0]
    assert KEY in (sent.get("x-api-key"), sent.get("authorization", "").removeprefix("Bearer "))
    assert fake.paths == ["/v1/messages"] and fake.requests[0]["model"] == "claude-x"


def test_a_missing_key_is_an_error_naming_the_variable_never_a_call(tmp_path, monkeypatch):
    monkeypatch.delenv("GB_KEY")
    with FakeModel(default="42") as fake:
        ran = _run(_suite(tmp_path, _openai(fake.base_url), ONE), tmp_path / "out")
    result = ran["results"]["a"]
    assert result.status.value == "error" and fake.requests == []
    assert result.error == "target: model target 'agent': $GB_KEY is not set (openai)"


def test_answers_are_cached_and_no_cache_asks_again(tmp_path):
    with FakeModel(default="42") as fake:
        path = _suite(tmp_path, _openai(fake.base_url), ONE)
        _run(path, tmp_path / "one")
        again = _run(path, tmp_path / "two")
        assert len(fake.requests) == 1 and again["results"]["a"].usage.cached_calls == 1
        _run(path, tmp_path / "three", use_cache=False)
        assert len(fake.requests) == 2


def test_repeat_asks_once_per_sample_and_passes_when_any_run_passed(tmp_path):
    with FakeModel(answers=["no idea", "42"]) as fake:
        path = _suite(tmp_path, _openai(fake.base_url),
                      ONE.replace("  - id: a\n", "  - id: a\n    run: {repeat: 2}\n"))  # fmt: skip
        result = _run(path, tmp_path / "out")["results"]["a"]
    assert len(fake.requests) == 2  # each sample its own request, not a cache hit
    assert [(t.status.value, t.score) for t in result.trials] == [("failed", 0.0), ("passed", 1.0)]
    assert result.status.value == "passed" and result.output == "42"


def test_repeat_keeps_every_trials_answer_and_graders(tmp_path):
    """The failing runs are what a reader opens: each trial keeps its own answer and its
    graders' results (with their evidence), not only its verdict; the result still stands
    for the best run."""
    with FakeModel(answers=["no idea", "42", "it is 41"]) as fake:
        path = _suite(tmp_path, _openai(fake.base_url),
                      ONE.replace("  - id: a\n", "  - id: a\n    run: {repeat: 3}\n"))  # fmt: skip
        result = _run(path, tmp_path / "out")["results"]["a"]
    assert [t.output for t in result.trials] == ["no idea", "42", "it is 41"]
    assert [[(g.name, g.passed) for g in t.graders] for t in result.trials] == [
        [(result.graders[0].name, False)], [(result.graders[0].name, True)],
        [(result.graders[0].name, False)],
    ]  # fmt: skip
    assert all(g.evidence for t in result.trials for g in t.graders)
    assert result.output == "42" and result.status.value == "passed"


def test_a_result_that_cannot_be_written_drops_its_trials_graders_too(tmp_path):
    """A trial holds its answer and graders now: what made the result unwritable (a lone
    surrogate in one trial's answer) is dropped with them, the verdicts stay, the run goes on."""
    from gradebox.core.jsonl import JsonlWriter
    from gradebox.drivers.runner import _append_or_error
    from gradebox.protocol.models import GraderResult, Status, TestResult, TrialRecord

    g = GraderResult(name="g", status=Status.failed, passed=False, score=0.0, evidence="e")
    trials = [TrialRecord(sample=0, status=Status.failed, score=0.0, output="\ud800", graders=[g]),
              TrialRecord(sample=1, status=Status.passed, score=1.0, output="ok")]  # fmt: skip
    writer = JsonlWriter(tmp_path / "results.jsonl")
    _append_or_error(writer, TestResult(id="t", status=Status.passed, passed=True, score=1.0,
                                        trials=trials))  # fmt: skip
    writer.close()
    written = read_results(tmp_path / "results.jsonl")["t"]
    assert written.details_dropped and written.status is Status.error
    assert [(t.status, t.score, t.output, t.graders) for t in written.trials] == [
        (Status.failed, 0.0, None, []), (Status.passed, 1.0, None, []),
    ]  # fmt: skip


def test_input_files_are_embedded_as_file_blocks(tmp_path):
    write(tmp_path / "evals" / "notes.txt", "the number is 42")
    with FakeModel(default="42") as fake:
        path = _suite(
            tmp_path, _openai(fake.base_url),
            "  - id: a\n    input_files: [notes.txt]\n    vars: {q: Read it.}\n",
        )  # fmt: skip
        _run(path, tmp_path / "out")
    assert fake.requests[0]["messages"][-1]["content"] == (
        'Read it.\n\n<file path="notes.txt">\nthe number is 42\n</file>'
    )


def test_mock_answers_with_its_canned_response(tmp_path):
    path = _suite(
        tmp_path, "- {id: mock, label: agent, response: 'Paris, of course.'}\n",
        "  - id: ok\n    vars: {q: x}\n    assert: [{type: contains, value: Paris}]\n"
        "  - id: ko\n    vars: {q: x}\n    assert: [{type: contains, value: Rome}]\n",
    )  # fmt: skip
    results = _run(path, tmp_path / "out")["results"]
    assert (results["ok"].status.value, results["ko"].status.value) == ("passed", "failed")


def _fixture(test_id: str, text: str, **extra) -> str:
    return json.dumps({
        "schema_version": "agentv.replay_fixture.v1", "suite": "e", "test_id": test_id,
        "source_target": "live", "output": [{"role": "assistant", "content": text,
        "tool_calls": [{"tool": "Read", "input": {"path": "skills/pdf/SKILL.md"}}]}],
        "token_usage": {"input": 5, "output": 7}, "cost_usd": 0.01, **extra,
    })  # fmt: skip


def test_replay_fixtures_answer_with_the_recorded_transcript(tmp_path):
    write(
        tmp_path / ".agentv" / "rec.jsonl",
        "\n".join([_fixture("a", "recorded 42"), _fixture("b", "b once"), _fixture("b", "b twice"),
                   _fixture("a", "other suite", suite="x")]) + "\n",
    )  # fmt: skip
    path = _suite(
        tmp_path, "- {id: replay, label: agent, fixtures: rec.jsonl, source_target: live}\n",
        "  - id: a\n    vars: {q: x}\n    assert:\n      - {type: contains, value: '42'}\n"
        "      - {type: skill-used, value: pdf}\n"
        "      - {type: trajectory:tool-used, value: Read}\n"
        "  - id: b\n    vars: {q: x}\n  - id: c\n    vars: {q: x}\n",
    )  # fmt: skip
    results = _run(path, tmp_path / "out")["results"]
    a = results["a"]
    assert a.status.value == "passed", [(g.name, g.evidence) for g in a.graders]
    assert a.output == "recorded 42"
    assert "2 records" in results["b"].error and "0 records" in results["c"].error


def test_replay_transcripts_group_lines_by_test(tmp_path):
    rows = [
        {"test_id": "a", "target": "codex", "message_index": 1, "role": "assistant",
         "content": "done: 42", "transcript_duration_ms": 1200, "source": {}},
        {"test_id": "a", "target": "codex", "message_index": 0, "role": "user",
         "content": "fix it", "source": {}},
    ]  # fmt: skip
    write(tmp_path / ".agentv" / "t.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    path = _suite(
        tmp_path, "- {id: replay, label: agent, transcripts: t.jsonl, source_target: codex}\n",
        "  - id: a\n    vars: {q: x}\n    assert:\n      - {type: contains, value: '42'}\n"
        "      - {type: latency, threshold: 2000}\n",
    )  # fmt: skip
    result = _run(path, tmp_path / "out")["results"]["a"]
    assert result.status.value == "passed", result.error
    assert result.output == "done: 42"


def test_a_conversation_sends_the_history_turn_by_turn(tmp_path):
    with FakeModel(answers=["30", "60", "I forgot"]) as fake:
        path = _suite(
            tmp_path, _openai(fake.base_url),
            "  - id: c\n    mode: conversation\n    aggregation: mean\n"
            "    vars: {q: [{role: system, content: Be terse.}]}\n"
            "    assert: [{type: contains, value: '60'}]\n    turns:\n"
            "      - input: 15% of 200?\n        assert: [{type: contains, value: '30'}]\n"
            "      - input: Double it.\n        assert: [{type: equals, value: '60'}]\n"
            "      - input: What did I ask?\n        assert: [{type: contains, value: '200'}]\n",
        )  # fmt: skip
        result = _run(path, tmp_path / "out")["results"]["c"]
    assert [len(r["messages"]) for r in fake.requests] == [2, 4, 6]
    assert fake.requests[2]["messages"][-2] == {"role": "assistant", "content": "60"}
    parts = {g.name: (g.status.value, g.score) for g in result.graders}
    assert parts == {"turn-1": ("passed", 1.0), "turn-2": ("passed", 1.0),
                     "turn-3": ("failed", 0.0), "conversation": ("passed", 1.0)}  # fmt: skip
    assert result.score == 0.75 and result.status.value == "failed"  # mean 0.75 < 0.8


def test_a_conversation_stops_after_a_failed_turn_when_told_to(tmp_path):
    with FakeModel(answers=["wrong"]) as fake:
        path = _suite(
            tmp_path, _openai(fake.base_url),
            "  - id: c\n    mode: conversation\n    on_turn_failure: stop\n"
            "    aggregation: max\n    vars: {q: x}\n    turns:\n"
            "      - {input: one, assert: [{type: contains, value: right}]}\n"
            "      - {input: two}\n",
        )  # fmt: skip
        result = _run(path, tmp_path / "out")["results"]["c"]
    assert len(fake.requests) == 1
    assert [g.evidence[:7] for g in result.graders] == ["score 0", "skipped"]
    assert result.status.value == "failed" and result.score == 0.0


def test_a_key_the_server_echoes_in_an_error_is_not_written(tmp_path):
    with FakeModel(answers=[(401, f"Incorrect API key provided: {KEY}.")]) as fake:
        ran = _run(_suite(tmp_path, _openai(fake.base_url), ONE), tmp_path / "out")
    error = ran["results"]["a"].error
    assert error == (
        "target: model target 'agent': HTTP 401: Error code: 401 - "
        "Incorrect API key provided: [redacted]."
    )
    assert KEY not in (tmp_path / "out" / "results.jsonl").read_text()


@pytest.mark.parametrize(
    ("strategy", "score", "status"),
    [
        ("pass_any", 0.9, "passed"),  # the best run
        ("pass_all", 0.5, "failed"),  # the lowest
        ("mean", 0.7, "failed"),
        # mean 0.7, stdev 0.2, t(2 df) = 4.303: 0.7 - 4.303 * 0.2 / sqrt(3)
        ("confidence_interval", 0.203132, "failed"),
    ],
)
def test_repeated_runs_add_up_by_agentvs_strategies(strategy, score, status):
    from gradebox.lifecycle.repeat import best_of
    from gradebox.protocol.models import Status, TestResult

    runs = [
        TestResult(id="t", status=Status.passed if s >= 0.8 else Status.failed,
                   passed=s >= 0.8, score=s, threshold=0.8)
        for s in (0.7, 0.9, 0.5)
    ]  # fmt: skip
    result = best_of(runs, strategy)
    assert (round(result.score, 6), result.status.value) == (score, status)
    assert [t.score for t in result.trials] == [0.7, 0.9, 0.5] and result.output is None


def test_the_earlier_repeat_object_and_a_count_out_of_range(tmp_path):
    path = write(
        tmp_path / "e.eval.yaml",
        "evaluate_options:\n  repeat: {count: 3, strategy: mean}\ntests:\n  - {id: a, vars: {}}\n",
    )
    case = load_suite(path).tests[0].case
    assert (case.repeat, case.repeat_strategy) == (3, "mean")
    path.write_text("evaluate_options: {repeat: 0}\ntests:\n  - {id: a, vars: {}}\n")
    with pytest.raises(ConfigError, match="repeat is a whole number from 1 to 100"):
        load_suite(path)


@pytest.mark.parametrize("strategy", ["pass_any", "pass_all", "mean", "confidence_interval"])
def test_a_repeated_run_that_errored_or_failed_a_gate_never_lends_its_score(strategy):
    """An errored run keeps the weighted score of the graders that did answer (an after_each
    that failed, a grader the agent made crash), and a run that failed a required gate keeps
    its weighted score too: neither is a score the test earned, so neither may lift the
    repeated test over its threshold."""
    from gradebox.lifecycle.repeat import best_of
    from gradebox.protocol.models import Status, TestResult

    errored = TestResult(id="t", status=Status.error, passed=False, score=1.0, threshold=0.8,
                         error="after_each: exit 1")  # fmt: skip
    gated = TestResult(id="t", status=Status.failed, passed=False, score=0.95, threshold=0.8,
                       gates_failed=["pytest scored 0.00 < required 0.8"])  # fmt: skip
    failed = TestResult(id="t", status=Status.failed, passed=False, score=0.5, threshold=0.8)
    for runs in ([errored, failed], [gated, failed], [failed, gated, errored]):
        result = best_of(runs, strategy)
        assert result.status is not Status.passed and not result.passed, (runs, result)
        assert result.score <= 0.5
