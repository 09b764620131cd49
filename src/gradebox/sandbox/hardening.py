"""Limits and security switches -> the Docker Engine's ``HostConfig``, as one pure function.

Kept free of the docker package so that it is unit-tested without an engine. What each setting
is, its default and the privilege that relaxes it: ``defaults.HARDENING`` (the table in
docs/security.md is made from it).
"""

from __future__ import annotations

from .base import Mount, default_user
from .defaults import DEFAULT_SECURITY, HARDENING, PRIVILEGES, Limits, Security, rlimits
from .seccomp import seccomp_json

TYPE_CHECKING = False  # not typing's: `gradebox exec` imports this module
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "HOME",
    "PRIVILEGES",
    "SCRATCH_FLAGS",
    "host_config",
    "privileges_of",
    "run_as",
    "run_as_ids",
]

HOME = "/home/grader"
# The writable scratch tmpfs (/tmp and $HOME) on both backends. noexec, as Docker mounts a
# tmpfs by default: what a grader runs comes from the image, the workspace or /grader, and a
# program it writes at run time runs through its interpreter (`python3 /tmp/x.py`), or from
# a `workspace: rw` copy (which is not noexec).
SCRATCH_FLAGS = ("nosuid", "nodev", "noexec")


def privileges_of(
    security: Security | None = None,
    network: str = "none",
    limits: Limits | None = None,
    image: object = None,
) -> list[str]:
    """The privileges (keys of PRIVILEGES) a configuration asks for: the settings of
    ``defaults.HARDENING`` it relaxes. ``image``: a name (nothing asked) or a Dockerfile build."""
    relaxed = {"network": network != "none", "image": not isinstance(image, str | None)}
    for record in (security or DEFAULT_SECURITY, limits):
        for row in record._rows if record is not None else ():
            value = getattr(record, row.name)
            if row.unit == "uid[:gid]":  # a user is a privilege only as root
                relaxed[row.key] = _root((value or "").partition(":")[0])
            elif row.unit in ("bytes", "cores", "count"):  # a limit may always be lowered
                relaxed[row.key] = float(value) > float(row.default)
            else:
                relaxed[row.key] = value != row.default
    asked = {row.allow for row in HARDENING if row.allow and relaxed.get(row.key)}
    return [p for p in PRIVILEGES if p in asked]


def _root(uid: str) -> bool:
    """Is ``uid`` root as the engine or the runtime would read it ("root", "0", and also
    "00", "+0", "0_0": ``int`` reads each as 0, as the OCI config's user does; 2**32 is 0 as
    a 32-bit uid)?"""
    uid = uid.strip()
    try:
        return uid == "root" or int(uid) % (1 << 32) == 0
    except ValueError:
        return False


def run_as(security: Security) -> str:
    return security.user or default_user()


def run_as_ids(security: Security | None = None) -> tuple[int, int]:
    """``run_as`` as numbers: the owner the host gives files the sandbox user must write."""
    uid, _, gid = run_as(security or DEFAULT_SECURITY).partition(":")
    return int(uid), int(gid or uid)


def host_config(
    limits: Limits,
    security: Security,
    network: str,
    mounts: tuple[Mount, ...],
    *,
    own_init: bool = False,
) -> dict[str, Any]:
    """The Engine API ``HostConfig`` body for one grader container. ``own_init``: the
    command starts our own init (the sealed tini of ``init.py``, bound in ``mounts``), so
    the engine adds none; without it, the engine's own init, whose copy a grader can read,
    and so trace."""
    tmpfs_opts = ",".join(("rw", *SCRATCH_FLAGS, f"size={int(limits.tmpfs)}", "mode=1777"))
    binds = [f"{m.source}:{m.target}:{'ro' if m.read_only else 'rw'}" for m in mounts]
    # Our profile, not the engine's default (see seccomp.py for how they differ).
    opts = [f"seccomp={seccomp_json()}"]
    if security.no_new_privileges:
        opts.insert(0, "no-new-privileges:true")
    config: dict[str, Any] = {
        "NetworkMode": network,
        "ReadonlyRootfs": security.read_only_root,
        "CapDrop": ["ALL"],
        "CapAdd": list(security.capabilities) or None,
        "SecurityOpt": opts,
        "PidsLimit": limits.pids,
        "Memory": int(limits.memory),
        # Equal to Memory: no swap, so a memory hog is OOM-killed instead of thrashing the host.
        "MemorySwap": int(limits.memory),
        "NanoCpus": int(limits.cpus * 1e9),
        "Ulimits": [{"Name": name, "Soft": n, "Hard": n} for name, n in rlimits(limits)],
        # The engine's init would report on the container's stdout; ours reports on a channel
        # of its own (see gate.py), so the engine's is the fallback only.
        "Init": security.init and not own_init,
        "Tmpfs": {"/tmp": tmpfs_opts, HOME: tmpfs_opts},
        "Binds": binds,
        # Output is read through the attach stream with a cap; a log driver would also copy a
        # flood of output onto the host's disk.
        "LogConfig": {"Type": "none", "Config": {}},
        "IpcMode": "private",
        "Privileged": False,
    }
    return config
