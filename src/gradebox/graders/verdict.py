"""From what a grader process did (a ``RunOutcome``) to one ``GraderResult``. Pure logic.

One table, written from the protocol references, decides every verdict. The *dialect* is a
property of the grader configuration (``GraderConfig.dialect``), never guessed from what the
grader printed:

=========  =================  ===================  ====================  =====================
dialect    exit 0, no stdout  exit 0, result JSON  exit 0, other stdout  exit != 0
=========  =================  ===================  ====================  =====================
program    passed, 1.0        its verdict          error                 failed (1)
script     passed, 1.0        its verdict (2)      passed, text is the   failed (1); error when
                                                   check (3)             it wrote to stderr
assertion  as script          as script            as script             as script
inline     error              its verdict          error                 error
=========  =================  ===================  ====================  =====================

1. Whatever it printed: a reported score is kept only when the report itself says it failed,
   otherwise the score is 0. A grader that exits non-zero never passes.
2. A result object may follow debug lines: the last JSON object that ends stdout is the result.
3. Unless stdout *looks like* a result (a line that opens a JSON object) that does not parse:
   that is an error, never the exit-code pass.

In every dialect a grader that timed out, ran out of memory, was killed by a signal (as the
sandbox reports it, ``RunOutcome.signal``), flooded its stdout or could not start
(``RunOutcome.start_error``, set by the backend) is an ``error``: it gave no verdict, and it is
never a pass. An exit code of 129-192 that the process chose itself is just an exit code.
"""

from __future__ import annotations

import signal
from typing import Any, Literal

from .._types import format_bytes, format_duration
from ..protocol import (
    Check,
    GraderResult,
    OutputShapeError,
    Status,
    load_untrusted_json,
    parse_grader_output,
)
from ..sandbox.base import Limits, RunOutcome

__all__ = ["Dialect", "judge", "tail_text"]

Dialect = Literal["program", "script", "assertion", "inline", "pytest", "node-test"]

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


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def find_result(text: str, *, trailing: bool) -> tuple[Any, str | None]:
    """The result object on stdout: ``(object, None)``, ``(None, None)`` when stdout holds no
    JSON at all, or ``(None, problem)`` when it holds something that is not a usable result.

    ``trailing``: a JSON object that ends stdout counts even after other lines (debug prints).
    """
    stripped = text.strip()
    if not stripped:
        return None, None
    try:
        return load_untrusted_json(stripped), None
    except OutputShapeError as exc:
        whole_error = str(exc)
    starts = [0] if stripped.startswith(("{", "[")) else []
    offset = 0
    for line in stripped.splitlines(keepends=True):
        if line.lstrip().startswith("{") and offset:
            starts.append(offset + len(line) - len(line.lstrip()))
        offset += len(line)
    if not starts:
        return None, None  # free text: no JSON anywhere at the start of a line
    if trailing:
        for start in (s for s in starts if s):  # 0 is the whole text, tried above
            try:
                found = load_untrusted_json(stripped[start:])
            except OutputShapeError:
                continue
            if isinstance(found, dict):
                return found, None
    return None, whole_error


def _json_problem(text: str) -> str:
    try:
        load_untrusted_json(text.strip())
    except OutputShapeError as exc:
        return str(exc)
    return "not a JSON object"


def judge(
    dialect: Dialect,
    name: str,
    outcome: RunOutcome,
    *,
    timeout: float,
    limits: Limits,
    named: bool = True,
    pass_score: float = 0.5,
) -> GraderResult:
    """Normalise one run into a result (image and duration are filled in by the caller).

    ``named``: ``name`` came from the configuration; when it did not, a ``name`` the grader
    reports in its JSON result is used instead. ``pass_score``: the verdict of a result that
    gives a score and no ``pass`` (AgentV's script graders: 0.8).
    """
    kind: Any = dialect
    common = dict(
        exit_code=outcome.exit_code,
        duration_ms=outcome.duration_ms,
        timed_out=outcome.timed_out,
        oom_killed=outcome.oom_killed,
        output_truncated=outcome.output_truncated,
        stdout_tail=tail_text(outcome.stdout),
        stderr_tail=tail_text(outcome.stderr),
    )

    def error(evidence: str) -> GraderResult:
        return GraderResult(
            name=name, type=kind, status=Status.error, passed=False, score=0.0,
            evidence=evidence, **common,
        )  # fmt: skip

    if outcome.timed_out:
        return error(f"Grader timed out after {format_duration(timeout)}")
    if outcome.stdout_dropped:
        return error(
            f"Grader output exceeded the {format_bytes(int(limits.output))} cap on stdout "
            "and was stopped"
        )
    if outcome.start_error:
        return error(f"Failed to start grader program: {outcome.start_error}")
    if outcome.oom_killed:
        return error(f"Grader was killed: out of memory (limit {format_bytes(int(limits.memory))})")
    code = outcome.exit_code
    if code is None:
        return error("Grader ended without an exit code")
    if outcome.signal:
        return error(f"Grader was killed by {_signal_name(outcome.signal)} (exit code {code})")

    text = outcome.stdout.decode("utf-8", errors="replace")
    if dialect in ("pytest", "node-test"):
        from .verifier import judge_junit, judge_node

        judged = judge_junit if dialect == "pytest" else judge_node
        return judged(name, text, common)
    if dialect == "inline" and code != 0:
        return error(f"Grader failed with exit code {code}: {_last_line(outcome.stderr)}".strip())
    if dialect in ("script", "assertion") and code != 0 and outcome.stderr.strip():
        return error(f"Grader failed with exit code {code}: {_last_line(outcome.stderr)}")

    parsed, problem = find_result(text, trailing=dialect in ("script", "assertion"))
    if parsed is None and problem is None and text.strip() and dialect in ("program", "inline"):
        problem = _json_problem(text)  # free text where these dialects owe JSON or nothing
    if parsed is None and problem is not None and (dialect != "program" or code == 0):
        # A program grader that exits non-zero has failed whatever it printed (pytest prints
        # its report on stdout); everyone else owes a parseable result once they print one.
        return error(f"Grader returned unparseable JSON output on stdout: {problem}")
    if parsed is not None and not isinstance(parsed, dict):
        if dialect in ("program", "inline") and code == 0:
            return error(
                "Grader output did not match schema: expected a JSON object, "
                f"got {type(parsed).__name__}"
            )
        parsed = None  # a script's stdout of `42` or `[1, 2]` is check text

    if isinstance(parsed, dict):
        try:
            passed, score, evidence, checks, details = parse_grader_output(
                parsed, pass_score=pass_score
            )
        except OutputShapeError as exc:
            if dialect == "program" and code != 0:
                return _exit_mode(dialect, name, code, text, common)
            return error(f"Grader output did not match schema: {exc}")
        if code != 0:
            # Whatever it printed, a grader that exits non-zero has not passed; its score
            # stands only when its own report agrees that it failed.
            if passed:
                score = 0.0
                evidence = f"{evidence} (but the grader exited with code {code})".strip()
            passed = False
        status = Status.passed if passed else Status.failed
        if not named and isinstance(parsed.get("name"), str) and parsed["name"].strip():
            name = parsed["name"].strip()[:200]
        return GraderResult(
            name=name, type=kind, status=status, passed=passed, score=score,
            evidence=evidence, checks=checks, details=details,
            **{**common, **_tails_if(status, common)},
        )  # fmt: skip

    if dialect == "inline":
        return error("Grader printed no JSON result on stdout (the inline dialect requires one)")
    return _exit_mode(dialect, name, code, text, common)


def _exit_mode(
    dialect: Dialect, name: str, code: int, text: str, common: dict[str, Any]
) -> GraderResult:
    """Exit-code mode: 0 passes, anything else fails; a script's stdout is its check text."""
    passed = code == 0
    status = Status.passed if passed else Status.failed
    text = text.strip()
    as_text = dialect in ("script", "assertion") and bool(text)
    checks = [Check(text=text[:10_000], passed=passed)] if as_text else []
    if as_text:
        evidence = text[:10_000]
    elif passed:
        evidence = "Grader exited successfully"
    else:
        evidence = f"Grader exited with exit code {code}"
    return GraderResult(
        name=name, type=dialect, status=status, passed=passed, score=1.0 if passed else 0.0,
        evidence=evidence, checks=checks, **{**common, **_tails_if(status, common)},
    )  # fmt: skip


def _tails_if(status: Status, common: dict[str, object]) -> dict[str, object]:
    """Tails help explain failures; on a pass they are noise in the result file."""
    if status is Status.passed:
        return {"stdout_tail": None, "stderr_tail": None}
    return {"stdout_tail": common["stdout_tail"], "stderr_tail": common["stderr_tail"]}
