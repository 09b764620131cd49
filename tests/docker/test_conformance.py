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
}
# Not even attempted on the host: they would load the machine itself.
HOST_NOT_RUN = {"memory_limit_kills", "pids_limit_holds"}


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


# One probe per family the OCI backend's own seccomp profile denies (x86_64 numbers): each
# must come back EPERM from the filter, whatever the kernel would have said.
FAMILY_PROBES = {
    "mount": (165, (0, 0, 0, 0, 0)),
    "namespaces": (308, (-1, 0)),  # setns
    "keyring": (250, (0, -3, 0)),  # keyctl(GET_KEYRING_ID, session)
    "bpf": (321, (0, 0, 0)),
    "tracing": (101, (0, 0, 0, 0)),  # ptrace(TRACEME): allowed to anyone without seccomp
    "perf": (298, (0, 0, -1, -1, 0)),
    "modules": (175, (0, 0, 0)),  # init_module
    "kexec": (246, (0, 0, 0, 0)),
    "clock": (227, (0, 0)),  # clock_settime
    "reboot": (169, (0, 0, 0, 0)),
    "swap": (167, (0, 0)),  # swapon
    "accounting": (163, (0,)),  # acct
    "handles": (304, (0, 0, 0)),  # open_by_handle_at
    "io-ports": (172, (0,)),  # iopl
    "kernel-log": (103, (0, 0, 0)),  # syslog
    "terminals": (153, ()),  # vhangup
    "userfaultfd": (323, (0,)),
    "numa": (237, (0, 0, 0, 0, 0, 0)),  # mbind
    "obsolete": (134, (0,)),  # uselib
}


@pytest.fixture(scope="module")
def oci_probe(python_image):
    import json
    import platform

    from gradebox.sandbox import SandboxSpec, get_sandbox

    assert platform.machine() == "x86_64", "the probe's syscall numbers are x86_64's"
    code = (
        "import ctypes, json\nlibc = ctypes.CDLL(None, use_errno=True)\nout = {}\n"
        f"for fam, (nr, args) in {FAMILY_PROBES!r}.items():\n"
        "    rc = libc.syscall(nr, *args)\n"
        "    out[fam] = ctypes.get_errno() if rc == -1 else 0\n"
        "print(json.dumps(out))\n"
    )
    with get_sandbox("oci") as box:
        out = box.run(SandboxSpec(image=python_image, command=["python3", "-c", code], name="p"))
    return json.loads(out.stdout)


@pytest.mark.parametrize("family", list(FAMILY_PROBES))
def test_oci_seccomp_denies_each_family(oci_probe, family):
    from gradebox.sandbox.oci_config import DENIED_SYSCALLS

    assert family in DENIED_SYSCALLS
    assert oci_probe[family] == 1, f"{family}: errno {oci_probe[family]}, not EPERM"
