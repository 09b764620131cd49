"""A multi-turn conversation test (AgentV's ``mode: conversation``), as AgentV runs one
(``runConversationMode`` in its ``orchestrator.ts``).

Each turn's input is appended to the history (the test's own input first: its system prompt
and context), the target answers the history (the last ``window_size`` exchanges, system kept),
the answer joins the history, and the turn's assertions grade that answer (a turn with none
scores 1). ``on_turn_failure: stop`` skips the turns after one that scores below the threshold
(a skipped turn scores 0). The test's own assertions then grade the whole transcript
(``role: content`` paragraphs). The test's score is the ``aggregation`` (mean, min, max) of the
turns' and the transcript's scores; it passes when the score reaches its threshold. A turn the
target could not answer is an ``error``, and so is the test: no answer is never a pass.

Only targets that answer from the host (a model, mock, replay) hold a conversation; the loader
refuses the others.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Protocol

from ..core.scores import reaches
from ..graders.assertion import DEFAULT_REQUIRED, Assertion, aggregate
from ..graders.transcript import summary_of, trace_of
from ..protocol.models import GraderResult, Message, Payload, Status, TestResult, TraceSummary
from ..suite import Test
from .host_targets import HostAnswer, chat_messages, converse


class _TestRun(Protocol):
    """What a conversation needs of its test's run (``lifecycle.TestRun``, which calls it)."""

    run_: Any  # the suite's context: its target, suite and model hub
    test: Test
    sample: int
    payload: Payload
    result: TestResult

    def grade_with(
        self, payload: Payload, assertions: list[Assertion], ws: Path, *, warm: bool = False
    ) -> list[GraderResult]: ...

    def take_answer(self, answer: HostAnswer | str, started: float) -> bool: ...

    def finish(self, status: Status, score: float, gates: list[str]) -> None: ...


__all__ = ["run_conversation"]


def _window(history: list[dict[str, Any]], size: int | None) -> list[dict[str, Any]]:
    if size is None:
        return list(history)
    return history[-2 * size :]


def _turn_result(
    name: str,
    status: Status,
    score: float,
    evidence: str,
    children: list[GraderResult] | None = None,
) -> GraderResult:
    return GraderResult(
        name=name,
        type="turn",
        status=status,
        passed=status is Status.passed,
        score=round(score, 6),
        evidence=evidence,
        children=children or [],
    )


def _graded(
    test_run: _TestRun,
    name: str,
    assertions: list[Any],
    ws: Path,
    *,
    history: list[dict[str, Any]],
    system: str | None,
    output: str,
    expected: Any = None,
) -> GraderResult:
    """One part of the conversation graded as a test of its own."""
    messages = _messages(system, history)
    answer = [Message(role="assistant", content=output)]
    payload = test_run.payload.model_copy(
        update={
            "input": messages,
            "output": output,
            "messages": answer,
            "expected_output": test_run.payload.expected_output
            if expected is None
            else [Message.model_validate(m) for m in _expected(expected)],
            "trace_summary": TraceSummary.model_validate(summary_of(trace_of(answer))),
        }
    )
    threshold = _threshold(test_run.test)
    results = test_run.grade_with(payload, assertions, ws)
    status, score, _gates = aggregate(
        results, threshold, agentv=test_run.test.semantics == "agentv"
    )
    return _turn_result(
        name, status, score, f"score {score:.3f} (threshold {threshold:g})", results
    )


def _threshold(test: Test) -> float:
    return test.threshold if test.threshold is not None else DEFAULT_REQUIRED


def _messages(system: str | None, history: list[dict[str, Any]]) -> list[Message]:
    shown = ([{"role": "system", "content": system}] if system else []) + history
    return [Message.model_validate(m) for m in shown]


def _expected(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"role": "assistant", "content": value}]
    return [m.model_dump() if isinstance(m, Message) else m for m in value]


def _text(content: Any) -> str:
    return content if isinstance(content, str) else str(content)


def run_conversation(test_run: _TestRun, ws: Path) -> None:
    """Hold the conversation, grade it, and write the verdict into the test's result."""
    run, test = test_run.run_, test_run.test
    conversation = test.case.conversation
    target = run.target
    assert conversation is not None
    if target is None or not target.on_host:
        test_run.result.error = "a conversation needs a model, mock or replay target"
        return
    threshold = _threshold(test)
    files = list(test.case.input_files)
    system, history = chat_messages(test_run.payload.input, files)
    if history == [{"role": "user", "content": ""}]:
        history = []
    parts: list[GraderResult] = []
    stopped = False
    last = ""
    for index, turn in enumerate(conversation.turns, 1):
        name = f"turn-{index}"
        if stopped:
            why = "skipped: an earlier turn scored below the threshold (on_turn_failure: stop)"
            parts.append(_turn_result(name, Status.failed, 0.0, why))
            continue
        text = (
            turn.input
            if isinstance(turn.input, str)
            else "\n".join(_text(m.content) for m in turn.input)
        )
        history.append({"role": "user", "content": text})
        t0 = time.monotonic()
        answer = converse(
            target,
            _window(history, conversation.window_size),
            system,
            test,
            run.suite,
            run.models,
            turn=index,
            sample=test_run.sample,
        )
        if isinstance(answer, str):
            parts.append(_turn_result(name, Status.error, 0.0, answer))
            if conversation.on_turn_failure == "stop":
                stopped = True
            continue
        test_run.take_answer(answer, t0)
        last = str(answer.fields.get("output") or "")
        history.append({"role": "assistant", "content": last})
        assertions = test.turn_assertions[index - 1]
        if not assertions and turn.expected_output is None:
            parts.append(_turn_result(name, Status.passed, 1.0, "no assertions"))
            continue
        part = _graded(
            test_run,
            name,
            assertions,
            ws,
            history=_window(history, conversation.window_size),
            system=system,
            output=last,
            expected=turn.expected_output,
        )
        parts.append(part)
        if conversation.on_turn_failure == "stop" and not reaches(part.score, threshold):
            stopped = True
    if test.assertions:
        transcript = "\n\n".join(f"{m['role']}: {m['content']}" for m in history)
        parts.append(
            _graded(
                test_run,
                "conversation",
                test.assertions,
                ws,
                history=history,
                system=system,
                output=transcript,
            )
        )
    _finish(test_run, parts, history, system, last, threshold)


def _finish(
    test_run: _TestRun,
    parts: list[GraderResult],
    history: list[dict[str, Any]],
    system: str | None,
    last: str,
    threshold: float,
) -> None:
    result = test_run.result
    aggregation = test_run.test.case.conversation.aggregation  # type: ignore[union-attr]
    scores = [p.score for p in parts] or [0.0]
    score = {"min": min(scores), "max": max(scores)}.get(aggregation, sum(scores) / len(scores))
    if any(p.status is Status.error for p in parts):
        status = Status.error
    else:
        status = Status.passed if reaches(score, threshold) else Status.failed
    test_run.payload.messages = _messages(system, history)
    result.output = last
    result.graders = parts
    test_run.finish(status, round(score, 6), [])
