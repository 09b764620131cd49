"""Red-team findings on issue 41's second batch (target matrices, batching providers, output
transforms, the {PROMPT} rework): each test is an attack that must fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from gradebox.errors import GradeboxError
from gradebox.protocol.models import Message, Payload

# --------------------------------------------------------------------------------------------
# Output transforms: bun runs AgentV's module over the agent's answer.


def _runtime(tmp_path: Path, workspace: Path):
    from gradebox.lifecycle import llm_runtime

    return llm_runtime.LlmRuntime(
        None, object(), lambda ref, src: "img", tmp_path, {}, workspace  # type: ignore[arg-type]
    )  # fmt: skip


def test_a_transform_does_not_start_in_the_agents_workspace(tmp_path, monkeypatch):
    # bun reads bunfig.toml from its working folder, also for `bun -e` (checked with bun
    # 1.4.2 on the node image: a preload there ran before the runner); the agent's preload
    # would run as the transform: read the request (vars, metadata) and print the text.
    from gradebox.lifecycle import llm_runtime

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "bunfig.toml").write_text('preload = ["./evil.js"]\n')
    (workspace / ".env").write_text("BUN_OPTIONS=--preload=./evil.js\n")
    seen: list[Path] = []

    def fake_run(argv, folder, box, **kw):
        # Where bun starts: the workspace unless a workdir says otherwise.
        workdir = kw.get("workdir", "/workspace")
        mounted = {"/workspace": folder, **{m.target: m.source for m in kw.get("extra_mounts", ())}}
        seen.append(mounted[workdir])
        raise GradeboxError("stop here")

    monkeypatch.setattr(llm_runtime, "run_in_workspace", fake_run)
    runtime = _runtime(tmp_path, workspace)
    payload = Payload(input=[Message(role="user", content="q")], output="a")
    with pytest.raises(GradeboxError):
        runtime._transform("output.trim()", payload)
    (folder,) = seen
    assert folder.resolve() != workspace.resolve()
    assert not (folder / "bunfig.toml").exists() and not (folder / ".env").exists()


def _transform_eval(
    tmp_path: Path, transform: str, module: str, kind: str = "equals, value: HI"
) -> Path:
    (tmp_path / "t.ts").write_text(module)
    path = tmp_path / "suite.eval.yaml"
    path.write_text(
        "prompts: ['{{ input }}']\nproviders: [{id: mock, label: m, config: {response: hi}}]\n"
        "default_test:\n  options: {transform: file://t.ts}\n"
        "tests:\n  - id: a\n    vars: {input: x}\n    assert:\n"
        f"      - {{type: {kind}, transform: '{transform}'}}\n"
    )
    return path


def _print(path: Path) -> str:
    from gradebox.suite import load_suite

    suite = load_suite(path)
    return suite.fingerprint(suite.tests[0])


@pytest.mark.parametrize(
    "kind", ["equals, value: HI", "llm-rubric, value: HI, provider: m", "is-json"]
)
def test_resume_does_not_reuse_a_verdict_across_a_changed_assertion_transform(tmp_path, kind):
    module = "export default (o: string) => o;\n"
    before = _print(_transform_eval(tmp_path, "output.toUpperCase()", module, kind))
    after = _print(_transform_eval(tmp_path, "output", module, kind))
    assert before != after  # the grader saw other text: its verdict is not this one


def test_resume_does_not_reuse_a_verdict_across_a_changed_transform_module(tmp_path):
    before = _print(_transform_eval(tmp_path, "output", "export default (o) => o;\n"))
    after = _print(_transform_eval(tmp_path, "output", 'export default () => "HI";\n'))
    assert before != after  # as a grader's own files are in its fingerprint


# --------------------------------------------------------------------------------------------
# Batching providers: one call's JSONL, keyed by test id, read on the host.


def test_a_batchs_lines_for_no_test_are_not_kept(tmp_path, monkeypatch):
    # 64 MiB of short lines naming ids of no test: each was validated and kept (16 MiB took
    # 280 MB and 3.4 s on the host; 64 MiB over a gigabyte). Only the batch's tests' are.
    from gradebox.lifecycle import steps

    calls = []
    real = steps._cli_fields
    monkeypatch.setattr(steps, "_cli_fields", lambda obj: calls.append(1) or real(obj))
    out = tmp_path / "output"
    lines = [f'{{"id": "z{i}", "text": "x"}}' for i in range(20_000)]
    out.write_text("\n".join([*lines, '{"id": "a", "text": "mine"}']) + "\n")
    answers = steps.read_batch_answers(out, ["a"])
    assert isinstance(answers, dict) and answers["a"]["output"] == "mine"
    assert len(calls) <= 1


def test_a_batch_answer_is_bounded_as_one_answer_is(tmp_path, monkeypatch):
    from gradebox.lifecycle import steps

    monkeypatch.setattr(steps, "MAX_CLI_OUTPUT", 1000)
    out = tmp_path / "output"
    out.write_text('{"id": "a", "text": "' + "x" * 5000 + '"}\n{"id": "b", "text": "ok"}\n')
    answers = steps.read_batch_answers(out, ["a", "b"])
    if isinstance(answers, str):
        return  # the batch refused: as good
    assert isinstance(answers["a"], str)  # over the cap: that test's error, never its answer


def test_a_line_separator_inside_an_answer_is_no_line_break(tmp_path):
    # JSON strings may hold U+2028 or U+0085 raw; str.splitlines cut the line there: the
    # whole batch failed on one answer quoting it (AgentV splits JSONL on \n).
    from gradebox.lifecycle import steps

    out = tmp_path / "output"
    out.write_text('{"id": "a", "text": "x\u2028y\x85z"}\n{"id": "b", "text": "ok"}\n')
    answers = steps.read_batch_answers(out, ["a", "b"])
    assert isinstance(answers, dict), answers
    assert answers["a"]["output"] == "x\u2028y\x85z" and answers["b"]["output"] == "ok"


# --------------------------------------------------------------------------------------------
# {PROMPT} and the other placeholders of a cli command.


def test_an_id_ending_in_a_newline_is_quoted_not_spliced():
    # _SAFE_ID's `$` matched before a final newline: the id went in raw, a line break in the
    # command's text (the rest of the template a second command).
    from gradebox.lifecycle.steps import render_cli_command

    command, _ = render_cli_command(
        "agent --id {EVAL_ID} --out {OUTPUT_FILE}", test_id="t\n", prompt_text="p",
        files=[], files_format="{path}", cwd=None,
    )  # fmt: skip
    assert "\n" not in command.replace("'t\n'", "")


def test_an_answer_in_a_double_quoted_nested_shell_stays_text(tmp_path):
    # In "..." {PROMPT} becomes ${GRADEBOX_PROMPT}: this shell expands it, and the shell the
    # template nests (sh -c "...", eval "...") parses the answer as code.
    import subprocess

    from gradebox.lifecycle.steps import PROMPT_ENV, render_cli_command

    answer = "x; echo INJECTED $(echo INJECTED)"
    for template in ('sh -c "echo judged {PROMPT}"', 'bash -lc "echo judged {PROMPT}"',
                     'eval "echo judged {PROMPT}"', "sh -c 'echo judged {PROMPT}'"):  # fmt: skip
        command, _ = render_cli_command(
            template, test_id="t", prompt_text=answer, files=[], files_format="{path}",
            cwd=None,
        )  # fmt: skip
        out = subprocess.run(
            ["bash", "-c", command], capture_output=True, text=True, check=False,
            env={"PATH": "/usr/bin:/bin", PROMPT_ENV: answer},
        )  # fmt: skip
        assert out.stdout == f"judged {answer}\n", (template, command, out.stdout)


@pytest.mark.parametrize("template", ["sh -c {PROMPT}", "eval {PROMPT}", "x; eval  {PROMPT}"])
def test_a_prompt_given_to_a_shell_as_its_script_is_refused(template):
    from gradebox.errors import GradeboxError
    from gradebox.lifecycle.steps import render_cli_command

    with pytest.raises(GradeboxError, match="as its script"):
        render_cli_command(
            template, test_id="t", prompt_text="x", files=[], files_format="{path}", cwd=None
        )
