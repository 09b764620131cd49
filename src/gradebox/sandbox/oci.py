"""The OCI backend: each run is a container of the OCI runtime itself (``runc``), no engine.

Docker's cost per container is the engine path (dockerd, containerd, a shim, and a FUSE
overlay of every image layer). Graders run on a read-only root, so they need none of it: the
image's root filesystem is unpacked once (``rootfs.RootfsCache``) and bound read-only, and
the runtime Docker itself uses runs the container directly from a bundle we write
(``oci_config.runtime_config``, a pure function). Same gate, same init, same caps and the same
conformance checks as the Docker backend.

Lifecycle: the bundle (``config.json``) is written, then ``runc run`` starts the container
with our pipes as its stdio; the gate blocks on its release line, so a container started
ahead costs nothing at release but a pipe write. The timeout SIGKILLs the container's PID 1,
and the kernel then kills every process in its pid namespace. The memory limit sits on a
cgroup of our own, the parent of the container's, on cgroup v1 and v2 alike
(``cgroups.make_parent``): it outlives the runtime's cleanup, so after the exit it says
whether the OOM killer struck, and then it is removed (one ``rmdir``, no second runtime call).
Only where that cgroup cannot be made does a runtime that can keep a container (``run
--keep``, ``Runtime.keeps``) keep it for a ``delete`` off the critical path. State lives
under a root of our own, in memory where it can (``state_root``), and every container id
carries the runner's pid, so ``gradebox gc`` finds and removes what a SIGKILLed runner left.

Without root it runs rootless (runc's own rootless mode): each container in a user namespace
of the runner's (``userns.py``: the grader keeps the runner's uid, every other id is a
subordinate one), on a root filesystem unpacked in that namespace, with its limits in cgroups
the runner owns (``cgroups.py``: a v2 delegated subtree, or on cgroup v1 a subtree the engine
makes once per boot). Where no limit can be enforced, the backend is not usable
(``oci_usable`` says why) and ``auto`` runs Docker instead. See docs/non-root.md.

Specs this backend does not run itself (a network beyond loopback, a writable root) go to the
Docker backend; their ``Prepared.backend`` says so.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import stat
import subprocess
import threading
import time
from pathlib import Path

from ..core import settings
from ..core.log import LazyLogger
from ..core.programs import which
from ..core.scratch import left_by, pid_in
from ..errors import EngineError, GradeboxError, SandboxClosed
from ..images.catalog import BASE, qualified
from . import cgroups, seccomp_bpf, userns
from ._shared import BackgroundRemover
from ._streams import CappedOutput, outcome, pump
from .base import Prepared, RunOutcome, Sandbox, SandboxSpec, Started, register_sandbox
from .door import listen_in_netns
from .gate import ReportChannel
from .hardening import HOME
from .init import init_binary, sealed_init
from .labels import slug
from .oci_config import MOUNT_POINTS, runtime_config
from .rootfs import RootfsCache, cache_dir
from .runtime import Runtime
from .runtime import choose as choose_runtime
from .slots import Slot, SlotPool, SlotProcess, slots_unusable

TYPE_CHECKING = False  # not typing's (~3 ms on `gradebox exec`'s hot path)
if TYPE_CHECKING:
    import socket

    from . import _engine

__all__ = ["OciSandbox", "collect_garbage", "oci_usable", "state_root", "state_roots"]

log = LazyLogger("gradebox.sandbox")  # logging loads on first use: not on exec's path

RUNNING_GRACE = 60.0  # s close() waits for a killed, running container's thread to discard it

ID_PREFIX = "gradebox-"
CGROUP_PARENT = cgroups.parent_name()  # gradebox, or gradebox-<uid> for a non-root runner
SLOT_LOST = (
    "the sandbox's slot server was killed while the grader ran (out of memory?): "
    "how the grader ended is unknown"
)


def state_root() -> Path:
    """Where the runtime's state and our bundles live: ``$GRADEBOX_OCI_STATE``; else the first
    of ``/run/gradebox`` (root) or ``$XDG_RUNTIME_DIR/gradebox`` (anyone else) that is in
    memory, then ``/dev/shm/gradebox-<uid>``, then the first of those two on disk, then
    ``<cache>/run``. In memory because every container writes, and its runtime removes, a
    few files there: on a disk's journal that was ~1.5 ms of CPU per container here."""
    if settings.current().oci_state:
        return Path(settings.current().oci_state)
    usual, shm, last = _state_candidates()
    if usual is not None and _in_memory(usual.parent):
        return usual
    if _in_memory(shm.parent) and _own_folder(shm):
        return shm
    return usual or last


def state_roots() -> list[Path]:
    """``state_root`` and every other folder it could have chosen that holds state of ours:
    what a runner left stays where it was, whichever is chosen now (``collect_garbage``)."""
    chosen = state_root()
    if settings.current().oci_state:
        return [chosen]
    usual, shm, last = _state_candidates()
    others = [p for p in (usual, last) if p is not None and p != chosen and p.is_dir()]
    if shm != chosen and _owned(shm):
        others.append(shm)
    return [chosen, *others]


def _state_candidates() -> tuple[Path | None, Path, Path]:
    """(the usual folder, or None; the one in /dev/shm; the last resort)."""
    if os.geteuid() == 0:
        usual: Path | None = Path("/run/gradebox")
    else:
        runtime = settings.current().xdg_runtime_dir or ""
        owned = runtime and Path(runtime).is_dir() and Path(runtime).stat().st_uid == os.getuid()
        usual = Path(runtime) / "gradebox" if owned else None
    return usual, Path(f"/dev/shm/gradebox-{os.geteuid()}"), cache_dir() / "run"


def _in_memory(path: Path, mountinfo: str = "/proc/self/mountinfo") -> bool:
    """Is ``path`` on a tmpfs (the mount that holds it, by ``mountinfo``)?"""
    real = os.path.realpath(path)
    best, kind = "", ""
    for point, fstype in cgroups.mounts(mountinfo):
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fstype
    return kind == "tmpfs"


def _own_folder(path: Path) -> bool:
    """Make ``path`` ours alone (0700), or find it so (``_owned``)."""
    with contextlib.suppress(OSError):  # made already, or cannot be: looked at as found
        if not os.path.lexists(path):
            os.mkdir(path, 0o700)
    return _owned(path)


def _owned(path: Path) -> bool:
    """Is ``path`` a folder of ours alone, in a parent where nobody else can move it away (a
    place everyone writes, ``/dev/shm``, must be sticky)? A link, or a folder anyone else
    made first, or one others may enter, is not used."""
    try:
        st, parent = os.lstat(path), os.stat(path.parent)
    except OSError:
        return False
    shared = parent.st_mode & 0o022 and not parent.st_mode & stat.S_ISVTX
    mine = stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077
    return mine and not shared


# uid -> why the engine could not delegate (None: it did); "scope" -> why no delegated scope
# of the user's systemd could be entered (None: this runner is in one).
_delegation: dict[int | str, str | None] = {}


def oci_usable(
    engine: _engine.Engine | None = None, runtime: str | Runtime | None = None
) -> str | None:
    """None when this host can run the OCI backend (keeping every limit), else why not (for
    ``auto``). ``runtime``: a name for ``choose_runtime``, or the runtime already chosen. For a
    non-root user on cgroup v1 this may ask the engine, once per boot, for the cgroup subtree
    rootless containers need (``cgroups.delegate_v1``)."""
    chosen = runtime if isinstance(runtime, Runtime) else choose_runtime(runtime)
    if which(chosen.binary) is None:
        return f"no OCI runtime {chosen.binary!r} on PATH"
    if init_binary() is None:
        return "no static init (docker-init or tini-static) on PATH"
    if not Path("/sys/fs/cgroup").is_dir():
        return "no cgroup filesystem"
    if os.geteuid() == 0:
        return None
    why = userns.missing()
    if why:
        return (
            f"rootless containers need subordinate ids: {why} (once, as root: "
            f"{userns.prerequisite()})"
        )
    return rootless_cgroups(engine)


def rootless_cgroups(engine: _engine.Engine | None = None) -> str | None:
    """None when this user has cgroups for its containers' limits (made through the engine
    if need be), else why not."""
    if cgroups.v2_delegated() is not None:
        return None
    if cgroups.unified():
        # A login shell (ssh, a console) sits in the system's session scope: the user's own
        # systemd moves this runner into a delegated scope of its tree, once.
        if "scope" not in _delegation:
            _delegation["scope"] = cgroups.enter_user_scope()
        if _delegation["scope"] is None:
            return None
        return (
            f"cgroup v2 without a delegated subtree for this user ({_delegation['scope']}): "
            "limits could not be enforced; run gradebox under `systemd-run --user --scope`, "
            "or have systemd delegate user@.service (Delegate=yes)"
        )
    if cgroups.v1_delegated() is None:
        return None
    uid = os.getuid()
    if uid not in _delegation:
        try:
            if engine is None:
                from . import _engine  # lazy: tenacity and the Docker SDK, only if asked

                engine = _engine.Engine.connect()
            cgroups.delegate_v1(engine, qualified(BASE))
            _delegation[uid] = cgroups.v1_delegated()
        except GradeboxError as exc:
            _delegation[uid] = str(exc)
    why = _delegation[uid]
    if why:
        return (
            f"cgroup v1 and no cgroup subtree of this user's ({why}): limits could not be "
            "enforced without root"
        )
    return None


@register_sandbox("oci")
class OciSandbox(Sandbox):
    """Runs each spec as a container of the OCI runtime, on an image's unpacked root filesystem.

    Example::

        with OciSandbox() as box:
            image = box.resolve_image("gradebox/python")
            out = box.run(SandboxSpec(image=image, command=["python3", "-c", "print(1)"]))
    """

    def __init__(
        self,
        engine: _engine.Engine | None = None,
        session: str | None = None,
        runtime: str | Runtime | None = None,
        slot: Slot | None = None,
    ) -> None:
        if engine is None:
            from . import _engine  # lazy: tenacity and the Docker SDK, only if no engine given

            engine = _engine.Engine.connect()
        # ``LazyEngine()`` (gradebox exec): connected on first use; an unpacked image never is
        # (nor, as root, does the check below reach it).
        self.engine = engine
        self.runtime: Runtime = runtime if isinstance(runtime, Runtime) else choose_runtime(runtime)
        why = oci_usable(self.engine, self.runtime)
        if why:
            raise EngineError(f"OCI backend unavailable: {why}")
        self.mapping = userns.id_map() if os.geteuid() != 0 else None  # rootless
        # Rootless, or crun on a hybrid cgroup host: the runtime runs in namespaces of ours.
        self.holder = (
            userns.Holder(self.mapping, self.runtime.hide_v2)
            if self.mapping is not None or self.runtime.hide_v2
            else None
        )
        self.session = session or os.urandom(4).hex()
        self.init = sealed_init() or init_binary()  # execute-only: no grader traces PID 1
        root = state_root()
        self.state = Path(self.runtime.state_dir(root))
        self.bundles = root / "bundles"
        for path in (self.state, self.bundles):
            path.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.cache = RootfsCache(
            self.engine, mount_points=MOUNT_POINTS, open_points=("/tmp", HOME), mapping=self.mapping
        )
        self.cgroup_parent = _cgroup_parent()
        self._live: dict[str, OciPrepared] = {}
        self._lock = threading.Lock()
        self._closed = False
        # crun on cgroup v1: containers start inside cgroups made and entered ahead (slots.py).
        self.slots_off = slots_unusable(self.runtime.name, self.mapping is not None)
        self.slots: SlotPool | None = None
        prefix = f"{ID_PREFIX}{os.getpid()}-{self.session}-"
        if slot is not None and (self.slots_off or not slot.name.startswith(prefix)):
            slot.destroy()  # made for a sandbox like this one, which this is not
            slot = None
        if self.slots_off is None:
            holder = self.holder
            self.slots = SlotPool(
                self.cgroup_parent.strip("/"),
                prefix,
                hide_v2=self.runtime.hide_v2,
                join=(lambda: holder.pid()) if holder is not None and self.mapping else None,
                first=slot,
            )
            self.slots.spare()  # the first container's, made while the caller gets ready
        self._docker: Sandbox | None = None
        self._remover = BackgroundRemover(
            lambda cid: self._delete(cid, self.bundles / cid), "gradebox-oci-rm"
        )
        atexit.register(self.close)

    # -- images ------------------------------------------------------------------------------

    # -- running -----------------------------------------------------------------------------

    def run(self, spec: SandboxSpec) -> RunOutcome:
        return self.prepare(spec, warm=False).execute(spec.stdin)

    def _fallback(self) -> Sandbox:
        with self._lock:
            if self._docker is None:
                from .docker import DockerSandbox  # lazy: the docker backend, as fallback only

                self._docker = DockerSandbox(self.engine, session=self.session)
            return self._docker

    def prepare(self, spec: SandboxSpec, *, warm: bool = True) -> Prepared:
        if self._closed:
            raise SandboxClosed()
        if spec.network != "none" or not spec.security.read_only_root:
            # A network or a writable root: the engine's job (the result says where it ran).
            return self._fallback().prepare(spec, warm=warm)
        name = f"{slug(spec.name, 20)}-{os.urandom(3).hex()}"
        cid = f"{ID_PREFIX}{os.getpid()}-{self.session}-{name}"
        bundle = self.bundles / cid
        try:
            rootfs = self.cache.path_for(spec.image)
        except EngineError as exc:
            return OciPrepared(self, cid, bundle, spec, start_error=str(exc))
        slot = self.slots.acquire(spec.limits) if self.slots is not None else None
        # Our cgroup, the container's parent, holds its memory limit (none in a slot).
        cg = None if slot else cgroups.make_parent(cid, int(spec.limits.memory), self.cgroup_parent)
        try:
            bundle.mkdir(parents=True, mode=0o700)
            channel = ReportChannel(bundle)
            cgroup = None if slot else f"{self.cgroup_parent}/{cid}" + ("/c" if cg else "")
            config = runtime_config(
                spec,
                rootfs=rootfs,
                init_source=self.init,
                memory=cg is None,
                cgroup=cgroup,
                report=channel.path,
                direct=slot is not None,
            )
            if slot is not None:
                # The grader before anything else of its slot (its server, crun's waiting
                # parent) when its memory runs out: they must outlive it to say how it ended.
                config["process"]["oomScoreAdj"] = 1000
            if self.runtime.name == "crun":  # the filter compiled once, not at every start
                bpf = seccomp_bpf.compiled(config["linux"]["seccomp"], str(cache_dir() / "seccomp"))
                if bpf is not None:
                    config["annotations"] = {seccomp_bpf.ANNOTATION: bpf}
                    # crun loads the compiled filter instead of the profile, and parsing the
                    # profile's JSON was a quarter of its own CPU per container.
                    del config["linux"]["seccomp"]
            (bundle / "config.json").write_text(json.dumps(config))
        except BaseException:  # a full disk, a signal: nothing of it is kept
            if slot is not None and self.slots is not None:
                self.slots.release(slot)
            if cg is not None:
                cgroups.remove_parent(cg)
            _remove_bundle(bundle)
            raise
        handle = OciPrepared(self, cid, bundle, spec, cg=cg, channel=channel, slot=slot)
        with self._lock:
            self._live[cid] = handle
            closed = self._closed
        if closed:  # close() ran while we were preparing: this container must not run
            handle.discard()
            raise SandboxClosed()
        if warm:
            handle.start()
        return handle

    def _dispose(self, cid: str, bundle: Path) -> None:
        """Delete the container and its bundle, off the caller's critical path unless closing."""
        if self._closed:
            self._delete(cid, bundle)
            return
        self._remover.put(cid)

    def _delete(self, cid: str, bundle: Path) -> None:
        if (self.state / cid).exists():  # kept (--keep), or its runtime was killed
            delete_container(self.runtime, self.state, cid, self.mapping, self.holder)
        _remove_bundle(bundle)
        for parent in cgroups.parents(self.cgroup_parent):
            if (parent / cid).exists():
                cgroups.remove_parent(parent / cid)
        with self._lock:
            self._live.pop(cid, None)

    def drain(self) -> None:
        self._remover.join()

    def leftovers(self) -> list[str]:
        self.drain()
        found = _named((self.state, self.bundles), f"{ID_PREFIX}{os.getpid()}-{self.session}-")
        if self._docker is not None:
            found |= set(self._docker.leftovers())
        return sorted(found)

    def close(self) -> None:
        """Kill and delete everything this sandbox still has; safe from another thread.

        One order, whatever stops the run (a full disk, a signal, the engine lost): nothing new
        starts (``_closed``, read under the lock by ``prepare``, ``start`` and ``execute``);
        every container is killed; a container being run is left to the thread running it,
        which sees ``_closed`` within one turn of its loop and discards it (closing its pipes
        here, under that thread's ``select``, was a ``ValueError`` or a reused descriptor);
        only then is the rest discarded and deleted."""
        with self._lock:
            self._closed = True
            live = list(self._live.values())
            running = [h for h in live if h._used]
        for handle in live:
            handle.kill()
        for handle in running:
            handle._done.wait(RUNNING_GRACE)  # its thread discards it (execute's finally)
        self.drain()
        for handle in live:
            if handle not in running or not handle._done.is_set():
                handle.discard()
        for handle in live:
            self._delete(handle.cid, handle.bundle)
        if self.slots is not None:
            self.slots.close()
        if self.holder is not None:
            self.holder.close()
        if self._docker is not None:
            self._docker.close()


class OciPrepared(Prepared):
    """One container of the OCI runtime, started ahead (or at execute), used at most once."""

    def __init__(
        self,
        box: OciSandbox,
        cid: str,
        bundle: Path,
        spec: SandboxSpec,
        start_error: str | None = None,
        cg: Path | None = None,
        channel: ReportChannel | None = None,
        slot: Slot | None = None,
    ) -> None:
        self.box, self.cid, self.bundle, self.spec = box, cid, bundle, spec
        self.slot = slot  # the cgroups it starts in, made ahead (None: the runtime makes them)
        self.channel = channel  # what the gate and the init report (see gate.py)
        self.cg = cg  # our cgroup, the container's parent (None: the runtime's own only)
        self.start_error = start_error
        self.proc: subprocess.Popen[bytes] | SlotProcess | None = None
        self._used = False
        self._disposed = False
        self._done = threading.Event()  # discarded: close() waits on it for a running one
        self.backend = "oci"

    def start(self) -> None:
        box = self.box
        # In a slot, its server places every fd: the runtime's stdout and stderr are the report
        # channel and the command's own wait on 3 and 4 (gate.direct_command), no entry shell.
        slotted = self.slot is not None
        manager = ("--cgroup-manager=disabled",) if slotted else ()
        keep = ("--keep",) if self.cg is None and not slotted and box.runtime.keeps else ()
        argv = [
            box.runtime.binary,
            *manager,
            "--root",
            str(box.state),
            "--log",
            str(self.bundle / "runtime.log"),
            "--log-format",
            "json",
            "run",
            *keep,
            *(("--preserve-fds", "2") if slotted else ()),
            "--bundle",
            str(self.bundle),
            "--pid-file",
            str(self.bundle / "pid"),
            self.cid,
        ]

        if box.mapping is not None:
            # crun writes its pid file as the user namespace's root (a subordinate id) with
            # mode 0700, which we could not read: made ours first, it is written into as is.
            with contextlib.suppress(OSError):
                os.close(
                    os.open(self.bundle / "pid", os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
                )
        # Under the lock: close() may have run between prepare() and here, and nothing may
        # start after it (it would outlive the run).
        with box._lock:
            if box._closed or self._disposed:
                raise SandboxClosed()
            sees = tuple(str(m.source) for m in self.spec.mounts)
            pipe = subprocess.PIPE
            io = dict(stdin=pipe, stdout=pipe, stderr=pipe, start_new_session=True)
            try:
                if self.slot is not None and self.channel is not None:
                    report = self.channel.writer()
                    try:
                        self.proc = self.slot.popen(argv, sees, report)
                    finally:
                        os.close(report)
                elif box.holder is not None:
                    self.proc = box.holder.popen(argv, sees=sees, **io)
                else:
                    self.proc = subprocess.Popen(argv, **io)
            except (OSError, GradeboxError) as exc:
                why = getattr(exc, "strerror", None) or exc
                self.start_error = f"cannot run {box.runtime.name}: {why}"

    def kill(self) -> None:
        """SIGKILL the container's PID 1: the kernel kills everything in its pid namespace."""
        try:
            pid = int((self.bundle / "pid").read_text().strip())
            os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError):
            # Not started yet, or already gone: make sure the runtime itself is gone too.
            if self.slot is not None:
                self.slot.kill_all()  # the slot holds nothing else of anyone's
            elif self.proc is not None and self.proc.poll() is None:
                _runtime_call(
                    self.box.runtime,
                    ["--root", str(self.box.state), "kill", "--all", self.cid, "KILL"],
                    self.box.mapping,
                    30,
                    self.box.holder,
                )

    def execute(self, stdin: bytes | None = None) -> RunOutcome:
        with self.box._lock:  # close() reads _used under it: a run it will wait for
            if self._used:
                raise RuntimeError("a sandbox is used once; prepare another")
            self._used = True
            closed = self.box._closed
        try:
            if closed:
                raise SandboxClosed()
            if self.proc is None and self.start_error is None:
                self.start()
            if self.start_error or self.proc is None or self.channel is None:
                return RunOutcome(exit_code=None, start_error=self.start_error)
            if self.spec.on_start is not None:
                try:
                    self.spec.on_start(Started(self._wait_pid(), self._listen))
                except (GradeboxError, OSError, ValueError) as exc:
                    self.kill()
                    return RunOutcome(exit_code=None, start_error=f"before release: {exc}")
            return self._run(stdin or b"")
        finally:
            self.discard()

    def _listen(self, port: int) -> socket.socket:
        """A socket on the container's loopback (``door.py``)."""
        pid = self._wait_pid()
        if self.box.mapping is not None:
            return userns.listen(pid, port)
        return listen_in_netns(pid, port)

    def _wait_pid(self, timeout: float = 30.0) -> int:
        """The container's first process, once the runtime has written it down."""
        deadline = time.monotonic() + timeout
        path = self.bundle / "pid"
        while time.monotonic() < deadline:
            text = path.read_text().strip() if path.is_file() else ""
            if text.isdigit():
                return int(text)
            if self.proc is not None and self.proc.poll() is not None:
                break
            time.sleep(0.005)
        why = _runtime_error(self.bundle / "runtime.log")
        raise GradeboxError("the container did not start" + (f": {why}" if why else ""))

    def _run(self, stdin: bytes) -> RunOutcome:
        proc, spec, channel = self.proc, self.spec, self.channel
        assert proc is not None and channel is not None
        started = time.monotonic()
        token = os.urandom(16).hex()  # secrets.token_hex itself, minus importing secrets
        out = CappedOutput(int(spec.limits.output))
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        # A slot's server gone (the OOM killer, a kill) ends the run: none is left to say how.
        # Else a word on its socket is the runtime's exit, read by wait().
        lost = {proc.slot.sock.fileno(): self._slot_gone} if isinstance(proc, SlotProcess) else {}
        timed_out, overflow = pump(
            proc.stdin.fileno(),
            f"{token}\n".encode() + stdin,
            proc.stdin.close,
            {proc.stdout.fileno(): out.head, proc.stderr.fileno(): out.tail},
            out,
            channel,
            started + spec.timeout,
            lambda: self.box._closed,
            lost,
        )
        if self.box._closed:
            self.kill()
            raise SandboxClosed()
        if timed_out or overflow:
            self.kill()
            self._hang_up()  # the runtime copies output to us: let it stop at once
        try:
            left = max(1.0, started + spec.timeout + 5 - time.monotonic())
            code: int | None = proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            self.kill()
            proc.kill()
            proc.wait()
            code = None
        duration_ms = int((time.monotonic() - started) * 1000)
        if isinstance(proc, SlotProcess) and proc.lost:
            return RunOutcome(
                exit_code=None,
                stdout=bytes(out.stdout),
                stderr=bytes(out.stderr),
                duration_ms=duration_ms,
                start_error=SLOT_LOST,
            )
        report = channel.report(token)
        oom = code == 137 and bool(report.signalled) and not timed_out
        if self.slot is not None:
            oom = oom and self.slot.oom_killed()
        else:
            oom = oom and _oom_killed(self.cid, self.cg, self.box.cgroup_parent)
        return outcome(
            out,
            report,
            code,
            timed_out=timed_out,
            oom=oom,
            duration_ms=duration_ms,
            failed=lambda: _runtime_error(self.bundle / "runtime.log"),
        )

    def _slot_gone(self) -> None:
        assert isinstance(self.proc, SlotProcess)
        if self.proc.slot.server_gone():
            self.proc.poll()  # marks it lost and kills what is in the slot

    def _hang_up(self) -> None:
        """Close our ends of the pipes: a gate still waiting reads EOF and exits, and the
        runtime stops copying output nobody reads."""
        if self.proc is None:
            return
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def discard(self) -> None:
        if self._disposed:
            return
        self._disposed = True
        try:
            self._discard()
        finally:
            self._done.set()

    def _discard(self) -> None:
        if self.channel is not None:
            self.channel.close()
        if self.proc is not None:
            if self.proc.poll() is None:
                self._hang_up()
                self.kill()
                try:
                    self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            self._hang_up()
        if self.slot is not None and self.box.slots is not None:
            self.box.slots.release(self.slot)  # checked empty first, else retired
        if self.bundle.exists():
            self.box._dispose(self.cid, self.bundle)
        else:
            with self.box._lock:
                self.box._live.pop(self.cid, None)


def _remove_bundle(bundle: Path) -> None:
    """Remove a bundle folder: its few files (config, log, pid file, the report FIFO) one by
    one, without following a link; anything else in it through ``shutil`` (which loads bz2
    and lzma: ~2 ms of every ``gradebox exec``)."""
    try:
        names = os.listdir(bundle)
    except OSError:
        return
    for name in names:
        try:
            os.unlink(os.path.join(bundle, name))
        except IsADirectoryError:
            import shutil  # lazy: it loads bz2 and lzma (~2 ms), off exec's path

            shutil.rmtree(os.path.join(bundle, name), ignore_errors=True)
        except OSError:
            pass
    with contextlib.suppress(OSError):
        os.rmdir(bundle)


def _runtime_error(log_file: Path) -> str | None:
    """What the runtime itself said went wrong (its log, where no grader can write)."""
    try:
        lines = log_file.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("level") in ("error", "fatal"):
            return str(entry.get("msg", "the runtime failed"))[:500]
    return None


def _cgroup_parent() -> str:
    """Where this runner's containers' cgroups go: ``/gradebox`` (root), ``/gradebox-<uid>``
    (a non-root runner on cgroup v1), or a folder of the user's delegated cgroup v2 tree."""
    # Outside the delegated tree (gc from a login shell) the user's service is where its
    # runners' containers went: the highest folder of the user's, as v2_delegated finds it.
    v2 = (cgroups.v2_delegated() or cgroups.user_service()) if os.geteuid() != 0 else None
    if v2 is not None:
        return "/" + str((v2 / CGROUP_PARENT).relative_to("/sys/fs/cgroup"))
    return f"/{CGROUP_PARENT}"


def _oom_killed(cid: str, parent_cg: Path | None, parent: str = f"/{CGROUP_PARENT}") -> bool:
    """Did the OOM killer strike (in our cgroup, else the container's own, kept)?"""
    if parent_cg is not None:
        return cgroups.oom_killed(parent_cg)
    v1 = cgroups.MEMCG_ROOT / CGROUP_PARENT / cid / "memory.oom_control"
    v2 = Path("/sys/fs/cgroup") / parent.lstrip("/") / cid / "memory.events"
    return any(cgroups.counter(path, "oom_kill") > 0 for path in (v1, v2))


def _runtime_call(
    runtime: Runtime,
    args: list[str],
    mapping: userns.IdMap | None,
    timeout: float,
    holder: userns.Holder | None = None,
) -> None:
    """Run the runtime once more (kill, delete): in the sandbox's ``holder``, where its
    containers run (a root of another user namespace may not signal them), else in
    namespaces like those (a runner that is gone: ``gc``)."""
    argv = [runtime.binary, *args]
    if holder is not None:
        proc = holder.popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    elif mapping is None:
        subprocess.run(runtime.one_shot(argv), capture_output=True, timeout=timeout)
    else:
        userns.run(runtime.one_shot(argv), mapping=mapping, timeout=timeout)


def delete_container(
    runtime: Runtime,
    state: Path,
    cid: str,
    mapping: userns.IdMap | None = None,
    holder: userns.Holder | None = None,
) -> None:
    """Force-delete a container (kills what still runs, removes its cgroups and state)."""
    try:
        _runtime_call(
            runtime, ["--root", str(state), "delete", "--force", cid], mapping, 60, holder
        )
    except (OSError, GradeboxError, subprocess.TimeoutExpired) as exc:
        log.warning("could not delete container %s: %s", cid, exc)


def _owner_pid(cid: str) -> int | None:
    rest = cid.removeprefix(ID_PREFIX)
    pid = rest.split("-", 1)[0]
    return pid_in(pid) if cid.startswith(ID_PREFIX) else None


def _runtimes() -> list[Runtime]:
    """Every runtime whose state gc may find: the chosen one, and crun and runc if installed
    (a container is deleted by the runtime that made it, each in its own state folder)."""
    found = {
        rt.name: rt for rt in (choose_runtime("runc"), choose_runtime("crun")) if which(rt.binary)
    }
    chosen = choose_runtime()
    found[chosen.name] = chosen
    return list(found.values())


def collect_garbage(everything: bool = False, owner: int | None = None) -> list[str]:
    """Delete containers and bundles whose runner is gone (or all, with ``everything``; only
    the runner ``owner``'s, gone or not, with ``owner``)."""
    # Every folder of state that could be ours: what a runner left stays where it was chosen.
    roots = state_roots()
    states = [(rt, Path(rt.state_dir(root))) for root in roots for rt in _runtimes()]
    bundles = [root / "bundles" for root in roots]
    mapping = userns.id_map() if os.geteuid() != 0 else None
    cgs = cgroups.parents(_cgroup_parent())

    def delete(cid: str) -> None:
        for runtime, state in states:
            if (state / cid).exists():
                delete_container(runtime, state, cid, mapping)

    names = _named((*(state for _, state in states), *bundles, *cgs), ID_PREFIX)
    removed = [cid for cid in sorted(names) if left_by(_owner_pid(cid), everything, owner)]
    for cid in removed:
        delete(cid)
        for folder in bundles:
            _remove_bundle(folder / cid)
        for folder in cgs:
            cgroups.remove_parent(folder / cid)
        # Once more, now that its processes are killed: rootless crun cannot signal a
        # container's from a user namespace other than the one it ran in.
        delete(cid)
    return removed


def _named(folders: tuple[Path, ...], prefix: str) -> set[str]:
    """The names in ``folders`` (those that exist) that start with ``prefix``."""
    return {p.name for f in folders if f.is_dir() for p in f.iterdir() if p.name.startswith(prefix)}
