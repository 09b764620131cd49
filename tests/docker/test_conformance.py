"""The sandbox conformance suite, run against every isolated backend (Docker and OCI)."""

import pytest

from gradebox.sandbox.self_check import CHECKS, self_check

pytestmark = pytest.mark.docker

# Checks each backend is known to fail, with the reason. Empty for Docker and OCI.
KNOWN_FAILURES: dict[str, dict[str, str]] = {"docker": {}, "oci": {}}


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
@pytest.mark.parametrize("name", list(CHECKS))
def test_backend_conforms(sandbox, python_image, name, warm):
    result = self_check(sandbox, python_image, only=[name], warm=warm)[name]
    if name in KNOWN_FAILURES[sandbox.name]:
        assert result is not True, f"{name} passes now: drop it from KNOWN_FAILURES"
    else:
        assert result is True, result


def test_report_never_raises(box, python_image):
    report = self_check(box, "sha256:" + "0" * 64, only=["stdout_and_exit_code"])
    assert report["stdout_and_exit_code"].startswith("FAILED")


# The host backend isolates nothing; these are the checks it fails, and why. Every other
# check (exit codes, streams, stdin, env, timeouts that kill children, output caps) it passes.
HOST_KNOWN_FAILURES = {
    "runs_as_non_root": "runs as whoever runs gradebox",
    "no_capabilities": "keeps the caller's capabilities",
    "root_fs_is_read_only": "the host filesystem is writable",
    "read_only_mount_is_unwritable": "no mounts: paths are translated, not protected",
    "network_is_loopback_only": "the host's network",
    "memory_limit_kills": "no memory limit",
    "pids_limit_holds": "no pids limit",
    "file_size_limit_holds": "no file-size limit",
    "no_docker_socket": "the host's docker socket is visible",
    "read_write_mount_is_writable": "paths inside a shell string are not translated",
    "prepared_waits_for_release": "paths inside a shell string are not translated",
    "seccomp_denies_escape_syscalls": "no seccomp filter",
    "init_is_out_of_reach": "PID 1 is the machine's own",
    "scratch_is_not_executable": "the host's /tmp runs programs",
}
# Not even attempted on the host: they would load the machine itself, or reach for its PID 1.
HOST_NOT_RUN = {"memory_limit_kills", "pids_limit_holds", "init_is_out_of_reach"}


@pytest.mark.parametrize("name", list(CHECKS))
def test_host_backend_is_honest_about_what_it_lacks(name):
    from gradebox.sandbox import get_sandbox

    if name in HOST_NOT_RUN:
        assert name in HOST_KNOWN_FAILURES
        return
    result = self_check(get_sandbox("host"), "host", only=[name])[name]
    if name in HOST_KNOWN_FAILURES:
        assert result is not True, f"{name} passes on the host backend now: update the list"
    else:
        assert result is True, result


# One probe per family the seccomp profile denies (x86_64 numbers), on both backends: each
# must come back EPERM from the filter, whatever the kernel would have said.
FAMILY_PROBES = {
    "mount": (165, (0, 0, 0, 0, 0)),
    "namespaces": (308, (-1, 0)),  # setns
    "keyring": (250, (0, -3, 0)),  # keyctl(GET_KEYRING_ID, session)
    "bpf": (321, (0, 0, 0)),
    "tracing": (101, (0, 0, 0, 0)),  # ptrace(TRACEME): allowed to anyone without seccomp
    "io_uring": (425, (4, 0)),  # io_uring_setup: EFAULT without seccomp
    "perf": (298, (0, 0, -1, -1, 0)),
    "modules": (175, (0, 0, 0)),  # init_module
    "kexec": (246, (0, 0, 0, 0)),
    "clock": (227, (0, 0)),  # clock_settime
    "hostname": (170, (0, 0)),  # sethostname
    "reboot": (169, (0, 0, 0, 0)),
    "swap": (167, (0, 0)),  # swapon
    "accounting": (163, (0,)),  # acct
    "handles": (303, (-100, 0, 0, 0, 0)),  # name_to_handle_at: EFAULT without seccomp
    "fanotify": (300, (0, 0)),  # fanotify_init
    "io-ports": (172, (0,)),  # iopl
    "ldt": (154, (0, 0, 0)),  # modify_ldt(read): allowed to anyone without seccomp
    "kernel-log": (103, (0, 0, 0)),  # syslog
    "terminals": (153, ()),  # vhangup
    "userfaultfd": (323, (0,)),
    "numa": (239, (0, 0, 0, 0, 0)),  # get_mempolicy: allowed to anyone without seccomp
    "obsolete": (134, (0,)),  # uselib
}


def test_every_denied_family_has_a_probe():
    from gradebox.sandbox.seccomp import DENIED_SYSCALLS

    assert set(FAMILY_PROBES) == set(DENIED_SYSCALLS)


@pytest.fixture(scope="module")
def family_probe(sandbox, python_image):
    import json
    import platform

    from gradebox.sandbox import SandboxSpec

    assert platform.machine() == "x86_64", "the probe's syscall numbers are x86_64's"
    code = (
        "import ctypes, json\nlibc = ctypes.CDLL(None, use_errno=True)\nout = {}\n"
        f"for fam, (nr, args) in {FAMILY_PROBES!r}.items():\n"
        "    rc = libc.syscall(ctypes.c_long(nr), *(ctypes.c_long(a) for a in args))\n"
        "    out[fam] = ctypes.get_errno() if rc == -1 else 0\n"
        "print(json.dumps(out))\n"
    )
    out = sandbox.run(SandboxSpec(image=python_image, command=["python3", "-c", code], name="p"))
    assert out.exit_code == 0, out
    return json.loads(out.stdout)


@pytest.mark.parametrize("family", list(FAMILY_PROBES))
def test_seccomp_denies_each_family(family_probe, family):
    assert family_probe[family] == 1, f"{family}: errno {family_probe[family]}, not EPERM"
