"""Scripted model servers on loopback: OpenAI-compatible chat completions, Azure OpenAI's
Responses API (``/openai/v1/responses?api-version=...``, key in ``api-key``) and Anthropic
messages. No model API is reachable from the tests; these answer as the real ones do."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Raw:
    """A reply sent exactly as given: a body of the wrong shape, an HTML page, not JSON."""

    body: bytes | dict[str, Any]
    status: int = 200
    content_type: str = "application/json"


Answer = str | int | tuple[int, str] | Raw | Callable[[dict[str, Any]], "str | int | Raw"]


class FakeModel:
    """``answers``: a list used in order (then ``default``); an int is an HTTP error status,
    ``(status, message)`` an error with that message, ``Raw`` a body sent as it is.

    Asked for structured output, it answers as the real servers do: the text of an OpenAI or
    Azure reply is the answer, and an Anthropic request with a forced tool call gets a
    ``tool_use`` block whose input is the answer parsed as JSON (a text block if it is not).

    Example::

        with FakeModel("openai", default='{"score": 1}') as fake:
            ... base_url=fake.base_url ...
            assert len(fake.requests) == 1
    """

    def __init__(
        self,
        kind: str = "openai",
        *,
        answers: list[Answer] | None = None,
        default: Answer = '{"score": 1, "checks": [], "reasoning": "ok"}',
    ) -> None:
        self.kind, self.answers, self.default = kind, list(answers or []), default
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}" + ("/v1" if self.kind == "openai" else "")

    @property
    def prompts(self) -> list[str]:
        """The text of the last user message of every request."""
        out = []
        for body in self.requests:
            content = body["messages" if "messages" in body else "input"][-1]["content"]
            out.append(content if isinstance(content, str) else json.dumps(content))
        return out

    def __enter__(self) -> FakeModel:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _next(self, body: dict[str, Any]) -> Any:
        with self._lock:
            self.requests.append(body)
            answer = self.answers.pop(0) if self.answers else self.default
        return answer(body) if callable(answer) else answer

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake._lock:
                    fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                    fake.paths.append(self.path)
                answer = fake._next(body)
                if isinstance(answer, Raw):
                    data = answer.body
                    self._send(answer.status, data, content_type=answer.content_type)
                elif isinstance(answer, tuple):
                    status, message = answer
                    self._send(status, {"error": {"message": message, "type": "error"}})
                elif isinstance(answer, int):
                    self._send(
                        answer,
                        {"error": {"message": f"scripted {answer}", "type": "rate_limit_error"}},
                        retry=True,
                    )
                elif fake.kind == "azure":
                    self._send(
                        200,
                        {
                            "id": "resp_1",
                            "object": "response",
                            "created_at": 0,
                            "model": body.get("model"),
                            "status": "completed",
                            "output": [
                                {
                                    "type": "message",
                                    "id": "msg_1",
                                    "status": "completed",
                                    "role": "assistant",
                                    "content": [
                                        {"type": "output_text", "text": answer, "annotations": []}
                                    ],
                                }
                            ],
                            "usage": {
                                "input_tokens": 100,
                                "output_tokens": 20,
                                "total_tokens": 120,
                                "input_tokens_details": {"cached_tokens": 0},
                                "output_tokens_details": {"reasoning_tokens": 0},
                            },
                            "parallel_tool_calls": True,
                            "tool_choice": "auto",
                            "tools": [],
                        },
                    )
                elif fake.kind == "anthropic":
                    self._send(
                        200,
                        {
                            "id": "msg_1",
                            "type": "message",
                            "role": "assistant",
                            "model": body.get("model"),
                            "stop_reason": "end_turn",
                            "stop_sequence": None,
                            "content": [_anthropic_block(body, answer)],
                            "usage": {"input_tokens": 100, "output_tokens": 20},
                        },
                    )
                else:
                    self._send(
                        200,
                        {
                            "id": "c1",
                            "object": "chat.completion",
                            "created": 0,
                            "model": body.get("model"),
                            "choices": [
                                {
                                    "index": 0,
                                    "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": answer},
                                }
                            ],
                            "usage": {
                                "prompt_tokens": 100,
                                "completion_tokens": 20,
                                "total_tokens": 120,
                            },
                        },
                    )

            def _send(
                self,
                status: int,
                body: dict[str, Any] | bytes,
                retry: bool = False,
                content_type: str = "application/json",
            ) -> None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                if retry:
                    self.send_header("retry-after", "0")
                self.end_headers()
                self.wfile.write(data)

        return Handler


def _anthropic_block(body: dict[str, Any], answer: str) -> dict[str, Any]:
    forced = body.get("tool_choice") or {}
    if forced.get("type") == "tool":
        try:
            value = json.loads(answer)
        except ValueError:
            value = None
        if isinstance(value, dict):
            return {"type": "tool_use", "id": "toolu_1", "name": forced["name"], "input": value}
    return {"type": "text", "text": answer}
