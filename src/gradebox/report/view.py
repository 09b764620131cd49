"""``gradebox view``: the report's page served on 127.0.0.1, following ``results.jsonl`` while
a run writes it.

The page asks ``api/results?offset=N&file=ID`` every second and gets the results appended
since byte N (read by ``gradebox.results``, the reader every output uses); when the file was
replaced (``--resume`` rewrites it) or shortened it gets everything again, marked ``reset``.
Only this machine can reach the server (it binds 127.0.0.1), and only under its own name: a
request whose Host header is not ``127.0.0.1:PORT`` or ``localhost:PORT`` is refused, so a web
page that rebinds its own DNS name to 127.0.0.1 cannot read the run (DNS rebinding).

Every other local user reaches 127.0.0.1 too, and a run folder private to its owner (0700)
must stay so through the port: every path is under a random secret, ``/TOKEN/``, that only the
URL printed to the owner holds (the page asks ``api/results`` relative to it). A request
without it is refused (403) before anything is read; the token is compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ..core.untrusted import open_regular, read_within
from ..errors import ConfigError
from ..protocol.models import RunSummary
from ..protocol.results import RunResults, read_results_from, results_file
from .html import csp, live_row, page, page_data

__all__ = ["ViewServer"]

SUMMARY_CAP = 16 << 20  # a summary.json gradebox wrote is a few KiB
CONNECTIONS = 32  # at once; more are closed unread (a browser opens about 6 per host)
IDLE = 10.0  # seconds a connection may send nothing before it is closed


class _Server(ThreadingHTTPServer):
    """A thread per connection, at most ``CONNECTIONS`` of them: any local user reaches the
    port, and one that opened idle connections without end made a thread each (never ended),
    until this user could start no process at all."""

    daemon_threads = True

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.slots = threading.BoundedSemaphore(CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def _identity(file: Path, offset: int) -> str:
    """What a reader at ``offset`` has read: the file (device, inode) and a digest of the
    4 KiB before ``offset``. A file rewritten under the same name (``--resume``; an inode can
    be reused) differs there, and is read again from the start."""
    fd = open_regular(file)  # a FIFO there (a run folder another user wrote) would hang it
    if fd is None:
        return "none"
    try:
        st = os.fstat(fd)
        start = max(0, offset - 4096)
        seen = os.pread(fd, offset - start, start)
    except OSError:
        return "none"
    finally:
        os.close(fd)
    return f"{st.st_dev}:{st.st_ino}:{hashlib.sha256(seen).hexdigest()[:16]}"


class ViewServer:
    """The live page of one run folder. ``serve_forever`` until Ctrl-C; ``port`` 0 takes a
    free port (``url`` says which)."""

    def __init__(self, run_dir: Path, port: int = 0) -> None:
        self.file = results_file(run_dir)
        if not self.file.parent.is_dir():
            raise ConfigError("no such run folder", file=str(run_dir))
        self.name = self.file.parent.name
        handler = type("Handler", (_Handler,), {"view": self})
        try:
            self.httpd = _Server(("127.0.0.1", port), handler)
        except OSError as exc:  # the port is taken, or privileged: the operator's to choose
            raise ConfigError(
                f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}", field="--port"
            ) from None
        self.port = self.httpd.server_address[1]
        # 256 bits, URL-safe: in the path, not the query, so the page's relative requests
        # (api/results) carry it without the page knowing it.
        self.token = secrets.token_urlsafe(32)
        self.url = f"http://127.0.0.1:{self.port}/{self.token}/"

    def summary(self) -> dict[str, Any] | None:
        # Bounded, a regular file only: a link to /dev/zero there would be read without end.
        data = read_within(self.file.with_name("summary.json"), SUMMARY_CAP)
        try:
            return RunSummary.model_validate_json(data or b"").model_dump(mode="json")
        except ValueError:
            return None  # none yet (the run goes on), or being written: the next poll has it

    def since(self, offset: int, file_id: str) -> dict[str, Any]:
        """The results appended since ``offset`` of the file ``file_id`` named."""
        size = self.file.stat().st_size if self.file.is_file() else 0
        reset = offset > size or _identity(self.file, offset) != file_id
        rows, end = read_results_from(self.file, 0 if reset else offset)
        return {
            "file": _identity(self.file, end),
            "offset": end,
            "reset": reset,
            "rows": [live_row(r) for r in rows],
            "summary": self.summary(),
        }

    def page(self) -> str:
        """The page with every result so far in it, and where the next read starts."""
        results, offset = read_results_from(self.file, 0)
        ident = _identity(self.file, offset)
        latest = list({r.id: r for r in results}.values())  # a later line for an id wins
        summary = self.summary()
        run = RunResults(
            self.name,
            self.file.parent,
            RunSummary.model_validate(summary) if summary else None,
            latest,
        )
        return page(page_data([run], live={"file": ident, "offset": offset}), [run])

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def start(self) -> threading.Thread:
        """Serve from a thread (tests); ``shutdown`` ends it."""
        thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        thread.start()
        return thread

    def shutdown(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    view: ViewServer
    server_version = "gradebox-view"
    timeout = IDLE  # the socket's: a connection that sends nothing is closed
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass  # the terminal shows the URL, not every poll

    def _send(self, code: int, body: bytes, kind: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self.send_header("Content-Security-Policy", csp(live=True) + "; frame-ancestors 'none'")
        self.end_headers()
        self.wfile.write(body)

    def _host_ok(self) -> bool:
        port = self.view.port
        return self.headers.get("Host", "") in {f"127.0.0.1:{port}", f"localhost:{port}"}

    def _route(self, path: str) -> str | None:
        """The path below ``/TOKEN/`` ("" for the page), or None when the request does not
        hold the token (any other local user). ``compare_digest``: how long the comparison
        takes says nothing of how much of a guess was right."""
        _, first, rest = (path.split("/", 2) + ["", ""])[:3]
        if not hmac.compare_digest(first.encode(), self.view.token.encode()):
            return None
        return rest if path.startswith(f"/{first}/") else "/"  # "/TOKEN": to "/TOKEN/"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if not self._host_ok():
            self._send(403, b"forbidden: not this server's name\n", "text/plain; charset=utf-8")
            return
        url = urlsplit(self.path)
        route = self._route(url.path)
        if route is None:
            body = b"forbidden: open the URL gradebox view printed\n"
            self._send(403, body, "text/plain; charset=utf-8")
            return
        try:
            if route == "/":  # the page's relative requests need the trailing slash
                self.send_response(308)
                self.send_header("Location", f"/{self.view.token}/")
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif route == "":
                self._send(200, self.view.page().encode(), "text/html; charset=utf-8")
            elif route == "api/results":
                query = parse_qs(url.query)
                offset = int(query.get("offset", ["0"])[0])
                data = self.view.since(max(0, offset), query.get("file", [""])[0])
                body = json.dumps(data, ensure_ascii=True, allow_nan=False).encode()
                self._send(200, body, "application/json")
            elif route == "favicon.ico":
                self._send(204, b"", "image/x-icon")
            else:
                self._send(404, b"not found\n", "text/plain; charset=utf-8")
        except (ConfigError, ValueError, OSError) as exc:
            message = str(exc).replace(os.linesep, " ")
            self._send(500, f"gradebox view: {message}\n".encode(), "text/plain; charset=utf-8")
