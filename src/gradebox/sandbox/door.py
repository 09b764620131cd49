"""A listening socket on a container's own loopback: the one door of a grader (model proxy).

The socket is made *inside* the container's network namespace, so the grader reaches it on
``127.0.0.1`` and nothing else: not the host's ports, not another grader's door (which is on
that other container's loopback). The host serves it; the container never holds it. How the
socket gets made depends on who owns the namespace:

- **root**: a thread joins the namespace with ``setns`` (``listen_in_netns``);
- **a non-root runner, OCI backend**: the container's namespaces belong to a user namespace
  this user owns; a single-threaded child joins both and hands the socket back
  (``userns.listen``);
- **a non-root runner, Docker backend**: the namespace belongs to the engine (root); a tiny
  container of the engine joins it (``network_mode=container:<id>``: no network of its own,
  no capabilities, read-only, our seccomp profile, the runner's uid), makes the socket and
  passes it over a unix socket in a 0700 folder of the runner, then exits
  (``listen_via_engine``).
"""

from __future__ import annotations

import contextlib
import os
import threading

from ..core.scratch import new_scratch
from ..errors import GradeboxError
from ..images.catalog import qualified
from .seccomp import seccomp_json

TYPE_CHECKING = False  # not typing's (~3 ms on `gradebox exec`'s hot path)
if TYPE_CHECKING:
    import socket
    from typing import Any

__all__ = ["listen_in_netns", "listen_via_engine"]

_CLONE_NEWNET = 0x40000000
DOOR_IMAGE = "python"  # the helper of listen_via_engine runs python3 from our own image


def _failed(why: object) -> GradeboxError:
    return GradeboxError(f"cannot open the model proxy in the grader's network: {why}")


def listen_in_netns(pid: int, port: int) -> socket.socket:
    """A listening TCP socket on 127.0.0.1:``port`` of the network namespace of ``pid``.

    ``setns`` applies to the calling thread only, so a thread of its own joins the namespace,
    makes the socket and ends; the socket stays in that namespace wherever it is served from.
    """
    found: dict[str, Any] = {}

    def work() -> None:
        # lazy: ctypes and socket (~5 ms): only a grader with a model proxy needs them
        import ctypes
        import socket

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
            try:
                if libc.setns(fd, _CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, os.strerror(err))
            finally:
                os.close(fd)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen(64)
            found["sock"] = sock
        except OSError as exc:
            found["error"] = exc

    thread = threading.Thread(target=work, name="proxy-netns")
    thread.start()
    thread.join()
    if "error" in found:
        raise _failed(found["error"])
    return found["sock"]


_HELPER = """
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", PORT))
s.listen(64)
u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
u.connect("/door/s")
socket.send_fds(u, [b"s"], [s.fileno()])
u.recv(1)
"""


def listen_via_engine(
    engine: Any, container: str, port: int, labels: dict[str, str]
) -> socket.socket:  # noqa: E501
    """The socket of ``listen_in_netns``, made by a short-lived container of the engine that
    shares ``container``'s network namespace (see the module's docstring)."""
    import socket  # lazy: socket (~3 ms): only a grader with a model proxy needs it

    folder = str(new_scratch("door"))  # 0700, ours, named after us (the watchdog's)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    cid = None
    try:
        server.bind(os.path.join(folder, "s"))
        server.listen(1)
        server.settimeout(30)
        config = engine.api.create_host_config(
            binds={folder: {"bind": "/door", "mode": "rw"}},
            network_mode=f"container:{container}",
            read_only=True,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges:true", f"seccomp={seccomp_json()}"],
            pids_limit=16,
            mem_limit=64 << 20,
            memswap_limit=64 << 20,
            ipc_mode="private",
        )
        try:
            cid = engine.create(
                lambda: f"gradebox-door-{os.urandom(4).hex()}",
                image=qualified(DOOR_IMAGE),
                user=f"{os.getuid()}:{os.getgid()}",
                command=["python3", "-I", "-S", "-c", _HELPER.replace("PORT", str(int(port)))],
                labels=labels,
                host_config=config,
                use_config_proxy=False,
            )
            engine.start(cid)
        except GradeboxError as exc:
            raise _failed(f"the engine could not run the door's helper ({exc})") from None
        try:
            conn, _ = server.accept()
        except OSError as exc:
            raise _failed(f"the door's helper never called back ({exc})") from None
        with conn:
            conn.settimeout(30)
            _msg, fds, _flags, _addr = socket.recv_fds(conn, 1, 1)
            with contextlib.suppress(OSError):
                conn.sendall(b"k")  # it may exit now
        if not fds:
            raise _failed("the door's helper passed no socket")
        sock = socket.socket(fileno=fds[0])
        if sock.type != socket.SOCK_STREAM or sock.getsockname() != ("127.0.0.1", port):
            sock.close()
            raise _failed("the door's helper passed the wrong socket")
        return sock
    finally:
        server.close()
        import shutil  # here: it loads bz2 and lzma (~2 ms)

        shutil.rmtree(folder, ignore_errors=True)
        if cid is not None:
            engine.remove(cid)
