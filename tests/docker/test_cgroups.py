"""A cgroup per container (``cgroups.make_parent``): the path every OCI container takes where
no slot holds it, and the only one on cgroup v2. Our cgroup, the container's parent, holds
its memory limit and outlives the runtime's own: it says whether the OOM killer struck, and
then nothing of the container is left. The v2 counterpart of ``test_slots.py``; run on both
kinds of host (here, slots off), for crun and runc, as root and (``test_nonroot``) as a
docker-group user."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gradebox.sandbox import cgroups
from gradebox.sandbox.base import SandboxSpec, Started
from gradebox.sandbox.defaults import Limits
from gradebox.sandbox.oci import OciSandbox

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module", params=["crun", "runc"])
def per_container(request, engine, monkeypatch_module):
    monkeypatch_module.setenv("GRADEBOX_OCI_SLOTS", "off")  # v1: the path v2 always takes
    box = OciSandbox(engine, runtime=request.param)
    assert box.slots is None
    yield box
    box.close()


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def _mine(box: OciSandbox) -> list[Path]:
    """Our containers' cgroups this sandbox still has."""
    prefix = f"gradebox-{os.getpid()}-{box.session}-"
    return [p for parent in cgroups.parents(box.cgroup_parent) if parent.is_dir()
            for p in parent.iterdir() if p.name.startswith(prefix)]  # fmt: skip


def _host_cgroup(pid: int) -> Path:
    """The cgroup folder of a process, as the host sees it (the memory hierarchy on v1)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if cgroups.unified() and controllers == "":
            return cgroups.ROOT / path.lstrip("/")
        if "memory" in controllers.split(","):
            return cgroups.MEMCG_ROOT / path.lstrip("/")
    raise AssertionError(f"no memory cgroup for {pid}")


def test_each_grader_has_its_own_limits_on_our_cgroup_and_nothing_is_left(
    per_container, python_image
):
    """Read from the host while the grader runs: the container's cgroup is a leaf under ours,
    ours holds the memory limit (no swap), the leaf the pids limit; after the run neither is
    there."""
    seen: dict[str, str] = {}

    def look(started: Started) -> None:
        leaf = _host_cgroup(started.pid)
        parent = leaf.parent
        seen["leaf"], seen["parent"] = leaf.name, str(parent)
        if cgroups.unified():
            seen["memory"] = (parent / "memory.max").read_text().strip()
            swap = parent / "memory.swap.max"
            seen["swap"] = swap.read_text().strip() if swap.exists() else "0"
            seen["pids"] = (leaf / "pids.max").read_text().strip()
        else:
            seen["memory"] = (parent / "memory.limit_in_bytes").read_text().strip()
            seen["swap"] = "0"
            pids = cgroups.ROOT / "pids" / leaf.relative_to(cgroups.MEMCG_ROOT) / "pids.max"
            seen["pids"] = pids.read_text().strip()

    out = per_container.run(SandboxSpec(
        image=python_image, command=["true"], timeout=60, name="cg-limits",
        limits=Limits(memory=96 << 20, pids=23), on_start=look,
    ))  # fmt: skip
    assert out.exit_code == 0, out
    assert seen["leaf"] == "c" and Path(seen["parent"]).name.startswith("gradebox-"), seen
    assert (seen["memory"], seen["swap"], seen["pids"]) == (str(96 << 20), "0", "23"), seen
    per_container.drain()
    assert not _mine(per_container), _mine(per_container)


def test_the_oom_killer_is_read_from_our_cgroup_after_the_runtime_removed_its_own(
    per_container, python_image
):
    """No ``run --keep`` (Debian 12's crun has none): the kill is counted in our cgroup."""
    out = per_container.run(SandboxSpec(
        image=python_image, command=["python3", "-c", "x = bytearray(400 << 20)"],
        timeout=60, name="cg-oom", limits=Limits(memory=64 << 20),
    ))  # fmt: skip
    assert out.oom_killed, out
    control = per_container.run(SandboxSpec(
        image=python_image, command=["/bin/sh", "-c", "kill -9 $$"], timeout=60,
        name="cg-kill", limits=Limits(memory=64 << 20),
    ))  # fmt: skip
    assert control.exit_code == 137 and not control.oom_killed, control
    per_container.drain()
    assert not _mine(per_container), _mine(per_container)


def test_processes_a_grader_left_behind_do_not_outlive_it(per_container, python_image):
    """Daemons of every kind (a new session, double forked, ignoring SIGTERM) go with the
    container: its cgroup is empty and gone once the run returns."""
    out = per_container.run(SandboxSpec(
        image=python_image, timeout=60, name="cg-daemons",
        command=["/bin/sh", "-c", "setsid sleep 600 & (trap '' TERM; sleep 600 &) & "
                 "nohup sleep 600 >/dev/null 2>&1 & echo started"],
    ))  # fmt: skip
    assert out.stdout.strip() == b"started", out
    per_container.drain()
    assert not _mine(per_container), _mine(per_container)
    sleeping = subprocess.run(["pgrep", "-f", "^sleep 600$"], capture_output=True, text=True)
    owners = [pid for pid in sleeping.stdout.split() if _started_by(int(pid), per_container)]
    assert not owners, owners


def _started_by(pid: int, box: OciSandbox) -> bool:
    try:
        return f"gradebox-{os.getpid()}-{box.session}-" in Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False


def _running(pid: int) -> bool:
    """Does a container of the runner ``pid`` run in its leaf under our cgroup?"""
    root = cgroups.ROOT if cgroups.unified() else cgroups.MEMCG_ROOT
    leaves = [*root.glob(f"gradebox*/gradebox-{pid}-*/c/cgroup.procs"),
              *root.glob(f"**/gradebox-*/gradebox-{pid}-*/c/cgroup.procs")]  # fmt: skip
    return any(leaf.read_text().split() for leaf in leaves)


_RUNNER = """
import sys
from gradebox.sandbox.base import SandboxSpec
from gradebox.sandbox.oci import OciSandbox
box = OciSandbox(runtime=sys.argv[2])
prepared = box.prepare(SandboxSpec(image=sys.argv[1], command=["sleep", "300"], timeout=300))
print("ready", flush=True)
prepared.execute()
"""


@pytest.mark.parametrize("runtime", ["crun", "runc"])
def test_a_runner_killed_with_sigkill_leaves_nothing_once_gc_runs(
    runtime, python_image, engine, monkeypatch
):
    """A bare library user, no watchdog: ``gradebox gc`` kills the container and removes its
    cgroups and state."""
    from gradebox.sandbox.oci import collect_garbage
    from tests.conftest import leftovers_of

    monkeypatch.setenv("GRADEBOX_OCI_SLOTS", "off")
    proc = subprocess.Popen([sys.executable, "-c", _RUNNER, python_image, runtime],
                            stdout=subprocess.PIPE, start_new_session=True)  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ready\n"
    deadline = time.monotonic() + 30
    while not _running(proc.pid):  # its container is up, in its cgroup (not still starting)
        assert time.monotonic() < deadline, "the container never ran in a cgroup of ours"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert leftovers_of(engine, proc.pid), "nothing to collect: the test proves nothing"
    collect_garbage(owner=proc.pid)
    assert not leftovers_of(engine, proc.pid), leftovers_of(engine, proc.pid)
