"""The Docker backend: one fresh container per run, created, attached, started, read, removed.

Lifecycle, after epicbox: create with the hardened HostConfig, attach to stdin/stdout/stderr
*before* start (so no output is lost), start, feed stdin and read both streams in one
non-blocking loop until EOF or the deadline, then inspect the final state and remove. The
container is removed on every path: success, error, timeout, Ctrl-C.

The container's init is our sealed copy of the host's tini (``init.py``), bound read-only, as
on the OCI backend (the engine's own ``Init`` only where the host has none, and then it
reports nothing): what it and the gate
report travels on a FIFO of the host bound into the container, never on the attach stream
(see ``gate``).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import secrets
import socket
import struct
import threading
import time
from typing import Any

from .._version import __version__
from ..core.scratch import left_by, new_scratch
from ..errors import EngineError, GradeboxError, SandboxClosed
from . import _engine
from ._shared import BackgroundRemover
from ._streams import CappedOutput, outcome, pump
from .base import Mount, Prepared, RunOutcome, Sandbox, SandboxSpec, Started, register_sandbox
from .door import listen_in_netns, listen_via_engine
from .gate import (
    GATE_CWD,
    INIT_ENV,
    ReportChannel,
    entry_command,
)
from .hardening import HOME, host_config, run_as
from .init import INIT_PATH, sealed_init
from .labels import (
    LABEL_OWNER,
    LABEL_PIDNS,
    LABEL_SESSION,
    owner_labels,
    parse_owner,
    pid_namespace,
    slug,
)

__all__ = ["DockerSandbox"]

log = logging.getLogger("gradebox.sandbox")

_STDOUT, _STDERR = 1, 2
_HEADER = struct.Struct(">BxxxL")


class _Streams(CappedOutput):
    """Demultiplexes Docker's attach stream into the capped stdout and stderr."""

    def __init__(self, cap: int) -> None:
        super().__init__(cap)
        self.buf = bytearray()

    def feed(self, data: bytes) -> None:
        self.buf += data
        while len(self.buf) >= _HEADER.size:
            stream, size = _HEADER.unpack_from(self.buf)
            if len(self.buf) < _HEADER.size + size:
                return
            chunk = bytes(self.buf[_HEADER.size : _HEADER.size + size])
            del self.buf[: _HEADER.size + size]
            if stream == _STDERR:
                self.tail(chunk)
            else:
                self.head(chunk)


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
        self._channels: set[ReportChannel] = set()  # of containers not yet discarded
        self._lock = threading.Lock()
        self._closed = False
        self._remover = BackgroundRemover(self._remove_now, "gradebox-rm")
        # Our own execute-only tini (init.py): it reports on the report channel, and no
        # grader can trace it. Without one on this host, the engine's init runs silent (no
        # signal reports) and traceable (`init_is_out_of_reach` fails).
        self.init = sealed_init()
        atexit.register(self.close)

    # -- images ------------------------------------------------------------------------------

    # -- running -----------------------------------------------------------------------------

    def run(self, spec: SandboxSpec) -> RunOutcome:
        return self.prepare(spec, warm=False).execute(spec.stdin)

    def prepare(self, spec: SandboxSpec, *, warm: bool = True) -> DockerPrepared:
        """Create the container now; with ``warm``, also start it, blocked on its gate.

        A warm container runs ``/bin/sh`` as a gate that reads one line of stdin before it
        changes to the working directory and execs the grader, so everything that is slow
        (create, attach, start: mostly the engine's and the runtime's work) happens before the
        input exists. The grader's timeout starts at release. The image needs ``/bin/sh``.
        """
        if self._closed:
            raise SandboxClosed()
        labels = {
            **spec.labels,
            **owner_labels(self.session),
            "gradebox.grader": spec.name,
            "gradebox.version": __version__,
        }
        # Every container starts with the gate (see gate.py); `warm` only says when.
        env = {"HOME": HOME, **spec.env, GATE_CWD: spec.workdir}
        init = self.init if spec.security.init else None
        if init is not None:
            env.update(INIT_ENV)  # the init then says whether a signal killed the child
        # A scratch folder of this runner (gc removes what a killed runner left).
        channel = ReportChannel(new_scratch(), own_folder=True)
        with self._lock:
            self._channels.add(channel)
        mounts = (*spec.mounts, channel.mount, *([Mount(init, INIT_PATH)] if init else []))
        try:
            cid = self.engine.create(
                lambda: f"gradebox-{slug(spec.name)}-{secrets.token_hex(4)}",
                image=spec.image,
                command=entry_command(spec.command, init=init is not None),
                working_dir="/",
                environment=env,
                user=run_as(spec.security),
                labels=labels,
                stdin_open=True,
                tty=False,
                host_config=host_config(
                    spec.limits, spec.security, spec.network, mounts, own_init=init is not None
                ),
                # The SDK would copy proxy settings (credentials included) from the runner's
                # ~/.docker/config.json into every container: a grader gets only what we set.
                use_config_proxy=False,
            )
        except EngineError as exc:
            self._close_channel(channel)
            return DockerPrepared(self, None, spec, warm, start_error=str(exc))
        with self._lock:
            self._live.add(cid)
            closed = self._closed
        handle = DockerPrepared(self, cid, spec, warm, channel=channel)
        if closed:  # close() ran while we were creating: this container must not run
            handle.discard()
            raise SandboxClosed()
        if warm:
            handle.attach_and_start()
        return handle

    def _close_channel(self, channel: ReportChannel) -> None:
        channel.close()
        with self._lock:
            self._channels.discard(channel)

    def _dispose(self, cid: str, *, now: bool = False) -> None:
        """Kill and remove, off the caller's critical path unless ``now`` or closing (then
        the process may be about to exit, and a queued removal would be lost)."""
        if now or self._closed:
            self._remove_now(cid)
            return
        self._remover.put(cid)

    def _remove_now(self, cid: str) -> None:
        # A forced remove kills what still runs. A slow engine (an emulated one took longer
        # than the client's wait) may fail it once: asked again, never left for later.
        for pause in (0.5, 2.0, 5.0, None):
            if self.engine.remove(cid):
                with self._lock:
                    self._live.discard(cid)
                return
            if pause is not None:
                time.sleep(pause)

    def drain(self) -> None:
        """Wait until every container handed to background removal is gone."""
        self._remover.join()

    # -- cleanup -----------------------------------------------------------------------------

    def leftovers(self) -> list[str]:
        self.drain()  # containers queued for background removal are not leftovers yet
        return [
            c["Id"]
            for c in self.engine.containers({LABEL_SESSION: self.session})
            if c.get("State") != "removing"
        ]

    def close(self) -> None:
        """Remove every container of this session, including ones a failed create left.

        Safe to call from another thread while runs are in flight (that is how Ctrl-C stops
        a parallel run): in-flight runs end, and no new container starts afterwards."""
        with self._lock:
            self._closed = True
            live = list(self._live)
        for cid in live:  # kill first: in-flight runs end now, not after the queue drains
            self.engine.kill(cid)
        self.drain()
        for cid in live:
            self._remove_now(cid)
        # A removal "already in progress" (by the background remover) is not done yet: wait
        # until the engine no longer lists anything of this session.
        deadline = time.monotonic() + 30
        try:
            while time.monotonic() < deadline:
                left = self.engine.containers({LABEL_SESSION: self.session})
                if not left:
                    break
                for c in left:
                    self.engine.remove(c["Id"])
                time.sleep(0.05)
        except EngineError as exc:
            log.warning("cleanup of session %s incomplete: %s", self.session, exc)
        with self._lock:
            channels, self._channels = list(self._channels), set()
        for channel in channels:  # of containers prepared and never discarded
            channel.close()


class DockerPrepared(Prepared):
    """One container, created (and, when warm, started and waiting), used at most once."""

    def __init__(
        self,
        box: DockerSandbox,
        cid: str | None,
        spec: SandboxSpec,
        warm: bool,
        start_error: str | None = None,
        channel: ReportChannel | None = None,
    ) -> None:
        self.box, self.cid, self.spec, self.warm = box, cid, spec, warm
        self.channel = channel  # what the gate and the init report (see gate.py)
        self.start_error = start_error
        self._sock: Any = None
        self._raw: socket.socket | None = None
        self._used = False
        self.backend = "docker"

    def attach_and_start(self) -> None:
        assert self.cid is not None
        try:
            self._sock = self.box.engine.attach(self.cid)
            self._raw = getattr(self._sock, "_sock", self._sock)
            self.box.engine.start(self.cid)
        except EngineError as exc:
            self.start_error = str(exc)

    def _listen(self, port: int) -> socket.socket:
        """A socket on the container's loopback (``door.py``): root joins its network
        namespace; a non-root runner has the engine do it."""
        assert self.cid is not None
        if os.geteuid() == 0:
            pid = int(self.box.engine.inspect(self.cid)["State"]["Pid"])
            return listen_in_netns(pid, port)
        labels = {**owner_labels(self.box.session), "gradebox.door": self.cid[:12]}
        return listen_via_engine(self.box.engine, self.cid, port, labels)

    def execute(self, stdin: bytes | None = None) -> RunOutcome:
        if self._used:
            raise RuntimeError("a sandbox is used once; prepare another")
        self._used = True
        if self.cid is None or self.start_error or self.channel is None:
            self.discard()
            return RunOutcome(exit_code=None, start_error=self.start_error)
        engine, spec, cid, channel = self.box.engine, self.spec, self.cid, self.channel
        try:
            if not self.warm:
                self.attach_and_start()
                if self.start_error:
                    return RunOutcome(exit_code=None, start_error=self.start_error)
            if spec.on_start is not None:
                try:
                    spec.on_start(Started(int(engine.inspect(cid)["State"]["Pid"]), self._listen))
                except (GradeboxError, OSError, KeyError, ValueError) as exc:
                    engine.kill(cid)
                    return RunOutcome(exit_code=None, start_error=f"before release: {exc}")
            assert self._raw is not None
            started = time.monotonic()
            token = secrets.token_hex(16)
            streams = _Streams(int(spec.limits.output))
            raw, fd = self._raw, self._raw.fileno()
            raw.setblocking(False)
            timed_out, overflow = pump(
                fd,
                f"{token}\n".encode() + (stdin or b""),
                lambda: raw.shutdown(socket.SHUT_WR),
                {fd: streams.feed},
                streams,
                channel,
                started + spec.timeout,
                send=lambda _fd, chunk: raw.send(chunk),
                recv=lambda _fd, size: raw.recv(size),
            )
            _hang_up(self._sock, self._raw)
            if timed_out or overflow:
                engine.kill(cid)
            remaining = max(1.0, started + spec.timeout + 5 - time.monotonic())
            try:
                exit_code: int | None = engine.wait(cid, remaining)
            except EngineError:
                engine.kill(cid)
                exit_code = None
            duration_ms = int((time.monotonic() - started) * 1000)
            oom = False
            if exit_code == 137 and not timed_out:
                # 137 is SIGKILL: the OOM killer, or something else. Only the engine knows.
                oom = bool(engine.inspect(cid).get("State", {}).get("OOMKilled"))
            return outcome(
                streams,
                channel.report(token),
                exit_code,
                timed_out=timed_out,
                oom=oom,
                duration_ms=duration_ms,
            )
        finally:
            self.discard()

    def discard(self) -> None:
        if self.channel is not None:
            self.box._close_channel(self.channel)
        if self._raw is not None:
            _hang_up(self._sock, self._raw)
            self._raw = None
        if self.cid is not None:
            cid, self.cid = self.cid, None
            self.box._dispose(cid)


def _hang_up(sock_io: Any, raw: socket.socket) -> None:
    """Really close the attach connection. ``socket.close()`` alone keeps the descriptor open
    while the SDK's file wrapper holds it, and then the engine keeps copying a flooding
    grader's output into a socket nobody reads, and a later kill waits on that copy."""
    with contextlib.suppress(OSError):
        raw.shutdown(socket.SHUT_RDWR)
    for closeable in (sock_io, raw):
        with contextlib.suppress(OSError):
            closeable.close()


def collect_garbage(
    engine: _engine.Engine, everything: bool = False, owner: int | None = None
) -> list[dict[str, Any]]:
    """Remove gradebox containers whose runner is gone (or all of them, with ``everything``;
    only the runner ``owner``'s of this host, gone or not, with ``owner``).

    A runner killed with SIGKILL cannot clean up after itself; its containers carry its host
    name and pid, which is how a later ``gradebox gc`` knows they are orphans.
    """
    removed = []
    host, pidns = socket.gethostname(), pid_namespace()
    for c in engine.containers({LABEL_SESSION: None}):
        labels = c.get("Labels") or {}
        made_by = parse_owner(labels.get(LABEL_OWNER, ""))
        elsewhere = made_by is not None and (
            made_by[0] != host or labels.get(LABEL_PIDNS, pidns) not in ("", pidns)
        )
        if elsewhere:  # another host's runner, or another pid namespace's: --all only
            collect = everything and owner is None
        else:
            collect = left_by(made_by[1] if made_by else None, everything, owner)
        if collect:
            engine.kill(c["Id"])
            if engine.remove(c["Id"]):
                removed.append(c)
    return removed
