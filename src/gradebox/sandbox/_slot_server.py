"""A slot's server (see ``slots.py``): the process inside a slot's cgroups that starts the
runtime for each container the slot runs. The standard library only, so that it also runs as
a script (``python3 -I -S _slot_server.py SOCK HIDE JOIN PROCS...``: nothing from the
environment imported), or in a fork of a single-threaded caller (``gradebox exec``: no second
interpreter to start).

Protocol over a SOCK_SEQPACKET pair: it says ``r`` once inside the slot (or ``e<why>``); each
request is a flag byte (``F``: the runtime needs a fresh copy of the host's mounts, ``-``: the
one held will do) and a NUL-separated argv, with three fds (stdin, stdout, stderr), answered
``p<pid>`` once the runtime is exec'd (or ``e<why>``), then ``x<code>`` when it exits (a Popen
returncode). Its socket closed (the runner is gone): it kills everything in its slot and ends.

How it starts the runtime. As root on a hybrid host (``hide``), the server itself holds a
mount namespace where the cgroup2 mount is covered, and ``posix_spawn``s the runtime there (no
fork of a Python process, no copy of its pages); a request marked ``F`` (a bind source mounted
since, which a host whose ``/`` propagates nothing would not show it) first makes a fresh one,
from the host's. For a non-root runner (``join``) the server cannot go back to the host's
mounts, so each runtime is forked into a fresh mount namespace of its own. Elsewhere (no
hybrid mount) the runtime is simply spawned.
"""

# ruff: noqa: SIM105 - try/except/pass, not contextlib: the script imports as little as it can

import _socket  # not socket's module: its enums cost a start of the server ~3 ms
import os
import select
import signal
import sys
import time

CLONE_NEWUSER = 0x10000000
CLONE_NEWNS = 0x00020000
MS_REC_SLAVE = 0x4000 | 0x80000
UNIFIED = b"/sys/fs/cgroup/unified"


def serve(sock: _socket.socket, hide: bool, join: int, procs: list[str]) -> None:
    """Move into the slot (``procs``: its ``cgroup.procs`` files), join the user namespace of
    ``join`` (0: none), then start runtimes until the socket closes. Never returns."""
    # Passed to a script as an inheritable fd: no runtime it starts may hold it (the runner
    # would then never see the server's end).
    os.set_inheritable(sock.fileno(), False)
    try:
        # Out of the OOM killer's reach as root (its runtime inherits it; the container gets
        # its own): killed, the server would take the run's exit code and the slot's watch
        # with it. Without root it cannot go below 0: the container's 1000 wins instead.
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("-1000")
        except OSError:
            pass
        for path in procs:  # the one migration, before anything is started
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        call = _libc() if hide or join else None
        if join and call is not None:
            ns = os.open(f"/proc/{join}/ns/user", os.O_RDONLY)
            call("setns", ns, CLONE_NEWUSER)
            os.close(ns)
            os.setresgid(0, 0, 0)
            os.setgroups([])
            os.setresuid(0, 0, 0)
    except OSError as exc:
        _say(sock, b"e" + f"{exc.filename or ''}: {os.strerror(exc.errno or 0)}".encode())
        os._exit(1)
    held = hide and not join and call is not None
    host = -1
    if held:
        try:
            host = os.open("/proc/self/ns/mnt", os.O_RDONLY)  # close-on-exec, as every fd here
            _cover(call)
        except OSError as exc:
            _say(sock, b"e" + f"{exc.filename or ''}: {os.strerror(exc.errno or 0)}".encode())
            os._exit(1)
    here = procs[0].rsplit("/", 1)[0] if procs else ""
    _say(sock, b"r")
    while True:
        try:
            msg, fds = _recv_fds(sock)
        except OSError:
            msg, fds = b"", []
        if not msg or len(fds) not in (3, 5):
            for fd in fds:
                os.close(fd)
            _sweep(here)
            os._exit(0)
        fresh, argv = msg[:1] == b"F", msg[1:].split(b"\0")
        if held:
            pid, why = _spawn(argv, fds, call, host if fresh else -1)
        elif hide:
            pid, why = _start(argv, fds, hide, call)
        else:
            pid, why = _spawn(argv, fds, None, -1)
        if why:
            _say(sock, b"e" + why)
            continue
        _say(sock, b"p%d" % pid)
        _await(sock, pid, here)


def _recv_fds(sock: _socket.socket) -> tuple[bytes, list[int]]:
    """One message and the fds passed with it (``socket.recv_fds``, on ``_socket``)."""
    msg, ancillary, _flags, _addr = sock.recvmsg(1 << 20, _socket.CMSG_LEN(5 * 4))
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            usable = len(data) - len(data) % 4
            fds += [
                int.from_bytes(data[i : i + 4], sys.byteorder, signed=True)
                for i in range(0, usable, 4)
            ]
    return msg, fds


def _libc():  # type: ignore[no-untyped-def]
    import ctypes  # lazy: ctypes (~2.5 ms) only for a non-root runner's server

    libc = ctypes.CDLL(None, use_errno=True)

    def call(name: str, *args: object) -> None:
        if getattr(libc, name)(*args) != 0:
            raise OSError(ctypes.get_errno(), name)

    return call


def _cover(call) -> None:  # type: ignore[no-untyped-def]
    """Into a new mount namespace, a copy of the current one propagating nothing back, where
    the hybrid host's cgroup2 mount is covered (``runtime.py``)."""
    call("unshare", CLONE_NEWNS)
    call("mount", None, b"/", None, MS_REC_SLAVE, None)
    call("mount", b"gradebox-no-v2", UNIFIED, b"tmpfs", 0, b"size=1m,mode=0755")


def _spawn(argv: list[bytes], fds: list[int], call: object, host: int) -> tuple[int, bytes]:
    """``posix_spawn`` ``argv`` with ``fds`` as its stdio, in a session of its own; with
    ``host``, in a fresh covered copy of the host's mounts first. (pid, b"") or (0, why)."""
    try:
        if host >= 0 and callable(call):
            call("setns", host, CLONE_NEWNS)
            _cover(call)
        actions = _placed(fds)
        pid = os.posix_spawn(
            argv[0],
            argv,
            os.environ,
            file_actions=actions,
            setsid=True,
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
        )
    except OSError as exc:
        return 0, f"{os.fsdecode(argv[0])}: {os.strerror(exc.errno or 0)}".encode()
    finally:
        for fd in fds:
            os.close(fd)
    return pid, b""


def _placed(fds: list[int]) -> list[tuple[int, ...]]:
    """File actions that put ``fds[i]`` on fd ``i`` and close the rest, whatever numbers they
    arrived with: each is first moved above all of them, so no placement overwrites an fd
    still to be placed (one that arrived as 3, say, before fd 3 is given its own)."""
    base = max([*fds, len(fds)]) + 1
    actions: list[tuple[int, ...]] = [
        (os.POSIX_SPAWN_DUP2, fd, base + i) for i, fd in enumerate(fds)
    ]
    actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in fds]
    actions += [(os.POSIX_SPAWN_DUP2, base + i, i) for i in range(len(fds))]
    actions += [(os.POSIX_SPAWN_CLOSE, base + i) for i in range(len(fds))]
    return actions


def _say(sock: _socket.socket, what: bytes) -> None:
    try:
        sock.send(what)
    except OSError:
        pass  # the runner is gone: the next receive says so


def _start(argv: list[bytes], fds: list[int], hide: bool, call: object) -> tuple[int, bytes]:
    """Fork and exec ``argv`` with ``fds`` as its stdio; (pid, b"") or (0, why)."""
    r, w = os.pipe()  # close-on-exec: end of file once the exec succeeded
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setsid()
            # As _placed: each fd (and the pipe) above all of them first, so placing fds[i]
            # on i overwrites none still to be placed.
            n = len(fds)
            base = max([*fds, w, n]) + 1
            w = os.dup2(w, base + n, inheritable=False)
            for i, fd in enumerate(fds):
                os.dup2(fd, base + i)
            for i in range(n):
                os.dup2(base + i, i)
            for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # as subprocess: the defaults back
                signal.signal(sig, signal.SIG_DFL)
            if hide and callable(call):
                _cover(call)  # a copy of the host's mounts as they are now, of its own
            os.closerange(n, w)
            os.closerange(w + 1, 1 << 16)
            os.execv(argv[0], argv)
        except BaseException as exc:  # noqa: BLE001 - said to the runner, whatever it was
            try:
                os.write(w, str(exc).encode()[:900] or b"failed")
            except BaseException:  # noqa: BLE001
                pass
        os._exit(127)
    os.close(w)
    for fd in fds:
        os.close(fd)
    why = os.read(r, 1000)
    os.close(r)
    if why:
        os.waitpid(pid, 0)
        return 0, why
    return pid, b""


def _await(sock: _socket.socket, pid: int, here: str) -> None:
    """Report ``pid``'s exit; if the runner goes first, kill it and what is in the slot."""
    pidfd = os.pidfd_open(pid)
    try:
        while True:
            ready, _, _ = select.select([sock, pidfd], [], [])
            if pidfd in ready:
                code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
                _say(sock, b"x%d" % code)
                return
            try:
                said = sock.recv(16)
            except OSError:
                said = b""
            if not said:  # the runner is gone: so is the slot
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
                _sweep(here)
                os._exit(0)
    finally:
        os.close(pidfd)


def _sweep(here: str) -> None:
    """Kill whatever is in the slot but this server (its runner is gone)."""
    me = os.getpid()
    for _ in range(20):
        try:
            with open(here + "/cgroup.procs") as f:
                left = [int(p) for p in f.read().split() if int(p) != me]
        except (OSError, ValueError):
            return
        if not left:
            return
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


if __name__ == "__main__":
    serve(
        _socket.socket(fileno=int(sys.argv[1])), sys.argv[2] == "1", int(sys.argv[3]), sys.argv[4:]
    )
