"""A ``SandboxSpec`` -> the OCI runtime's ``config.json``, as one pure function.

The OCI counterpart of ``hardening.host_config``: the same defaults, written out the way the
runtime takes them, unit-tested without a runtime. Every protection Docker gives a container
is here by name: namespaces (pid, ipc, uts, mount, network with only loopback), a read-only
root, tmpfs ``/tmp`` and ``$HOME``, ``/proc`` with the kernel's sensitive paths masked or
read-only, no capabilities, ``no_new_privileges``, rlimits, cgroup limits (memory without
swap, pids, CPU), a non-root user, a reaping init as PID 1, and a seccomp profile of our own.

The same bundle runs under ``runc`` (the default), ``crun`` or gVisor's ``runsc``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .base import SandboxSpec
from .gate import GATE, GATE_CWD, INIT_ENV
from .hardening import HOME, run_as

__all__ = [
    "DENIED_SYSCALLS",
    "INIT_PATH",
    "MASKED_PATHS",
    "MOUNT_POINTS",
    "READONLY_PATHS",
    "runtime_config",
    "seccomp_profile",
]

INIT_PATH = "/sbin/gradebox-init"
"""Where the host's tini (``docker-init``) is bound, read-only, as the container's PID 1."""

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

# Syscall families Docker's default profile denies, by what they would let a grader do. The
# profile allows everything else (a deny list): denying these is what keeps a grader inside.
DENIED_SYSCALLS: dict[str, tuple[str, ...]] = {
    "mount": (
        "mount",
        "umount",
        "umount2",
        "pivot_root",
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
        "move_mount",
        "open_tree",
        "mount_setattr",
    ),
    "namespaces": ("unshare", "setns"),
    "keyring": ("keyctl", "add_key", "request_key"),
    "bpf": ("bpf",),
    "tracing": ("ptrace", "process_vm_readv", "process_vm_writev", "kcmp"),
    "perf": ("perf_event_open", "lookup_dcookie"),
    "modules": (
        "init_module",
        "finit_module",
        "delete_module",
        "create_module",
        "query_module",
        "get_kernel_syms",
    ),
    "kexec": ("kexec_load", "kexec_file_load"),
    "clock": ("clock_settime", "clock_adjtime", "settimeofday", "adjtimex", "stime"),
    "reboot": ("reboot",),
    "swap": ("swapon", "swapoff"),
    "accounting": ("acct", "quotactl", "quotactl_fd"),
    "handles": ("open_by_handle_at", "name_to_handle_at"),
    "io-ports": ("iopl", "ioperm"),
    "kernel-log": ("syslog",),
    "terminals": ("vhangup",),
    "userfaultfd": ("userfaultfd",),
    "numa": ("mbind", "set_mempolicy", "get_mempolicy", "move_pages", "migrate_pages"),
    "obsolete": ("uselib", "ustat", "sysfs", "_sysctl", "nfsservctl", "vm86", "vm86old"),
}
# clone() and clone3() may not make namespaces either (unshare by another name).
_CLONE_NEW_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)
_EPERM, _ENOSYS = 1, 38


def seccomp_profile() -> dict[str, Any]:
    """Allow by default; deny DENIED_SYSCALLS with EPERM and namespace-making clone flags."""
    denied = sorted({name for family in DENIED_SYSCALLS.values() for name in family})
    rules: list[dict[str, Any]] = [
        {"names": denied, "action": "SCMP_ACT_ERRNO", "errnoRet": _EPERM},
        # clone3 passes its flags in memory, out of seccomp's sight: ENOSYS makes the C
        # library fall back to clone(), whose flags are checked below (Docker does the same).
        {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": _ENOSYS},
    ]
    for flag in _CLONE_NEW_FLAGS:
        rules.append(
            {
                "names": ["clone"],
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": _EPERM,
                "args": [{"index": 0, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}],
            }
        )
    return {
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32",
                          "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"],
        "syscalls": rules,
    }  # fmt: skip


_CAP_PREFIX = "CAP_"


def _caps(names: list[str]) -> list[str]:
    return [n.upper() if n.upper().startswith(_CAP_PREFIX) else _CAP_PREFIX + n.upper()
            for n in names]  # fmt: skip


def runtime_config(
    spec: SandboxSpec,
    *,
    rootfs: Path,
    cgroup: str,
    init_source: Path | None,
    hostname: str = "gradebox",
    memory: bool = True,
) -> dict[str, Any]:
    """The OCI runtime configuration (``config.json``) that runs ``spec`` behind the gate.

    ``memory=False``: the caller has put the memory limit on the parent of ``cgroup`` itself
    (where the OOM killer's count outlives the container's own cgroup)."""
    limits, security = spec.limits, spec.security
    uid, _, gid = run_as(security).partition(":")
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "HOME": HOME, **spec.env, GATE_CWD: spec.workdir}  # fmt: skip
    args = [*GATE, *spec.command]
    if security.init and init_source is not None:
        env.update(INIT_ENV)
        args = [INIT_PATH, "--", *args]
    caps = _caps(security.capabilities)
    tmpfs = ["nosuid", "nodev", f"size={int(limits.tmpfs)}", "mode=1777"]
    mounts: list[dict[str, Any]] = [
        {"destination": "/proc", "type": "proc", "source": "proc",
         "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
         "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
         "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
        {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
         "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs",
         "options": ["nosuid", "noexec", "nodev", "ro"]},
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": tmpfs},
        {"destination": HOME, "type": "tmpfs", "source": "tmpfs", "options": tmpfs},
    ]  # fmt: skip
    if init_source is not None and security.init:
        mounts.append({"destination": INIT_PATH, "type": "bind", "source": str(init_source),
                       "options": ["bind", "ro", "nosuid", "nodev"]})  # fmt: skip
    nested = [m for m in spec.mounts if m.target.startswith("/grader/")]
    if nested and not any(m.target == "/grader" for m in spec.mounts):
        # Single files under /grader: their mount points are made in a small tmpfs, never in
        # the shared root filesystem.
        mounts.append({"destination": "/grader", "type": "tmpfs", "source": "tmpfs",
                       "options": ["nosuid", "nodev", "size=1m", "mode=755"]})  # fmt: skip
    for m in sorted(spec.mounts, key=lambda m: m.target.count("/")):
        mounts.append({"destination": m.target, "type": "bind", "source": str(m.source),
                       "options": ["rbind", "ro" if m.read_only else "rw", "nosuid", "nodev",
                                   "rprivate"]})  # fmt: skip
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
            },  # fmt: skip
            "rlimits": [
                {"type": "RLIMIT_NOFILE", "hard": limits.open_files, "soft": limits.open_files},
                {
                    "type": "RLIMIT_FSIZE",
                    "hard": int(limits.file_size),
                    "soft": int(limits.file_size),
                },
                {"type": "RLIMIT_CORE", "hard": 0, "soft": 0},
            ],  # fmt: skip
            "noNewPrivileges": security.no_new_privileges,
            "oomScoreAdj": 500,  # under memory pressure a grader goes before the host
        },
        "root": {"path": str(rootfs), "readonly": security.read_only_root},
        "hostname": hostname,
        "mounts": mounts,
        "linux": {
            "namespaces": namespaces,
            "cgroupsPath": cgroup,
            "resources": {
                "devices": [{"allow": False, "access": "rwm"}],
                "pids": {"limit": limits.pids},
                "cpu": {"quota": int(limits.cpus * 100_000), "period": 100_000},
                # Memory and memory+swap equal: no swap, an OOM kill instead of thrashing.
                **(
                    {"memory": {"limit": int(limits.memory), "swap": int(limits.memory)}}
                    if memory
                    else {}
                ),
            },
            "maskedPaths": list(MASKED_PATHS),
            "readonlyPaths": list(READONLY_PATHS),
            "seccomp": seccomp_profile(),
        },
    }
