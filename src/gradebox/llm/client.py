"""Model calls from the host: the official SDKs, retries with backoff, a bounded number in
flight, a response cache on disk, and a ledger of calls, tokens and cost.

Every model call gradebox makes goes through one ``ModelHub`` per run: LLM graders call it
directly, and script graders reach it through their own proxy (``llm.proxy``). API keys are
read from the environment at call time and never leave the host process.

What an endpoint sends back is bytes others wrote, bounded at the one HTTP client every SDK
client is given (``_http_client``): the target's ``timeout`` bounds the whole call (a reply
trickled a byte at a time ends there), the decoded reply is at most ``REPLY_CAP`` bytes (a
gzip bomb costs that much, not what it inflates to), and a redirect is never followed (the
SDKs' headers, ``x-api-key`` or ``api-key``, would go with it). Each is an error for good,
never retried. The answer cache is a ``PrivateCache``: a folder another user could write is
ignored with a warning.

Example::

    hub = ModelHub(load_targets(Path(".")))
    answer = hub.complete(hub.targets.get("judge", file=None, field=None),
                          [{"role": "user", "content": "Say OK"}])
    print(answer.text, hub.usage())
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
import stat
import threading
import time
from collections.abc import Iterator
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

from ..core import settings
from ..core.jsonl import digest
from ..core.log import LazyLogger
from ..core.private_cache import ENTRY_CAP, PrivateCache, cache_dir
from ..core.untrusted import OverCap, decoded_within, private
from ..errors import GradeboxError
from ..protocol.models import Usage
from .targets import ModelTarget, TargetSet

__all__ = [
    "Cancelled",
    "Completion",
    "MalformedReply",
    "ModelError",
    "ModelHub",
    "REPLY_CAP",
    "azure_base_url",
    "cache_dir",
    "missing_env_message",
]

log = LazyLogger("gradebox.llm")

# The decoded bytes of one reply: ~4M tokens of text, far above any model's output limit, and
# a bound on what an endpoint can make this process hold.
REPLY_CAP = 16 << 20
# A reply's token count past this is no count (read as 0, as a negative one is): far past any
# context window, and the largest a float holds exactly, so a cost stays a finite number (the
# endpoint's 10**4000 was an OverflowError in it) and a total stays exact in JSON.
MAX_TOKENS = 1 << 53


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
    # lazy: the SDKs take over a second to import, and most commands never call a model
    import anthropic
    import openai

    return openai, anthropic


def _transient(exc: BaseException) -> bool:
    """Rate limits, server errors, timeouts and dropped connections are worth another try; a
    reply over one of its bounds is not (another attempt would be the same)."""
    if _broken_bound(exc) is not None:
        return False
    openai, anthropic = _sdks()
    if isinstance(exc, openai.APIStatusError | anthropic.APIStatusError):
        return exc.status_code == 429 or exc.status_code >= 500
    return isinstance(
        exc,
        openai.APITimeoutError
        | openai.APIConnectionError
        | anthropic.APITimeoutError
        | anthropic.APIConnectionError,
    )


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


# -- the bounds on what an endpoint sends back ----------------------------------------------

_WATCH = "gradebox.watch"  # the request extension that holds its attempt's deadline


class _Bound(Exception):
    """A reply over one of its bounds (the deadline, the decoded size, a redirect, an encoding
    we do not read), raised inside the HTTP client; ``_broken_bound`` finds it again through
    the SDK's error wrapped around it."""


class _Watch:
    """One attempt's deadline: the target's timeout bounds the whole attempt, not each read
    (a reply trickled a byte at a time never lets a per-read timeout fire). At the deadline
    every socket the attempt opened is shut, which ends a read blocked on it, headers or body.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self._socks: list[socket.socket] = []
        self._finished = False
        self._lock = threading.Lock()
        self._timer = threading.Timer(timeout, self._expire)
        self._timer.daemon = True  # never holds the process open
        self._timer.start()

    def over(self) -> bool:
        return time.monotonic() >= self.deadline

    def late(self) -> _Bound:
        return _Bound(f"no whole reply within its {self.timeout:g} s timeout")

    def tracer(self, previous: Any) -> Any:
        """httpcore's ``trace`` extension: the socket of each connection made, kept as a
        duplicate descriptor (TLS wraps the first and detaches it) for the deadline to shut."""

        def trace(name: str, info: dict[str, Any]) -> None:
            if previous is not None:
                previous(name, info)
            if name != "connection.connect_tcp.complete":
                return
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if not isinstance(sock, socket.socket):
                return
            with self._lock:
                if self._finished:
                    return
                self._socks.append(sock.dup())
            if self.over():  # made after the deadline fired
                self._expire()

        return trace

    def _expire(self) -> None:
        with self._lock:
            socks, self._socks = self._socks, []
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def finish(self) -> None:
        """The reply was read, or given up: the deadline stops, the duplicates close."""
        self._timer.cancel()
        with self._lock:
            socks, self._socks = self._socks, []
            self._finished = True
        for sock in socks:
            sock.close()


def _broken_bound(exc: BaseException) -> str | None:
    """Why an attempt failed on one of its reply's bounds, or None: a ``_Bound`` somewhere in
    the chain the SDK wrapped around it, or the attempt's deadline passed (the deadline shut
    its socket, or a read timed out at it)."""
    seen: BaseException | None = exc
    for _ in range(20):  # a chain is short; a cycle in one must not hang us
        if seen is None:
            break
        if isinstance(seen, _Bound):
            return str(seen)
        seen = seen.__cause__ or seen.__context__
    request = getattr(exc, "request", None)
    watch = getattr(request, "extensions", {}).get(_WATCH)
    return str(watch.late()) if isinstance(watch, _Watch) and watch.over() else None


def _httpx() -> Any:
    """The HTTP library the SDKs are built on: httpx2, or httpx under older SDKs."""
    try:
        import httpx2 as httpx  # lazy: loaded with the SDKs (see _sdks)
    except ImportError:  # pragma: no cover - older SDKs
        import httpx  # type: ignore[no-redef]  # lazy: as httpx2 above
    return httpx


def _http_client(timeout: float, cap: int) -> Any:
    """The HTTP client given to every SDK client a hub makes, so every call, whatever the
    provider, has its reply's bounds: a whole-call deadline (``_Watch``), at most ``cap``
    decoded bytes (decoded here, ``untrusted.decoded_within``), and no redirect followed.

    Redirects: httpx strips ``Authorization`` on a redirect to another origin, but not
    ``x-api-key`` (Anthropic) nor ``api-key`` (Azure); a model API answers a POST, it does not
    redirect it. So none is followed, to any origin: the error names where it pointed."""
    httpx = _httpx()

    def arm(request: Any) -> None:
        watch = _Watch(timeout)
        request.extensions[_WATCH] = watch
        request.extensions["trace"] = watch.tracer(request.extensions.get("trace"))
        # Only encodings decoded_within reads: an honest server sends no other.
        request.headers["Accept-Encoding"] = "gzip, deflate"

    def check(response: Any) -> None:
        watch = response.request.extensions[_WATCH]
        if response.has_redirect_location:
            watch.finish()
            raise _Bound(_redirected(response))
        encoding = response.headers.pop("content-encoding", "identity")  # decoded here, once
        response.stream = _bounded_stream()(response.stream, encoding, cap, watch)

    return httpx.Client(
        timeout=timeout,
        follow_redirects=False,
        # No connection kept for another call: the deadline can shut only sockets it saw made.
        limits=httpx.Limits(max_keepalive_connections=0),
        event_hooks={"request": [arm], "response": [check]},
    )


def _redirected(response: Any) -> str:
    try:
        to = response.request.url.join(response.headers["location"])
        where = f"{to.scheme}://{to.host}" + (f":{to.port}" if to.port else "")
    except Exception:  # a Location that is no URL: where it points says nothing more
        where = "an address that is no URL"
    status = response.status_code
    return (
        f"the endpoint redirects (HTTP {status}) to {where}: not followed, its key would go "
        "with it (set base_url to where it points)"
    )


@functools.cache
def _bounded_stream() -> type:
    """The class of a reply's body read within its bounds (made on first use: httpx is
    imported with the SDKs, and most commands never call a model)."""
    httpx = _httpx()

    class BoundedStream(httpx.SyncByteStream):
        def __init__(self, raw: Any, encoding: str, cap: int, watch: _Watch) -> None:
            self.raw, self.encoding, self.cap, self.watch = raw, encoding, cap, watch

        def __iter__(self) -> Iterator[bytes]:
            try:
                yield from decoded_within(self._timed(), self.encoding, self.cap)
            except OverCap:
                mib = f"{self.cap / (1 << 20):g} MiB"
                raise _Bound(f"the reply is over {mib} decoded (the cap on a reply)") from None
            except ValueError as exc:  # an encoding we do not read, a corrupt stream
                raise _Bound(f"the reply is refused: {_short(exc)}") from None

        def _timed(self) -> Iterator[bytes]:
            try:
                for chunk in self.raw:
                    if self.watch.over():
                        raise self.watch.late()
                    yield chunk
            except _Bound:
                raise
            except Exception:
                if self.watch.over():  # the deadline shut the socket under the read
                    raise self.watch.late() from None
                raise

        def close(self) -> None:
            try:
                self.raw.close()
            finally:
                self.watch.finish()

    return BoundedStream


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
        reply_cap: int = REPLY_CAP,
    ) -> None:
        self.targets = targets
        self.use_cache = use_cache
        folder = cache or cache_dir() / "llm"
        self.cache = PrivateCache(folder.name, folder.parent)
        self._cache_checked = False
        self.attempts = attempts
        self.reply_cap = reply_cap
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
            retry=retry_if_exception(_transient),
            wait=_wait,
            reraise=True,
            # Cancelled: no further attempt, and no backoff sleep that outlives the caller.
            stop=stop | stop_when_event_set(cancel) if cancel is not None else stop,
            sleep=cancel.wait if cancel is not None else time.sleep,
        )
        def once() -> Completion:
            nonlocal sent
            if cancel is not None and cancel.is_set():
                raise Cancelled(f"model target {target.name!r}: cancelled")  # never retried
            sent = True
            # `params: {structured_output: false}`: a server without structured output (an
            # older OpenAI-compatible one) is asked in prose; its reply is judged as prose.
            asked = schema if target.params.get("structured_output", True) is not False else None
            try:
                return self._ask(target, messages, system, asked)
            except json.JSONDecodeError:  # a body the SDK took for JSON (its content type)
                raise _missing(target, "is not JSON") from None
            except RecursionError:  # nested deeper than json's decoder recurses
                raise _missing(target, "is JSON nested too deep to read") from None
            except ValueError as exc:  # json.loads of a number past Python's digit limit
                if "integer string conversion" not in str(exc):
                    raise
                raise _missing(target, "holds a number of too many digits to read") from None

        openai, anthropic = _sdks()
        try:
            return once()
        except Cancelled:
            if sent:  # an earlier attempt reached the model
                raise ModelError(
                    f"model target {target.name!r}: cancelled after a failed attempt"
                ) from None
            raise
        except _Bound as exc:  # the SDKs let an error that is not httpx's through as it is
            raise ModelError(f"model target {target.name!r}: {exc}") from None
        except (openai.APIError, anthropic.APIError) as exc:
            bound = _broken_bound(exc)
            if bound is not None:
                raise ModelError(f"model target {target.name!r}: {bound}") from None
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
        ident = (target.provider, target.base_url, key, target.api_version, target.timeout)
        with self._lock:
            client = self._clients.get(ident)
            if client is None:
                openai, anthropic = _sdks()
                # Retries are ours (tenacity), so the SDK's own are off.
                common = {
                    "api_key": key or "unused",
                    "max_retries": 0,
                    "timeout": target.timeout,
                    "http_client": _http_client(target.timeout, self.reply_cap),
                }
                if target.provider == "azure":
                    client = openai.AzureOpenAI(
                        base_url=azure_base_url(target.base_url or ""),
                        api_version=target.api_version or "v1",
                        **common,
                    )
                else:
                    kind = anthropic.Anthropic if target.provider == "anthropic" else openai.OpenAI
                    client = kind(base_url=target.base_url, **common)
                self._clients[ident] = client
            return client

    def _ask(
        self,
        target: ModelTarget,
        messages: list[dict[str, Any]],
        system: str | None,
        schema: dict[str, Any] | None,
    ) -> Completion:
        """One request in the provider's own API, and its reply read (``_read_reply``)."""
        client = self._client(target)
        if target.provider == "azure":
            # Azure OpenAI through its Responses API (as AgentV calls it): the deployment is
            # the model, ``api-key`` the header, ``api-version`` the query.
            params: dict[str, Any] = {}
            if schema is not None:
                params["text"] = {"format": {"type": "json_schema", **_answer_schema(schema)}}
            if "temperature" in target.params:
                params["temperature"] = target.params["temperature"]
            if "max_tokens" in target.params:
                params["max_output_tokens"] = target.params["max_tokens"]
            if system:
                params["instructions"] = system
            reply = client.responses.create(model=target.model, input=messages, **params)
            return _read_reply(_azure_reply, target, reply, schema is not None)
        if target.provider == "anthropic":
            params = {"max_tokens": 1024, **_sdk_params(target)}
            if system:
                params["system"] = system
            if schema is not None:
                # Anthropic's structured output: one tool whose input is the answer, and a
                # call of it forced. Its input, not the text blocks, is the answer.
                tool = {"name": ANSWER_TOOL, "description": "Record your answer."}
                params["tools"] = [{**tool, "input_schema": schema}]
                params["tool_choice"] = {"type": "tool", "name": ANSWER_TOOL}
            reply = client.messages.create(model=target.model, messages=messages, **params)
            return _read_reply(_anthropic_reply, target, reply, schema is not None)
        sent = ([{"role": "system", "content": system}] if system else []) + messages
        params = _sdk_params(target)
        if schema is not None:
            params["response_format"] = {
                "type": "json_schema",
                "json_schema": _answer_schema(schema),
            }
        reply = client.chat.completions.create(model=target.model, messages=sent, **params)
        return _read_reply(_openai_reply, target, reply, schema is not None)

    # -- the cache -----------------------------------------------------------------------

    @staticmethod
    def _name(key: str) -> str:
        return key.removeprefix("sha256:") + ".json"

    def _read(self, key: str) -> Completion | None:
        """The cached answer, or None: missing, or not ours alone (``PrivateCache``)."""
        self._check_cache()
        raw = self.cache.read(self._name(key))
        if raw is None:
            return None
        try:
            data = json.loads(raw)
            return Completion(
                text=str(data["text"]),
                input_tokens=int(data["input_tokens"]),
                output_tokens=int(data["output_tokens"]),
                cached=True,
                cost_usd=None,
                structured=data.get("structured") is True,
            )
        except (ValueError, KeyError, TypeError):
            return None

    def _write(self, key: str, done: Completion) -> None:
        body = {
            "text": done.text,
            "input_tokens": done.input_tokens,
            "output_tokens": done.output_tokens,
            "structured": done.structured,
        }
        data = json.dumps(body).encode()
        if len(data) <= ENTRY_CAP:  # a larger entry would never be read back
            # A cache that cannot be written costs money later, never a verdict; the write
            # is whole or not at all (no half-written file left behind on a full disk).
            self.cache.write(self._name(key), data)

    def _check_cache(self) -> None:
        """One warning per hub when the cache folder is not ours alone: every read of it is
        then a miss (``PrivateCache``), and this says why the run pays for every call."""
        with self._lock:
            if self._cache_checked:
                return
            self._cache_checked = True
        path = self.cache.path
        try:
            st = os.lstat(path)
        except OSError:
            return  # not there yet: made private by the first write
        if stat.S_ISLNK(st.st_mode):
            why = "it is a link"
        elif st.st_uid != os.geteuid():
            why = f"it is owned by uid {st.st_uid}"
        elif not private(st):
            why = f"others may write into it (mode {stat.S_IMODE(st.st_mode):o})"
        else:
            return
        log.warning("model cache %s ignored: %s; every model call is made", path, why)


ANSWER_TOOL = "record_answer"


def _answer_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's and Azure's structured output: the answer, one object of ``schema``."""
    return {"name": "answer", "strict": True, "schema": schema}


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
    choices = _listed(target, reply, "choices")
    if not choices:
        raise _missing(target, "has no 'choices'")
    message = getattr(choices[0], "message", None)
    if message is None:
        raise _missing(target, "has no 'choices[0].message'")
    if not isinstance(getattr(message, "content", None), str):
        refusal = getattr(message, "refusal", None)
        why = f" (refusal: {str(refusal)[:200]})" if refusal else ""
        raise _missing(target, f"has no text: 'choices[0].message.content' is null{why}")
    tokens = _tokens(reply, "prompt_tokens", "completion_tokens")
    return Completion(text=message.content, structured=structured, **tokens)


def _azure_reply(target: ModelTarget, reply: Any, structured: bool) -> Completion:
    # The SDK's `output_text`, with every step checked: the text parts of its messages.
    texts = [
        part.text
        for item in _listed(target, reply, "output")
        if getattr(item, "type", None) == "message"
        for part in (getattr(item, "content", None) or [])
        if getattr(part, "type", None) == "output_text"
        and isinstance(getattr(part, "text", None), str)
    ]
    if not texts:
        raise _missing(target, "has no text: 'output' holds no message with output_text")
    tokens = _tokens(reply, "input_tokens", "output_tokens")
    return Completion(text="".join(texts), structured=structured, **tokens)


def _anthropic_reply(target: ModelTarget, reply: Any, structured: bool) -> Completion:
    content = _listed(target, reply, "content")
    tokens = _tokens(reply, "input_tokens", "output_tokens")
    if structured:
        calls = [
            b
            for b in content
            if getattr(b, "type", None) == "tool_use" and getattr(b, "name", None) == ANSWER_TOOL
        ]
        if len(calls) != 1 or not isinstance(getattr(calls[0], "input", None), dict):
            raise _missing(
                target,
                f"has no single '{ANSWER_TOOL}' tool call with an object "
                f"as its input ({len(calls)} found)",
            )
        return Completion(text=json.dumps(calls[0].input), structured=True, **tokens)
    texts = [getattr(b, "text", None) for b in content if getattr(b, "type", None) == "text"]
    if not texts or not all(isinstance(t, str) for t in texts):
        raise _missing(target, "has no text: 'content' holds no text block")
    return Completion(text="".join(texts), **tokens)


def _listed(target: ModelTarget, reply: Any, field: str) -> list[Any]:
    """The reply's list ``field``. The SDK returns the body as a string when it is not JSON
    (an HTML error page with 200, a proxy's banner): that is no reply."""
    if isinstance(reply, str | bytes) or reply is None:
        text = (reply or "")[:80] if isinstance(reply, str) else ""
        first = text.strip().splitlines()[0] if text.strip() else "empty"
        raise _missing(target, f"is not JSON (no {field!r}): {first!r}")
    value = getattr(reply, field, None)
    if not isinstance(value, list):
        raise _missing(target, f"has no {field!r}")
    return value


def _tokens(reply: Any, sent: str, received: str) -> dict[str, int]:
    """The reply's token counts, by the provider's names for them; 0 where not a count
    (``MAX_TOKENS``)."""
    usage = getattr(reply, "usage", None)
    return {"input_tokens": _count(usage, sent), "output_tokens": _count(usage, received)}


def _sdk_params(target: ModelTarget) -> dict[str, Any]:
    """A target's ``params`` as the SDK takes them: ``structured_output`` is ours."""
    return {k: v for k, v in target.params.items() if k != "structured_output"}


def _count(usage: Any, name: str) -> int:
    value = getattr(usage, name, 0) if usage is not None else 0
    is_count = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKENS
    return value if is_count else 0


def missing_env_message(target: ModelTarget, missing: list[str]) -> str:
    """One line naming what is unset, e.g. ``model target 'llm': $AZURE_OPENAI_API_KEY is not
    set (azure)``."""
    names = ", ".join(f"${n}" for n in missing)
    verb = "is" if len(missing) == 1 else "are"
    if target._use_target is not None:
        return (
            f"target {target.name!r} uses use_target: {target._use_target}, and {names} "
            f"{verb} not set (set it to a target's name)"
        )
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
