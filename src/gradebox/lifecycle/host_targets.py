"""Targets that answer from the host, without a container: a model (AgentV's ``openai``,
``azure``, ``anthropic``, ``gemini``... providers, or one of our model targets), AgentV's
``mock`` (a canned answer) and ``replay`` (a recorded transcript).

A model is called through the run's ``ModelHub``: the official SDKs, retries on 429/5xx, the
response cache, usage and cost. Its key is read from this process's environment when the call
is made; it is never given to a container, written to a result or logged. The test's input
becomes chat messages as AgentV builds them for a language model: leading system messages are
the system prompt, input files are embedded as ``<file path="...">`` blocks.

Everything here returns the payload fields of the answer, or why there is none (a string):
a target that cannot answer makes its test an ``error``, never a pass.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import untrusted
from ..errors import ConfigError
from ..llm.client import ModelError, ModelHub
from ..protocol.models import (
    Message,
    OutputShapeError,
    Payload,
    TokenUsage,
    Usage,
    load_untrusted_json,
)

if TYPE_CHECKING:
    from ..suite import ReplaySource, Suite, TargetConfig, Test

__all__ = ["HostAnswer", "answer_on_host", "chat_messages", "converse"]

MAX_FILE = 1 << 20  # bytes of one input file embedded in a model's prompt
MAX_REPLAY = 64 << 20  # bytes of a replay file read


@dataclass
class HostAnswer:
    """The payload fields of an answer, and the model calls it cost."""

    fields: dict[str, Any]
    usage: Usage = field(default_factory=Usage)


# --------------------------------------------------------------------------------------------
# The input as a model's chat.


def _file_block(rel: str, files: list[str]) -> str:
    """``<file path="rel">`` with the file's text (AgentV's ``formatFileContents``)."""
    wanted = rel.replace("\\", "/").lstrip("./")
    host = next((f for f in files if f.replace("\\", "/").endswith(wanted)), None)
    try:
        data = (untrusted.read_regular(host, MAX_FILE) or b"")[:MAX_FILE] if host else b""
        text = data.decode("utf-8", errors="replace").replace("\r\n", "\n").strip()
    except OSError:
        text = ""
    return f'<file path="{rel}">\n{text}\n</file>'


def _text(content: Any, files: list[str]) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text", part.get("value", ""))))
            elif isinstance(part, dict) and part.get("type") == "file":
                parts.append(_file_block(str(part.get("value") or part.get("path") or ""), files))
            else:
                parts.append(json.dumps(part, ensure_ascii=False))
        return "\n\n".join(p for p in parts if p)
    return json.dumps(content, ensure_ascii=False)


def chat_messages(
    messages: list[Message], files: list[str], extra_files: list[str] | None = None
) -> tuple[str | None, list[dict[str, Any]]]:
    """``(system prompt, chat messages)`` of a test's input. ``extra_files`` (input files no
    message names) are appended to the last user message."""
    system: list[str] = []
    chat: list[dict[str, Any]] = []
    for m in messages:
        text = _text(m.content, files)
        if m.role == "system" and not chat:
            system.append(text)
        else:
            role = "assistant" if m.role == "assistant" else "user"
            chat.append({"role": role, "content": text})
    if extra_files:
        blocks = "\n\n".join(_file_block(Path(f).name, [f]) for f in extra_files)
        if chat and chat[-1]["role"] == "user":
            chat[-1]["content"] = f"{chat[-1]['content']}\n\n{blocks}".strip()
        else:
            chat.append({"role": "user", "content": blocks})
    if not chat:
        chat.append({"role": "user", "content": ""})
    return ("\n\n".join(system) or None), chat


def _named_files(messages: list[Message]) -> set[str]:
    named = set()
    for m in messages:
        if isinstance(m.content, list):
            for part in m.content:
                if isinstance(part, dict) and part.get("type") == "file":
                    named.add(str(part.get("value") or part.get("path") or "").lstrip("./"))
    return named


# --------------------------------------------------------------------------------------------
# Answering.


def answer_on_host(
    target: TargetConfig,
    payload: Payload,
    test: Test,
    suite: Suite,
    hub: ModelHub | None,
    *,
    sample: int = 0,
) -> HostAnswer | str:
    """The answer of a model, mock or replay target to one test."""
    canned = _canned(target, test.id, suite, sample)
    if canned is not None:
        return canned
    files = list(test.case.input_files)
    named = _named_files(payload.input)
    extra = [f for f in files if not any(f.endswith(n) for n in named if n)]
    system, chat = chat_messages(payload.input, files, extra)
    return _ask(target, suite, hub, system, chat, sample)


def _canned(target: TargetConfig, key: str, suite: Suite, sample: int) -> HostAnswer | str | None:
    """A mock's answer, or a replay's recorded one under ``key``; None for a model target."""
    if target.provider == "mock":
        return _answered([{"role": "assistant", "content": target.response or ""}])
    if target.provider == "replay":
        assert target.replay is not None
        return replay_answer(target.replay, key, suite, sample)
    return None


def _ask(
    target: TargetConfig,
    suite: Suite,
    hub: ModelHub | None,
    system: str | None,
    chat: list[dict[str, Any]],
    sample: int,
) -> HostAnswer | str:
    if hub is None or suite.targets is None:
        return "target: no model hub for this run"
    name = target.model or ""
    try:  # following AgentV's use_target, as the preflight did
        model = suite.targets.lookup(name)
    except ConfigError as exc:
        return f"target: {exc.message}"
    if model is None:
        known = ", ".join(sorted(suite.targets.targets)) or "none found"
        return f"target: no provider or model target named {name!r} (model targets: {known})"
    t0 = time.monotonic()
    try:
        done = hub.complete(model, chat, system=system, sample=sample)
    except ModelError as exc:
        return f"target: {exc}"
    answer = _answered([{"role": "assistant", "content": done.text}])
    answer.fields["token_usage"] = TokenUsage(input=done.input_tokens, output=done.output_tokens)
    answer.fields["duration_ms"] = float(int((time.monotonic() - t0) * 1000))
    if done.cost_usd is not None:
        answer.fields["cost_usd"] = done.cost_usd
    answer.usage.add(done)
    return answer


def _answered(messages: list[dict[str, Any]], **extra: Any) -> HostAnswer:
    parsed = [Message.model_validate(m) for m in messages]
    finals = [m for m in parsed if m.role == "assistant" and m.content is not None]
    content = finals[-1].content if finals else ""
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    return HostAnswer({"output": text, "messages": parsed, **extra})


def converse(
    target: TargetConfig,
    history: list[dict[str, Any]],
    system: str | None,
    test: Test,
    suite: Suite,
    hub: ModelHub | None,
    *,
    turn: int,
    sample: int = 0,
) -> HostAnswer | str:
    """One turn of a conversation: the answer to the history so far."""
    canned = _canned(target, f"{test.id}/turn-{turn}", suite, sample)
    if canned is not None:
        return canned
    return _ask(target, suite, hub, system, history, sample)


# --------------------------------------------------------------------------------------------
# Replay: AgentV's fixtures (agentv.replay_fixture.v1) and transcripts JSONL.


def _jsonl(path: str) -> list[dict[str, Any]] | str:
    try:
        data = untrusted.read_regular(path, MAX_REPLAY)
        if data is None:
            raise OSError(22, "not a regular file", path)
    except OSError as exc:
        return f"target: cannot read replay file {path}: {exc.strerror}"
    if len(data) > MAX_REPLAY:
        return f"target: replay file {path} is over {MAX_REPLAY >> 20} MiB"
    rows = []
    for n, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = load_untrusted_json(line)
        except OutputShapeError as exc:
            return f"target: {path}:{n}: invalid JSON: {exc}"
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _same_eval_path(recorded: str, lookup: str) -> bool:
    a = recorded.replace("\\", "/").removeprefix("./")
    b = lookup.replace("\\", "/").removeprefix("./")
    return a == b or (Path(lookup).is_absolute() and b.endswith("/" + a))


def replay_answer(
    source: ReplaySource, test_id: str, suite: Suite, sample: int
) -> HostAnswer | str:
    """The recorded answer of ``test_id`` (exactly one record must match, as in AgentV)."""
    if source.transcripts:
        return _transcript(source, test_id)
    rows = _jsonl(source.fixtures or "")
    if isinstance(rows, str):
        return rows
    want_suite = source.suite or suite.name
    eval_path = source.eval_path or str(suite.path.resolve())
    matches = [
        r
        for r in rows
        if r.get("suite") == want_suite
        and r.get("test_id") == test_id
        and r.get("source_target") == source.source_target
        and int(r.get("attempt") or 0) == sample
        and (r.get("variant") or None) == (source.variant or None)
        and (not r.get("eval_path") or _same_eval_path(str(r["eval_path"]), eval_path))
    ]
    key = (
        f"suite={want_suite} test_id={test_id} source_target={source.source_target} "
        f"attempt={sample}"
    )
    if len(matches) != 1:
        return f"target: replay fixtures hold {len(matches)} records for {key} (one wanted)"
    row = matches[0]
    extra = _metrics(row.get("token_usage"), row.get("cost_usd"), row.get("duration_ms"))
    return _checked(row.get("output"), extra)


def _transcript(source: ReplaySource, test_id: str) -> HostAnswer | str:
    rows = _jsonl(source.transcripts or "")
    if isinstance(rows, str):
        return rows
    mine = [
        r for r in rows if r.get("test_id") == test_id and r.get("target") == source.source_target
    ]
    if not mine:
        return (
            f"target: the replay transcripts hold nothing for test_id={test_id} "
            f"source_target={source.source_target}"
        )
    mine.sort(
        key=lambda r: r.get("message_index") if isinstance(r.get("message_index"), int) else 0
    )
    messages = [
        {k: r[k] for k in ("role", "name", "content", "tool_calls") if k in r} for r in mine
    ]
    last = mine[-1]
    extra = _metrics(
        last.get("transcript_token_usage"),
        last.get("transcript_cost_usd"),
        last.get("transcript_duration_ms"),
    )
    return _checked(messages, extra)


def _metrics(usage: Any, cost: Any, duration: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(usage, dict):
        out["token_usage"] = TokenUsage.model_validate(
            {k: usage[k] for k in ("input", "output") if isinstance(usage.get(k), int)}
        )
    for key, value in (("cost_usd", cost), ("duration_ms", duration)):
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = float(value)
    return out


def _checked(messages: Any, extra: dict[str, Any]) -> HostAnswer | str:
    if not isinstance(messages, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages
    ):
        return "target: a replay record's output is not a list of messages"
    return _answered(messages, **extra)
