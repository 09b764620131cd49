"""A normalised trace of what an agent did, as far as its answer tells: the tool calls in its
reported transcript (``{tool|name, input|args|arguments, output}``, or the OpenAI
``{function: {name, arguments}}`` form), with its summary and Vally's view of it. Pure data,
read by the trajectory checks (``trace``), the skill checks (``skills``), LLM judges and the
test lifecycle. No process, no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..protocol.models import Message, Payload

__all__ = ["ToolCall", "Trace", "summary_of", "trace_of", "vally_input"]


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


def _arguments(value: Any) -> Any:
    if isinstance(value, str):  # OpenAI sends arguments as a JSON string
        try:
            return json.loads(value)
        except ValueError:
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
    duration = next((raw[k] for k in ("duration_ms", "durationMs") if k in raw), None)
    if isinstance(duration, bool) or not isinstance(duration, int | float):
        duration = None
    return ToolCall(
        name=name,
        args=_arguments(args),
        output=raw.get("output"),
        error=status in ("error", "failed") or bool(raw.get("error")),
        duration_ms=duration,
    )


def trace_of(messages: list[Message], events: list[Any] | None = None) -> Trace:
    """The tool calls, in order, from a transcript (and any reported trace events)."""
    trace = Trace()
    for message in messages:
        if message.role == "assistant":
            trace.assistant_messages += 1
        for raw in getattr(message, "tool_calls", None) or []:
            call = _tool_call(raw)
            if call is not None:
                trace.tool_calls.append(call)
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
    counts: dict[str, int] = {}
    for call in trace.tool_calls:
        counts[call.name] = counts.get(call.name, 0) + 1
    return {
        "event_count": len(trace.tool_calls),
        "tool_calls": counts,
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
