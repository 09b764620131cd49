"""Model calls from the host: the official SDKs, retries with backoff, a bounded number in
flight, a response cache on disk, and a ledger of calls, tokens and cost.

Every model call gradebox makes goes through one ``ModelHub`` per run: LLM graders call it
directly, and script graders reach it through their own proxy (``llm.proxy``). API keys are
read from the environment at call time and never leave the host process.

Example::

    hub = ModelHub(load_targets(Path(".")))
    answer = hub.complete(hub.targets.get("judge", file=None, field=None),
                          [{"role": "user", "content": "Say OK"}])
    print(answer.text, hub.usage())
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tenacity import (
    RetryCallState,
    retry,
    retry_if_exception,
    stop_after_attempt,
    stop_when_event_set,
)

from .. import settings
from ..atomic import write_atomic
from ..errors import GradeboxError
from ..jsonl import digest
from ..private_cache import cache_dir
from ..protocol import Usage
from .targets import ModelTarget, TargetSet

__all__ = [
    "Cancelled",
    "Completion",
    "MalformedReply",
    "ModelError",
    "ModelHub",
    "azure_base_url",
    "cache_dir",
    "missing_env_message",
]


class ModelError(GradeboxError):
    """A model call failed for good (after retries), or cannot be made (no key)."""


class Cancelled(ModelError):
    """The caller gave up before the request was sent: nothing reached the model."""


@dataclass
class Completion:
    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    cached: bool = False
    cost_usd: float | None = None
    # The text is the object the provider's structured output returned (a JSON schema, a
    # forced tool call), not prose the model chose to write.
    structured: bool = False


class MalformedReply(ModelError):
    """A reply of the wrong shape (no ``choices``, no ``output``, content null, not JSON):
    one line naming the provider and what was missing, never a traceback."""


def _missing(target: ModelTarget, what: str) -> MalformedReply:
    return MalformedReply(f"model target {target.name!r}: the {target.provider} reply {what}")


def _sdks() -> tuple[Any, Any]:
    """The SDKs, imported on first use: they take over a second to import, and most commands
    never call a model."""
    import anthropic
    import openai

    return openai, anthropic


def _transient(exc: BaseException) -> bool:
    """Rate limits, server errors, timeouts and dropped connections are worth another try."""
    openai, anthropic = _sdks()
    if isinstance(exc, openai.APIStatusError | anthropic.APIStatusError):
        return exc.status_code == 429 or exc.status_code >= 500
    return isinstance(
        exc,
        openai.APITimeoutError | openai.APIConnectionError
        | anthropic.APITimeoutError | anthropic.APIConnectionError,
    )  # fmt: skip


def _backoff() -> float:
    return settings.current().llm_backoff


def _wait(state: RetryCallState) -> float:
    """Exponential backoff (1, 2, 4... times $GRADEBOX_LLM_BACKOFF s, at most 30 s), or the
    server's own Retry-After when it sends one."""
    exc = state.outcome.exception() if state.outcome else None
    response = getattr(exc, "response", None)
    header = response.headers.get("retry-after") if response is not None else None
    if header:
        with contextlib.suppress(ValueError):
            return min(30.0, max(0.0, float(header)))
    return min(30.0, _backoff() * 2 ** (state.attempt_number - 1))


class ModelHub:
    """The run's one way to a model. Thread-safe."""

    def __init__(
        self,
        targets: TargetSet,
        *,
        max_in_flight: int = 4,
        use_cache: bool = True,
        cache: Path | None = None,
        attempts: int = 5,
    ) -> None:
        self.targets = targets
        self.use_cache = use_cache
        self.cache = cache or cache_dir() / "llm"
        self.attempts = attempts
        self._slots = threading.BoundedSemaphore(max(1, max_in_flight))
        self._lock = threading.Lock()
        self._clients: dict[tuple[str, str | None, str | None], Any] = {}
        self._usage = Usage()

    # -- the ledger ----------------------------------------------------------------------

    def usage(self) -> Usage:
        with self._lock:
            return self._usage.model_copy()

    def _record(self, done: Completion) -> None:
        with self._lock:
            self._usage.add(done)

    # -- calls ---------------------------------------------------------------------------

    def complete(
        self,
        target: ModelTarget,
        messages: list[dict[str, Any]],
        system: str | None = None,
        *,
        sample: int = 0,
        cancel: threading.Event | None = None,
        schema: dict[str, Any] | None = None,
    ) -> Completion:
        """One answer: from the cache when this exact request was answered before, else
        from the model (retried on rate limits, 5xx and timeouts). ``sample`` tells repeated
        samples of one request apart (a test run N times asks N times).

        ``schema``: the answer is one JSON object of this schema, asked for through the
        provider's structured output (OpenAI and Azure: a ``json_schema`` response format;
        Anthropic: a forced tool call), and ``Completion.text`` is that object as JSON.

        ``cancel`` set: a call still waiting for its turn raises ``Cancelled`` (nothing was
        sent), one that was sent makes no further attempt (its failure is a ``ModelError``).
        A reply of the wrong shape is a ``MalformedReply``."""
        extra = ([sample] if sample else []) + ([{"schema": schema}] if schema else [])
        key = digest(target.identity(), system, messages, *extra)
        if self.use_cache:
            hit = self._read(key)
            if hit is not None:
                self._record(hit)
                return hit
        if not self._turn(cancel):
            raise Cancelled(f"model target {target.name!r}: cancelled before it was sent")
        try:
            done = self._call(target, messages, system, cancel, schema)
        finally:
            self._slots.release()
        done.cost_usd = target.cost(done.input_tokens, done.output_tokens)
        if self.use_cache:
            self._write(key, done)
        self._record(done)
        return done

    def _turn(self, cancel: threading.Event | None) -> bool:
        """A slot among the calls in flight; False when ``cancel`` is set while waiting."""
        if cancel is None:
            return self._slots.acquire()
        while not self._slots.acquire(timeout=0.05):
            if cancel.is_set():
                return False
        if cancel.is_set():
            self._slots.release()
            return False
        return True

    def _call(
        self,
        target: ModelTarget,
        messages: list[dict[str, Any]],
        system: str | None,
        cancel: threading.Event | None = None,
        schema: dict[str, Any] | None = None,
    ) -> Completion:
        stop = stop_after_attempt(self.attempts)
        sent = False

        @retry(
            retry=retry_if_exception(_transient), wait=_wait, reraise=True,
            # Cancelled: no further attempt, and no backoff sleep that outlives the caller.
            stop=stop | stop_when_event_set(cancel) if cancel is not None else stop,
            sleep=cancel.wait if cancel is not None else time.sleep,
        )  # fmt: skip
        def once() -> Completion:
            nonlocal sent
            if cancel is not None and cancel.is_set():
                raise Cancelled(f"model target {target.name!r}: cancelled")  # never retried
            sent = True
            call = {"anthropic": self._anthropic, "azure": self._azure}.get(
                target.provider, self._openai
            )
            # `params: {structured_output: false}`: a server without structured output (an
            # older OpenAI-compatible one) is asked in prose; its reply is judged as prose.
            asked = schema if target.params.get("structured_output", True) is not False else None
            try:
                return call(target, messages, system, asked)
            except json.JSONDecodeError:  # a body the SDK took for JSON (its content type)
                raise _missing(target, "is not JSON") from None

        openai, anthropic = _sdks()
        try:
            return once()
        except Cancelled:
            if sent:  # an earlier attempt reached the model
                raise ModelError(f"model target {target.name!r}: cancelled after a failed "
                                 "attempt") from None  # fmt: skip
            raise
        except (openai.APIError, anthropic.APIError) as exc:
            status = getattr(exc, "status_code", None)
            what = f"HTTP {status}" if status else type(exc).__name__
            # A server may echo the key in its error; the message goes into results.
            text = _short(exc)
            key = target.api_key()
            if key and len(key) >= 4:
                text = text.replace(key, "[redacted]")
            raise ModelError(f"model target {target.name!r}: {what}: {text}") from None

    def _client(self, target: ModelTarget) -> Any:
        missing = target.missing_env()
        if missing:
            raise ModelError(missing_env_message(target, missing))
        key = target.api_key()
        if key is None and target.base_url is None:
            raise ModelError(
                f"model target {target.name!r}: ${target.api_key_env or '(api_key_env)'} is not set"
            )
        ident = (target.provider, target.base_url, key, target.api_version)
        with self._lock:
            client = self._clients.get(ident)
            if client is None:
                openai, anthropic = _sdks()
                # Retries are ours (tenacity), so the SDK's own are off.
                common = {"api_key": key or "unused", "max_retries": 0, "timeout": target.timeout}
                if target.provider == "azure":
                    client = openai.AzureOpenAI(
                        base_url=azure_base_url(target.base_url or ""),
                        api_version=target.api_version or "v1", **common,
                    )  # fmt: skip
                else:
                    kind = anthropic.Anthropic if target.provider == "anthropic" else openai.OpenAI
                    client = kind(base_url=target.base_url, **common)
                self._clients[ident] = client
            return client

    def _openai(
        self,
        target: ModelTarget,
        messages: list[dict[str, Any]],
        system: str | None,
        schema: dict[str, Any] | None = None,
    ) -> Completion:
        sent = ([{"role": "system", "content": system}] if system else []) + messages
        params = _sdk_params(target)
        if schema is not None:
            params["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "answer", "strict": True, "schema": schema},
            }
        reply = self._client(target).chat.completions.create(
            model=target.model, messages=sent, **params
        )
        return _read_reply(_openai_reply, target, reply, schema is not None)

    def _azure(
        self,
        target: ModelTarget,
        messages: list[dict[str, Any]],
        system: str | None,
        schema: dict[str, Any] | None = None,
    ) -> Completion:
        """Azure OpenAI through its Responses API (as AgentV calls it): the deployment is the
        model, ``api-key`` the header, ``api-version`` the query."""
        params: dict[str, Any] = {}
        if schema is not None:
            params["text"] = {
                "format": {"type": "json_schema", "name": "answer", "strict": True,
                           "schema": schema}
            }  # fmt: skip
        if "temperature" in target.params:
            params["temperature"] = target.params["temperature"]
        if "max_tokens" in target.params:
            params["max_output_tokens"] = target.params["max_tokens"]
        if system:
            params["instructions"] = system
        reply = self._client(target).responses.create(model=target.model, input=messages, **params)
        return _read_reply(_azure_reply, target, reply, schema is not None)

    def _anthropic(
        self,
        target: ModelTarget,
        messages: list[dict[str, Any]],
        system: str | None,
        schema: dict[str, Any] | None = None,
    ) -> Completion:
        params = {"max_tokens": 1024, **_sdk_params(target)}
        if system:
            params["system"] = system
        if schema is not None:
            # Anthropic's structured output: one tool whose input is the answer, and a call
            # of it forced. Its input, not the text blocks, is the answer.
            params["tools"] = [{"name": ANSWER_TOOL, "description": "Record your answer.",
                                "input_schema": schema}]  # fmt: skip
            params["tool_choice"] = {"type": "tool", "name": ANSWER_TOOL}
        reply = self._client(target).messages.create(
            model=target.model, messages=messages, **params
        )
        return _read_reply(_anthropic_reply, target, reply, schema is not None)

    # -- the cache -----------------------------------------------------------------------

    def _path(self, key: str) -> Path:
        name = key.removeprefix("sha256:")
        return self.cache / name[:2] / f"{name}.json"

    def _read(self, key: str) -> Completion | None:
        try:
            data = json.loads(self._path(key).read_text(encoding="utf-8"))
            return Completion(
                text=str(data["text"]), input_tokens=int(data["input_tokens"]),
                output_tokens=int(data["output_tokens"]), cached=True,
                cost_usd=None, structured=data.get("structured") is True,
            )  # fmt: skip
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _write(self, key: str, done: Completion) -> None:
        body = {"text": done.text, "input_tokens": done.input_tokens,
                "output_tokens": done.output_tokens, "structured": done.structured}  # fmt: skip
        # write_atomic removes its temporary file when the write fails (a full disk left
        # half-written .tmp files in the cache for ever).
        with contextlib.suppress(GradeboxError):
            # a cache that cannot be written costs money later, never a verdict
            write_atomic(self._path(key), json.dumps(body), what="model cache")


ANSWER_TOOL = "record_answer"


def _read_reply(read: Any, target: ModelTarget, reply: Any, structured: bool) -> Completion:
    """A reply read by ``read``, every step checked there; a shape it did not foresee is
    still one line naming the provider, never a traceback."""
    try:
        return read(target, reply, structured)
    except MalformedReply:
        raise
    except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
        raise _missing(target, f"is not of the expected shape ({_short(exc)})") from None


def _openai_reply(target: ModelTarget, reply: Any, structured: bool) -> Completion:
    _expect_object(target, reply, "choices")
    choices = getattr(reply, "choices", None)
    if not isinstance(choices, list) or not choices:
        raise _missing(target, "has no 'choices'")
    message = getattr(choices[0], "message", None)
    if message is None:
        raise _missing(target, "has no 'choices[0].message'")
    if not isinstance(getattr(message, "content", None), str):
        refusal = getattr(message, "refusal", None)
        why = f" (refusal: {str(refusal)[:200]})" if refusal else ""
        raise _missing(target, f"has no text: 'choices[0].message.content' is null{why}")
    usage = getattr(reply, "usage", None)
    return Completion(
        text=message.content,
        input_tokens=_count(usage, "prompt_tokens"),
        output_tokens=_count(usage, "completion_tokens"),
        structured=structured,
    )


def _azure_reply(target: ModelTarget, reply: Any, structured: bool) -> Completion:
    _expect_object(target, reply, "output")
    output = getattr(reply, "output", None)
    if not isinstance(output, list):
        raise _missing(target, "has no 'output'")
    # The SDK's `output_text`, with every step checked: the text parts of its messages.
    texts = [
        part.text
        for item in output
        if getattr(item, "type", None) == "message"
        for part in (getattr(item, "content", None) or [])
        if getattr(part, "type", None) == "output_text"
        and isinstance(getattr(part, "text", None), str)
    ]
    if not texts:
        raise _missing(target, "has no text: 'output' holds no message with output_text")
    usage = getattr(reply, "usage", None)
    return Completion(
        text="".join(texts),
        input_tokens=_count(usage, "input_tokens"),
        output_tokens=_count(usage, "output_tokens"),
        structured=structured,
    )


def _anthropic_reply(target: ModelTarget, reply: Any, structured: bool) -> Completion:
    _expect_object(target, reply, "content")
    content = getattr(reply, "content", None)
    if not isinstance(content, list):
        raise _missing(target, "has no 'content'")
    usage = getattr(reply, "usage", None)
    tokens = {"input_tokens": _count(usage, "input_tokens"),
              "output_tokens": _count(usage, "output_tokens")}  # fmt: skip
    if structured:
        calls = [b for b in content if getattr(b, "type", None) == "tool_use"
                 and getattr(b, "name", None) == ANSWER_TOOL]  # fmt: skip
        if len(calls) != 1 or not isinstance(getattr(calls[0], "input", None), dict):
            raise _missing(target, f"has no single '{ANSWER_TOOL}' tool call with an object "
                           f"as its input ({len(calls)} found)")  # fmt: skip
        return Completion(text=json.dumps(calls[0].input), structured=True, **tokens)
    texts = [getattr(b, "text", None) for b in content if getattr(b, "type", None) == "text"]
    if not texts or not all(isinstance(t, str) for t in texts):
        raise _missing(target, "has no text: 'content' holds no text block")
    return Completion(text="".join(texts), **tokens)


def _expect_object(target: ModelTarget, reply: Any, field: str) -> None:
    """The SDK returns the body as a string when it is not JSON (an HTML error page with 200,
    a proxy's banner): that is no reply."""
    if isinstance(reply, str | bytes) or reply is None:
        text = (reply or "")[:80] if isinstance(reply, str) else ""
        first = text.strip().splitlines()[0] if text.strip() else "empty"
        raise _missing(target, f"is not JSON (no {field!r}): {first!r}")


def _sdk_params(target: ModelTarget) -> dict[str, Any]:
    """A target's ``params`` as the SDK takes them: ``structured_output`` is ours."""
    return {k: v for k, v in target.params.items() if k != "structured_output"}


def _count(usage: Any, name: str) -> int:
    value = getattr(usage, name, 0) if usage is not None else 0
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def missing_env_message(target: ModelTarget, missing: list[str]) -> str:
    """One line naming what is unset, e.g. ``model target 'llm': $AZURE_OPENAI_API_KEY is not
    set (azure)``."""
    names = ", ".join(f"${n}" for n in missing)
    verb = "is" if len(missing) == 1 else "are"
    if target._use_target is not None:
        return (f"target {target.name!r} uses use_target: {target._use_target}, and {names} "
                f"{verb} not set (set it to a target's name)")  # fmt: skip
    return f"model target {target.name!r}: {names} {verb} not set ({target.provider})"


def azure_base_url(endpoint: str) -> str:
    """An Azure resource URL as the Responses API's base (AgentV's ``buildAzureBaseUrl``):
    ``https://r.openai.azure.com`` and ``.../openai`` both become ``.../openai/v1``."""
    url = endpoint.rstrip("/")
    if url.endswith("/openai/v1"):
        return url
    if url.endswith("/openai"):
        return f"{url}/v1"
    if "://" not in url:  # a bare resource name
        url = f"https://{url}.openai.azure.com"
    return f"{url}/openai/v1"


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
