"""A ``SandboxSpec`` -> the OCI runtime's ``config.json``, as one pure function.

The OCI counterpart of ``hardening.host_config``: the same defaults, written out the way the
runtime takes them, unit-tested without a runtime. Every protection Docker gives a container
is here by name: namespaces (pid, ipc, uts, mount, network with only loopback), a read-only
root, tmpfs ``/tmp`` and ``$HOME`` (noexec, as Docker mounts them), ``/proc`` with the
kernel's sensitive paths masked or read-only, no capabilities, ``no_new_privileges``, rlimits,
cgroup limits (memory without swap, pids, CPU), a non-root user, a reaping init as PID 1
(the sealed copy of ``init.py``), and the seccomp profile both backends share
(``seccomp.py``).

The same bundle runs under ``runc`` (the default), ``crun`` or gVisor's ``runsc``.
"""

from __future__ import annotations

from pathlib import Path

from .base import SandboxSpec
from .defaults import rlimits
from .gate import GATE_CWD, INIT_ENV, REPORT_PATH, direct_command, entry_command
from .hardening import HOME, SCRATCH_FLAGS, run_as
from .init import INIT_PATH
from .seccomp import DENIED_SYSCALLS, seccomp_profile

TYPE_CHECKING = False  # not typing's (~3 ms on `gradebox exec`'s hot path)
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "DENIED_SYSCALLS",
    "INIT_PATH",
    "MASKED_PATHS",
    "MOUNT_POINTS",
    "READONLY_PATHS",
    "runtime_config",
    "seccomp_profile",
]

# Mount points every container uses; the root filesystem cache creates them once, so the
# runtime never has to write into the shared, read-only root.
MOUNT_POINTS = ("/workspace", "/run/gradebox", "/grader", "/tmp", HOME, "/proc", "/dev", "/sys")

# As Docker masks them: kernel state a container must not read.
MASKED_PATHS = (
    "/proc/acpi",
    "/proc/asound",
    "/proc/interrupts",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/sys/devices/virtual/powercap",
    "/sys/firmware",
)
READONLY_PATHS = (
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
)

_CAP_PREFIX = "CAP_"


def _caps(names: list[str]) -> list[str]:
    return [
        n.upper() if n.upper().startswith(_CAP_PREFIX) else _CAP_PREFIX + n.upper() for n in names
    ]


def runtime_config(
    spec: SandboxSpec,
    *,
    rootfs: Path,
    cgroup: str | None,
    init_source: Path | None,
    hostname: str = "gradebox",
    memory: bool = True,
    report: Path | None = None,
    direct: bool = False,
) -> dict[str, Any]:
    """The OCI runtime configuration (``config.json``) that runs ``spec`` behind the gate.

    ``memory=False``: the caller has put the memory limit on the parent of ``cgroup`` itself
    (where the OOM killer's count outlives the container's own cgroup). ``cgroup=None``: the
    container is started inside cgroups that already hold every limit (a slot, ``slots.py``),
    with the runtime's cgroup manager disabled: no cgroup path, no resources. ``report``: the
    host FIFO of the report channel (``gate.ReportChannel``), bound for the entry to open.
    ``direct``: the runtime is handed the channel as its stdout and stderr and the real ones
    on fds 3 and 4 (``gate.direct_command``): no entry, no bind."""
    limits, security = spec.limits, spec.security
    uid, _, gid = run_as(security).partition(":")
    env = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": HOME,
        **spec.env,
        GATE_CWD: spec.workdir,
    }
    init = security.init and init_source is not None
    if init:
        env.update(INIT_ENV)
    args = (direct_command if direct else entry_command)(spec.command, init=init)
    caps = _caps(security.capabilities)
    tmpfs = [*SCRATCH_FLAGS, f"size={int(limits.tmpfs)}", "mode=1777"]  # Docker's, noexec
    mounts = [
        _mount("/proc", "proc", "proc", ["nosuid", "noexec", "nodev"]),
        _mount("/dev", "tmpfs", "tmpfs", ["nosuid", "strictatime", "mode=755", "size=65536k"]),
        _mount(
            "/dev/pts",
            "devpts",
            "devpts",
            ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"],
        ),
        _mount(
            "/dev/shm", "tmpfs", "shm", ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]
        ),
        _mount("/dev/mqueue", "mqueue", "mqueue", ["nosuid", "noexec", "nodev"]),
        _mount("/sys", "sysfs", "sysfs", ["nosuid", "noexec", "nodev", "ro"]),
        _mount("/tmp", "tmpfs", "tmpfs", tmpfs),
        _mount(HOME, "tmpfs", "tmpfs", tmpfs),
    ]
    if init:
        mounts.append(_mount(INIT_PATH, "bind", init_source, ["bind", "ro", "nosuid", "nodev"]))
    if report is not None and not direct:
        mounts.append(
            _mount(REPORT_PATH, "bind", report, ["bind", "ro", "nosuid", "nodev", "noexec"])
        )
    nested = [m for m in spec.mounts if m.target.startswith("/grader/")]
    if nested and not any(m.target == "/grader" for m in spec.mounts):
        # Single files under /grader: their mount points are made in a small tmpfs, never in
        # the shared root filesystem.
        mounts.append(
            _mount("/grader", "tmpfs", "tmpfs", ["nosuid", "nodev", "size=1m", "mode=755"])
        )
    for m in sorted(spec.mounts, key=lambda m: m.target.count("/")):
        options = ["rbind", "ro" if m.read_only else "rw", "nosuid", "nodev", "rprivate"]
        mounts.append(_mount(m.target, "bind", m.source, options))
    resources = {
        "devices": [{"allow": False, "access": "rwm"}],
        "pids": {"limit": limits.pids},
        "cpu": {"quota": int(limits.cpus * 100_000), "period": 100_000},
        # Memory and memory+swap equal: no swap, an OOM kill instead of thrashing.
        **({"memory": {"limit": int(limits.memory), "swap": int(limits.memory)}} if memory else {}),
    }
    namespaces = [{"type": t} for t in ("pid", "ipc", "uts", "mount")]
    if spec.network == "none":
        namespaces.append({"type": "network"})  # a new one: the runtime brings up lo only
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": int(uid), "gid": int(gid or uid)},
            "args": args,
            "env": [f"{k}={v}" for k, v in env.items()],
            "cwd": "/",
            "capabilities": {
                k: caps for k in ("bounding", "effective", "permitted", "inheritable")
            },
            "rlimits": [
                {"type": f"RLIMIT_{name.upper()}", "hard": n, "soft": n}
                for name, n in rlimits(limits)
            ],
            "noNewPrivileges": security.no_new_privileges,
            "oomScoreAdj": 500,  # under memory pressure a grader goes before the host
        },
        "root": {"path": str(rootfs), "readonly": security.read_only_root},
        "hostname": hostname,
        "mounts": mounts,
        "linux": {
            "namespaces": namespaces,
            **({} if cgroup is None else {"cgroupsPath": cgroup, "resources": resources}),
            "maskedPaths": list(MASKED_PATHS),
            "readonlyPaths": list(READONLY_PATHS),
            "seccomp": seccomp_profile(),
        },
    }


def _mount(destination: str, kind: str, source: object, options: list[str]) -> dict[str, Any]:
    """One entry of the config's ``mounts``."""
    return {"destination": destination, "type": kind, "source": str(source), "options": options}
