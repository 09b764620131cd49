"""A script grader's only way out: a model proxy on its own loopback.

For each run of a grader with ``target: {max_calls: N}``, gradebox starts an HTTP server with a
fresh bearer token and binds it *inside the grader container's network namespace*, on
``127.0.0.1:47100`` (for every backend and user: ``sandbox/door.py``). The container keeps no
network of its own (loopback only): it reaches the
proxy and nothing else, neither the host's ports, nor the internet, nor another grader's proxy
(which lives on that other container's loopback). The model call itself is made by the host,
through the run's ``ModelHub``, with a key the container never sees.

The wire protocol is AgentV's, so its SDK clients work unchanged: bearer token; ``GET /info``;
``POST /invoke`` with ``question`` and optional ``systemPrompt`` and ``provider``, answering
``output`` (messages), ``rawText`` and ``tokenUsage``; ``POST /invokeBatch`` with ``requests``.
Past ``max_calls`` it answers 429; a wrong or missing token is 401.

What a grader cannot do through it: call any target but its own (``provider``/``target``
naming another is 400, the same answer whatever the name, and ``/info`` names only its own);
hold more than ``MAX_CONNECTIONS`` host threads (connections beyond wait in the kernel's
backlog, holding none; each answer closes its connection, and a silent one is dropped after
``IDLE_TIMEOUT`` s); outlive its run (``close`` stops queued calls before they are sent, lets
no call in flight retry, and waits for what was sent). Every call that reached the model is
in the grader's result, failed ones included.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import secrets
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..errors import GradeboxError
from ..protocol.models import Usage
from ..sandbox.base import Started
from .client import Cancelled, ModelError, ModelHub
from .targets import ModelTarget

__all__ = ["MAX_CONNECTIONS", "PROXY_PORT", "TargetProxy"]

PROXY_PORT = 47100
MAX_BODY = 1 << 20
MAX_CONNECTIONS = 8  # served at once, per proxy: each holds one host thread
IDLE_TIMEOUT = 30  # seconds a connection may keep silent before it is dropped


class _Server(ThreadingHTTPServer):
    """At most ``MAX_CONNECTIONS`` connections served at once, one thread each. The accept
    loop waits for a free slot before it accepts the next: connections beyond it stay in the
    kernel's backlog, costing no thread."""

    daemon_threads = True

    def __init__(self, sock: socket.socket, proxy: TargetProxy) -> None:
        super().__init__(("127.0.0.1", 0), _Handler, bind_and_activate=False)
        self.socket.close()
        self.socket = sock
        self.server_address = sock.getsockname()
        self.proxy = proxy
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._open: set[socket.socket] = set()
        self._guard = threading.Lock()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a grader's broken request must not print a traceback into gradebox's stderr

    def process_request(self, request: Any, client_address: Any) -> None:
        while not self._slots.acquire(timeout=0.1):
            if self.proxy.closed.is_set():
                self.shutdown_request(request)
                return
        with self._guard:
            self._open.add(request)
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread to give the slot back: give it back here
            self._done_with(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._done_with(request)

    def _done_with(self, request: Any) -> None:
        with self._guard:
            self._open.discard(request)
        self.shutdown_request(request)
        self._slots.release()

    def drop_connections(self) -> None:
        """Cut every open connection: a handler waiting on its client ends at once."""
        with self._guard:
            live = list(self._open)
        for conn in live:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class TargetProxy:
    """One grader run's proxy: its token, its budget, its ledger.

    Example::

        proxy = TargetProxy(hub, hub.targets.get("judge", file=None, field=None), max_calls=10)
        spec = SandboxSpec(..., env={**proxy.env()}, on_start=proxy.start_in)
        ...
        proxy.close(); print(proxy.usage)
    """

    def __init__(self, hub: ModelHub, target: ModelTarget, *, max_calls: int = 50) -> None:
        self.hub, self.target, self.max_calls = hub, target, max_calls
        self.token = secrets.token_urlsafe(32)
        self.usage = Usage()
        self.granted = 0  # calls let through (the budget), whether they succeed or not
        self.refused = 0
        self.closed = threading.Event()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)  # notified when a call comes back
        self._in_flight = 0
        self._settled = False  # the ledger is final: close() has handed it over
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def env(self) -> dict[str, str]:
        """The environment that tells a grader where its proxy is (every known spelling)."""
        url = f"http://127.0.0.1:{PROXY_PORT}"
        out = {}
        for prefix in ("AGENTV_TARGET_PROXY", "AGENTV_PROVIDER_PROXY", "GRADEBOX_TARGET_PROXY"):
            out[f"{prefix}_URL"] = url
            out[f"{prefix}_TOKEN"] = self.token
        return out

    def start_in(self, started: Started) -> None:
        """Serve on the loopback of the container just started (``SandboxSpec.on_start``)."""
        self.serve(started.listen(PROXY_PORT))

    def serve(self, sock: socket.socket) -> None:
        self._server = _Server(sock, self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="model-proxy",
            daemon=True,
        )
        self._thread.start()

    def close(self, *, wait: bool = True) -> None:
        """Stop serving, cancel what is queued, and wait for the calls already sent, so that
        ``usage`` holds every call that reached the model. Idempotent. ``wait=False``: the
        result is not wanted (an interrupt): nothing is awaited."""
        self.closed.set()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.drop_connections()
            server.server_close()
        if not wait:
            return
        with self._idle:
            # A call in flight makes no further attempt once closed: this waits for one
            # request at most (the target's own timeout bounds it).
            self._idle.wait_for(lambda: self._in_flight == 0, timeout=self.target.timeout + 30)
            if not self._settled:
                self.usage.calls += self._in_flight  # sent, and never answered in time
                self._settled = True

    # -- requests --------------------------------------------------------------------------

    def _take_call(self) -> bool:
        with self._lock:  # counted when granted: concurrent calls cannot overrun the budget
            if self.granted >= self.max_calls:
                self.refused += 1
                return False
            self.granted += 1
            self._in_flight += 1
            return True

    def _returned(self, done: Any, sent: bool) -> None:
        with self._idle:
            self._in_flight -= 1
            if sent and not self._settled:
                if done is None:
                    self.usage.calls += 1  # made and failed upstream: it used its budget
                else:
                    self.usage.add(done)
            self._idle.notify_all()

    def invoke(self, request: Any) -> tuple[int, dict[str, Any]]:
        if not isinstance(request, dict) or not isinstance(request.get("question"), str):
            return 400, {"error": "a request needs a string 'question'"}
        system = request.get("systemPrompt", request.get("system_prompt"))
        if system is not None and not isinstance(system, str):
            return 400, {"error": "'systemPrompt' must be a string"}
        name = request.get("provider") or request.get("target")
        if name and name != self.target.name:
            # One answer for every other name, known or not: nothing about other targets.
            return 400, {"error": "this grader may call only its own model target"}
        if self.closed.is_set():
            return 503, {"error": "this grader's run is over"}
        if not self._take_call():
            return 429, {"error": f"this grader's budget of {self.max_calls} model calls is spent"}
        messages = [{"role": "user", "content": request["question"]}]
        try:
            done = self.hub.complete(self.target, messages, system=system, cancel=self.closed)
        except Cancelled:
            self._returned(None, sent=False)
            return 503, {"error": "this grader's run is over"}
        except (ModelError, GradeboxError) as exc:
            self._returned(None, sent=True)
            return 502, {"error": str(exc)}
        except BaseException:
            self._returned(None, sent=True)
            raise
        self._returned(done, sent=True)
        usage = {"input": done.input_tokens, "output": done.output_tokens}
        return 200, {
            "output": [{"role": "assistant", "content": done.text}],
            "rawText": done.text,
            "tokenUsage": usage,
            "cached": done.cached,
        }

    def info(self) -> dict[str, Any]:
        with self._lock:
            calls = self.granted
        name = self.target.name
        return {
            "targetName": name,
            "providerLabel": name,  # ours, and AgentV's SDK's spelling
            "model": self.target.model,
            "maxCalls": self.max_calls,
            "callCount": calls,
            "availableTargets": [name],
            "availableProviderLabels": [name],
        }


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = IDLE_TIMEOUT  # a silent connection is dropped: it holds one of few slots
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body leave at once: no 40 ms delayed ACK

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib's name)
        pass  # a grader's requests are its own business; results record the calls

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        # One request per connection: an idle keep-alive would hold a slot another needs.
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _authorised(self) -> bool:
        given = self.headers.get("Authorization", "")
        want = f"Bearer {self.server.proxy.token}"
        if hmac.compare_digest(given.encode(), want.encode()):
            return True
        self._send(401, {"error": "a valid bearer token is required"})
        return False

    def do_GET(self) -> None:  # noqa: N802 (stdlib's name)
        if not self._authorised():
            return
        if self.path.rstrip("/") == "/info":
            self._send(200, self.server.proxy.info())
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:  # noqa: N802 (stdlib's name)
        if not self._authorised():
            return
        raw = self.headers.get("Content-Length") or "0"
        length = int(raw) if raw.isdigit() else -1
        if length < 0:
            self._send(400, {"error": "a request needs a valid Content-Length"})
            return
        if length > MAX_BODY:
            self._send(413, {"error": f"a request is at most {MAX_BODY} bytes"})
            return
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._send(400, {"error": "the body is not JSON"})
            return
        proxy = self.server.proxy
        path = self.path.rstrip("/")
        if path == "/invoke":
            self._send(*proxy.invoke(body))
        elif path == "/invokeBatch":
            requests = body.get("requests") if isinstance(body, dict) else None
            if not isinstance(requests, list):
                self._send(400, {"error": "'requests' must be a list"})
                return
            answers = [proxy.invoke(r) for r in requests]  # each stops once the run is over
            if any(code == 429 for code, _ in answers) and all(code != 200 for code, _ in answers):
                self._send(429, {"error": "budget spent", "responses": [a for _, a in answers]})
                return
            self._send(200, {"responses": [{**a, "status": code} for code, a in answers]})
        else:
            self._send(404, {"error": "not found"})
