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
import stat
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ..core.untrusted import open_regular, read_within
from ..errors import ConfigError
from ..protocol.results import read_results_from
from .html import (
    Layout,
    Run,
    csp,
    layout,
    live_row,
    not_a_run,
    page,
    page_data,
    read_summary,
    real_folder,
    relabelled,
)

__all__ = ["ViewServer", "lock_held"]

CONNECTIONS = 32  # at once; more are closed unread (a browser opens about 6 per host)
IDLE = 10.0  # seconds a connection may send nothing before it is closed
LOCKS_CAP = 4 << 20  # /proc/locks: a line per lock on the machine


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
        thread = threading.Thread(
            target=self.process_request_thread, args=(request, client_address), daemon=True
        )
        try:
            thread.start()
        except RuntimeError:  # no thread (the process's limit): its slot is not taken
            self.slots.release()
            raise
        # Not ThreadingMixIn's: a SIGTERM (KeyboardInterrupt) in its wait for the thread to
        # start came after the start, so the thread releases the slot too; released here
        # again, the semaphore raised ValueError in place of the interrupt, which the server
        # loop caught and went on serving: `gradebox view` ignored SIGTERM.

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


def lock_held(folder: Path) -> bool | None:
    """Whether a process holds ``folder``'s run lock (``gradebox run`` holds an ``flock`` on
    ``.gradebox.lock`` for as long as it runs, and the kernel lets it go when the process
    dies, SIGKILL too); None when this cannot be told. Read from ``/proc/locks``, never by
    taking the lock: a viewer holding it even a moment could make a starting run refuse the
    folder as in use."""
    try:
        st = os.lstat(folder / ".gradebox.lock")
    except FileNotFoundError:
        return False
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return False  # (a link there names some other file's lock)
    data = read_within("/proc/locks", LOCKS_CAP)
    if data is None:
        return None
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    return any(want in line.split() for line in data.decode("ascii", "replace").splitlines())


def _tag(plan: list[str] | None) -> str:
    """A short name of a plan: the page is sent the plan again only when it changes."""
    if plan is None:
        return "none"
    return hashlib.sha256("\n".join(plan).encode("utf-8", "replace")).hexdigest()[:16]


class ViewServer:
    """The live page of one run folder. ``serve_forever`` until Ctrl-C; ``port`` 0 takes a
    free port (``url`` says which). A path that is no run is refused; an empty folder, and
    with ``wait`` a path not there yet, is served as waiting for a run."""

    def __init__(self, run_dir: Path, port: int = 0, *, wait: bool = False) -> None:
        self.path = Path(run_dir)
        self.serving = False
        self._cache: tuple[Any, Layout | None] | None = None
        if self.layout() is None:
            missing = not self.path.exists()
            empty = self.path.is_dir() and not [
                n for n in os.listdir(self.path) if n != ".gradebox.lock"
            ]
            if not (missing or empty):
                raise not_a_run(self.path, "gradebox view")
            # An empty folder is one a run is about to write (`run` makes it, then its plan);
            # a path that is not there may be a typo: waiting for it is asked for.
            if missing and not wait:
                raise ConfigError(
                    "no such folder, no run yet: check the path, or add --wait to wait for "
                    f"`gradebox run SUITE --out {self.path}` to start",
                    file=str(self.path),
                )
        # The name the reader gave, not its parent's (a folder that is not there yet).
        self.name = self.path.resolve().name or str(self.path)
        self.folder = self.path if not self.path.is_file() else self.path.parent
        self.file = self.path if self.path.is_file() else self.path / "results.jsonl"
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

    def layout(self) -> Layout | None:
        """What the path holds now; the plan (up to megabytes) is read again only when its
        file or the folder changed."""
        key = []
        for path in (self.path, self.path / "plan.json"):
            try:
                st = os.lstat(path)
                key.append((st.st_ino, st.st_size, st.st_mtime_ns))
            except OSError:
                key.append(None)
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, layout(self.path))
        return self._cache[1]

    def state(self, found: Layout | None) -> dict[str, str]:
        """Where the run is: waiting (nothing there yet), running (a process holds its
        folder), finished or interrupted (its summary says), or stale (no process holds it
        and it wrote no summary: killed, or its machine went down)."""
        if found is None:
            return {"state": "waiting", "note": f"no run in {self.name} yet"}
        folder = self.folder
        held = lock_held(folder)
        summary = read_summary(folder)
        # A --resume runs over the last run's summary: one of another run id is not this one's.
        if summary is not None and found.run_id not in (None, summary.run_id):
            summary = None
        if held:
            return {"state": "running", "note": "running"}
        if summary is not None:
            state = "interrupted" if summary.interrupted else "finished"
            return {"state": state, "note": state}
        if held is None:
            return {"state": "running", "note": "running (whether its process lives is unknown)"}
        return {
            "state": "stale",
            "note": "stale: no process runs it and it wrote no summary (killed?)",
        }

    def _read(self, found: Layout | None, offsets: list[int] | None) -> tuple[list, list, list]:
        """Each part's results since its offset (all of them when ``offsets`` is None),
        labelled; the offsets and identities reached."""
        results, ends, idents = [], [], []
        for i, (label, file) in enumerate(found.parts if found else []):
            start = offsets[i] if offsets else 0
            rows, end = read_results_from(file, start) if real_folder(file.parent) else ([], 0)
            results += relabelled(label, rows)
            ends.append(end)
            idents.append(_identity(file, end))
        return results, ends, idents

    def since(self, offset: str | int, file_id: str, plan_tag: str = "") -> dict[str, Any]:
        """The results appended since ``offset`` (one per part of the run, joined by ".") of
        the files ``file_id`` named (joined by "|"); everything again when any changed."""
        found = self.layout()
        parts = found.parts if found else []
        try:
            offsets = [max(0, int(o)) for o in str(offset).split(".")] if parts else []
        except ValueError:
            offsets = []
        idents = file_id.split("|")
        reset = len(offsets) != len(parts) or len(idents) != len(parts)
        if not reset:
            for (_, file), at, ident in zip(parts, offsets, idents, strict=True):
                size = file.stat().st_size if file.is_file() else 0
                if at > size or _identity(file, at) != ident:
                    reset = True
                    break
        rows, ends, new_ids = self._read(found, None if reset else offsets)
        plan = found.plan if found else None
        answer = {
            "file": "|".join(new_ids),
            "offset": ".".join(map(str, ends)),
            "reset": reset,
            "rows": [live_row(r) for r in rows],
            "summary": self.summary(),
            "state": self.state(found),
            "plan_tag": _tag(plan),
        }
        if plan_tag != answer["plan_tag"]:
            answer["plan"] = plan
        return answer

    def summary(self) -> dict[str, Any] | None:
        summary = read_summary(self.folder)
        return summary.model_dump(mode="json") if summary else None

    def page(self) -> str:
        """The page with every result so far in it, and where the next read starts."""
        found = self.layout()
        results, ends, idents = self._read(found, None)
        latest = list({r.id: r for r in results}.values())  # a later line for an id wins
        summary = read_summary(self.folder)
        plan = found.plan if found else None
        run = Run(self.name, self.folder, summary, latest, plan)
        live = {
            "file": "|".join(idents),
            "offset": ".".join(map(str, ends)),
            "state": self.state(found),
            "plan_tag": _tag(plan),
        }
        return page(page_data([run], live=live), [run])

    def serve_forever(self) -> None:
        self.serving = True
        self.httpd.serve_forever()

    def start(self) -> threading.Thread:
        """Serve from a thread (tests); ``shutdown`` ends it."""
        self.serving = True
        thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        thread.start()
        return thread

    def shutdown(self) -> None:
        if self.serving:  # (the base's shutdown waits for a loop that never started)
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
                data = self.view.since(
                    query.get("offset", ["0"])[0],
                    query.get("file", [""])[0],
                    query.get("plan", [""])[0],
                )
                body = json.dumps(data, ensure_ascii=True, allow_nan=False).encode()
                self._send(200, body, "application/json")
            elif route == "favicon.ico":
                self._send(204, b"", "image/x-icon")
            else:
                self._send(404, b"not found\n", "text/plain; charset=utf-8")
        except (ConfigError, ValueError, OSError) as exc:
            message = str(exc).replace(os.linesep, " ")
            self._send(500, f"gradebox view: {message}\n".encode(), "text/plain; charset=utf-8")
