"""The OCI runtime the ``oci`` backend drives as a program: crun where it works, else runc.

crun (C, one process) starts a container for about a third of runc's CPU: runc is a Go
program that re-executes itself (two Go runtimes per container, ~14 ms of CPU here). Both
take the same bundle, the same ``--root``/``--log``/``run``/``kill``/``delete`` flags and the
same config, so the backend needs nothing but the program's name and, on one kind of host,
a mount namespace to run it in.

**Hybrid hosts.** A cgroup v1 host that also mounts cgroup2 at ``/sys/fs/cgroup/unified``
with a controller in it (``hugetlb`` here) makes crun refuse every container ("cgroups in
hybrid mode not supported, drop all controllers from cgroupv2"). crun decides that from the
mount it sees, so it is run in a mount namespace of ours (``unshare -m``, propagation
``slave``: the host's later mounts, such as a workspace overlay, still reach it) where an
empty tmpfs covers that one mount. crun then sees a plain v1 host, and the limits are kept:
they live in the v1 hierarchies, which are untouched. An over-mount rather than an
unmount, because a non-root runner's namespace may not unmount what it inherited (a
locked mount), and may cover it; the tmpfs is the namespace's own and goes with it.

``choose`` picks: ``$GRADEBOX_RUNTIME`` (or ``--runtime``) when set (``crun``, ``runc``, or
any runtime's path), else ``auto``: crun when it is installed and can keep every limit here,
else runc. It says which and why: that is the ``sandbox: oci (...)`` line.
"""

from __future__ import annotations

import os
import re

from ..core import settings
from ..core.programs import which

__all__ = ["HIDE_V2", "NAMED", "Runtime", "checked", "choose", "hybrid_v2", "v2_hidden"]

UNIFIED = "/sys/fs/cgroup/unified"
# Run in a fresh mount namespace (propagation slave) with the hybrid mount covered, then
# exec "$@": one shell between unshare and the runtime, for a one-off call (kill, delete, gc)
# or to hold the namespace (``read _``) for a sandbox's containers.
HIDE_V2 = f"mount -t tmpfs -o size=1m,mode=0755 gradebox-no-v2 {UNIFIED} || exit 125; "


class Runtime:
    """An OCI runtime: its name (``crun``, ``runc``), its program, why it was chosen, and
    whether it must run where the hybrid cgroup2 mount is covered (``hide_v2``)."""

    __slots__ = ("_keeps", "binary", "hide_v2", "name", "why")

    def __init__(self, name: str, binary: str, why: str, hide_v2: bool = False) -> None:
        self.name, self.binary, self.why, self.hide_v2 = name, binary, why, hide_v2
        self._keeps: bool | None = None

    @property
    def keeps(self) -> bool:
        """Can ``run --keep`` keep a container after its exit (runc can; crun only from 1.9:
        Debian 12's 1.8.1 refuses the flag and starts nothing)? Asked of the program itself,
        once: what a runtime supports, not its name, decides."""
        if self._keeps is None:
            import subprocess  # lazy: ~5 ms, off the path to exec's first slot

            try:
                done = subprocess.run(
                    [self.binary, "run", "--help"],
                    capture_output=True,
                    timeout=10,
                    stdin=subprocess.DEVNULL,
                )
                # An option line of its own ("--keep   do not delete ..."), not a word in prose.
                found = re.search(rb"(?m)^\s*--keep(?![\w-])", done.stdout + done.stderr)
                self._keeps = found is not None
            except (OSError, subprocess.TimeoutExpired):
                self._keeps = False
        return self._keeps

    def __repr__(self) -> str:
        return f"Runtime({self.name!r}, {self.binary!r})"

    def one_shot(self, argv: list[str]) -> list[str]:
        """``argv`` (starting with the runtime) as one call, in a mount namespace of its own
        where one is needed."""
        return v2_hidden(argv) if self.hide_v2 else argv

    def state_dir(self, root: os.PathLike[str] | str) -> str:
        """The runtime's ``--root`` under gradebox's state folder. runc's keeps its old name
        (``runtime``), so ``gc`` still finds what an earlier version left; each runtime has
        its own, since neither reads the other's state."""
        return os.path.join(root, "runtime" if self.name == "runc" else f"runtime-{self.name}")


def v2_hidden(argv: list[str]) -> list[str]:
    """``argv`` in a fresh mount namespace where the hybrid cgroup2 mount is covered."""
    return [
        "unshare",
        "-m",
        "--propagation",
        "slave",
        "--",
        "/bin/sh",
        "-c",
        HIDE_V2 + 'exec "$@"',
        "sh",
        *argv,
    ]


def hybrid_v2() -> bool:
    """A cgroup v1 host with a cgroup2 mount that holds a controller (crun refuses it)."""
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        return False  # a pure cgroup v2 host
    try:
        with open(os.path.join(UNIFIED, "cgroup.controllers")) as f:
            return bool(f.read().split())
    except OSError:
        return False


def _unshare_usable() -> bool:
    return which("unshare") is not None


NAMED = ("auto", "crun", "runc")


def checked(value: str) -> str:
    """``--runtime``'s value; ValueError (one line) unless it is a known name or a program."""
    value = value.strip()
    if value in NAMED or (os.path.isabs(value) and os.access(value, os.X_OK)):
        return value
    raise ValueError(
        f"unknown OCI runtime {value!r}: auto, crun, runc, or an executable's absolute path"
    )


def choose(wanted: str | None = None) -> Runtime:
    """The runtime for this runner: ``wanted``, else ``$GRADEBOX_RUNTIME``, else ``auto``.

    A runtime named outright is used as named (its failures are the run's errors); ``auto``
    picks crun where it keeps every limit, else runc, else whichever is installed."""
    wanted = (wanted or settings.current().runtime or "auto").strip()
    if wanted != "auto":
        binary = which(wanted) or wanted
        name = os.path.basename(wanted)
        hide = name == "crun" and hybrid_v2()
        return Runtime(name, binary, f"{name}: asked for", hide)
    crun, runc = which("crun"), which("runc")
    why_not = _crun_unusable() if crun else "crun is not installed"
    if crun and why_not is None:
        hide = hybrid_v2()
        how = ", the hybrid cgroup2 mount covered" if hide else ""
        return Runtime("crun", crun, f"crun{how}", hide)
    if runc:
        return Runtime("runc", runc, f"runc ({why_not})")
    return Runtime("runc", "runc", "no OCI runtime installed")


def _crun_unusable() -> str | None:
    """Why crun cannot keep every promise here (None: it can)."""
    if hybrid_v2() and not _unshare_usable():
        return "a hybrid cgroup host, and no unshare(1) to hide its cgroup2 mount"
    return None
