"""Cgroup slots: a container's cgroups made, limited and entered before the container exists.

On cgroup v1 the largest single cost of starting a container is not the runtime's work but
one kernel wait: writing a pid into a ``cgroup.procs`` file takes the global threadgroup lock,
which waits for an RCU grace period (~10 ms here) and holds up every fork and exit on the
machine meanwhile. crun does that write for every container it starts (into each hierarchy).
A process that already sits in the right cgroups needs none: its children are born there.

So a sandbox keeps a pool of **slots**. A slot is one cgroup in each hierarchy that holds a
limit (``memory``, ``pids``, ``cpu``, and as root ``devices``) and a small **server** inside
them: a Python interpreter (``-I -S``, the standard library only) that moved itself in once,
when the slot was made (that one wait off any container's path), and then forks the runtime
for each container the slot runs, with ``crun --cgroup-manager=disabled``: crun touches no
cgroup, and the container inherits the slot's. A container's limits are written into the
slot's files before it starts (a write of a limit is no migration); its OOM verdict is the
slot's ``oom_kill`` counter, read before and after.

One container at a time runs in a slot. Before a slot is used again it is checked empty (no
process but its server: a grader's daemons die with its pid namespace, and whatever would not
is killed, or the slot is retired), and its counters (``memory.max_usage_in_bytes``,
``memory.failcnt`` and their ``memsw`` twins) are reset. What a grader cannot leave behind in
a slot: processes (its pid namespace dies with it), memory (its tmpfs mounts die with its mount
namespace; page cache it caused is reclaimable and counts toward the next limit only until
reclaimed), IPC (its own namespace), its counters (reset) and its limits (rewritten).

The server runs the runtime where the hybrid host's cgroup2 mount is covered (``runtime.py``):
as root, in a mount namespace it holds, made again from the host's whenever a container's bind
source was mounted since (``userns.sees_as_host``: a host whose ``/`` propagates nothing hides
it from an older namespace); for a non-root runner, which cannot go back to the host's mounts,
in a fresh copy per container (``_slot_server.py``). For a non-root runner it also joins the
user namespace of the sandbox's ``userns.Holder`` (as its root, after moving into the slot as
the runner's own uid: the only one cgroup v1 lets move it), so every container shares that
namespace, as they do without slots, and the runtime's ``kill``/``delete`` still reach them.

Nothing of a slot outlives its runner: its cgroups are named like the runner's containers
(``gradebox-<pid>-<session>-s<n>``), so the watchdog and ``gradebox gc`` kill what is in them
and remove them; a server whose runner is gone (its socket closed) kills everything in its
slot and exits.

Where slots cannot be used (runc, which has no disabled cgroup manager; cgroup v2, where crun
starts a container straight into its cgroup with ``clone3(CLONE_INTO_CGROUP)`` itself; no
``pidfd_open``; ``GRADEBOX_OCI_SLOTS=off``) the backend makes a cgroup per container as before.
"""

from __future__ import annotations

import _socket  # not socket's module (its enums: ~2 ms of every `gradebox exec`)
import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path

from ..core import settings
from ..core.log import LazyLogger
from ..errors import GradeboxError
from .cgroups import counter, kill_all, parent_name, read, read_int, remove, write
from .defaults import CGROUPS

TYPE_CHECKING = False  # not typing's (~3 ms on `gradebox exec`'s hot path)
if TYPE_CHECKING:
    import subprocess

    from .base import Limits
    from .runtime import Runtime

__all__ = ["HELD", "Slot", "SlotPool", "SlotProcess", "slots_unusable"]

log = LazyLogger("gradebox.sandbox")

ROOT = Path("/sys/fs/cgroup")
# The hierarchies a slot limits. ``devices`` only as root: cgroup v1 lets nobody else write
# its rules (rootless crun has none either, and a non-root runner can make no device node).
LIMITED = CGROUPS
# Processes of a slot that are not the grader's: its server and the runtime's own process
# (``crun run`` waits for the container). The pids limit is the grader's plus these.
HELD = 2
READY_TIMEOUT = 30.0
# Memory still charged to a free slot past which it is emptied before reuse (its server's own
# pages are a few MiB at most).
CHARGED_MAX = 16 << 20

# The devices a container may use, as crun allows them by default (the rest: denied).
DEVICES = (
    "c 1:3 rwm",  # null
    "c 1:5 rwm",  # zero
    "c 1:7 rwm",  # full
    "c 1:8 rwm",  # random
    "c 1:9 rwm",  # urandom
    "c 5:0 rwm",  # tty
    "c 5:1 rwm",  # console
    "c 5:2 rwm",  # ptmx
    "c 136:* rwm",  # pts
)

# The server (``_slot_server.py``), as a script of its own.
SERVER = str(Path(__file__).with_name("_slot_server.py"))


def slots_unusable(runtime_name: str, rootless: bool) -> str | None:
    """Why this host cannot start containers from slots (None: it can)."""
    if not settings.current().oci_slots:
        return "GRADEBOX_OCI_SLOTS=off"
    if runtime_name != "crun":
        return f"{runtime_name} has no disabled cgroup manager"
    if (ROOT / "cgroup.controllers").exists():
        return "cgroup v2: crun starts each container into its cgroup itself"
    if not hasattr(os, "pidfd_open"):
        return "no pidfd_open"
    for name in LIMITED:
        if not (ROOT / name / "cgroup.procs").exists():
            return f"no cgroup v1 {name} hierarchy"
    return None


def first_slot(runtime: Runtime, session: str) -> Slot | None:
    """The first slot of a sandbox still to be made (``OciSandbox(session=session,
    slot=...)`` takes it), made as early as its caller can so that its one wait passes while
    the caller reads its input and builds the spec: ``gradebox exec`` makes it before it has
    imported the backend. As root only (a non-root runner's server joins the user namespace
    of a holder the sandbox makes); None where there are no slots."""
    if os.geteuid() != 0 or slots_unusable(runtime.name, False) is not None:
        return None
    try:
        return Slot(f"gradebox-{os.getpid()}-{session}-s0", parent_name(), runtime.hide_v2, None)
    except OSError:
        return None  # the sandbox makes its own, or says why it cannot


def _single_threaded() -> bool:
    """May this process fork a server that runs Python (no lock another thread holds)?"""
    threading_ = sys.modules.get("threading")
    return threading_ is None or threading_.active_count() == 1


class _Process:
    """What ``_Forked`` and ``SlotProcess`` share with ``Popen``: a pid, its code once it
    ended, and a SIGKILL until then."""

    pid: int
    returncode: int | None = None

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)


class _Forked(_Process):
    """A server that is a fork of this (single-threaded) process, not a new interpreter: the
    ~15 ms of CPU a ``python3 -I -S`` start costs, spared on ``gradebox exec``'s path. As
    much of ``Popen`` as a slot uses: ``pid``, ``poll``, ``wait``, ``kill``."""

    def __init__(self, sock: _socket.socket, hide: bool, join: int, procs: list[str]) -> None:
        keep = sock.fileno()
        self.returncode: int | None = None
        self.pid = os.fork()
        if self.pid == 0:
            try:
                os.setsid()  # a harness that kills our process group leaves it to its sweep
                for sig in (signal.SIGINT, signal.SIGTERM):
                    signal.signal(sig, signal.SIG_DFL)
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                # None of the caller's files: a harness waiting for our stdout to close, or a
                # watchdog waiting for its pipe's end, is not kept waiting by the server.
                os.closerange(3, keep)
                os.closerange(keep + 1, 1 << 16)
                from ._slot_server import serve  # lazy: only the forked server runs it

                serve(_socket.socket(fileno=keep), hide, join, procs)
            finally:
                os._exit(1)

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -1
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code; TimeoutError after ``timeout`` seconds (a pidfd: no polling)."""
        if self.poll() is None:
            import select  # lazy: off the path to exec's first slot

            fd = os.pidfd_open(self.pid)
            try:
                if not select.select([fd], [], [], timeout)[0]:
                    raise TimeoutError(f"slot server {self.pid} still running")
            finally:
                os.close(fd)
            self.poll()
        assert self.returncode is not None
        return self.returncode


class SlotProcess(_Process):
    """The runtime a slot's server started, as much of ``subprocess.Popen`` as the backend
    uses: our ends of its three pipes, ``pid``, ``poll``, ``wait``, ``kill``."""

    def __init__(self, slot: Slot, pid: int, stdin: int, stdout: int, stderr: int) -> None:
        self.slot, self.pid = slot, pid
        self.returncode: int | None = None
        self.lost = False  # its server died before saying how it ended
        self.stdin = open(stdin, "wb", buffering=0)  # noqa: SIM115 - closed by the backend
        self.stdout = open(stdout, "rb", buffering=0)  # noqa: SIM115
        self.stderr = open(stderr, "rb", buffering=0)  # noqa: SIM115

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.slot._exit_code(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.slot._exit_code(timeout)
            if self.returncode is None:
                import subprocess  # lazy: off exec's first slot (the backend has loaded it by now)

                raise subprocess.TimeoutExpired(["slot", self.slot.name], timeout or 0)
        return self.returncode


class Slot:
    """One slot: its cgroups (``paths``, by hierarchy) and the server inside them."""

    def __init__(self, name: str, parent: str, hide_v2: bool, join: int | None) -> None:
        self.name = name
        self.paths = {h: ROOT / h / parent / name for h in LIMITED}
        if os.geteuid() == 0 and (ROOT / "devices" / "cgroup.procs").exists():
            self.paths["devices"] = ROOT / "devices" / parent / name
        self.limits: dict[str, str] = {}
        self.server: subprocess.Popen[bytes] | _Forked | None = None
        self.broken: str | None = None
        self._ready = False
        self._running: SlotProcess | None = None
        self._oom_base = 0
        for hierarchy, path in self.paths.items():
            (path.parent).mkdir(exist_ok=True)
            path.mkdir()
            if hierarchy == "devices":
                write(path / "devices.deny", "a")
                for rule in DEVICES:
                    write(path / "devices.allow", rule)
        ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
        self.sock = ours
        procs = [str(p / "cgroup.procs") for p in self.paths.values()]
        try:
            if _single_threaded():
                self.server = _Forked(theirs, hide_v2, join or 0, procs)
            else:
                import subprocess  # lazy: ~5 ms, off the path to exec's first slot

                self.server = subprocess.Popen(
                    [
                        sys.executable,
                        "-I",
                        "-S",
                        SERVER,
                        str(theirs.fileno()),
                        "1" if hide_v2 else "0",
                        str(join or 0),
                        *procs,
                    ],
                    pass_fds=(theirs.fileno(),),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
        except OSError as exc:
            self.broken = f"cannot start the slot's server: {exc.strerror or exc}"
        finally:
            theirs.close()

    # -- the server's words ------------------------------------------------------------------

    def _recv(self, timeout: float | None) -> bytes | None:
        """The server's next message; None at the timeout; b"" when it is gone."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1024)
        except (TimeoutError, BlockingIOError):  # settimeout(0): a poll
            return None
        except OSError:
            return b""

    def ready(self) -> None:
        """Wait until the server is inside the slot (made ahead: usually it already is)."""
        if self.broken:
            raise GradeboxError(self.broken)
        if self._ready:
            return
        said = self._recv(READY_TIMEOUT)
        if said != b"r":
            self.broken = "the slot's server did not start" + (
                f": {said[1:].decode(errors='replace')}" if said and said[:1] == b"e" else ""
            )
            raise GradeboxError(self.broken)
        self._ready = True

    def popen(
        self, argv: list[str], sees: tuple[str, ...] = (), report: int | None = None
    ) -> SlotProcess:
        """Start ``argv`` (the runtime) in this slot, with three new pipes as its stdin,
        stdout and stderr; with ``report`` (an fd, not taken), that as its stdout and stderr
        and the pipes on fds 3 and 4 (``gate.direct_command``). ``sees``: host paths the
        runtime must find as the host has them (bind sources)."""
        self.ready()
        if self._running is not None:
            raise GradeboxError(f"slot {self.name} is running a container already")
        self._oom_base = self.oom_kills()
        pipes = [os.pipe() for _ in range(3)]  # (read, write) each
        theirs = [pipes[0][0], pipes[1][1], pipes[2][1]]
        ours = [pipes[0][1], pipes[1][0], pipes[2][0]]
        if report is not None:
            theirs = [pipes[0][0], os.dup(report), os.dup(report), pipes[1][1], pipes[2][1]]
        try:
            rights = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in theirs)
            flag = b"-" if self._sees(sees) else b"F"
            self.sock.sendmsg(
                [flag + b"\0".join(a.encode() for a in argv)],
                [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)],
            )
            said = self._recv(READY_TIMEOUT)
        except OSError:
            said = b""  # its server is gone
        finally:
            for fd in theirs:
                os.close(fd)
        if not said or said[:1] != b"p":
            for fd in ours:
                os.close(fd)
            if said and said[:1] == b"e":  # the runtime could not be started; the slot is fine
                raise GradeboxError(said[1:].decode(errors="replace"))
            self.broken = f"slot {self.name}: its server is gone"
            raise GradeboxError(self.broken)
        self._running = SlotProcess(self, int(said[1:]), *ours)
        return self._running

    def _sees(self, paths: tuple[str, ...]) -> bool:
        """Does the server's mount namespace show ``paths`` as the host does? A no asks it
        for a fresh one."""
        from .userns import sees_as_host  # lazy: subprocess (~5 ms), off exec's first slot

        return self.server is None or sees_as_host(self.server.pid, paths)

    def server_gone(self) -> bool:
        """Has the server closed its end (it died), rather than said something?"""
        self.sock.settimeout(0)
        try:
            return self.sock.recv(1, _socket.MSG_PEEK) == b""
        except (BlockingIOError, TimeoutError):
            return False
        except OSError:
            return True

    def _exit_code(self, timeout: float | None) -> int | None:
        said = self._recv(timeout)
        if said is None:
            return None
        if said[:1] == b"x":
            self._running = None
            return int(said[1:])
        # The server died (the OOM killer, a kill) with the runtime still running: its code
        # is lost, and so is the server's watch over the slot. What runs there is killed now;
        # the run is the caller's ``error`` (``SlotProcess.lost``), never a verdict.
        self.broken = f"slot {self.name}: its server is gone"
        if self._running is not None:
            self._running.lost = True
        self._running = None
        self.kill_all()
        return -int(signal.SIGKILL)

    # -- limits and counters -----------------------------------------------------------------

    def apply(self, limits: Limits) -> None:
        """Write this container's limits into the slot (only those that change)."""
        memory = str(int(limits.memory))
        want = {
            "pids/pids.max": str(int(limits.pids) + HELD),
            "cpu/cpu.cfs_period_us": "100000",
            "cpu/cpu.cfs_quota_us": str(int(limits.cpus * 100_000)),
        }
        mem = self.paths["memory"]
        swap = (mem / "memory.memsw.limit_in_bytes").exists()
        if self.limits.get("memory") != memory:
            # memory <= memory+swap at every step: raise memsw first, lower memory first.
            old = int(self.limits.get("memory") or 0)
            order = ["memory.memsw.limit_in_bytes", "memory.limit_in_bytes"]
            if 0 < int(memory) < old or not old:
                order.reverse()
            for name in order:
                if name.startswith("memory.memsw") and not swap:
                    continue
                write(mem / name, memory)
            self.limits["memory"] = memory
        for key, value in want.items():
            if self.limits.get(key) != value:
                hierarchy, name = key.split("/")
                write(self.paths[hierarchy] / name, value)
                self.limits[key] = value

    def oom_kills(self) -> int:
        return counter(self.paths["memory"] / "memory.oom_control", "oom_kill")

    def oom_killed(self) -> bool:
        """Did the OOM killer strike in this slot since its last container started?"""
        return self.oom_kills() > self._oom_base

    def strays(self) -> bool:
        """Are there processes in the slot other than its server (in any of its hierarchies)?"""
        server = str(self.server.pid) if self.server is not None else ""
        return any(
            set(read(path / "cgroup.procs").split()) - {server} for path in self.paths.values()
        )

    def kill_all(self) -> None:
        """SIGKILL every process in the slot but its server."""
        server = self.server.pid if self.server is not None else 0
        for path in self.paths.values():
            kill_all(path, spare=server)

    def recycle(self) -> bool:
        """Make the slot ready for another container: empty, counters reset. False: it is
        not fit for another (retire it)."""
        if self.broken or self._running is not None:
            return False
        if self.server is None or self.server.poll() is not None:
            self.broken = f"slot {self.name}: its server exited"
            return False
        deadline = time.monotonic() + 1.0
        while self.strays():
            if time.monotonic() > deadline:
                log.warning("slot %s: processes left in it; retired", self.name)
                return False
            self.kill_all()
            time.sleep(0.01)
        mem = self.paths["memory"]
        if read_int(mem / "memory.usage_in_bytes") > CHARGED_MAX:
            # Page cache the last grader caused (files it read or wrote) still charged here:
            # reclaimed now, so the next grader starts under its limit as in a new cgroup.
            with contextlib.suppress(OSError):
                write(mem / "memory.force_empty", "0")
            if read_int(mem / "memory.usage_in_bytes") > CHARGED_MAX:
                # What no reclaim frees without swap (files it wrote into a host tmpfs, its
                # workspace): charged here for as long as they exist. Retired: the charge stays
                # with the removed cgroup, as it did with a cgroup per container.
                log.info("slot %s: memory still charged after its grader; retired", self.name)
                return False
        for name in (
            "memory.max_usage_in_bytes",
            "memory.failcnt",
            "memory.memsw.max_usage_in_bytes",
            "memory.memsw.failcnt",
        ):
            with contextlib.suppress(OSError):
                write(mem / name, "0")
        return True

    def destroy(self) -> None:
        """End the server, kill what is left, remove the cgroups."""
        with contextlib.suppress(OSError):
            self.sock.close()
        if self.server is not None:
            try:
                self.server.wait(timeout=2)
            except Exception:  # noqa: BLE001 - subprocess's TimeoutExpired, or ours
                self.server.kill()
                self.server.wait()
        for path in self.paths.values():
            remove(path)


class SlotPool:
    """The slots of one sandbox: a free one (made ahead) for each container it starts.

    ``parent``: the cgroup the slots go under (``gradebox``, ``gradebox-<uid>``); ``prefix``:
    the name every slot starts with (the runner's pid and the sandbox's session, as its
    containers' ids); ``join``: for a non-root runner, a call that returns the pid whose user
    namespace the servers join. ``spare`` makes one ahead (the sandbox's first container's);
    others are made when every slot is busy, and kept for the next container. None is made
    ahead while containers start: a server moving into its cgroups holds up every fork on the
    machine for that wait, the runtime's own too. At most ``limit`` exist at once (past that,
    the caller makes a cgroup of its own for the container, as without slots)."""

    def __init__(
        self,
        parent: str,
        prefix: str,
        *,
        hide_v2: bool,
        join: object = None,
        limit: int = 64,
        first: Slot | None = None,
    ) -> None:
        self.parent, self.prefix, self.hide_v2 = parent, prefix, hide_v2
        self._join = join
        self.limit = limit
        # ``first``: a slot made for this pool before it was (``first_slot``).
        self._free: list[Slot] = [first] if first is not None else []
        self._all: list[Slot] = list(self._free)
        self._count = len(self._free)
        self._lock = threading.Lock()
        self._closed = False

    def _make(self) -> Slot | None:
        with self._lock:
            if self._closed or len(self._all) >= self.limit:
                return None
            name = f"{self.prefix}s{self._count}"
            self._count += 1
        try:
            join = self._join() if callable(self._join) else None
            slot = Slot(name, self.parent, self.hide_v2, join)
        except (OSError, GradeboxError) as exc:
            log.info("no cgroup slot (%s): a cgroup per container instead", exc)
            return None
        with self._lock:
            self._all.append(slot)
            closed = self._closed
        if closed:
            self._retire(slot)
            return None
        return slot

    def spare(self) -> None:
        """Make a slot ahead, if none is free."""
        with self._lock:
            if self._free or self._closed:
                return
        slot = self._make()
        if slot is not None:
            with self._lock:
                self._free.append(slot)

    def acquire(self, limits: Limits) -> Slot | None:
        """A slot with ``limits`` written, ready to start a container; None: none to be had."""
        for _ in range(3):
            with self._lock:
                slot = self._free.pop() if self._free else None
            if slot is None:
                slot = self._make()
            if slot is None:
                return None
            try:
                if slot.server is None or slot.server.poll() is not None:
                    raise GradeboxError(f"slot {slot.name}: its server exited")
                slot.ready()
                slot.apply(limits)
            except (OSError, GradeboxError) as exc:
                log.info("slot %s unusable: %s", slot.name, exc)
                self._retire(slot)
                continue
            return slot
        return None

    def release(self, slot: Slot) -> None:
        """The container of ``slot`` is gone: the slot is free again, or retired. A slot with
        much memory still charged is emptied on a thread of its own (writing back what the
        grader left dirty takes a while), off the caller's path."""
        if read_int(slot.paths["memory"] / "memory.usage_in_bytes") > CHARGED_MAX:
            threading.Thread(
                target=self._release, args=(slot,), daemon=True, name="gradebox-slot-empty"
            ).start()
            return
        self._release(slot)

    def _release(self, slot: Slot) -> None:
        if slot.recycle():
            with self._lock:
                if not self._closed:
                    self._free.append(slot)
                    return
        self._retire(slot)

    def _retire(self, slot: Slot) -> None:
        slot.destroy()
        with self._lock:
            if slot in self._all:
                self._all.remove(slot)
            if slot in self._free:
                self._free.remove(slot)

    def names(self) -> list[str]:
        with self._lock:
            return [s.name for s in self._all]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            slots, self._all, self._free = list(self._all), [], []
        for slot in slots:
            slot.kill_all()
        for slot in slots:
            slot.destroy()
