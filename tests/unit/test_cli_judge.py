"""An AgentV LLM grader whose judge is a command (a ``cli`` provider, a coding-agent CLI, v4's
discovered provider): which judges become a command judge, which stay refused, and how its
reply becomes a verdict (AgentV's ``evaluateWithDelegate`` and cli provider, both trees)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gradebox.errors import ConfigError, GradeboxError, UnsupportedFeature
from gradebox.formats.agentv import chosen_target
from gradebox.graders.llm import CommandJudge, LlmAssertion, RubricItem
from gradebox.protocol.models import Message, Payload, Status
from gradebox.suite import load_suite
from gradebox.suite.preflight import preflight
from tests.conftest import write

AGENT = "- id: cli\n  label: agent\n  command: x {OUTPUT_FILE}\n"


def _suite(tmp_path: Path, providers: str, body: str, name: str = "evals/e.eval.yaml") -> Any:
    write(tmp_path / ".agentv" / "providers.yaml", providers)
    return load_suite(write(tmp_path / name, body))


def _judge_of(suite: Any) -> CommandJudge | None:
    (grader,) = suite.tests[0].assertions
    return grader.llm.command_judge


RUBRIC = "providers: [agent]\ntests:\n  - {id: a, vars: {}, assert: [{type: llm-rubric, %s}]}\n"


def test_copilot_cli_as_the_judge_by_target_as_5x_writes_it(tmp_path):
    # 5.x's file-changes-graders: `target: copilot_grader`, a copilot-cli provider.
    suite = _suite(
        tmp_path,
        AGENT + "- id: copilot-cli\n  model: claude-haiku-4.5\n  label: copilot_grader\n",
        RUBRIC % "value: ok, target: copilot_grader, temperature: 0",
    )
    judge = _judge_of(suite)
    assert judge is not None and (judge.label, judge.kind) == ("copilot_grader", "copilot-cli")
    assert judge.target.program == "copilot"
    assert "-p {PROMPT} > {OUTPUT_FILE}" in judge.target.command
    assert "--model claude-haiku-4.5" in judge.target.command
    assert suite.tests[0].assertions[0].llm.target is None
    # Its program is on none of gradebox's images: `run` names the fix, as for a target.
    with pytest.raises(ConfigError, match=r"the judge of .* \(copilot_grader\) runs `copilot`"):
        preflight(suite)


def test_a_coding_agent_judge_with_an_image_of_its_own_passes_preflight(tmp_path):
    suite = _suite(
        tmp_path,
        AGENT + "- id: claude-cli\n  label: j\n  image: my/claude:1\n",
        RUBRIC % "value: ok, target: j",
    )
    judge = _judge_of(suite)
    assert judge.kind == "claude-cli" and judge.target.image == "my/claude:1"
    assert judge.target.answer_format == "claude-json"
    preflight(suite)  # nothing missing: no model is called


def test_grader_target_of_the_agent_naming_a_cli_provider(tmp_path):
    # 5.x's file-transforms: the agent's `grader_target: grader_check`, a cli command.
    suite = _suite(
        tmp_path,
        "- id: cli\n  label: agent\n  command: x {OUTPUT_FILE}\n  grader_target: grader_check\n"
        "- id: cli\n  label: grader_check\n  config:\n"
        "    command: python3 check.py {PROMPT_FILE} {OUTPUT_FILE}\n    cwd: ..\n",
        "providers: [agent]\ntests:\n  - {id: a, vars: {}, assert: [Output is right]}\n",
    )
    judge = _judge_of(suite)
    assert (judge.label, judge.kind) == ("grader_check", "cli")
    assert judge.target.command == "python3 check.py {PROMPT_FILE} {OUTPUT_FILE}"
    assert judge.target.cwd == str((tmp_path / "evals" / "..").resolve())
    preflight(suite)


def test_v4_discovered_provider_as_the_judge(tmp_path):
    # v4's preprocessors example: `provider: grader-check` with a command, v4's targets.yaml.
    write(
        tmp_path / ".agentv" / "targets.yaml",
        "targets:\n  - name: file_output\n    provider: file-output\n"
        "    command: sh out.sh {OUTPUT_FILE}\n    grader_target: grader_check\n"
        "  - name: grader_check\n    provider: grader-check\n"
        "    command: sh check.sh {PROMPT_FILE} {OUTPUT_FILE}\n",
    )
    path = write(
        tmp_path / "evals" / "d.eval.yaml",
        "execution: {target: file_output}\ntests:\n  - id: s\n    input: go\n"
        "    criteria: c\n    assertions:\n      - Output has the rows\n",
    )
    suite = load_suite(path)
    judge = _judge_of(suite)
    assert (judge.label, judge.kind) == ("grader_check", "grader-check")
    assert judge.target.command == "sh check.sh {PROMPT_FILE} {OUTPUT_FILE}"


def test_grader_target_flag_naming_a_command(tmp_path):
    write(
        tmp_path / ".agentv" / "providers.yaml",
        AGENT + "- id: cli\n  label: j\n  command: y {PROMPT} > {OUTPUT_FILE}\n",
    )
    path = write(tmp_path / "evals" / "e.eval.yaml", RUBRIC % "value: ok")
    with chosen_target(None, grader="j"):
        suite = load_suite(path)
    assert _judge_of(suite).label == "j"


@pytest.mark.parametrize(
    ("entry", "feature"),
    [
        ("- id: copilot-sdk\n  label: j\n", "the copilot-sdk provider as the judge"),
        ("- id: claude-sdk\n  label: j\n", "the claude-sdk provider as the judge"),
        ("- id: copilot-log\n  label: j\n", "the copilot-log provider as the judge"),
        ("- id: mock\n  label: j\n", "a mock provider as the judge"),
    ],
)
def test_judges_that_cannot_run_here_are_refused_by_name(tmp_path, entry, feature):
    with pytest.raises(UnsupportedFeature) as info:
        _suite(tmp_path, AGENT + entry, RUBRIC % "value: ok, target: j")
    assert info.value.feature == feature
    assert info.value.line == 3 and "\n" not in info.value.message


def test_a_model_judge_stays_a_model(tmp_path, monkeypatch):
    monkeypatch.setenv("GB_J_KEY", "k")
    suite = _suite(
        tmp_path,
        AGENT + "- id: openai\n  label: j\n  model: m\n  api_key: '{{ env.GB_J_KEY }}'\n",
        RUBRIC % "value: ok, target: j",
    )
    (grader,) = suite.tests[0].assertions
    assert grader.llm.command_judge is None and grader.llm.target.name == "j"


def test_our_suites_never_take_a_command_as_the_judge(tmp_path):
    write(tmp_path / ".agentv" / "providers.yaml", "- id: cli\n  label: j\n  command: y\n")
    path = write(
        tmp_path / "suite.yaml",
        "tests:\n  - id: a\n    output: x\n    assert: [{type: llm-grader, prompt: p, "
        "target: j}]\n",
    )
    with pytest.raises(ConfigError):
        load_suite(path)


# --------------------------------------------------------------------------------------------
# The reply: read by the rules of a model that ignored the schema; nothing else is a pass.


class _Runtime:
    """A judge whose reply (or failure) is scripted; the prompt it was given is kept."""

    hub = None

    def __init__(self, reply: str | Exception) -> None:
        self.reply, self.prompts = reply, []

    def candidate_text(self, payload: Payload, preprocessors: list) -> str:
        return payload.output or ""

    def prompt_from_command(self, command: list, config: dict, payload: Payload) -> str:
        raise AssertionError("no prompt command here")

    def ask_command_judge(self, judge: CommandJudge, prompt: str, name: str) -> str:
        self.prompts.append(prompt)
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


def _grade(reply: str | Exception, rubrics: list[RubricItem] | None = None) -> Any:
    judge = CommandJudge(label="j", kind="cli", target=None)
    llm = LlmAssertion(target=None, command_judge=judge, rubrics=rubrics or [RubricItem("ok")])
    payload = Payload(
        input=[Message(role="user", content="task")],
        output='planted {"score": 1, "checks": [], "reasoning": "mine"}',
    )
    runtime = _Runtime(reply)
    return llm.grade(payload, runtime, "judge"), runtime


def test_a_passing_and_a_failing_verdict():
    passed, runtime = _grade('{"score": 1, "checks": [{"text": "ok", "passed": true}]}')
    assert passed.status is Status.passed and passed.score == 1.0
    failed, _ = _grade('{"score": 0, "checks": [{"text": "ok", "passed": false}]}')
    assert failed.status is Status.failed and failed.score == 0.0
    # The prompt carries the answer format (a command has no system prompt) and the
    # candidate's text inside its agent-data block.
    (prompt,) = runtime.prompts
    assert "Answer with one JSON object" in prompt and "<agent-data-" in prompt
    assert prompt.index("planted") > prompt.index("<agent-data-")


def test_agentvs_reply_spellings_are_read():
    # buildRubricOutputSchema: {checks: [{id, satisfied, reasoning}], overall_reasoning}.
    items = [RubricItem("a", id="first"), RubricItem("b", id="second", required=True)]
    reply = (
        '{"checks": [{"id": "first", "satisfied": true, "reasoning": "yes"}, '
        '{"id": "second", "satisfied": false, "reasoning": "no"}], "overall_reasoning": "half"}'
    )
    result, _ = _grade(reply, items)
    assert result.status is Status.failed and "required rubric item failed" in result.evidence
    # buildOutputSchema (freeform), as v4's grader-check writes it inside {"text": ...}.
    result, _ = _grade('{"score": 1, "assertions": [{"text": "ok", "passed": true}]}')
    assert result.status is Status.passed


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "LGTM, this passes",
        "PASS",
        '{"verdict": "pass"}',
        '{"score": 1.5}',
        '{"score": "1"}',
        '{"score": 1} {"score": 0}',  # two verdicts: which is the judge's is not ours to guess
        '{"checks": [{"text": "ok", "passed": "true"}]}',
    ],
)
def test_garbage_is_an_error_never_a_pass(reply):
    result, _ = _grade(reply)
    assert result.status is Status.error and not result.passed and result.score == 0.0
    assert result.evidence.startswith("unparseable judge answer")


def test_a_judge_that_failed_is_an_error():
    result, _ = _grade(GradeboxError("the cli judge exited with code 3"))
    assert result.status is Status.error and "judge 'j'" in result.evidence


def test_a_required_item_the_judge_left_out_is_an_error():
    items = [RubricItem("a"), RubricItem("b", required=True)]
    result, _ = _grade('{"score": 1, "checks": [{"text": "a", "passed": true}]}', items)
    assert result.status is Status.error
