"""Steps that are not graders: the target (the agent) and the workspace hooks.

They run in the same hardened sandbox as graders; the one difference is the workspace, which
they may change in place. A target (and a hook) sees only the files its command names, never
the suite's graders or expected answers. A step that fails, or that the sandbox stopped, is
judged by the same table as a grader and makes its test an ``error``.
"""

from __future__ import annotations

import json
from pathlib import Path

from .graders.run import CONTAINER_WORKSPACE, source_mounts, translate_args
from .graders.verdict import judge, tail_text
from .protocol import Payload, Status, StepRecord
from .sandbox.base import Limits, Mount, RunOutcome, Sandbox, SandboxSpec, Security
from .sandbox.hardening import run_as
from .scratch import new_scratch
from .workspace import remove_tree

__all__ = ["HOOK_TIMEOUT", "input_text", "judge_step", "run_in_workspace"]

HOOK_TIMEOUT = 300.0  # before_each / after_each


def run_in_workspace(
    command: list[str] | str,
    workspace: Path,
    sandbox: Sandbox,
    *,
    image_id: str,
    name: str,
    stdin: bytes | None = None,
    timeout: float = 300.0,
    network: str = "none",
    env: dict[str, str] | None = None,
    limits: Limits | None = None,
    labels: dict[str, str] | None = None,
    source_dir: Path | None = None,
) -> RunOutcome:
    """Run a command that may change the workspace in place (a suite's target and hooks).

    Same hardening as a grader; the only difference is the workspace, mounted read-write.
    """
    argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
    mounts = [Mount(workspace.resolve(), CONTAINER_WORKSPACE, read_only=False)]
    scratch = new_scratch()
    try:
        if source_dir is not None and not isinstance(command, str):
            argv, used = translate_args(argv, source_dir)
            mounts += source_mounts(
                source_dir, used, run_as(Security()), scratch, whole_folder=False
            )
        spec = SandboxSpec(
            image=image_id,
            command=argv,
            workdir=CONTAINER_WORKSPACE,
            env={**(env or {}), "EVALUATE_WORKSPACE": CONTAINER_WORKSPACE},
            mounts=tuple(mounts),
            stdin=stdin,
            timeout=timeout,
            limits=limits or Limits(),
            network=network,
            labels=labels or {},
            name=name,
        )
        return sandbox.run(spec)
    finally:
        remove_tree(scratch)


def input_text(payload: Payload) -> bytes:
    """What a target reads on stdin: the user's text, or the message list as JSON."""
    if len(payload.input) == 1 and isinstance(payload.input[0].content, str):
        return payload.input[0].content.encode()
    return json.dumps([m.model_dump(mode="json") for m in payload.input]).encode()


def judge_step(
    what: str, outcome: RunOutcome, timeout: float, limits: Limits
) -> tuple[StepRecord, str | None]:
    """A target or hook run: its record, and why it failed (None when it exited 0)."""
    record = StepRecord(
        exit_code=outcome.exit_code,
        duration_ms=outcome.duration_ms,
        timed_out=outcome.timed_out,
        stderr_tail=tail_text(outcome.stderr),
    )
    if outcome.exit_code == 0 and not outcome.timed_out and not outcome.oom_killed:
        return record, None
    # Timeouts, OOM, signals and failed starts read the same as for a grader.
    verdict = judge("program", what, outcome, timeout=timeout, limits=limits)
    if verdict.status is Status.error:
        return record, f"{what}: {verdict.evidence}"
    tail = (record.stderr_tail or "").splitlines()
    return record, f"{what} exited with code {outcome.exit_code}" + (
        f": {tail[-1]}" if tail else ""
    )
