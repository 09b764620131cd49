"""From what a grader process did (a ``RunOutcome``) to one ``GraderResult``. Pure logic.

The two dialects differ on purpose, as their references say:

- a *program* grader's non-zero exit is a plain failure whatever it wrote, so a failing
  ``pytest`` run is ``failed``; when it exits 0, stdout must be empty or a JSON result;
- a *script* grader that exits non-zero *and* writes to stderr had an execution error, and
  its stdout may be free text that becomes the check text.

In both, a grader that timed out, ran out of memory, was killed, flooded its output or could
not start is an ``error``: it gave no verdict, and it is never a pass.
"""

from __future__ import annotations

import json
import signal
from typing import Literal

from .._types import format_bytes, format_duration
from ..protocol import Check, GraderResult, OutputShapeError, Status, parse_grader_output
from ..sandbox.base import Limits, RunOutcome

__all__ = ["judge", "tail_text"]

TAIL_CHARS = 2000


def tail_text(data: bytes) -> str | None:
    """The last TAIL_CHARS characters of a stream, for a human reading a failure."""
    text = data.decode("utf-8", errors="replace").strip()
    if not text:
        return None
    return text if len(text) <= TAIL_CHARS else "…" + text[-TAIL_CHARS:]


def _last_line(data: bytes) -> str:
    lines = data.decode("utf-8", errors="replace").strip().splitlines()
    return lines[-1].strip() if lines else ""


def _exec_failure(outcome: RunOutcome) -> str | None:
    """The init in every container (tini) exits 127 and says why when exec itself failed."""
    if outcome.start_error:
        return outcome.start_error
    if outcome.exit_code in (126, 127):
        line = _last_line(outcome.stderr)
        if "[FATAL tini" in line and "exec" in line:
            return line.split("failed:", 1)[-1].strip() or line
        # The gate of a container started ahead: `exec` by /bin/sh, or the working directory.
        if line.startswith("[gradebox] "):
            return line.removeprefix("[gradebox] ")
        if line.startswith("gradebox-gate: ") and "exec" in line:
            return line.split("exec: ", 1)[-1].strip()
    return None


def _signal_name(code: int) -> str | None:
    # Under an init, a child killed by signal N is reported as exit code 128 + N.
    if 128 < code < 128 + 65:
        try:
            return signal.Signals(code - 128).name
        except ValueError:
            return f"signal {code - 128}"
    return None


def judge(
    kind: Literal["program", "script"],
    name: str,
    outcome: RunOutcome,
    *,
    timeout: float,
    limits: Limits,
    named: bool = True,
) -> GraderResult:
    """Normalise one run into a result (image and duration are filled in by the caller).

    ``named``: ``name`` came from the configuration; when it did not, a ``name`` the grader
    reports in its JSON result is used instead.
    """

    def error(evidence: str) -> GraderResult:
        return GraderResult(
            name=name,
            type=kind,
            status=Status.error,
            passed=False,
            score=0.0,
            evidence=evidence,
            **common,
        )

    common = dict(
        exit_code=outcome.exit_code,
        duration_ms=outcome.duration_ms,
        timed_out=outcome.timed_out,
        oom_killed=outcome.oom_killed,
        output_truncated=outcome.output_truncated,
        stdout_tail=tail_text(outcome.stdout),
        stderr_tail=tail_text(outcome.stderr),
    )

    if outcome.timed_out:
        return error(f"Grader timed out after {format_duration(timeout)}")
    if outcome.stdout_dropped:
        return error(
            f"Grader output exceeded the {format_bytes(int(limits.output))} cap on stdout "
            "and was stopped"
        )
    failure = _exec_failure(outcome)
    if failure:
        return error(f"Failed to start grader program: {failure}")
    if outcome.oom_killed:
        return error(f"Grader was killed: out of memory (limit {format_bytes(int(limits.memory))})")
    code = outcome.exit_code
    if code is None:
        return error("Grader ended without an exit code")
    sig = _signal_name(code)
    if sig:
        return error(f"Grader was killed by {sig} (exit code {code})")

    text = outcome.stdout.decode("utf-8", errors="replace").strip()
    stderr_said = bool(outcome.stderr.strip())

    if kind == "script" and code != 0 and stderr_said:
        return error(f"Grader failed with exit code {code}: {_last_line(outcome.stderr)}")

    parsed: object = None
    if text:
        try:
            parsed = json.loads(text)
        except ValueError as exc:
            # A program grader that exits non-zero has failed whatever it printed (pytest
            # prints its report on stdout); one that exits 0 owes us a JSON result. A script
            # grader's free text is its check text.
            if kind == "program" and code == 0:
                return error(f"Grader returned unparseable JSON output on stdout: {exc}")
            parsed = None

    if isinstance(parsed, dict):
        try:
            passed, score, evidence, checks, details = parse_grader_output(parsed)
        except OutputShapeError as exc:
            return error(f"Grader output did not match schema: {exc}")
        if code != 0 and passed:
            # Whatever it printed, a grader that exits non-zero has not passed.
            passed = False
            evidence = f"{evidence} (but the grader exited with code {code})".strip()
        status = Status.passed if passed else Status.failed
        if not named and isinstance(parsed.get("name"), str) and parsed["name"].strip():
            name = parsed["name"].strip()
        return GraderResult(
            name=name,
            type=kind,
            status=status,
            passed=passed,
            score=score,
            evidence=evidence,
            checks=checks,
            details=details,
            **{**common, **_tails_if(status, common)},
        )
    if parsed is not None and kind == "program" and code == 0:
        return error(
            "Grader output did not match schema: expected a JSON object, "
            f"got {type(parsed).__name__}"
        )

    # Exit-code mode.
    passed = code == 0
    status = Status.passed if passed else Status.failed
    as_text = kind == "script" and bool(text)
    checks = [Check(text=text, passed=passed)] if as_text else []
    if as_text:
        evidence = text
    elif passed:
        evidence = "Grader exited successfully"
    else:
        evidence = f"Grader exited with exit code {code}"
    return GraderResult(
        name=name,
        type=kind,
        status=status,
        passed=passed,
        score=1.0 if passed else 0.0,
        evidence=evidence,
        checks=checks,
        **{**common, **_tails_if(status, common)},
    )


def _tails_if(status: Status, common: dict[str, object]) -> dict[str, object]:
    """Tails help explain failures; on a pass they are noise in the result file."""
    if status is Status.passed:
        return {"stdout_tail": None, "stderr_tail": None}
    return {"stdout_tail": common["stdout_tail"], "stderr_tail": common["stderr_tail"]}
