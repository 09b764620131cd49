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

import contextlib
import os
import signal
import time
from pathlib import Path

from ..core.log import LazyLogger
from ..core.programs import which
from ..errors import GradeboxError

__all__ = [
    "counter", "delegate_v1", "enter_user_scope", "kill_all", "make_parent", "mounts",
    "oom_killed", "parent_name", "read", "read_int", "remove", "remove_parent", "unified",
    "v1_delegated", "v1_hierarchies", "v2_delegated", "write",
]  # fmt: skip

log = LazyLogger("gradebox.sandbox")  # logging loads on first use: not on exec's path

ROOT = Path("/sys/fs/cgroup")
MEMCG_ROOT = ROOT / "memory"  # cgroup v1's memory hierarchy
# The controllers a container's limits need below our cgroups on v2 (cpu where the host has it).
V2_CONTROLLERS = ("memory", "pids", "cpu")


def unified() -> bool:
    """Is this a cgroup v2 (unified) host?"""
    return (ROOT / "cgroup.controllers").exists()


def parent_name(uid: int | None = None) -> str:
    """The cgroup every container of this user goes under (``gradebox`` for root)."""
    uid = os.getuid() if uid is None else uid
    return "gradebox" if uid == 0 else f"gradebox-{uid}"


def v1_hierarchies() -> list[Path]:
    """Every mounted cgroup v1 hierarchy (``memory``, ``pids``, ``name=systemd``...): rootless
    runc makes the container's cgroup in each one, so each one must be ours."""
    return sorted(Path(point) for point, kind in mounts() if kind == "cgroup")


def mounts(mountinfo: str = "/proc/self/mountinfo") -> list[tuple[str, str]]:
    """(mount point, filesystem type) of each mount this process sees ([] if unreadable)."""
    try:
        with open(mountinfo) as f:
            rows = [line.split(" - ", 1) for line in f]
    except OSError:
        return []
    return [(left.split()[4], right.split()[0]) for left, right in (r for r in rows if len(r) == 2)]


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
    if not unified():
        return None
    here = _here()
    # systemd delegates user@<uid>.service, whose processes sit in leaves below it: the
    # highest folder of this user's is the one to make a subtree in (it holds no process).
    found = None
    for folder in here.parents:
        if folder == ROOT or ROOT not in folder.parents:
            break
        try:
            ctl = set((folder / "cgroup.controllers").read_text().split())
            if not (
                {"memory", "pids"} <= ctl
                and folder.stat().st_uid == os.getuid()
                and os.access(folder / "cgroup.subtree_control", os.W_OK)
            ):
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
    from ._engine import Engine  # lazy: tenacity and the Docker SDK, for cgroup v1 only

    assert isinstance(engine, Engine)
    uid, gid = os.getuid(), os.getgid()
    name = f"gradebox-cgroups-{uid}-{os.urandom(3).hex()}"
    try:
        cid = engine.create(
            lambda: name,
            image=image,
            command=["/bin/sh", "-c", _DELEGATE],
            environment={"NAME": parent_name(uid), "OWNER": f"{uid}:{gid}"},
            network_disabled=True,
            labels={"gradebox.cgroups": str(uid)},
            host_config=engine.api.create_host_config(
                binds={"/sys/fs/cgroup": {"bind": "/cg", "mode": "rw"}},
                cap_drop=["ALL"],
                cap_add=["CHOWN", "DAC_OVERRIDE", "FOWNER"],
                security_opt=["no-new-privileges:true"],
                read_only=True,
                network_mode="none",
            ),
        )
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


# -- a container's parent cgroup ---------------------------------------------------------------


def make_parent(cid: str, limit: int, parent: str) -> Path | None:
    """Our cgroup ``<parent>/<cid>`` holding a memory limit of ``limit`` bytes and no swap:
    the runtime makes the container's own cgroup (``.../c``) under it, with the other limits.
    None where it cannot be made (then the runtime sets the memory limit itself)."""
    if unified():
        return _make_v2(ROOT / parent.strip("/") / cid, limit)
    if not (MEMCG_ROOT / "memory.limit_in_bytes").exists():
        return None
    return _make_v1(MEMCG_ROOT / parent.strip("/") / cid, limit)


def _make_v1(path: Path, limit: int) -> Path | None:
    try:
        path.parent.mkdir(exist_ok=True)
        path.mkdir()
        (path / "memory.limit_in_bytes").write_text(str(limit))
        if (path / "memory.memsw.limit_in_bytes").exists():
            (path / "memory.memsw.limit_in_bytes").write_text(str(limit))
    except OSError as exc:
        log.info("no memory cgroup of our own (%s): the runtime sets the limit", exc)
        remove_parent(path)
        return None
    return path


_enabled: set[Path] = set()  # folders whose subtree_control already has what we need
scope_entered: list[str] = []  # the transient scope ``enter_user_scope`` moved us into


def _enable(folder: Path) -> None:
    """Give ``folder``'s children the controllers a container's limits need (those the host
    has): ``+memory +pids +cpu`` in its ``cgroup.subtree_control``, once per process."""
    if folder in _enabled:
        return
    have = set((folder / "cgroup.controllers").read_text().split())
    on = set((folder / "cgroup.subtree_control").read_text().split())
    missing = [name for name in V2_CONTROLLERS if name in have and name not in on]
    if missing:
        (folder / "cgroup.subtree_control").write_text(" ".join(f"+{n}" for n in missing))
    _enabled.add(folder)


def _make_v2(path: Path, limit: int) -> Path | None:
    try:
        _enable(path.parent.parent)
        path.parent.mkdir(exist_ok=True)
        _enable(path.parent)
        path.mkdir()
        if not (path / "memory.max").exists():
            raise OSError(f"no memory controller in {path.parent}")
        (path / "memory.max").write_text(str(limit))
        if (path / "memory.swap.max").exists():
            (path / "memory.swap.max").write_text("0")
        _enable(path)
    except OSError as exc:
        _enabled.discard(path)
        log.info("no cgroup of our own (%s): the runtime sets the memory limit", exc)
        remove_parent(path)
        return None
    return path


def oom_killed(path: Path) -> bool:
    """Did the OOM killer strike in our cgroup ``path`` (the container's, gone now, included)?

    v2: its ``memory.events`` counts every kill below it. v1 counts the kill only in the
    container's own cgroup, gone with it; ours remembers the peak, and a SIGKILL (the caller
    checks) of a container that reached its limit is the OOM killer's."""
    if (path / "memory.events").exists():
        return counter(path / "memory.events", "oom_kill") > 0
    limit = read_int(path / "memory.limit_in_bytes")
    peak = read_int(path / "memory.max_usage_in_bytes")
    return limit > 0 and peak >= limit - (1 << 20)


def remove_parent(path: Path) -> None:
    """rmdir our cgroup ``<parent>/<cid>`` (and a leaf ``c`` the runtime left in it), in every
    v1 hierarchy the runtime made it in on its way to its leaf. Whatever still runs in one is
    killed first."""
    _enabled.discard(path)
    if unified():
        folders = [path]
    else:
        rel = path.relative_to(MEMCG_ROOT)
        folders = [MEMCG_ROOT / rel, *(h / rel for h in _v1_others(rel.parent))]
    for base in folders:
        remove(base / "c", tries=50)
        remove(base, tries=50)


def _v1_others(parent: Path) -> list[Path]:
    """The v1 hierarchies other than memory that hold our ``parent`` folder."""
    try:
        return [h for h in ROOT.iterdir() if h != MEMCG_ROOT and (h / parent).is_dir()]
    except OSError:
        return []


def parents(parent: str) -> list[Path]:
    """The folders our containers' cgroups are made in (``gc`` looks there)."""
    if unified():
        return [ROOT / parent.strip("/")]
    return [MEMCG_ROOT / parent.strip("/")]


# -- a cgroup's files (the kernel's, in folders only root or we can write) ----------------------


def read(path: Path) -> str:
    """The file's text; "" where it cannot be read (the cgroup is gone)."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def read_int(path: Path) -> int:
    text = read(path).strip()
    return int(text) if text.isdigit() else 0


def counter(path: Path, key: str) -> int:
    """The value of ``key`` in a file of ``key value`` lines (``memory.events``), else 0."""
    for line in read(path).splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value) if value.strip().isdigit() else 0
    return 0


def write(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def kill_all(cgroup: Path, spare: int = -1) -> None:
    """SIGKILL every process in ``cgroup`` (but ``spare``)."""
    if spare < 0:
        with contextlib.suppress(OSError):  # v2, Linux 5.14+: every process below, at once
            write(cgroup / "cgroup.kill", "1")
            return
    for text in read(cgroup / "cgroup.procs").split():
        if text.isdigit() and int(text) != spare:
            with contextlib.suppress(OSError):
                os.kill(int(text), signal.SIGKILL)


def remove(cgroup: Path, tries: int = 100) -> None:
    """rmdir ``cgroup``, killing what still runs in it while it is busy."""
    for _ in range(tries):
        try:
            os.rmdir(cgroup)
            return
        except FileNotFoundError:
            return
        except OSError:  # busy: processes still in it
            kill_all(cgroup)
            time.sleep(0.02)


# -- a logged-in user's delegated scope --------------------------------------------------------


def user_service(uid: int | None = None) -> Path | None:
    """This user's ``user@UID.service`` cgroup when systemd delegated it to the user (owned by
    them), else None."""
    uid = os.getuid() if uid is None else uid
    path = ROOT / "user.slice" / f"user-{uid}.slice" / f"user@{uid}.service"
    try:
        return path if path.stat().st_uid == uid else None
    except OSError:
        return None


def enter_user_scope(timeout: float = 10.0) -> str | None:
    """Move this process into a transient scope of the user's own systemd manager with
    ``Delegate=yes`` (``systemd-run --user --scope`` for a process already running): a login
    shell sits in ``session-N.scope``, which the system owns, and no container started from
    there could be moved into the user's delegated tree. None once done, else why not.

    The user's manager moves the process through the system's manager (which lets a user
    move their own processes into their own units); nothing runs as root."""
    if os.geteuid() == 0 or not unified():
        return "not needed"
    if user_service() is None:
        return f"no delegated user@{os.getuid()}.service (is the user's systemd running?)"
    busctl = which("busctl")
    if busctl is None:
        return "no busctl (systemd) to ask the user's manager for a scope"
    if not os.environ.get("DBUS_SESSION_BUS_ADDRESS") and not os.environ.get("XDG_RUNTIME_DIR"):
        return "no user bus (XDG_RUNTIME_DIR is unset: not a login session)"
    unit = f"gradebox-{os.getpid()}-{os.urandom(3).hex()}.scope"
    argv = [
        busctl,
        "--user",
        "--quiet",
        "call",
        "org.freedesktop.systemd1",
        "/org/freedesktop/systemd1",
        "org.freedesktop.systemd1.Manager",
        "StartTransientUnit",
        "ssa(sv)a(sa(sv))",
        unit,
        "fail",
        "3",
        "PIDs",
        "au",
        "1",
        str(os.getpid()),
        "Delegate",
        "b",
        "true",
        "Description",
        "s",
        "gradebox runner (its containers' cgroups)",
        "0",
    ]
    import subprocess  # lazy: ~5 ms, off the path to exec's first slot (slots.py)

    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, text=True)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the user's systemd did not answer: {exc}"
    if done.returncode != 0:
        return f"the user's systemd refused a scope: {done.stderr.strip()[:200]}"
    deadline = time.monotonic() + timeout  # the job runs after the call returns
    while time.monotonic() < deadline:
        if _here().name == unit and v2_delegated() is not None:
            scope_entered.append(unit)
            log.info("cgroups: moved into %s, delegated by the user's systemd", unit)
            return None
        time.sleep(0.02)
    return f"moved into {unit}, but no delegated memory and pids controllers there"


def _here() -> Path:
    """This process's cgroup v2 folder."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return ROOT / line[3:].strip().lstrip("/")
    except OSError:
        pass
    return ROOT
