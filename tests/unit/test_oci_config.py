"""The OCI runtime configuration, from the spec alone: no runtime needed."""

import json
import os
from pathlib import Path

from gradebox.sandbox.base import Limits, Mount, SandboxSpec, Security
from gradebox.sandbox.oci_config import (
    DENIED_SYSCALLS,
    INIT_PATH,
    MASKED_PATHS,
    runtime_config,
    seccomp_profile,
)


def config(**kw):
    spec = SandboxSpec(image="sha256:" + "0" * 64, command=["python3", "g.py"], **kw)
    return runtime_config(spec, rootfs=Path("/cache/rootfs/x"), cgroup="/gradebox/c1",
                          init_source=Path("/usr/bin/tini-static"),
                          report=Path("/run/gradebox/bundles/c1/report"))  # fmt: skip


def test_the_runtimes_reports_have_a_channel_of_their_own():
    from gradebox.sandbox.gate import REPORT_PATH

    c = config()
    report = {m["destination"]: m for m in c["mounts"]}[REPORT_PATH]
    assert report["source"] == "/run/gradebox/bundles/c1/report"
    assert report["options"][:2] == ["bind", "ro"] and "noexec" in report["options"]
    args = c["process"]["args"]
    assert f">{REPORT_PATH} 2>&1" in args[2]  # the entry points fds 1 and 2 at it...
    assert args[-2:] == ["python3", "g.py"]  # ...and the command comes last, unchanged


def test_the_bundle_is_valid_oci():
    c = json.loads(json.dumps(config()))  # plain JSON all the way down
    assert c["ociVersion"].startswith("1.0")
    assert {"process", "root", "mounts", "linux", "hostname"} <= set(c)
    p = c["process"]
    assert p["terminal"] is False and isinstance(p["args"], list) and p["cwd"] == "/"
    assert all(isinstance(e, str) and "=" in e for e in p["env"])
    assert isinstance(p["user"]["uid"], int) and isinstance(p["user"]["gid"], int)
    for m in c["mounts"]:
        assert m["destination"].startswith("/") and "type" in m and "source" in m
        assert all(isinstance(o, str) for o in m.get("options", []))
    for r in p["rlimits"]:
        assert r["type"].startswith("RLIMIT_") and isinstance(r["hard"], int)
    assert {n["type"] for n in c["linux"]["namespaces"]} <= {
        "pid", "network", "mount", "ipc", "uts", "user", "cgroup"
    }  # fmt: skip


def test_defaults_are_the_locked_down_setting():
    c = config()
    p, linux = c["process"], c["linux"]
    assert p["user"] == {"uid": 65534, "gid": 65534} or p["user"]["uid"] != 0
    assert all(v == [] for v in p["capabilities"].values())
    assert p["noNewPrivileges"] is True
    assert c["root"]["readonly"] is True
    types = {n["type"] for n in linux["namespaces"]}
    assert {"pid", "ipc", "uts", "mount", "network"} <= types
    res = linux["resources"]
    assert res["memory"]["limit"] == res["memory"]["swap"] == 1 << 30  # no swap
    assert res["pids"]["limit"] == 256 and res["cpu"]["quota"] == 100_000
    rl = {r["type"]: r["hard"] for r in p["rlimits"]}
    assert rl == {"RLIMIT_NOFILE": 1024, "RLIMIT_FSIZE": 256 << 20, "RLIMIT_CORE": 0}
    dests = {m["destination"]: m for m in c["mounts"]}
    assert {"/proc", "/dev", "/tmp", "/home/grader"} <= set(dests)
    assert dests[INIT_PATH]["options"][:2] == ["bind", "ro"]
    # The entry (PID 1 until it execs) becomes the reaping init, which runs the gate.
    assert p["args"][:2] == ["/bin/sh", "-c"] and p["args"][4:6] == [INIT_PATH, "--"]
    assert set(MASKED_PATHS) <= set(linux["maskedPaths"]) and "/proc/kcore" in MASKED_PATHS
    assert "/proc/sys" in linux["readonlyPaths"]


def test_overrides_reach_the_config():
    c = config(
        limits=Limits(memory=256 << 20, pids=32, cpus=0.5),
        security=Security(
            user="1000:1000", capabilities=["net_bind_service"], no_new_privileges=False, init=False
        ),  # fmt: skip
        mounts=(
            Mount(Path("/host/ws"), "/workspace", read_only=False),
            Mount(Path("/host/g.py"), "/grader/g.py"),
        ),  # fmt: skip
    )
    assert c["process"]["user"] == {"uid": 1000, "gid": 1000}
    assert c["process"]["capabilities"]["bounding"] == ["CAP_NET_BIND_SERVICE"]
    assert c["process"]["noNewPrivileges"] is False
    assert INIT_PATH not in c["process"]["args"]
    assert c["linux"]["resources"]["cpu"]["quota"] == 50_000
    binds = {m["destination"]: m["options"] for m in c["mounts"] if m["type"] == "bind"}
    assert "rw" in binds["/workspace"] and "ro" in binds["/grader/g.py"]
    # A single file under /grader gets a tmpfs to hold its mount point, before the file.
    order = [m["destination"] for m in c["mounts"]]
    assert order.index("/grader") < order.index("/grader/g.py")


def test_seccomp_is_an_allow_list_that_names_every_denied_family():
    from gradebox.sandbox.seccomp import ALLOWED_SYSCALLS, ARCHITECTURES

    profile = seccomp_profile()
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO" and profile["defaultErrnoRet"] == 1
    # The host's own 64-bit ABI only (x86_64 here; a 32-bit call is refused outright).
    native = {"x86_64": ["SCMP_ARCH_X86_64"], "aarch64": ["SCMP_ARCH_AARCH64"]}
    assert profile["architectures"] == native.get(os.uname().machine, list(ARCHITECTURES))
    allowed, denied = set(), set()
    for rule in profile["syscalls"]:
        if rule["action"] == "SCMP_ACT_ALLOW" and "args" not in rule:
            allowed |= set(rule["names"])
        if rule["action"] == "SCMP_ACT_ERRNO" and rule.get("errnoRet") == 1:
            denied |= set(rule["names"])
    for family, names in DENIED_SYSCALLS.items():
        assert set(names) <= denied, family
    assert allowed == {n for names in ALLOWED_SYSCALLS.values() for n in names}
    assert not allowed & denied
    for name in ("io_uring_setup", "ptrace", "process_vm_writev", "mount", "unshare",
                 "keyctl", "bpf", "modify_ldt", "socket", "clone", "personality"):  # fmt: skip
        assert name not in allowed, name
    for name in ("read", "openat", "execve", "futex", "epoll_pwait", "getrandom", "statx"):
        assert name in allowed, name
    conditional = {r["names"][0]: r for r in profile["syscalls"] if "args" in r}
    clone = conditional["clone"]["args"][0]  # no CLONE_NEW* flag
    assert clone["op"] == "SCMP_CMP_MASKED_EQ" and clone["value"] == 0x7E020000
    assert clone["valueTwo"] == 0
    sockets = {r["args"][0]["value"] for r in profile["syscalls"] if r["names"] == ["socket"]}
    assert sockets == {1, 2, 10, 16}
    assert config()["linux"]["seccomp"] == profile
