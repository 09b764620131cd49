"""What this machine gives gradebox, for ``gradebox doctor``: one row per piece (the backend
``auto`` picks and why, each OCI runtime, cgroups, the OCI state folder, subordinate ids, the
engine, the workspace quota, the image definitions, the lock and each image, the base image's
builder, the init, KVM), each missing piece with the one line that fixes it.

Every row asks the function the code path itself asks (``sandbox.auto_reason``,
``runtime.choose``, ``oci.state_root``, ``subids.missing``/``prerequisite``,
``images.status``/``verify``, ``images.build.bootstrap_unusable``, ``init.init_binary``):
never a second copy of their rules, so the doctor cannot say yes where a run would say no.
Asking is what a run does, no more: for a non-root user that may make its cgroups through
the engine (cgroup v1) or enter a delegated scope of its systemd (v2), as ``auto`` does.

A row's state: ``ok``; ``missing`` (a promise cannot be kept: ``doctor`` exits 1);
``optional`` (absent, and what runs instead keeps every promise: the fix makes gradebox
faster or ready for ``--locked``); ``info`` (a fact: the cgroup mode, the state folder, KVM).
"""

from __future__ import annotations

import errno
import fcntl
import grp
import os
import stat
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .. import sandbox
from ..core import settings
from ..core.programs import which
from ..core.subids import missing, prerequisite, subordinate, user_name
from ..engine import Engine
from ..errors import GradeboxError
from ..files import workspace
from ..images import images_dir, lock_path, read_lock, status, verify
from ..images.apt import apt_mirror
from ..images.build import bootstrap_unusable
from ..sandbox import cgroups, runtime
from ..sandbox.init import init_binary, sealed_init
from ..sandbox.rootfs import cache_dir

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..images import ImageStatus, Lock

__all__ = ["INFO", "MISSING", "OK", "OPTIONAL", "Check", "diagnose", "image_checks", "kept"]

OK, MISSING, OPTIONAL, INFO = "ok", "missing", "optional", "info"


@dataclass(frozen=True)
class Check:
    name: str
    state: str
    detail: str
    fix: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def kept(checks: list[Check]) -> bool:
    """Can every promise be kept here (no row ``missing``)?"""
    return not any(c.state == MISSING for c in checks)


def diagnose() -> list[Check]:
    """Every row, in the order a reader follows: how graders run, then what they run."""
    user = user_name()
    engine, engine_row = _engine(user)
    rows = [
        _backend(engine is not None),
        *_runtimes(),
        _cgroups(user),
        _state(),
        _subids(),
        _quota(),
        engine_row,
    ]
    rows += _images(engine, engine_row.fix)
    rows += [_init(), kvm(user)]
    return rows


# -- how graders run ---------------------------------------------------------------------------


def _backend(engine: bool = True) -> Check:
    """``engine``: is the engine reachable (Docker's backend runs nothing without it)?"""
    chosen, why = sandbox.auto_reason()
    named = settings.current().sandbox or "auto"
    if named == "host":
        return Check(
            "backend",
            MISSING,
            f"GRADEBOX_SANDBOX=host: graders run with no "
            f"isolation at all (auto would pick {chosen}: {why})",
            "unset GRADEBOX_SANDBOX",
        )
    said = f"{chosen}: {why}"
    if named != "auto":
        said = f"GRADEBOX_SANDBOX={named} (auto would pick {said})"
    if chosen != "oci" and not engine:
        return Check("backend (auto)", MISSING, f"{said}; and no engine (its row has the fix)")
    # Docker keeps every promise too, more slowly: the rows below name what OCI lacks.
    return Check("backend (auto)", OK if chosen == "oci" else OPTIONAL, said)


def version_of(binary: str) -> str:
    """The first line of ``binary --version`` (``crun version 1.8.1``), or why there is none."""
    try:
        done = subprocess.run(
            [binary, "--version"],
            capture_output=True,
            text=True,
            timeout=10,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"does not run ({exc})"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if lines else f"no version (exit {done.returncode})"


def _runtimes() -> list[Check]:
    chosen = runtime.choose()
    rows = []
    for name in ("crun", "runc"):
        path = which(name)
        if path is None:
            rows.append(
                Check(f"runtime {name}", OPTIONAL, "not installed", f"apt-get install -y {name}")
            )
            continue
        said = f"{version_of(path)} ({path})"
        if chosen.name == name:
            said += f"; auto runs it: {chosen.why}"
        rows.append(Check(f"runtime {name}", OK, said))
    return rows


def cgroup_mode() -> str:
    """``v2`` (unified), ``hybrid`` (v1 controllers, and cgroup2 at /sys/fs/cgroup/unified)
    or ``v1``, with what matters to the runtimes."""
    if cgroups.unified():
        return "v2 (unified)"
    if Path(runtime.UNIFIED, "cgroup.procs").exists():
        held = " holding a controller: crun runs where it is covered" if runtime.hybrid_v2() else ""
        return f"hybrid (v1 controllers; cgroup2 at {runtime.UNIFIED}{held})"
    return "v1" if cgroups.v1_hierarchies() else "none mounted"


def _cgroups(user: str) -> Check:
    mode = cgroup_mode()
    if os.geteuid() == 0:
        return Check("cgroups", INFO, f"{mode}; limits in root's cgroups")
    if cgroups.unified():
        mine = cgroups.v2_delegated()
        if mine is not None:
            return Check("cgroups", OK, f"{mode}; limits in this user's delegated {mine}")
        return Check(
            "cgroups",
            OPTIONAL,
            f"{mode}; no delegated subtree of this user's: rootless "
            "OCI cannot set limits (Docker runs instead)",
            "systemd-run --user --scope gradebox ...",
        )
    why = cgroups.v1_delegated()
    if why is None:
        return Check(
            "cgroups",
            OK,
            f"{mode}; limits in {cgroups.parent_name()}/ of every "
            "hierarchy, this user's (made through the engine once per boot)",
        )
    return Check(
        "cgroups",
        OPTIONAL,
        f"{mode}; no cgroups of this user's ({why}): rootless "
        "OCI cannot set limits (Docker runs instead); the engine makes them",
        f"sudo usermod -aG docker {user}",
    )


def _state() -> Check:
    from ..sandbox.oci import state_root  # lazy: the oci backend, not for every typer command

    return Check("oci state folder", INFO, str(state_root()))


def _subids() -> Check:
    if os.geteuid() == 0:
        return Check("subordinate ids", INFO, "not needed as root")
    why = missing()
    if why:
        return Check(
            "subordinate ids",
            OPTIONAL,
            f"{why}: no rootless OCI (Docker runs instead), no base image built without root",
            prerequisite(),
        )
    uid, gid = subordinate("/etc/subuid", os.getuid()), subordinate("/etc/subgid", os.getuid())
    assert uid is not None and gid is not None
    return Check(
        "subordinate ids",
        OK,
        f"uids {uid[0]}+{uid[1]}, gids {gid[0]}+{gid[1]}; newuidmap, newgidmap",
    )


def _quota() -> Check:
    if workspace.quota_mounts():
        return Check(
            "workspace quota",
            OK,
            "a tmpfs of the quota: the kernel stops a runaway "
            "agent or a `workspace: rw` grader (ENOSPC)",
        )
    # docs/non-root.md: the one promise a non-root runner does not keep, on either backend.
    return Check(
        "workspace quota",
        MISSING,
        "checked after the target; a `workspace: rw` "
        "grader's copy is a plain copy on this disk, not size-limited (only "
        "limits.file_size bounds each file): the tmpfs needs root",
        "run gradebox as root, or give no grader `workspace: rw`",
    )


def engine_fix(user: str, socket: str | None = None) -> str:
    """The one line that gives this user the engine: join the docker group where the socket
    is there but not theirs, else start (or install) Docker."""
    if os.environ.get("DOCKER_HOST"):
        return "point DOCKER_HOST at a running engine (check with `docker info`)"
    socket = socket or "/var/run/docker.sock"
    if os.path.exists(socket) and not os.access(socket, os.R_OK | os.W_OK):
        return f"sudo usermod -aG docker {user} (then log in again)"
    if which("dockerd") is None and not os.path.exists("/usr/sbin/dockerd"):
        return "sudo apt-get install -y docker.io"
    return "sudo systemctl start docker"


def _engine(user: str) -> tuple[Engine | None, Check]:
    try:
        engine = Engine.connect(timeout=15)
        info = engine.info()
    except GradeboxError as exc:
        return None, Check("engine", MISSING, str(exc), engine_fix(user))
    said = (
        f"Docker {info.get('ServerVersion', '?')}, storage driver "
        f"{info.get('Driver', '?')}, cgroup v{info.get('CgroupVersion', '?')}"
    )
    return engine, Check("engine", OK, said)


# -- what graders run --------------------------------------------------------------------------


def _images(engine: Engine | None, engine_fix: str | None = None) -> list[Check]:
    try:
        where = images_dir()
        names = ", ".join(p.name for p in sorted(where.iterdir()) if (p / "Dockerfile").is_file())
        rows = [Check("image definitions", OK, f"{where}: {names}")]
    except (GradeboxError, OSError) as exc:
        # The operator's folder (refused, or not there) is theirs to mend; a reinstall brings
        # back only the package's own definitions.
        fix = (
            "point GRADEBOX_IMAGES_DIR at an images/ folder only you (or root) can write"
            if settings.current().images_dir
            else "pip install --force-reinstall gradebox"
        )
        return [Check("image definitions", MISSING, str(exc), fix)]
    locked = settings.current().ci  # --locked's default
    try:
        lock = read_lock()
    except GradeboxError as exc:
        return [*rows, Check("image lock", MISSING, str(exc), "gradebox images lock")]
    if lock is None:
        rows.append(
            Check(
                "image lock",
                MISSING if locked else OPTIONAL,
                f"none at {lock_path()}" + (": CI=true runs --locked" if locked else ""),
                "gradebox images lock",
            )
        )
    else:
        rows.append(Check("image lock", OK, f"{lock_path()}: {len(lock.images)} image(s)"))
    if engine is None:
        return [*rows, Check("images", MISSING, "not known: no engine to ask", engine_fix)]
    statuses = status(engine)
    problems = verify(engine, lock) if lock is not None else None
    rows += image_checks(statuses, lock, problems, locked)
    unusable = bootstrap_unusable()
    try:
        mirror = apt_mirror()
    except GradeboxError as exc:
        unusable = (str(exc), "export GRADEBOX_APT_MIRROR=URI GRADEBOX_APT_SUITE=SUITE")
    needed = any(s.id is None or not s.up_to_date for s in statuses)
    if unusable:
        why, fix = unusable
        rows.append(Check("image builder", MISSING if needed else OPTIONAL, why, fix))
    else:
        tool = "debootstrap" if os.geteuid() == 0 else "mmdebstrap --mode=unshare"
        rows.append(Check("image builder", OK, f"{tool}, Debian {mirror.suite} from {mirror.uri}"))
    return rows


def image_checks(
    statuses: list[ImageStatus],
    lock: Lock | None,
    problems: dict[str, str | None] | None,
    locked: bool = False,
) -> list[Check]:
    """One row per image: built, up to date with its definitions, and the one the lock names
    (``problems``: ``images.verify``'s answer). ``locked``: runs are ``--locked`` (CI)."""
    rows = []
    seen = set()
    for s in statuses:
        seen.add(s.name)
        name, short = f"image {s.name}", (s.id or "")[7:19]
        build = f"gradebox images build {'' if s.name == 'base' else s.name}".rstrip()
        if s.id is None:
            rows.append(Check(name, MISSING, "not built", build))
            continue
        entry = lock.images.get(s.name) if lock else None
        if entry is not None and problems is not None and problems.get(s.name):
            rows.append(
                Check(
                    name,
                    MISSING,
                    f"{short} {problems[s.name]}",
                    "review it, then gradebox images lock",
                )
            )
            continue
        if entry is not None:
            state, said, fix = OK, f"{short}, verified against the lock", None
        elif lock is not None:
            state, said = (MISSING if locked else OPTIONAL), f"{short}, not in the lock"
            fix = "gradebox images lock"
        else:
            state, said, fix = OK, f"{short}, no lock to verify it against", None
        if not s.up_to_date:
            said += "; out of date with its definitions"
            if state == OK:
                state, fix = OPTIONAL, f"{build} && gradebox images lock"
        rows.append(Check(name, state, said, fix))
    for gone, problem in sorted((problems or {}).items()):
        if gone not in seen:  # locked, but no longer defined here
            rows.append(
                Check(
                    f"image {gone}",
                    MISSING if problem else OK,
                    f"locked, not in the definitions ({problem or 'present'})",
                    "gradebox images lock" if problem else None,
                )
            )
    return rows


def _init() -> Check:
    found = init_binary()
    if found is None:
        return Check(
            "init",
            MISSING,
            "no static tini (docker-init, tini-static) on PATH: PID 1 of every container",
            "apt-get install -y tini",
        )
    # The copy every sandbox binds (made once per tini, as a sandbox makes it).
    sealed = sealed_init(found)
    if sealed is None:
        return Check(
            "init",
            MISSING,
            f"{found}, but no execute-only copy of it in "
            f"{cache_dir() / 'init'}: a grader could trace PID 1",
            f"chown -R {os.geteuid()} {cache_dir()}",
        )
    return Check("init", OK, f"{found}, bound execute-only as PID 1 ({sealed})")


KVM_GET_API_VERSION = 0xAE00
# The KVM modules and what each means for a guest (tests/guest boots a Debian 12 guest).
KVM_KINDS = {
    "kvm_intel": "Intel VT-x",
    "kvm_amd": "AMD-V",
    "kvm_pvm": "PVM, a software KVM: a stock distribution kernel cannot boot under it "
    "(guests run under TCG)",
}


def _kvm_fix(user: str, device: str) -> str:
    """Join the device's group where that group may use it; else open the device to every
    user, as systemd's own udev rule does (root-only here: no group would help)."""
    st = os.stat(device)
    if st.st_mode & stat.S_IRGRP and st.st_mode & stat.S_IWGRP and st.st_gid != 0:
        try:
            return f"sudo usermod -aG {grp.getgrgid(st.st_gid).gr_name} {user}"
        except KeyError:
            pass
    return f"sudo chmod 0666 {device}"


def kvm(user: str, device: str = "/dev/kvm", modules: str = "/sys/module") -> Check:
    """Is ``device`` usable (opened, and it answers KVM's API version), and of which kind?
    Not a promise of gradebox: only its cgroup v2 guest test boots faster with it."""
    if not os.path.exists(device):
        return Check("KVM", INFO, f"no {device}")
    try:
        fd = os.open(device, os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM):
            return Check(
                "KVM", INFO, f"{device} is not this user's to open", _kvm_fix(user, device)
            )
        return Check("KVM", INFO, f"{device} does not open ({exc.strerror})")
    try:
        api = fcntl.ioctl(fd, KVM_GET_API_VERSION)
    except OSError as exc:
        return Check("KVM", INFO, f"{device} answers no KVM API ({exc.strerror})")
    finally:
        os.close(fd)
    kinds = [what for mod, what in KVM_KINDS.items() if os.path.isdir(os.path.join(modules, mod))]
    return Check("KVM", INFO, f"{device} usable (API {api}); {'; '.join(kinds) or 'kind unknown'}")
