"""Cgroup slots (``sandbox/slots.py``): what one grader does to its slot, the next grader in
the same slot never sees. Each test runs a hostile grader, then a probe in the very slot it
used (checked by the slot's name in the probe's own ``/proc/self/cgroup``), and the probe must
get its whole budget back: processes, memory, counters, limits. Root and, through
``test_nonroot``, a docker-group user."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gradebox.sandbox import cgroups
from gradebox.sandbox.base import SandboxSpec
from gradebox.sandbox.defaults import Limits
from gradebox.sandbox.oci import OciSandbox
from gradebox.sandbox.slots import HELD

pytestmark = [
    pytest.mark.docker,
    # Said, not silent: slots are a cgroup v1 device. On v2 crun places each container into
    # its own cgroup itself, and tests/docker/test_cgroups.py checks that path the same way.
    pytest.mark.skipif(cgroups.unified(), reason="cgroup v2 has no slots: test_cgroups.py"),
]


def _crun_or_fail() -> None:
    if shutil.which("crun") is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("crun is not installed: `make images` installs it")
        pytest.skip("crun is not installed")


@pytest.fixture
def slotted(python_image):
    _crun_or_fail()
    box = OciSandbox(runtime="crun")
    if box.slots is None:
        box.close()
        pytest.fail(f"crun on this host starts no container from a slot: {box.slots_off}")
    try:
        yield box
    finally:
        box.close()


def _sh(box, image, script, **limits) -> tuple[object, str]:
    """Run ``script``; its outcome and the slot it ran in (from its own cgroup file)."""
    out = box.run(
        SandboxSpec(
            image=image,
            command=["/bin/sh", "-c", f"grep :memory: /proc/self/cgroup >&2; {script}"],
            limits=Limits(**limits) if limits else Limits(),
            timeout=60,
            name="slot-test",
        )
    )
    first = out.stderr.decode(errors="replace").splitlines()[:1]
    return out, first[0].rsplit("/", 1)[-1] if first else ""


def _only_slot(box) -> None:
    """Leave the pool one free slot, so that the next two runs share it."""
    pool = box.slots
    assert pool is not None
    with pool._lock:
        keep, extra = pool._free[:1], pool._free[1:]
        pool._free = keep
    for slot in extra:
        pool._retire(slot)


def test_a_slot_starts_the_init_itself_with_the_channel_as_its_stdout(slotted, python_image):
    """No entry shell: crun is handed the report channel as its stdout and stderr and the
    command's own on 3 and 4; the command gets exactly 0-2 (the gate closed 3 and 4), and
    nothing is bound at the report path. (A subshell writes the listing to a file: in a
    pipeline the shell itself holds the pipe's ends, as fds 3 and 4, while `ls` may already be
    reading.)"""
    from gradebox.sandbox.gate import INIT_PATH, REPORT_PATH

    out, _ = _sh(slotted, python_image,
                 "tr '\\0' '\\n' < /proc/1/cmdline | head -3 | tr '\\n' ' '; echo;"
                 " (ls /proc/$$/fd > /tmp/fds); tr '\\n' ' ' < /tmp/fds; echo;"
                 f" [ -e {REPORT_PATH} ] && echo bound || echo unbound; kill -9 $$")  # fmt: skip
    cmdline, fds, bound = out.stdout.decode().splitlines()
    assert cmdline.split()[:3] == [INIT_PATH, "--", "/bin/sh"], cmdline
    assert bound == "unbound", bound
    assert fds.split() == ["0", "1", "2", "255"] or fds.split() == ["0", "1", "2"], fds
    # The init still says how the command ended on the channel: a SIGKILL, not an exit 137.
    assert out.signal == signal.SIGKILL and out.exit_code == 137, out


def test_processes_a_grader_leaves_are_gone_before_the_next(slotted, python_image):
    _only_slot(slotted)
    # Daemons of every kind: backgrounded, detached in a new session, double-forked.
    first, slot = _sh(
        slotted, python_image,
        "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 300 & done; setsid sleep 300 & "
        "(sh -c 'sleep 300 &' &); exit 0",
        pids=24,
    )  # fmt: skip
    assert first.exit_code == 0 and slot.endswith(tuple(f"s{i}" for i in range(99))), first
    pool = slotted.slots
    assert all(not s.strays() for s in pool._all), "processes left in a free slot"
    # Under the same 24: 20 processes fit only if none of the first grader's 13 is counted.
    second, again = _sh(
        slotted, python_image,
        "for i in $(seq 20); do sleep 1 & done; echo spawned", pids=24,
    )  # fmt: skip
    assert again == slot, (slot, again)
    assert second.exit_code == 0 and b"spawned" in second.stdout, second
    assert b"fork" not in second.stderr.lower(), second.stderr


def test_a_fork_bomb_leaves_the_next_grader_its_whole_pids_budget(slotted, python_image):
    _only_slot(slotted)
    bomb, slot = _sh(slotted, python_image, "b() { b | b & }; b; sleep 2", pids=32)
    assert bomb.exit_code != 0 or b"fork" in (bomb.stdout + bomb.stderr).lower()
    probe, again = _sh(
        slotted, python_image,
        "for i in $(seq 28); do sleep 1 & done; echo spawned", pids=32,
    )  # fmt: skip
    assert again == slot
    assert b"spawned" in probe.stdout and b"fork" not in probe.stderr.lower(), probe


def test_memory_a_grader_filled_is_the_next_graders_again(slotted, python_image):
    _only_slot(slotted)
    hog, slot = _sh(slotted, python_image,
                    "exec python3 -c 'x = bytearray(3 << 30)'", memory=256 << 20)  # fmt: skip
    assert hog.exit_code == 137 and hog.oom_killed, hog
    pool = slotted.slots
    mem = next(s for s in pool._all if s.name == slot).paths["memory"]
    peak = int((mem / "memory.max_usage_in_bytes").read_text())
    assert peak < 128 << 20, f"the hog's peak ({peak}) still counted in the free slot"
    assert int((mem / "memory.failcnt").read_text()) == 0
    # 200 MiB under the same 256 MiB: fits only if nothing of the hog's is still charged, and
    # is no OOM kill (the slot's oom_kill counter is read against its own start).
    probe, again = _sh(slotted, python_image,
                       "python3 -c 'x = bytearray(200 << 20); print(len(x))'",
                       memory=256 << 20)  # fmt: skip
    assert again == slot
    assert probe.exit_code == 0 and b"209715200" in probe.stdout, probe
    assert not probe.oom_killed


def test_each_grader_gets_its_own_limits_in_a_reused_slot(slotted, python_image):
    _only_slot(slotted)
    big, slot = _sh(slotted, python_image,
                    "python3 -c 'x = bytearray(300 << 20); print(len(x))'",
                    memory=512 << 20, pids=64, cpus=2)  # fmt: skip
    assert big.exit_code == 0, big
    # Lower now: the 512 MiB the last grader had must not be this one's.
    small, again = _sh(slotted, python_image,
                       "exec python3 -c 'x = bytearray(300 << 20); print(len(x))'",
                       memory=128 << 20, pids=16, cpus=0.5)  # fmt: skip
    assert again == slot
    assert small.exit_code == 137 and small.oom_killed, small
    s = next(s for s in slotted.slots._all if s.name == slot)
    assert int((s.paths["pids"] / "pids.max").read_text()) == 16 + HELD
    assert int((s.paths["cpu"] / "cpu.cfs_quota_us").read_text()) == 50_000
    assert int((s.paths["memory"] / "memory.limit_in_bytes").read_text()) == 128 << 20


def test_a_grader_that_still_runs_at_its_timeout_leaves_a_clean_slot(slotted, python_image):
    _only_slot(slotted)
    out = slotted.run(
        SandboxSpec(
            image=python_image,
            command=["/bin/sh", "-c", "trap '' TERM; sleep 300 & sleep 300"],
            timeout=1,
            name="slot-test",
        )  # fmt: skip
    )
    assert out.timed_out
    assert all(not s.strays() for s in slotted.slots._all)
    probe, _ = _sh(slotted, python_image, "echo fine")
    assert probe.exit_code == 0 and b"fine" in probe.stdout


def test_concurrent_graders_each_have_a_slot_of_their_own(slotted, python_image):
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        runs = list(pool.map(lambda _: _sh(slotted, python_image, "sleep 0.5; echo ok"),
                             range(4)))  # fmt: skip
    assert all(out.exit_code == 0 for out, _ in runs), runs
    assert len({slot for _, slot in runs}) == 4, [slot for _, slot in runs]


def test_a_slot_whose_server_died_is_retired_not_reused(slotted, python_image):
    _only_slot(slotted)
    _, slot = _sh(slotted, python_image, "true")
    victim = next(s for s in slotted.slots._all if s.name == slot)
    os.kill(victim.server.pid, signal.SIGKILL)
    victim.server.wait()
    out, other = _sh(slotted, python_image, "echo fine")
    assert out.exit_code == 0 and b"fine" in out.stdout, out
    assert other != slot
    assert not victim.paths["memory"].exists(), "a dead slot's cgroups were kept"


_RUNNER = """
import sys, time
from gradebox.sandbox.base import SandboxSpec
from gradebox.sandbox.oci import OciSandbox
box = OciSandbox(runtime="crun")
assert box.slots is not None, box.slots_off
prepared = box.prepare(SandboxSpec(image=sys.argv[1], command=["sleep", "300"], timeout=300))
print("ready", flush=True)
prepared.execute()
"""


def test_a_runner_killed_with_sigkill_leaves_no_slot(tmp_path, python_image, engine):
    """No watchdog here (a bare library user): the slot's server sees its runner gone and
    empties its slot; ``gradebox gc`` removes the cgroups."""
    _crun_or_fail()
    from gradebox.sandbox.oci import collect_garbage
    from tests.conftest import leftovers_of

    proc = subprocess.Popen([sys.executable, "-c", _RUNNER, python_image],
                            stdout=subprocess.PIPE, start_new_session=True)  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ready\n"
    time.sleep(0.5)
    slots = [p for p in Path("/sys/fs/cgroup/memory").glob(f"gradebox*/gradebox-{proc.pid}-*")]
    assert slots, "no slot made"
    busy = [p for p in slots if len((p / "cgroup.procs").read_text().split()) > 1]
    assert busy, "the container is not in a slot"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while any((p / "cgroup.procs").read_text().split() for p in slots if p.exists()):
        assert time.monotonic() < deadline, "the slot's processes outlived its runner"
        time.sleep(0.1)
    collect_garbage(owner=proc.pid)
    assert not leftovers_of(engine, proc.pid), leftovers_of(engine, proc.pid)


def test_page_cache_a_grader_left_is_not_charged_to_the_next(slotted, python_image, tmp_path):
    from gradebox.sandbox.base import Mount

    _only_slot(slotted)
    os.chmod(tmp_path, 0o777)
    out = slotted.run(
        SandboxSpec(image=python_image, command=["/bin/sh", "-c", "head -c 67108864 /dev/zero "
                    "> /w/big; grep :memory: /proc/self/cgroup"],
                    mounts=(Mount(tmp_path, "/w", read_only=False),), name="slot-test")
    )  # fmt: skip
    assert out.exit_code == 0, out
    slot = out.stdout.decode().strip().rsplit("/", 1)[-1]
    usage = Path("/sys/fs/cgroup/memory").glob(f"gradebox*/{slot}/memory.usage_in_bytes")
    path = next(iter(usage))
    deadline = time.monotonic() + 30
    while int(path.read_text()) > 16 << 20:  # emptied on a thread of the pool's
        assert time.monotonic() < deadline, f"{int(path.read_text())} bytes still charged"
        time.sleep(0.1)
    # Emptied, the slot rejoins the pool's free slots, not retired: it is there for the next
    # grader (the pool hands out the slot freed last, so which one a probe gets is the pool's
    # order, not this test's; under load a slot made ahead keeps coming first).
    pool = slotted.slots
    deadline = time.monotonic() + 30
    while not any(s.name == slot for s in pool._free):
        assert time.monotonic() < deadline, f"{slot} never rejoined the free slots"
        time.sleep(0.1)
    assert any(s.name == slot for s in pool._all), f"{slot} was retired"


@pytest.mark.parametrize("flags", [["--allow", "bogus"], ["--workspace", "/nonexistent"]])
def test_exec_that_fails_before_its_container_leaves_no_slot(tmp_path, engine, flags):
    """``gradebox exec`` makes its first slot before it reads anything: an exec that then
    fails (a bad flag, a missing workspace) removes it all the same."""
    _crun_or_fail()
    from tests.conftest import leftovers_of

    # `python -m gradebox`: the unprivileged user's venv (test_nonroot) has no entry script.
    proc = subprocess.Popen([sys.executable, "-m", "gradebox", "exec", *flags, "--", "true"],
                            cwd=tmp_path,
                            env={**os.environ, "GRADEBOX_RUNTIME": "crun"},
                            stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 125, err
    assert leftovers_of(engine, proc.pid) == [], leftovers_of(engine, proc.pid)


def test_memory_left_in_a_host_tmpfs_is_not_the_next_graders(slotted, python_image, tmp_path):
    """A workspace on a host tmpfs (a suite's agent workspace): what a grader writes there stays
    charged to its slot while the file exists, and no reclaim frees it without swap. The slot
    is retired, and the next grader gets its whole memory."""
    from gradebox.sandbox.base import Mount

    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs on the host needs root (the rootless rerun)")
    _only_slot(slotted)
    ws = tmp_path / "ws"
    ws.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300m,mode=0777", "gbx-test", str(ws)],
                   check=True)  # fmt: skip
    try:
        out = slotted.run(
            SandboxSpec(image=python_image, command=["/bin/sh", "-c", "head -c 200000000 "
                        "/dev/zero > /ws/blob"], mounts=(Mount(ws, "/ws", read_only=False),),
                        limits=Limits(memory=256 << 20), name="slot-test")
        )  # fmt: skip
        assert out.exit_code == 0, out
        import threading

        for thread in threading.enumerate():  # a slot this full is emptied on a thread
            if thread.name == "gradebox-slot-empty":
                thread.join(30)
        probe, _ = _sh(slotted, python_image,
                       "python3 -c 'x = bytearray(150 << 20); print(len(x))'",
                       memory=256 << 20)  # fmt: skip
        assert probe.exit_code == 0 and not probe.oom_killed, probe
    finally:
        subprocess.run(["umount", str(ws)], check=False)


def test_a_slot_server_killed_mid_run_is_an_error_not_an_exit_code(slotted, python_image):
    _only_slot(slotted)
    slot = slotted.slots._free[0]
    ready = slotted.prepare(SandboxSpec(image=python_image, command=["sleep", "30"],
                                        timeout=60, name="slot-test"))  # fmt: skip
    import threading

    threading.Timer(1.0, os.kill, (slot.server.pid, signal.SIGKILL)).start()
    started = time.monotonic()
    out = ready.execute()
    assert out.exit_code is None and out.start_error and "slot server" in out.start_error, out
    assert time.monotonic() - started < 20, "the grader ran on after its server was killed"
    assert not slot.strays()
