"""Cgroups a non-root runner may use for its containers' limits.

Rootless runc puts a container's limits (memory, pids, CPU) in cgroups its user can write.

- **cgroup v2 with delegation** (systemd's ``user@.service`` has ``Delegate=yes`` on current
  distributions): the user's own slice is writable; ``v2_delegated`` finds it, and the
  containers' cgroups go under it.
- **cgroup v1** (this kind of host): nothing is delegated. A user of the ``docker`` group can
  already do anything as root through the engine, so gradebox asks the engine once per boot,
  narrowly, for a subtree of its own: one short-lived container (``gradebox-cgroups-<uid>-…``,
  removed at once) with the host's cgroup hierarchies bound in makes
  ``/sys/fs/cgroup/<controller>/gradebox-<uid>/`` in every v1 hierarchy and gives it to the
  user. Nothing else is changed, and nothing stays running. Without an engine, or without the
  right to use it, no limit could be enforced: the OCI backend is then not used
  (``sandbox.choose_backend`` says why).
"""

from __future__ import annotations

import os
from pathlib import Path

from .._log import LazyLogger
from ..errors import GradeboxError

__all__ = ["delegate_v1", "parent_name", "v1_delegated", "v1_hierarchies", "v2_delegated"]

log = LazyLogger("gradebox.sandbox")  # logging loads on first use: not on exec's path

ROOT = Path("/sys/fs/cgroup")


def parent_name(uid: int | None = None) -> str:
    """The cgroup every container of this user goes under (``gradebox`` for root)."""
    uid = os.getuid() if uid is None else uid
    return "gradebox" if uid == 0 else f"gradebox-{uid}"


def v1_hierarchies() -> list[Path]:
    """Every mounted cgroup v1 hierarchy (``memory``, ``pids``, ``name=systemd``...): rootless
    runc makes the container's cgroup in each one, so each one must be ours."""
    found = []
    try:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            fields = right.split()
            if fields and fields[0] == "cgroup":
                found.append(Path(left.split()[4]))
    except OSError:
        return []
    return sorted(found)


def v1_delegated(uid: int | None = None) -> str | None:
    """None when this user owns ``gradebox-<uid>`` in every v1 hierarchy, else why not."""
    uid = os.getuid() if uid is None else uid
    hierarchies = v1_hierarchies()
    if not hierarchies:
        return "no cgroup v1 hierarchy"
    name = parent_name(uid)
    for hierarchy in hierarchies:
        path = hierarchy / name
        try:
            st = path.stat()
        except OSError:
            return f"no {path}"
        if st.st_uid != uid or not os.access(path / "cgroup.procs", os.W_OK):
            return f"{path} is not this user's"
    return None


def v2_delegated() -> Path | None:
    """The cgroup v2 folder this user may make containers' cgroups in (its own, delegated
    with the memory and pids controllers), or None."""
    if not (ROOT / "cgroup.controllers").exists():
        return None
    try:
        rel = next(
            line[3:] for line in Path("/proc/self/cgroup").read_text().splitlines()
            if line.startswith("0::")
        )  # fmt: skip
    except (OSError, StopIteration):
        return None
    here = ROOT / rel.lstrip("/")
    # systemd delegates user@<uid>.service, whose processes sit in leaves below it: the
    # highest folder of this user's is the one to make a subtree in (it holds no process).
    found = None
    for folder in here.parents:
        if folder == ROOT or ROOT not in folder.parents:
            break
        try:
            ctl = set((folder / "cgroup.controllers").read_text().split())
            if not ({"memory", "pids"} <= ctl and folder.stat().st_uid == os.getuid()
                    and os.access(folder / "cgroup.subtree_control", os.W_OK)):  # fmt: skip
                break
        except OSError:
            break
        found = folder
    return found


# Run as root in the helper container, with the host's /sys/fs/cgroup at /cg: make
# gradebox-<uid> in every v1 hierarchy (cpuset needs its cpus and mems before any task), and
# give it, files included, to the user.
_DELEGATE = r"""
set -eu
for h in /cg/*/; do
  [ -e "$h/cgroup.procs" ] || continue
  [ -e "$h/cgroup.subtree_control" ] && continue
  d="$h$NAME"
  mkdir -p "$d"
  if [ -e "$h/cpuset.cpus" ]; then
    cat "$h/cpuset.cpus" > "$d/cpuset.cpus"
    cat "$h/cpuset.mems" > "$d/cpuset.mems"
  fi
  chown -R "$OWNER" "$d"
done
"""


def delegate_v1(engine: object, image: str) -> None:
    """Have the engine make this user's subtree (see the module's docstring); raises
    ``GradeboxError`` when it cannot."""
    from ._engine import Engine

    assert isinstance(engine, Engine)
    uid, gid = os.getuid(), os.getgid()
    name = f"gradebox-cgroups-{uid}-{os.urandom(3).hex()}"
    try:
        cid = engine.create(
            lambda: name, image=image, command=["/bin/sh", "-c", _DELEGATE],
            environment={"NAME": parent_name(uid), "OWNER": f"{uid}:{gid}"},
            network_disabled=True, labels={"gradebox.cgroups": str(uid)},
            host_config=engine.api.create_host_config(
                binds={"/sys/fs/cgroup": {"bind": "/cg", "mode": "rw"}},
                cap_drop=["ALL"], cap_add=["CHOWN", "DAC_OVERRIDE", "FOWNER"],
                security_opt=["no-new-privileges:true"], read_only=True, network_mode="none",
            ),
        )  # fmt: skip
    except GradeboxError as exc:
        raise GradeboxError(f"cannot ask the engine for a cgroup subtree: {exc}") from None
    try:
        engine.start(cid)
        code = engine.wait(cid, 60)
        logs = engine.api.logs(cid, stdout=True, stderr=True)[-300:].decode(errors="replace")
    except GradeboxError as exc:
        raise GradeboxError(f"cannot make a cgroup subtree through the engine: {exc}") from None
    finally:
        engine.remove(cid)
    if code != 0:
        raise GradeboxError(f"making a cgroup subtree through the engine failed: {logs.strip()}")
    log.info("cgroups: %s delegated to uid %d through the engine", parent_name(uid), uid)
