"""A normalised trace of what an agent did, as far as its answer tells: the tool calls in its
reported transcript (``{tool|name, input|args|arguments, output}``, or the OpenAI
``{function: {name, arguments}}`` form), with its summary and Vally's view of it. Pure data,
read by the trajectory checks (``trace``), the skill checks (``skills``), LLM judges and the
test lifecycle; ``transcript_of`` keeps the same reading, bounded, in the test's result (the
report's steps). No process, no I/O.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.json_bounds import clean_value
from ..protocol.models import (
    Message,
    Payload,
    TokenUsage,
    ToolStep,
    Transcript,
    TranscriptStep,
)

__all__ = [
    "ToolCall",
    "Trace",
    "cut_name",
    "listed",
    "summary_of",
    "trace_of",
    "transcript_of",
    "vally_input",
]

# What a result keeps of a transcript: the agent wrote it, and a 10,000-test run's results
# file and report hold every one. One text (a message, a call's arguments or its output) is
# cut as a grader's evidence is (``verdict.judge``, ``llm.MAX_RAW``); the messages kept are
# counted, and all of them together are bounded as the diff is (``workspace.max_diff``'s
# default).
TEXT_CAP = 10_000  # characters of one text
MAX_STEPS = 500  # messages
# Tool calls: each kept costs ~100 bytes of fields whatever its texts (a million {"name": "a"}
# in a 15 MB answer made a 100 MB result line); past this many, counted, not kept.
MAX_CALLS = 2_000
TRANSCRIPT_CAP = 1 << 20  # characters of every text together
# How deeply a call's arguments or output is kept as structure: an arguments string is parsed
# whatever its depth, and a result nesting past pydantic's 200 levels cannot be read back
# (the run's whole results file is refused). Deeper is kept as its JSON text.
KEPT_DEPTH = 32
NAME_CAP = 200  # characters of a tool's name (kept whatever the budget has left)
SHOWN = 10  # names an evidence lists (the trace and skill checks'); the rest are counted


@dataclass
class ToolCall:
    name: str
    args: Any = None
    output: Any = None
    error: bool = False
    duration_ms: float | None = None  # as reported (AgentV's durationMs): latency bounds


@dataclass
class Trace:
    tool_calls: list[ToolCall] = field(default_factory=list)
    assistant_messages: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)


def cut_name(text: str) -> str:
    """A name the agent wrote (a tool's, a skill's, a path), as an evidence shows it."""
    return text if len(text) <= NAME_CAP else text[:NAME_CAP] + "…"


def listed(items: Sequence[Any], show: Callable[[Any], str] = cut_name) -> str:
    """What an evidence says the agent did: the first ``SHOWN`` of ``items``, each ``show``n
    (a name, cut), the rest counted. The agent chose the names and how many there are."""
    text = ", ".join(show(item) for item in items[:SHOWN]) or "(none)"
    return text + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def _arguments(value: Any) -> Any:
    """Arguments as reported; a JSON string (OpenAI's form) parsed, as the answer file was:
    every string writable (a "\\ud800" in it was a lone surrogate no result could be written
    with), no deeper than an answer may be (else, and when no JSON, the string itself)."""
    if isinstance(value, str):
        try:
            return clean_value(json.loads(value))
        except (ValueError, RecursionError):  # OutputShapeError is a ValueError
            return value
    return value


def _tool_call(raw: Any) -> ToolCall | None:
    if not isinstance(raw, dict):
        return None
    function = raw.get("function") if isinstance(raw.get("function"), dict) else {}
    name = raw.get("tool") or raw.get("name") or raw.get("toolName") or function.get("name")
    if not isinstance(name, str) or not name:
        return None
    args = next((raw[k] for k in ("input", "args", "arguments") if k in raw), None)
    if args is None:
        args = function.get("arguments")
    status = str(raw.get("status") or "").lower()
    duration = _duration(next((raw[k] for k in ("duration_ms", "durationMs") if k in raw), None))
    return ToolCall(
        name=name,
        args=_arguments(args),
        output=raw.get("output"),
        error=status in ("error", "failed") or bool(raw.get("error")),
        duration_ms=duration,
    )


def _calls(message: Message) -> list[ToolCall]:
    """A message's tool calls, as every reader counts them (what is not one is left out)."""
    calls = (_tool_call(raw) for raw in getattr(message, "tool_calls", None) or [])
    return [c for c in calls if c is not None]


def trace_of(messages: list[Message], events: list[Any] | None = None) -> Trace:
    """The tool calls, in order, from a transcript (and any reported trace events)."""
    trace = Trace()
    for message in messages:
        if message.role == "assistant":
            trace.assistant_messages += 1
        trace.tool_calls.extend(_calls(message))
    for event in events or []:
        if not isinstance(event, dict):
            continue
        trace.events.append(event)
        if event.get("type") in ("tool_call", "tool") and not messages:
            call = _tool_call(event.get("data") if isinstance(event.get("data"), dict) else event)
            if call is not None:
                trace.tool_calls.append(call)
    return trace


def summary_of(trace: Trace) -> dict[str, Any]:
    """The reference's ``trace_summary``: event count, calls per tool, errors, LLM calls."""
    return {
        "event_count": len(trace.tool_calls),
        "tool_calls": dict(Counter(call.name for call in trace.tool_calls)),
        "error_count": sum(c.error for c in trace.tool_calls),
        "llm_call_count": trace.assistant_messages,
    }


def vally_input(payload: Payload, trace: Trace, workspace: str | None) -> dict[str, Any]:
    """Vally's GraderInput parts: ``trajectory`` (output, events, metrics) and ``stimulus``."""
    usage = payload.token_usage
    prompt = " ".join(m.content for m in payload.input if isinstance(m.content, str))
    return {
        "trajectory": {
            "output": payload.output or "",
            "events": [
                {"type": "tool_call", "data": {"toolName": c.name, "arguments": c.args}}
                for c in trace.tool_calls
            ],
            "metrics": {
                "toolCallCount": len(trace.tool_calls),
                "llmCallCount": trace.assistant_messages,
                "errorCount": sum(c.error for c in trace.tool_calls),
                "durationMs": payload.duration_ms,
                "costUsd": payload.cost_usd,
                "tokenUsage": usage.model_dump(exclude_none=True) if usage else None,
            },
            "diff": payload.file_changes,
            "workDir": workspace,
        },
        "stimulus": {
            "prompt": prompt,
            "messages": [m.model_dump(mode="json") for m in payload.input],
            "files": list(payload.input_files),
        },
    }


class _Budget:
    """Texts kept, each cut at ``TEXT_CAP`` and all together at ``TRANSCRIPT_CAP``."""

    def __init__(self) -> None:
        self.left = TRANSCRIPT_CAP
        self.cut = 0

    def text(self, value: Any) -> tuple[str | None, bool]:
        if value is None:
            return None, False
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        keep = min(len(text), TEXT_CAP, self.left)
        self.left -= keep
        if keep < len(text):
            self.cut += 1
            return text[:keep], True
        return text, False

    def value(self, value: Any) -> tuple[Any, bool]:
        """A call's arguments or output: as reported when whole, else its JSON text, cut."""
        if value is None or isinstance(value, str):
            return self.text(value)
        try:
            text = json.dumps(value, ensure_ascii=False)
        except (RecursionError, ValueError):  # deeper than the encoder goes
            return self.text("[gradebox: nested too deeply to keep]")
        if _deeper_than(value, KEPT_DEPTH):
            return self.text(text)
        if len(text) <= min(TEXT_CAP, self.left):
            self.left -= len(text)
            return value, False
        return self.text(text)


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists and objects past ``limit`` (a stack, no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            stack.extend(
                (sub, depth + 1) for sub in (item.values() if isinstance(item, dict) else item)
            )
    return False


def _duration(value: Any) -> float | None:
    """A reported duration as a float, or None: not a number, or one past any float (JSON
    bounds no integer: 10**400 failed the step's validation, and the test with it)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _reported(raw: Message, *keys: str) -> Any:
    extra = raw.model_extra or {}
    return next((extra[k] for k in keys if extra.get(k) is not None), None)


def transcript_of(messages: list[Message], output: str | None) -> Transcript | None:
    """The transcript a result keeps: every message and tool call as the trace checks read
    them (``trace_of``: the same positions), bounded; None when it says no more than the
    answer (one assistant message holding it, no tool call)."""
    calls = [_calls(m) for m in messages]
    if not messages or (
        len(messages) == 1
        and messages[0].role == "assistant"
        and not calls[0]
        and (messages[0].content or "") == (output or "")
    ):
        return None
    budget, steps, position = _Budget(), [], 0
    total = sum(len(c) for c in calls)
    for message, made in zip(messages[:MAX_STEPS], calls, strict=False):
        text, cut = budget.text(message.content)
        tools = []
        for call in made[: max(0, MAX_CALLS - position)]:
            args, cut_args = budget.value(call.args)
            out, cut_out = budget.value(call.output)
            tools.append(
                ToolStep(
                    position=position,
                    name=call.name[:NAME_CAP],  # outside the budget: a call keeps its name
                    args=args,
                    output=out,
                    error=call.error,
                    duration_ms=call.duration_ms,
                    cut=cut_args or cut_out,
                )
            )
            position += 1
        duration = _reported(message, "duration_ms", "durationMs")
        usage = _reported(message, "token_usage", "tokenUsage")
        steps.append(
            TranscriptStep(
                role=message.role[:100],
                text=text,
                tool_calls=tools,
                duration_ms=_duration(duration),
                token_usage=_usage(usage),
                cut=cut,
            )
        )
    notes = []
    if len(messages) > MAX_STEPS:
        notes.append(f"kept the first {MAX_STEPS} of {len(messages)} messages")
    if position == MAX_CALLS < total:
        notes.append(f"kept the first {position:,} of {total:,} tool calls")
    if budget.cut:
        notes.append(
            f"{budget.cut} text(s) cut: at most {TEXT_CAP:,} characters each, "
            f"{TRANSCRIPT_CAP:,} in all"
        )
    return Transcript(steps=steps, messages=len(messages), tool_calls=total, cut=notes)


def _usage(value: Any) -> TokenUsage | None:
    if not isinstance(value, dict):
        return None
    kept = {
        k: value[k]
        for k in ("input", "output")
        if isinstance(value.get(k), int) and not isinstance(value.get(k), bool)
    }
    return TokenUsage(**kept) if kept else None
