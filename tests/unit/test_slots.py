"""The slot pool's pure parts and its server's protocol, without cgroups (the hostile tests of
slots in real cgroups are tests/docker/test_slots.py)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gradebox.sandbox import slots
from gradebox.sandbox.defaults import Limits
from gradebox.sandbox.slots import HELD, SERVER, Slot, SlotProcess, slots_unusable


def _bare_slot(tmp_path: Path, server: object = None) -> Slot:
    """A Slot whose 'cgroups' are plain folders (limits and counters as files)."""
    slot = Slot.__new__(Slot)
    slot.name, slot.limits, slot.broken, slot._ready = "s0", {}, None, True
    slot._running, slot._oom_base, slot.server = None, 0, server
    slot.paths = {h: tmp_path / h for h in ("memory", "pids", "cpu")}
    for path in slot.paths.values():
        path.mkdir()
        (path / "cgroup.procs").write_text("")
    for name in ("memory/memory.limit_in_bytes", "memory/memory.memsw.limit_in_bytes",
                 "pids/pids.max", "cpu/cpu.cfs_quota_us", "cpu/cpu.cfs_period_us"):  # fmt: skip
        (tmp_path / name).write_text("")
    return slot


def test_limits_are_written_and_only_those_that_change(tmp_path, monkeypatch):
    slot = _bare_slot(tmp_path)
    writes: list[tuple[str, str]] = []
    real = slots.write

    def spy(path: Path, value: str) -> None:
        writes.append((path.name, value))
        real(path, value)

    monkeypatch.setattr(slots, "write", spy)
    slot.apply(Limits(memory=256 << 20, pids=64, cpus=1.5))
    assert (slot.paths["pids"] / "pids.max").read_text() == str(64 + HELD)
    assert (slot.paths["cpu"] / "cpu.cfs_quota_us").read_text() == "150000"
    assert (slot.paths["memory"] / "memory.limit_in_bytes").read_text() == str(256 << 20)
    assert (slot.paths["memory"] / "memory.memsw.limit_in_bytes").read_text() == str(256 << 20)
    writes.clear()
    slot.apply(Limits(memory=256 << 20, pids=64, cpus=1.5))
    assert writes == [], "unchanged limits written again"
    slot.apply(Limits(memory=128 << 20, pids=64, cpus=1.5))
    # Lowered: memory before memory+swap (memsw may never be under memory).
    assert [w[0] for w in writes] == ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
    writes.clear()
    slot.apply(Limits(memory=512 << 20, pids=64, cpus=1.5))
    assert [w[0] for w in writes] == ["memory.memsw.limit_in_bytes", "memory.limit_in_bytes"]


def test_the_oom_verdict_counts_only_kills_since_the_container_started(tmp_path):
    slot = _bare_slot(tmp_path)
    control = slot.paths["memory"] / "memory.oom_control"
    control.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    slot._oom_base = slot.oom_kills()
    assert slot._oom_base == 3 and not slot.oom_killed()
    control.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 4\n")
    assert slot.oom_killed()
    control.write_text("garbage")
    assert slot.oom_kills() == 0


def test_a_slot_with_a_stray_process_is_not_reused(tmp_path, monkeypatch):
    class Alive:
        pid = 1

        def poll(self):
            return None

    slot = _bare_slot(tmp_path, Alive())
    monkeypatch.setattr(slot, "kill_all", lambda: None)  # a process no kill removes
    (slot.paths["pids"] / "cgroup.procs").write_text("1\n4242\n")
    started = time.monotonic()
    assert slot.recycle() is False
    assert time.monotonic() - started < 5
    (slot.paths["pids"] / "cgroup.procs").write_text("1\n")
    assert slot.recycle() is True
    slot.broken = "its server is gone"
    assert slot.recycle() is False


@pytest.mark.parametrize(
    "env,runtime,why",
    [({"GRADEBOX_OCI_SLOTS": "off"}, "crun", "GRADEBOX_OCI_SLOTS=off"),
     ({}, "runc", "runc has no disabled cgroup manager")],
)  # fmt: skip
def test_where_slots_are_not_used_says_why(monkeypatch, env, runtime, why):
    monkeypatch.delenv("GRADEBOX_OCI_SLOTS", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert slots_unusable(runtime, False) == why


# -- the server's protocol, as a script, with no cgroup to enter ------------------------------


@pytest.fixture
def server():
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    proc = subprocess.Popen([sys.executable, "-I", "-S", SERVER, str(theirs.fileno()), "0", "0"],
                            pass_fds=(theirs.fileno(),))  # fmt: skip
    theirs.close()
    slot = Slot.__new__(Slot)
    slot.name, slot.sock, slot.server, slot.broken = "unit", ours, proc, None
    slot._ready, slot._running, slot._oom_base = False, None, 0
    slot.paths = {"memory": Path("/nonexistent")}
    try:
        yield slot
    finally:
        ours.close()
        proc.wait(timeout=10)


def _run(slot: Slot, argv: list[str], stdin: bytes = b"") -> tuple[int, bytes, bytes]:
    proc: SlotProcess = slot.popen(argv)
    proc.stdin.write(stdin)
    proc.stdin.close()
    out, err = proc.stdout.read(), proc.stderr.read()
    return proc.wait(timeout=10), out, err


def test_the_server_runs_a_program_with_our_pipes_and_says_its_code(server):
    code, out, err = _run(server, ["/bin/sh", "-c", "cat; echo err >&2; exit 3"], b"in")
    assert (code, out, err) == (3, b"in", b"err\n")
    code, _, _ = _run(server, ["/bin/sh", "-c", "kill -9 $$"])
    assert code == -signal.SIGKILL
    # SIGPIPE is back to its default in what it starts (Python ignores it).
    code, out, _ = _run(server, ["/bin/grep", "^SigIgn:", "/proc/self/status"])
    assert code == 0 and not int(out.split()[1], 16) & (1 << (signal.SIGPIPE - 1)), out


def test_a_program_that_cannot_start_is_an_error_and_the_slot_lives_on(server):
    from gradebox.errors import GradeboxError

    with pytest.raises(GradeboxError, match="No such file"):
        server.popen(["/nonexistent/crun", "run"])
    assert server.broken is None
    assert _run(server, ["/bin/true"])[0] == 0


def test_the_server_ends_with_its_runner_and_kills_what_it_started(server):
    proc = server.popen(["/bin/sleep", "300"])
    server.sock.close()  # the runner is gone
    server.server.wait(timeout=10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(proc.pid, 0)
        except ProcessLookupError:
            break
        try:  # a zombie is gone as a process; it may also be reaped between the two looks
            if Path(f"/proc/{proc.pid}/stat").read_text().split()[2] == "Z":
                break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("what the server started outlived its runner")


def _fd_targets(out: bytes) -> list[str]:
    return out.decode().split()


# What the started program has on fds 0-4 (the command substitution runs in a child: the
# shell's own fds are read), and whether it has a 6th.
_SHOW_FDS = [
    "/bin/sh",
    "-c",
    "[ -e /proc/$$/fd/5 ] && x=extra || x=none;"
    ' for i in 0 1 2 3 4; do x="$x $(readlink /proc/$$/fd/$i)"; done; echo $x >&4',
]


def test_the_server_places_a_report_fd_and_the_pipes_on_3_and_4(server, tmp_path):
    report = os.open(tmp_path / "report", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        proc: SlotProcess = server.popen(_SHOW_FDS, report=report)
    finally:
        os.close(report)
    proc.stdin.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=10) == 0
    extra, *targets = _fd_targets(err)
    # stdin a pipe, 1 and 2 the report, 3 and 4 our stdout and stderr pipes, nothing else.
    assert targets[1] == targets[2] == str(tmp_path / "report"), targets
    assert all(targets[i].startswith("pipe:") for i in (0, 3, 4)), targets
    assert len(set(targets)) == 4 and extra == "none", (extra, targets)
    assert proc.stdout.read() == b""


_PLACE = """
import os, sys
from gradebox.sandbox._slot_server import _placed
folder, low = sys.argv[1], int(sys.argv[2])
for fd in range(3, 10):  # a process of its own: its low fds are ours to take
    try:
        os.close(fd)
    except OSError:
        pass
files = [os.open(f"{folder}/f{i}", os.O_WRONLY | os.O_CREAT, 0o600) for i in range(5)]
fds = [os.dup2(fd, 100 + i) for i, fd in enumerate(files)]
for fd in files:
    os.close(fd)
os.dup2(fds[3], low)  # fds[3] arrives as 3 or 4: a number two others go to
os.close(fds[3])
fds[3] = low
pid = os.posix_spawn("/bin/sh", ["/bin/sh", "-c", "for i in 0 1 2 3 4; do echo $i >&$i; done"],
                     os.environ, file_actions=_placed(fds))
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


@pytest.mark.parametrize("low", [3, 4])
def test_fds_that_arrive_on_the_numbers_they_go_to_are_not_overwritten(tmp_path, low):
    """The server received the runtime's fds with whatever numbers were free; one of them may
    be 3 or 4, the very fds two others go to. Placed in order, it would be lost."""
    subprocess.run([sys.executable, "-c", _PLACE, str(tmp_path), str(low)], check=True)
    assert [(tmp_path / f"f{i}").read_text() for i in range(5)] == [f"{i}\n" for i in range(5)]
