"""User namespaces for a runner that is not root: the id mapping, and work done inside it.

A non-root runner (uid U, gid G) runs OCI containers in a user namespace of its own, the way
rootless runc and rootless Podman do. The mapping (``id_map``) is the same for every container
and for the root filesystem cache, so that files keep one owner everywhere:

- the grader runs as U:G inside (``base.default_user`` for a non-root runner), which is U:G on
  the host: the files the runner gives it (0700 folders of U) are its own, and what it writes
  into a ``workspace: rw`` copy is U's to delete, as with the Docker backend;
- every other id from 0 to 65535 comes from U's ``/etc/subuid`` and ``/etc/subgid`` ranges
  (``newuidmap``/``newgidmap``, package ``uidmap``): the image's root is a subordinate id, so
  the grader owns nothing of the image, as under root.

``runc`` runs as root of such a namespace (``Holder``: one per sandbox), so that what it does
as root (the container's pipes and exec FIFO handed to the container's root, mounts, cgroup
files) works, with no privilege on the host. ``run`` runs a command as root of a fresh one
(unpacking an image with its owners, removing what it unpacked, ``runc delete``); ``listen``
opens a listening socket inside a container's own network namespace (the model proxy): U
owns the user namespace, so a single-threaded child of U may join it, then the container's
network namespace.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from ..core.programs import which
from ..core.record import Record
from ..core.subids import SPAN, missing, prerequisite, subordinate
from ..errors import GradeboxError
from .runtime import v2_hidden

TYPE_CHECKING = False  # not typing's (~3 ms on `gradebox exec`'s hot path)
if TYPE_CHECKING:
    import socket
    from typing import Any

__all__ = [
    "IdMap",
    "id_map",
    "listen",
    "missing",
    "prerequisite",
    "run",
    "spawn",
    "subordinate",
    "Holder",
]


class IdMap(Record):
    """Inside -> outside ranges, as the OCI config's ``uidMappings`` take them."""

    __slots__ = _fields = ("uids", "gids")  # each tuple[tuple[int, int, int], ...]
    _frozen = True

    def oci(self) -> dict[str, list[dict[str, int]]]:
        def rows(ranges: tuple[tuple[int, int, int], ...]) -> list[dict[str, int]]:
            return [{"containerID": c, "hostID": h, "size": n} for c, h, n in ranges]

        return {"uidMappings": rows(self.uids), "gidMappings": rows(self.gids)}


def _ranges(own: int, start: int) -> tuple[tuple[int, int, int], ...]:
    """``own`` -> itself, every other id below SPAN -> the subordinate range from ``start``."""
    if own >= SPAN:
        return ((0, start, SPAN - 1), (own, own, 1))
    out = []
    if own > 0:
        out.append((0, start, own))
    out.append((own, own, 1))
    if own < SPAN - 1:
        out.append((own + 1, start + own, SPAN - 1 - own))
    return tuple(out)


def id_map() -> IdMap | None:
    """The mapping for this (non-root) user, or None when the prerequisites are missing
    (``missing()`` says which)."""
    if missing():
        return None
    uid, gid = os.getuid(), os.getgid()
    su = subordinate("/etc/subuid", uid)
    sg = subordinate("/etc/subgid", uid)
    assert su is not None and sg is not None
    return IdMap(_ranges(uid, su[0]), _ranges(gid, sg[0]))


# Children run with ``python3 -I -S``: nothing from the environment is imported, and the
# process is single-threaded, which joining a user namespace requires.
_ENTER = """
import ctypes, os, sys
ctl, ack = int(sys.argv[1]), int(sys.argv[2])
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x10000000) != 0:
    sys.exit("unshare(CLONE_NEWUSER): " + os.strerror(ctypes.get_errno()))
os.write(ack, b"u"); os.close(ack)
if os.read(ctl, 1) != b"m":
    sys.exit("the id mapping failed")
os.close(ctl)
os.setresgid(0, 0, 0); os.setgroups([]); os.setresuid(0, 0, 0)
os.execvp(sys.argv[3], sys.argv[3:])
"""

_JOIN = """
import ctypes, os, socket, sys
pid, port, back = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
libc = ctypes.CDLL(None, use_errno=True)
user = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
for fd, kind, what in ((user, 0x10000000, "user"), (net, 0x40000000, "network")):
    if libc.setns(fd, kind) != 0:
        sys.exit(f"cannot join the grader's {what} namespace: " + os.strerror(ctypes.get_errno()))
sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", port))
sock.listen(64)
socket.send_fds(socket.socket(fileno=back), [b"s"], [sock.fileno()])
"""


def spawn(argv: list[str], mapping: IdMap | None, **popen: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(argv, **popen)``, as root of a new user namespace with ``mapping``
    (plainly when ``mapping`` is None). Returns once the ids are mapped."""
    if mapping is None:
        return subprocess.Popen(argv, **popen)
    ctl_r, ctl_w = os.pipe()  # parent -> child: "m" once mapped
    ack_r, ack_w = os.pipe()  # child -> parent: "u" once unshared
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _ENTER, str(ctl_r), str(ack_w), *argv],
            pass_fds=(ctl_r, ack_w),
            **popen,
        )
    finally:
        os.close(ctl_r)
        os.close(ack_w)
    err = ""
    try:
        with os.fdopen(ack_r, "rb") as ack:
            ready = ack.read(1) == b"u"
        if ready:
            for tool, ranges in (("newuidmap", mapping.uids), ("newgidmap", mapping.gids)):
                args = [str(x) for r in ranges for x in r]
                done = subprocess.run(
                    [tool, str(proc.pid), *args], capture_output=True, text=True, timeout=30
                )
                if done.returncode != 0:
                    err = f"{tool}: {done.stderr.strip() or done.returncode}"
                    break
        else:
            err = "the child could not make a user namespace"
        with os.fdopen(ctl_w, "wb") as ctl:
            ctl.write(b"x" if err else b"m")
        if err:
            raise GradeboxError(f"cannot map ids ({err}); once, as root: {prerequisite()}")
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc


def run(
    argv: list[str], *, mapping: IdMap | None = None, timeout: float = 3600
) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` as root of a new user namespace with ``mapping`` (default ``id_map()``),
    without stdin; its stdout and stderr captured."""
    mapping = mapping or id_map()
    if mapping is None:
        raise GradeboxError(f"cannot map ids: {missing()}; once, as root: {prerequisite()}")
    proc = spawn(
        argv, mapping, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


RETIRE_AFTER = 5.0  # seconds a replaced holder is kept (see ``Holder._retire``)


class Holder:
    """The namespaces a sandbox's runtime calls share, held by an idle child: a command runs
    in them through ``nsenter`` (a few ms), not in fresh ones each (a Python child and two
    mapping helpers: ~25 ms).

    - ``mapping`` (a non-root runner): a user namespace, the command runs as its root. Like
      Docker's ``userns-remap``, the containers share it, each in its own pid, mount,
      network, ipc and uts namespaces.
    - ``hide_v2`` (crun on a hybrid cgroup host, see ``runtime.py``): a mount namespace
      where the cgroup2 mount is covered, for root and non-root alike.

    The holder reads its stdin and ends when it closes: at ``close``, or when we die; the
    namespaces go with it."""

    def __init__(self, mapping: IdMap | None, hide_v2: bool = False) -> None:
        self.mapping = mapping
        self.hide_v2 = hide_v2
        self.nsenter = which("nsenter")
        self._proc: subprocess.Popen[bytes] | None = None
        # Holders replaced by a newer one: (when to end it, the holder).
        self._retired: list[tuple[float, subprocess.Popen[bytes]]] = []
        self._lock = threading.Lock()

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` to run in a fresh set of these namespaces (no holder: one call)."""
        if not self.hide_v2:
            return argv
        return v2_hidden(argv)

    def popen(
        self, argv: list[str], *, sees: tuple[str, ...] = (), **popen: Any
    ) -> subprocess.Popen[bytes]:
        """``argv`` in the held namespaces (fresh ones without ``nsenter``).

        ``sees``: host paths the command must find as the host has them (a container's bind
        sources). A mount namespace is a copy made when the holder started, and a host whose
        ``/`` is private propagates nothing into it: a workspace mounted since (a tmpfs, an
        overlay) would be the empty folder under it there. Then a new holder is started,
        which sees the host as it is now; the old one's namespace stays with whatever still
        runs in it."""
        if self.nsenter is None:
            return spawn(self.wrap(argv), self.mapping, **popen)
        flags = ("-U",) * (self.mapping is not None) + ("-m",) * self.hide_v2
        argv = [self.nsenter, *flags, "-t", str(self.pid(sees)), "--", *argv]
        return subprocess.Popen(argv, **popen)

    def pid(self, sees: tuple[str, ...] = ()) -> int:
        """The holder's pid (started now if need be, or again for ``sees``: see ``popen``): a
        process that joins its namespaces (a slot's server, ``slots.py``) joins them through
        ``/proc/PID/ns``."""
        with self._lock:
            self._reap()
            held = self._proc
            if held is None or held.poll() is not None or not self._sees(held.pid, sees):
                if held is not None:
                    self._retire(held)
                self._proc = held = self._hold()
            return held.pid

    def _hold(self) -> subprocess.Popen[bytes]:
        # It says a line once its namespaces are ready: joined before that, the mount
        # namespace could still be the host's.
        proc = spawn(
            self.wrap(["/bin/sh", "-c", "echo; read _"]),
            self.mapping,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert proc.stdout is not None
        if proc.stdout.readline() != b"\n":
            proc.wait()
            raise GradeboxError(
                f"cannot hold the runtime's namespaces: its holder exited with {proc.returncode}"
            )
        proc.stdout.close()
        return proc

    def _sees(self, pid: int, paths: tuple[str, ...]) -> bool:
        """Does the holder's mount namespace show each of ``paths`` as the host does?"""
        return not self.hide_v2 or sees_as_host(pid, paths)

    def _retire(self, proc: subprocess.Popen[bytes]) -> None:
        # Ended a few seconds later, not now: another thread may have just been given its pid
        # for an nsenter that has not joined yet. Its namespace then lasts while a container
        # still uses it.
        self._retired.append((time.monotonic() + RETIRE_AFTER, proc))

    def _reap(self) -> None:
        now, kept = time.monotonic(), []
        for when, proc in self._retired:
            if when <= now and proc.stdin is not None and not proc.stdin.closed:
                proc.stdin.close()
            if proc.poll() is None:
                kept.append((when, proc))
        self._retired = kept

    def close(self) -> None:
        with self._lock:
            proc, self._proc = self._proc, None
            retired, self._retired = [p for _, p in self._retired], []
        held_all = [*retired, *([proc] if proc is not None else [])]
        for held in held_all:
            if held.stdin is not None and not held.stdin.closed:
                held.stdin.close()
        for held in held_all:
            try:
                held.wait(timeout=5)
            except subprocess.TimeoutExpired:
                held.kill()
                held.wait()


def sees_as_host(pid: int, paths: tuple[str, ...]) -> bool:
    """Does the mount namespace of ``pid`` show each of ``paths`` as the host does (the same
    device and inode; ``/proc/PID/root``: the path as ``pid`` resolves it)? A host whose ``/``
    propagates nothing hides from an older namespace what was mounted since."""
    root = f"/proc/{pid}/root"
    for path in paths:
        try:
            host, held = os.stat(path), os.stat(root + path)
        except OSError:
            return False
        # The device tells a mount apart; the inode a bind of the same filesystem.
        if (host.st_dev, host.st_ino) != (held.st_dev, held.st_ino):
            return False
    return True


def listen(pid: int, port: int) -> socket.socket:
    """A listening TCP socket on 127.0.0.1:``port`` in the network namespace of ``pid``, a
    process of a container in a user namespace this user owns (made by a child that joins
    both namespaces and hands the socket back)."""
    import socket  # here: only a grader with a model proxy needs it

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours:
        try:
            proc = subprocess.run(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    "-c",
                    _JOIN,
                    str(pid),
                    str(port),
                    str(theirs.fileno()),
                ],
                pass_fds=(theirs.fileno(),),
                capture_output=True,
                text=True,
                timeout=30,
            )
        finally:
            theirs.close()
        if proc.returncode != 0:
            why = proc.stderr.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
            raise GradeboxError(f"cannot open the model proxy in the grader's network: {why[0]}")
        ours.settimeout(5)
        _msg, fds, _flags, _addr = socket.recv_fds(ours, 1, 1)
    if not fds:
        raise GradeboxError("cannot open the model proxy in the grader's network: no socket")
    return socket.socket(fileno=fds[0])
