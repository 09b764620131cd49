"""The Docker backend: one fresh container per run, created, attached, started, read, removed.

Lifecycle, after epicbox: create with the hardened HostConfig, attach to stdin/stdout/stderr
*before* start (so no output is lost), start, feed stdin and read both streams in one
non-blocking loop until EOF or the deadline, then inspect the final state and remove. The
container is removed on every path: success, error, timeout, Ctrl-C.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import secrets
import selectors
import socket
import struct
import threading
import time
from typing import Any

from .._version import __version__
from ..errors import EngineError
from . import _engine
from .base import RunOutcome, Sandbox, SandboxSpec, register_sandbox
from .hardening import HOME, host_config, run_as
from .labels import LABEL_SESSION, owner_labels, slug

__all__ = ["DockerSandbox"]

log = logging.getLogger("gradebox.sandbox")

_STDOUT, _STDERR = 1, 2
_HEADER = struct.Struct(">BxxxL")


class _Streams:
    """Demultiplexes Docker's attach stream and applies the output caps.

    stdout keeps its head: it carries the verdict, and past the cap no verdict can be trusted,
    so the caller stops the grader. stderr keeps its tail, the part that explains a failure,
    and draining it is allowed to go on.
    """

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.buf = bytearray()
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.stdout_dropped = 0
        self.stderr_dropped = 0

    def feed(self, data: bytes) -> None:
        self.buf += data
        while len(self.buf) >= _HEADER.size:
            stream, size = _HEADER.unpack_from(self.buf)
            if len(self.buf) < _HEADER.size + size:
                return
            chunk = bytes(self.buf[_HEADER.size : _HEADER.size + size])
            del self.buf[: _HEADER.size + size]
            if stream == _STDERR:
                self._tail(chunk)
            else:
                self._head(chunk)

    def _head(self, chunk: bytes) -> None:
        room = self.cap - len(self.stdout)
        self.stdout += chunk[: max(room, 0)]
        self.stdout_dropped += max(len(chunk) - max(room, 0), 0)

    def _tail(self, chunk: bytes) -> None:
        self.stderr += chunk
        if len(self.stderr) > self.cap:
            over = len(self.stderr) - self.cap
            del self.stderr[:over]
            self.stderr_dropped += over


@register_sandbox("docker")
class DockerSandbox(Sandbox):
    """Runs each spec in its own hardened container on the local Docker engine.

    Example::

        with DockerSandbox() as box:
            image = box.resolve_image("gradebox/python")
            out = box.run(SandboxSpec(image=image, command=["python3", "-c", "print(1)"]))
    """

    def __init__(self, engine: _engine.Engine | None = None, session: str | None = None) -> None:
        self.engine = engine or _engine.Engine.connect()
        self.session = session or secrets.token_hex(6)
        self._live: set[str] = set()
        self._lock = threading.Lock()
        self._image_cache: dict[str, str] = {}
        self._closed = False
        atexit.register(self.close)

    # -- images ------------------------------------------------------------------------------

    def resolve_image(self, ref: str) -> str:
        if ref.startswith("sha256:") and len(ref) == 71:
            return ref
        if ref not in self._image_cache:
            self._image_cache[ref] = str(self.engine.image(ref)["Id"])
        return self._image_cache[ref]

    # -- running -----------------------------------------------------------------------------

    def run(self, spec: SandboxSpec) -> RunOutcome:
        if self._closed:
            raise EngineError("the sandbox was closed (interrupted)")
        labels = {
            **spec.labels,
            **owner_labels(self.session),
            "gradebox.grader": spec.name,
            "gradebox.version": __version__,
        }
        env = {"HOME": HOME, **spec.env}
        try:
            cid = self.engine.create(
                lambda: f"gradebox-{slug(spec.name)}-{secrets.token_hex(4)}",
                image=spec.image,
                command=spec.command,
                working_dir=spec.workdir,
                environment=env,
                user=run_as(spec.security),
                labels=labels,
                stdin_open=True,
                tty=False,
                host_config=host_config(spec.limits, spec.security, spec.network, spec.mounts),
            )
        except EngineError as exc:
            return RunOutcome(exit_code=None, start_error=str(exc))
        with self._lock:
            self._live.add(cid)
            closed = self._closed
        if closed:  # close() ran while we were creating: this container must not run
            self.engine.remove(cid)
            with self._lock:
                self._live.discard(cid)
            raise EngineError("the sandbox was closed (interrupted)")
        try:
            return self._attach_and_run(cid, spec)
        finally:
            if self.engine.remove(cid):
                with self._lock:
                    self._live.discard(cid)

    def _attach_and_run(self, cid: str, spec: SandboxSpec) -> RunOutcome:
        sock_io = self.engine.attach(cid)
        raw: socket.socket = getattr(sock_io, "_sock", sock_io)
        try:
            started = time.monotonic()
            try:
                self.engine.start(cid)
            except EngineError as exc:
                return RunOutcome(exit_code=None, start_error=str(exc))
            streams, timed_out, overflow = self._pump(raw, spec, started + spec.timeout)
        finally:
            _hang_up(sock_io, raw)
        if timed_out or overflow:
            self.engine.kill(cid)
        remaining = max(1.0, started + spec.timeout + 5 - time.monotonic())
        try:
            exit_code: int | None = self.engine.wait(cid, remaining)
        except EngineError:
            self.engine.kill(cid)
            exit_code = None
        duration_ms = int((time.monotonic() - started) * 1000)
        state = self.engine.inspect(cid).get("State", {})
        return RunOutcome(
            exit_code=None if timed_out else exit_code,
            stdout=bytes(streams.stdout),
            stderr=bytes(streams.stderr),
            stdout_dropped=streams.stdout_dropped,
            stderr_dropped=streams.stderr_dropped,
            timed_out=timed_out,
            oom_killed=bool(state.get("OOMKilled")) and not timed_out,
            duration_ms=duration_ms,
        )

    @staticmethod
    def _pump(
        raw: socket.socket, spec: SandboxSpec, deadline: float
    ) -> tuple[_Streams, bool, bool]:
        """Write stdin and read output concurrently, without threads, until EOF or deadline.

        Writing all of stdin before reading would deadlock against a grader that fills its
        stdout pipe before it reads its input.
        """
        streams = _Streams(int(spec.limits.output))
        pending = memoryview(spec.stdin or b"")
        raw.setblocking(False)
        sel = selectors.DefaultSelector()
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if pending else 0)
        sel.register(raw, events)
        if not pending:
            raw.shutdown(socket.SHUT_WR)
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return streams, True, False
                for _key, mask in sel.select(timeout=min(left, 0.5)):
                    if mask & selectors.EVENT_WRITE and pending:
                        try:
                            sent = raw.send(pending[:65536])
                        except (BlockingIOError, InterruptedError):
                            sent = 0
                        except OSError:  # the grader exited without reading its stdin
                            pending = memoryview(b"")
                            sent = 0
                        pending = pending[sent:]
                        if not pending:
                            sel.modify(raw, selectors.EVENT_READ)
                            with contextlib.suppress(OSError):
                                raw.shutdown(socket.SHUT_WR)
                    if mask & selectors.EVENT_READ:
                        try:
                            data = raw.recv(262144)
                        except (BlockingIOError, InterruptedError):
                            continue
                        except OSError:
                            data = b""
                        if not data:
                            return streams, False, False
                        streams.feed(data)
                        if streams.stdout_dropped:
                            return streams, False, True
        finally:
            sel.close()

    # -- cleanup -----------------------------------------------------------------------------

    def leftovers(self) -> list[str]:
        return [c["Id"] for c in self.engine.containers({LABEL_SESSION: self.session})]

    def close(self) -> None:
        """Remove every container of this session, including ones a failed create left.

        Safe to call from another thread while runs are in flight (that is how Ctrl-C stops
        a parallel run): in-flight runs end, and no new container starts afterwards."""
        with self._lock:
            self._closed = True
            live = list(self._live)
        for cid in live:
            self.engine.kill(cid)
            if self.engine.remove(cid):
                with self._lock:
                    self._live.discard(cid)
        try:
            for c in self.engine.containers({LABEL_SESSION: self.session}):
                self.engine.remove(c["Id"])
        except EngineError as exc:
            log.warning("cleanup of session %s incomplete: %s", self.session, exc)


def _hang_up(sock_io: Any, raw: socket.socket) -> None:
    """Really close the attach connection. ``socket.close()`` alone keeps the descriptor open
    while the SDK's file wrapper holds it, and then the engine keeps copying a flooding
    grader's output into a socket nobody reads, and a later kill waits on that copy."""
    with contextlib.suppress(OSError):
        raw.shutdown(socket.SHUT_RDWR)
    for closeable in (sock_io, raw):
        with contextlib.suppress(OSError):
            closeable.close()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def collect_garbage(engine: _engine.Engine, everything: bool = False) -> list[dict[str, Any]]:
    """Remove gradebox containers whose runner is gone (or all of them, with ``everything``).

    A runner killed with SIGKILL cannot clean up after itself; its containers carry its host
    name and pid, which is how a later ``gradebox gc`` knows they are orphans.
    """
    from .labels import LABEL_OWNER, parse_owner

    removed = []
    host = socket.gethostname()
    for c in engine.containers({LABEL_SESSION: None}):
        owner = parse_owner(c.get("Labels", {}).get(LABEL_OWNER, ""))
        orphan = owner is None or (owner[0] == host and not _pid_alive(owner[1]))
        if everything or orphan:
            engine.kill(c["Id"])
            if engine.remove(c["Id"]):
                removed.append(c)
    return removed
