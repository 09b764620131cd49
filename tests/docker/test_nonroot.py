"""Every promise without root (issue 23): the sandbox conformance suite, the attack battery and
the model proxy's tests run again as an unprivileged member of the ``docker`` group.

Run as root (CI), this module makes that user once (``useradd``, with ``/etc/subuid`` and
``/etc/subgid`` ranges: the documented prerequisite), and runs a pytest of those modules as
that user, on the same interpreter and packages. Run as anyone else, the suite itself is
already the unprivileged run: these tests say so and pass nothing off as run.

The subset (kept small: the whole suite must stay well under 15 minutes): every conformance
check on both backends, cold (the warm variants differ only in when the container starts);
every seccomp family probe; the attack battery's limits, isolation and private-file tests on
both backends; the model-proxy tests on both backends (the proxy and nothing else reached,
the SDKs through it, two graders' proxies apart; not the flood and queue tests, whose proxy
is the same code as root's, nor the suite-level LLM tests, which run nothing the proxy tests
do not); the SIGKILLed `exec` whose watchdog sweeps (its user's own containers and
folders only, on both backends).

Left out, because it does not hold without root (docs/non-root.md says so):
``test_an_rw_grader_cannot_fill_the_host_disk``. A ``workspace: rw`` grader's private copy is
size-limited by a tmpfs only root can mount; without root it is a plain copy on the host's
disk, bounded per file by ``limits.file_size`` only.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from gradebox.sandbox import cgroups

pytestmark = pytest.mark.docker

USER = os.environ.get("GRADEBOX_TEST_USER", "gbxtest")
ROOT = Path(__file__).resolve().parents[2]

# (module, -k expression or None): what runs again as the unprivileged user.
SUBSET = [
    ("tests/docker/test_conformance.py", "cold or family or report_never"),
    (
        "tests/docker/test_adversarial.py",
        "timeout or sigterm or fork_bomb or 3_gib or gigabyte or loopback or uid_cap "
        "or readable_by_the_sandbox_user or quota or pid1 "
        "or forges or unwritable",
    ),
    ("tests/docker/test_llm.py", "reaches_its_proxy or sdk or apart"),
    ("tests/docker/test_exec.py", "sigkill"),  # the watchdog's sweep, rootless and via docker
    ("tests/docker/test_slots.py", None),  # slots in the user's delegated cgroups (v1)
    ("tests/docker/test_cgroups.py", None),  # a cgroup per container (v1 slots off, and v2)
    ("tests/docker/test_doctor.py", None),  # what the machine gives this user, said true
    ("tests/docker/test_remote_repos.py", None),  # the repositories' cache: the user's own
    ("tests/docker/test_cli_judge.py", "proxy or network"),  # a command judge, its one door
]


def _as_user(argv: list[str], **kw) -> subprocess.CompletedProcess[str]:
    if not cgroups.unified():
        return subprocess.run(["runuser", "-u", USER, "--", *argv], text=True, **kw)
    # cgroup v2: as a user logs in (ssh, a console), through PAM, so that the process sits in
    # a session scope of the system's and the user's systemd runs: what gradebox meets there.
    cwd = kw.pop("cwd", None)
    line = shlex.join(argv) if cwd is None else f"cd {shlex.quote(str(cwd))} && {shlex.join(argv)}"
    return subprocess.run(["runuser", "-l", USER, "-c", line], text=True, **kw)


@pytest.fixture(scope="module")
def unprivileged() -> tuple[str, Path]:
    """The test user (made if missing) and a venv it can run: our packages, its own python."""
    if os.geteuid() != 0:
        pytest.skip("this run is itself unprivileged: the modules above ran as this user")
    if subprocess.run(["id", USER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "-m", "-G", "docker", "-s", "/bin/sh", USER], check=True)
    for path, flag in (("/etc/subuid", "--add-subuids"), ("/etc/subgid", "--add-subgids")):
        text = Path(path).read_text() if Path(path).exists() else ""
        if not any(line.startswith(f"{USER}:") for line in text.splitlines()):
            subprocess.run(["usermod", flag, "100000-165535", USER], check=True)
    missing = [t for t in ("newuidmap", "newgidmap", "runuser") if shutil.which(t) is None]
    assert not missing, f"missing {missing}: apt-get install uidmap"
    # The runner's interpreter may live where the user cannot go (pyenv under /root): then a
    # venv of the system's python of the same version, seeing our packages through a .pth.
    python = Path(sys.executable)
    if _as_user(["test", "-x", str(python)]).returncode != 0:
        base = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
        assert base.exists(), f"the test user cannot run {python}, and there is no {base}"
        venv = Path(f"/tmp/gradebox-test-venv-{USER}")
        if not (venv / "bin" / "python").exists():
            subprocess.run([str(base), "-m", "venv", "--without-pip", str(venv)], check=True)
        site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
        (site / "site-packages" / "gradebox-test.pth").write_text(
            f"{ROOT / 'src'}\n{sysconfig.get_paths()['purelib']}\n"
        )
        python = venv / "bin" / "python"
    return USER, python


@pytest.mark.parametrize("module,select", SUBSET, ids=[Path(m).stem for m, _ in SUBSET])
def test_the_same_promises_hold_for_an_unprivileged_user(unprivileged, module, select):
    user, python = unprivileged
    env = {k: v for k, v in os.environ.items() if k.startswith(("GRADEBOX_IMAGE", "DOCKER_"))}
    # The user's own cache and runtime state (it cannot use root's, and must not).
    env.update(PATH="/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", LANG="C.UTF-8")
    if cgroups.unified():  # the login's runtime folder: the user's systemd is reached there
        env.update(XDG_RUNTIME_DIR=f"/run/user/{pwd.getpwnam(user).pw_uid}")
    argv = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), f"HOME={pwd.getpwnam(user).pw_dir}",
            str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", module,
            *(["-k", select] if select else [])]  # fmt: skip
    started = time.time()
    done = _as_user(argv, cwd=ROOT, capture_output=True, timeout=900)
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-30:])
    assert done.returncode == 0, f"as {user}:\n{tail}"
    assert " passed" in tail, tail
    # Nothing of those runs outlived them: no scratch folder of the user's (the sealed input
    # folder, 0500, kept 80 of them here once, when only root could empty it).
    uid = pwd.getpwnam(user).pw_uid
    left = [
        p.name for p in Path("/tmp").glob("gradebox-[0-9]*")  # the user runs with no TMPDIR
        if p.lstat().st_uid == uid and p.lstat().st_mtime >= started
    ]  # fmt: skip
    assert left == [], left
