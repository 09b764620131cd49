"""What an LLM grader of one test needs from the run it belongs to: the model hub, and
containers for its prompt commands, preprocessors and command judges (read-only workspace, no
network, the suite's files named). Built per test by ``gradebox.lifecycle.testrun``; the
graders see only this."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import GradeboxError
from ..graders.assertion import infer_image
from ..graders.llm import CommandJudge, candidate_from_files
from ..graders.run import CONTAINER_WORKSPACE
from ..protocol.models import Payload
from ..sandbox.base import Limits
from ..suite import TargetConfig
from .steps import HOOK_TIMEOUT, judge_step, run_cli_command, run_in_workspace

if TYPE_CHECKING:
    from ..llm.client import ModelHub
    from ..sandbox.base import Sandbox

__all__ = ["LlmRuntime"]


class LlmRuntime:
    """What an LLM grader of one test needs from the run: the hub, and containers for prompt
    commands and preprocessors (read-only workspace, no network, the suite's files named)."""

    def __init__(
        self,
        hub: ModelHub | None,
        box: Sandbox,
        image_for: Callable[[object, Path | None], str],
        root: Path,
        labels: dict[str, str],
        workspace: Path,
    ) -> None:
        self.hub = hub  # type: ignore[assignment]
        self.box, self.image_for, self.root = box, image_for, root
        self.labels, self.workspace = labels, workspace

    def _text_of(self, command: list[str], stdin: bytes, name: str) -> str:
        image = self.image_for(infer_image(command), self.root)
        outcome = run_in_workspace(
            command,
            self.workspace,
            self.box,
            image_id=image,
            name=name,
            stdin=stdin,
            timeout=HOOK_TIMEOUT,
            labels=self.labels,
            source_dir=self.root,
            read_only=True,
        )
        failure = judge_step(name, outcome, HOOK_TIMEOUT, Limits())[1]
        if failure:
            raise GradeboxError(failure)
        return outcome.stdout.decode("utf-8", errors="replace")

    def prompt_from_command(self, command: list[str], config: dict, payload: Payload) -> str:
        body = payload.model_copy(update={"config": config, "workspace_path": CONTAINER_WORKSPACE})
        return self._text_of(command, body.to_wire(), "prompt-template")

    def candidate_text(self, payload: Payload, preprocessors: list[dict]) -> str:
        def preprocess(command: Any, rel: str) -> str:
            argv = command.split() if isinstance(command, str) else list(command)
            path = f"{CONTAINER_WORKSPACE}/{rel}"
            # The path as the last argument (ours), and on stdin as AgentV's
            # runContentPreprocessor writes it ({path, original_path}).
            stdin = json.dumps({"path": path, "original_path": rel}).encode()
            try:
                return self._text_of([*argv, path], stdin, "preprocessor")
            except GradeboxError as exc:
                return f"[gradebox: the preprocessor of {rel} failed: {exc}]"

        return candidate_from_files(payload, self.workspace, preprocess, preprocessors)

    def ask_command_judge(self, judge: CommandJudge, prompt: str, name: str) -> str:
        """Run a judge that is a command as a cli target runs (``steps.run_cli_command``),
        with the prompt as its ``{PROMPT}`` / ``{PROMPT_FILE}``, the workspace read-only and
        no network whatever the provider says (it is a grader); its reply is the answer it
        wrote to ``{OUTPUT_FILE}``, text to parse as untrusted. A failed run is an error."""
        target = judge.target
        assert isinstance(target, TargetConfig)
        image = self.image_for(target.image, self.root)
        outcome, answer = run_cli_command(
            target,
            prompt,
            self.workspace,
            self.box,
            test_id=self.labels.get("gradebox.test", "judge"),
            input_files=[],
            image_id=image,
            env=dict(target.env),
            labels=self.labels,
            source_dir=self.root,
            name="llm-judge",
            network="none",
            read_only=True,
        )
        failure = judge_step(f"the {judge.kind} judge", outcome, target.timeout, target.limits)[1]
        if failure:
            raise GradeboxError(failure)
        if isinstance(answer, str):
            raise GradeboxError(answer.replace("target:", f"the {judge.kind} judge:", 1))
        return answer.get("output") or ""
