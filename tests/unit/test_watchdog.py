"""The runner's watchdog (sandbox/watchdog.py) and the sweep it shares with `gradebox gc`:
what it takes, what it must leave alone, and which commands get one."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from gradebox.core.scratch import collect_scratch
from gradebox.files.workspace import unmount_below
from tests.conftest import write

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")


def _mounted(path: Path) -> bool:
    return any(line.split()[4] == str(path) for line in Path("/proc/self/mountinfo").open())


@needs_root
def test_a_link_named_like_a_runners_folder_unmounts_nothing_it_points_at(tmp_path, monkeypatch):
    """Another local user links /tmp/gradebox-<pid>-x to any folder: the sweep (as root, the
    watchdog of a killed runner or `gradebox gc`) must not detach the mounts below its target."""
    tmp, target = tmp_path / "tmp", tmp_path / "target"
    (target / "m").mkdir(parents=True)
    tmp.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "gbx-test", str(target / "m")],
                   check=True)  # fmt: skip
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(tmp))
        pid = os.getpid()
        (tmp / f"gradebox-{pid}-evil").symlink_to(target)
        (tmp / "gradebox-4194304-evil").symlink_to(target)
        collect_scratch(owner=pid)
        collect_scratch()
        collect_scratch(everything=True)
        assert _mounted(target / "m")
        unmount_below(tmp / f"gradebox-{pid}-evil")  # itself follows no link either
        assert _mounted(target / "m")
    finally:
        subprocess.run(["umount", "-l", str(target / "m")], check=False)


def test_a_link_or_someone_elses_folder_is_not_the_watchdogs(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    pid = os.getpid()
    write(tmp_path / "elsewhere" / "f", "1\n")
    (tmp_path / f"gradebox-{pid}-link").symlink_to(tmp_path / "elsewhere")
    write(tmp_path / f"gradebox-{pid}-mine" / "f", "1\n")
    theirs = tmp_path / f"gradebox-{pid}-theirs"
    write(theirs / "f", "1\n")
    if os.geteuid() == 0:  # another user's folder named like ours
        os.chown(theirs, 1001, 1001)
    else:
        os.rename(theirs, tmp_path / "not-ours")
        theirs = tmp_path / "not-ours"
    assert collect_scratch(owner=pid) == [tmp_path / f"gradebox-{pid}-mine"]
    assert (tmp_path / "elsewhere" / "f").exists() and (theirs / "f").exists()


def test_names_no_runner_of_ours_makes_neither_break_the_sweep_nor_are_taken(tmp_path, monkeypatch):
    """Digits that are not ASCII ('²' is a digit to str.isdigit, not to int; '١٢٣' is 123 to
    int) and leading zeros are no pid gradebox writes: such a folder, which any local user
    may make, neither stops the sweep of the others nor is taken for runner 123's."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    pid = os.getpid()
    odd = [tmp_path / f"gradebox-{p}-x" for p in ("²", "\u0661\u0662\u0663", f"0{pid}")]
    mine = tmp_path / f"gradebox-{pid}-mine"
    for folder in (*odd, mine):
        write(folder / "f", "1\n")
    assert collect_scratch(owner=pid) == [mine]
    assert all(p.exists() for p in odd)
    dead = tmp_path / "gradebox-4194304-dead"
    write(dead / "f", "1\n")
    assert collect_scratch() == [dead]  # gc: no ValueError from '²'
    assert all(p.exists() for p in odd)


def test_container_owners_are_ascii_pids_without_leading_zeros():
    from gradebox.sandbox.labels import parse_owner
    from gradebox.sandbox.oci import _owner_pid

    assert parse_owner("h:123") == ("h", 123)
    assert parse_owner("h:²") is None
    assert parse_owner("h:0123") is None
    assert parse_owner("h:\u0661\u0662\u0663") is None
    assert _owner_pid("gradebox-123-s-n") == 123
    assert _owner_pid("gradebox-²-s-n") is None
    assert _owner_pid("gradebox-0123-s-n") is None


def _dispatched(monkeypatch, argv: list[str], code: int = 0, during=None) -> dict:
    """Run cli.main on ``argv`` with the command (exec's or the app's) replaced by one that
    returns ``code`` (after calling ``during``); what happened to the watchdog and how the
    process ended."""
    import sys

    import gradebox.cli.app
    import gradebox.cli.exec
    import gradebox.sandbox.watchdog
    from gradebox import cli

    seen: dict = {"watched": 0, "dismissed": 0, "exit": None, "hard": False, "log": []}

    def dismiss() -> None:
        seen["dismissed"] += 1
        seen["log"].append("dismissed")

    def watch():
        seen["watched"] += 1
        return dismiss

    def command(*args):
        if during is not None:
            during()
        if argv[0] == "exec":
            return code
        raise SystemExit(code)

    def exit_now(code: int) -> None:  # os._exit: not in the test's process
        seen["hard"] = True
        raise SystemExit(code)

    monkeypatch.setattr(gradebox.sandbox.watchdog, "watch", watch)
    monkeypatch.setattr(gradebox.cli.exec, "main", command)
    monkeypatch.setattr(gradebox.cli.app, "main", command)
    monkeypatch.setattr(sys, "argv", ["gradebox", *argv])
    import atexit

    at_exit: list = []
    monkeypatch.setattr(cli, "_exit_now", exit_now)
    monkeypatch.setattr(atexit, "register", lambda fn, *args: at_exit.append((fn, args)))
    # The command's threads are those it started: not what earlier tests left in this
    # process (a real `gradebox` process has no others).
    import threading

    before, enumerate_ = (
        set(threading.enumerate()) - {threading.current_thread()},
        threading.enumerate,
    )
    monkeypatch.setattr(
        threading, "enumerate", lambda: [t for t in enumerate_() if t not in before]
    )
    with pytest.raises(SystemExit) as ended:
        cli.main()
    seen["exit"] = ended.value.code
    for fn, args in at_exit:  # as the interpreter would, at its end
        fn(*args)
    return seen


@pytest.mark.parametrize(
    "argv",
    [
        ["exec", "--", "sleep", "60"],
        ["--debug", "exec", "--", "sleep", "60"],  # a root option before the command
        ["-v", "grade", "g", "--submission", "s"],
        ["--verbose", "--debug", "run", "suite.yaml"],
        ["exec", "--", "python", "grader.py", "--help"],  # the grader's --help, not ours
        ["run", "suite.yaml", "--", "--help"],
        ["assert", "my-grader", "--agent-output", "x"],  # it ran without one (issue 30)
    ],
)
def test_every_container_starting_command_gets_its_watchdog(argv, monkeypatch):
    seen = _dispatched(monkeypatch, argv)
    assert (seen["watched"], seen["dismissed"], seen["exit"]) == (1, 1, 0)


def _app_commands() -> list[str]:
    """Every command the app registers (groups by their name), read from typer itself."""
    from gradebox.cli.app import app

    names = [c.name or c.callback.__name__ for c in app.registered_commands]
    return sorted({*names, *(g.name for g in app.registered_groups)})


def test_every_registered_command_but_the_unsandboxed_is_watched(monkeypatch):
    """A command added to the app later gets the watchdog unless it is listed as starting no
    container: nothing is watched by a list of the ones that do."""
    from gradebox.cli import UNSANDBOXED

    commands = _app_commands()
    assert {"assert", "batch", "trials", "calibrate", "run", "grade", "exec"} <= set(commands)
    assert set(commands) >= UNSANDBOXED  # no stale name there
    for name in commands:
        seen = _dispatched(monkeypatch, [name])
        assert seen["watched"] == (name not in UNSANDBOXED), name


@pytest.mark.parametrize("argv", [["--version"], ["gc"], ["--debug", "gc"], ["images", "ls"]])
def test_commands_that_start_no_container_get_no_watchdog(argv, monkeypatch):
    import sys

    import gradebox.cli.app
    import gradebox.sandbox.watchdog
    from gradebox import cli

    monkeypatch.setattr(gradebox.sandbox.watchdog, "watch", lambda: pytest.fail("watched"))
    monkeypatch.setattr(gradebox.cli.app, "main", lambda: None)
    monkeypatch.setattr(sys, "argv", ["gradebox", *argv])
    with contextlib.suppress(SystemExit):
        cli.main()


@pytest.mark.parametrize("argv", [["run", "s.yaml"], ["exec", "--", "true"]])
def test_an_interrupted_command_never_dismisses_its_watchdog(argv, monkeypatch):
    """Ctrl-C or SIGTERM (exit 130): the command removed what it could, and ends at once
    without waiting for its threads; what a thread still had in flight is the watchdog's."""
    seen = _dispatched(monkeypatch, argv, code=130)
    assert (seen["watched"], seen["dismissed"], seen["exit"], seen["hard"]) == (1, 0, 130, True)


_ENDING = """
import sys, threading, time
from concurrent.futures import ThreadPoolExecutor
import gradebox.cli.app as app
import gradebox.sandbox.watchdog as watchdog
from gradebox import cli

log = open(sys.argv[1], "a")


def say(word):
    log.write(word + "\\n")
    log.flush()


def grader():
    time.sleep(0.5)
    say("thread ended")


def command():
    threading.Thread(target=grader).start()  # still running when the command returns
    ThreadPoolExecutor(2).submit(lambda: None)  # an idle worker that nobody shut down
    raise SystemExit(0)


watchdog.watch = lambda: lambda: say("dismissed")
app.main = command
sys.argv = ["gradebox", "run", "s.yaml"]
cli.main()
"""


def test_the_watchdog_is_dismissed_only_once_every_thread_has_ended(tmp_path):
    """A command that returns while a grader thread still runs (it may yet start a
    container) has not ended: its watchdog is dismissed after that thread, not before; and an
    idle executor's worker keeps nothing from ending."""
    import sys

    log = tmp_path / "log"
    p = subprocess.run([sys.executable, "-c", _ENDING, str(log)], capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert log.read_text().splitlines() == ["thread ended", "dismissed"]


class _Engine:
    def __init__(self, containers: list[dict]) -> None:
        self.listed, self.removed = containers, []

    def containers(self, filters: dict) -> list[dict]:
        return [c for c in self.listed if c["Id"] not in self.removed]

    def kill(self, cid: str) -> None:
        pass

    def remove(self, cid: str) -> bool:
        self.removed.append(cid)
        return True


def test_a_pid_is_a_runners_only_in_its_pid_namespace():
    """Two runners in containers sharing the host's name (--network host) and its engine may
    both be pid 7: the watchdog of the one killed must not remove the live other's
    containers, and gc must not judge the other's pid by a namespace it is not in."""
    import socket

    from gradebox.sandbox.docker import collect_garbage
    from gradebox.sandbox.labels import LABEL_OWNER, LABEL_SESSION, owner_labels

    labels = owner_labels("s")
    ours = labels[LABEL_OWNER]
    assert set(labels) > {LABEL_SESSION, LABEL_OWNER}  # and the pid namespace it is read in

    def made(cid: str, **extra: str) -> dict:
        return {"Id": cid, "Labels": {**labels, **extra}}

    host = socket.gethostname()
    pidns = next(k for k in labels if k not in (LABEL_SESSION, LABEL_OWNER))
    engine = _Engine([made("mine"), made("neighbour", **{pidns: "1"}),
                      made("dead-neighbour", **{pidns: "1", LABEL_OWNER: f"{host}:4194304"}),
                      made("old", **{pidns: ""})])  # fmt: skip
    assert ours == f"{host}:{os.getpid()}"
    collect_garbage(engine, owner=os.getpid())  # type: ignore[arg-type]
    assert engine.removed == ["mine", "old"]
    collect_garbage(engine)  # type: ignore[arg-type]
    assert engine.removed == ["mine", "old"]  # the dead neighbour's pid is no pid here
    collect_garbage(engine, everything=True)  # type: ignore[arg-type]
    assert sorted(engine.removed) == ["dead-neighbour", "mine", "neighbour", "old"]


_WORKER = """
import os, sys, threading, time
from pathlib import Path
from gradebox.sandbox.watchdog import watch_from_outside
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # a process with threads
mine = Path(sys.argv[1]) / f"gradebox-{os.getpid()}-test"
(mine / "inside").mkdir(parents=True)
dismiss = watch_from_outside()
if sys.argv[2] == "dismiss":
    dismiss()
print(mine, flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("dismissed", [False, True], ids=["killed", "dismissed"])
def test_a_watcher_started_from_outside_sweeps_a_killed_worker_only(tmp_path, dismissed):
    """A Ray worker runs threads, so its watchdog is a new interpreter, not a fork: a worker
    killed with SIGKILL has its scratch removed at once; one that dismissed it keeps it."""
    import signal
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-c", _WORKER, str(tmp_path), "dismiss" if dismissed else "keep"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp_path)},
    )  # fmt: skip
    assert proc.stdout is not None
    mine = Path(proc.stdout.readline().strip())
    assert mine.is_dir()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # Swept at once (and again after 1 s and 3 s); a dismissed watcher never sweeps.
    deadline = time.monotonic() + (4.5 if dismissed else 15)
    while mine.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert mine.exists() == dismissed


_NODE_WORKER = """
import os, sys
from pathlib import Path
from gradebox.cluster import node
node._watched()
node._watched()  # once per process
mine = Path(sys.argv[1]) / f"gradebox-{os.getpid()}-test"
(mine / "inside").mkdir(parents=True)
print(mine, flush=True)
if sys.argv[2] == "ends":
    sys.exit(0)  # exit handlers run: the watcher is dismissed
os._exit(0)  # as a killed worker: no handler runs
"""


@pytest.mark.parametrize("how", ["ends", "vanishes"])
def test_a_ray_workers_watcher_is_dismissed_only_by_a_normal_end(tmp_path, how):
    """A worker that ends normally sweeps nothing (its sandboxes closed first); one that
    vanishes without its exit handlers (SIGKILL, os._exit) is swept."""
    import sys
    import time

    out = subprocess.run([sys.executable, "-c", _NODE_WORKER, str(tmp_path), how],
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "TMPDIR": str(tmp_path)})  # fmt: skip
    mine = Path(out.stdout.strip())
    deadline = time.monotonic() + (4.5 if how == "ends" else 15)
    while mine.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert mine.exists() == (how == "ends")


# Names in /tmp are anyone's to make: every shape the sweep may meet (issue 30, class 7).
HOSTILE_WORDS = [
    "3000000000",  # past a C int: os.kill raised OverflowError and gc ended in a traceback
    "99999999999999999999999999",
    str(1 << 63),
    "-1",
    "-0",
    "0",
    "+5",
    " 5",
    "5 ",
    "1e3",
    "0x10",
    "²",
    "\u0661\u0662\u0663",
    "\uff11\uff12",  # full-width digits
    "ünïcödé",
    "",
]


@pytest.mark.parametrize("word", HOSTILE_WORDS)
def test_no_name_in_tmp_breaks_the_sweep(word, tmp_path, monkeypatch):
    """gc (as root, every user's folders) and the watchdog's sweep meet a folder, a file, a
    link and another user's folder under each hostile name, beside a dead runner's folder:
    no exception, none of the hostile ones taken, the dead runner's removed."""
    from gradebox.core.scratch import PID_MAX, owner_of

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert owner_of(f"gradebox-{word}-x") is None or owner_of(f"gradebox-{word}-x").pid > 0
    write(tmp_path / "elsewhere" / "f", "1\n")
    hostile = [
        write(tmp_path / f"gradebox-{word}-folder" / "f", "1\n").parent,
        write(tmp_path / f"gradebox-{word}-file", "1\n"),
        tmp_path / f"gradebox-{word}-link",
        write(tmp_path / f"gradebox-{word}-n1-x-theirs" / "f", "1\n").parent,
    ]
    hostile[2].symlink_to(tmp_path / "elsewhere")
    if os.geteuid() == 0:
        os.chown(hostile[3], 1001, 1001)
    dead = write(tmp_path / f"gradebox-{PID_MAX}-dead" / "f", "1\n").parent
    assert collect_scratch(owner=os.getpid()) == []
    assert collect_scratch() == [dead]
    assert all(os.path.lexists(p) for p in hostile)
    assert (tmp_path / "elsewhere" / "f").exists()


@pytest.mark.parametrize("word", HOSTILE_WORDS)
def test_no_owner_label_breaks_the_container_sweep(word):
    """The same numbers in a container's owner label or an OCI container's id."""
    from gradebox.core.scratch import left_by, pid_alive
    from gradebox.sandbox.labels import parse_owner
    from gradebox.sandbox.oci import _owner_pid

    for pid in (parse_owner(f"h:{word}"), _owner_pid(f"gradebox-{word}-s-n")):
        assert pid is None
    assert left_by(None, owner=5) is False
    for number in (3_000_000_000, -1, 0, 1 << 63):
        assert pid_alive(number) is False  # no OverflowError, and no such runner


def test_the_sweep_in_a_new_process_survives_a_folder_named_after_an_impossible_pid(tmp_path):
    """The reported case: gc's sweep of scratch with /tmp/gradebox-3000000000-x there."""
    import sys

    (tmp_path / "gradebox-3000000000-x").mkdir()
    (tmp_path / "gradebox--5-x").mkdir()
    code = "from gradebox.core.scratch import collect_scratch; print(len(collect_scratch()))"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "TMPDIR": str(tmp_path)})  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "gradebox-3000000000-x").is_dir()


def test_scratch_names_carry_their_owner_and_its_pid_namespace(tmp_path, monkeypatch):
    """Every scratch folder says whose it is: its pid and pid namespace. A folder of a runner
    in another pid namespace (a container sharing this /tmp) is never judged by a pid here."""
    from gradebox.core.scratch import new_scratch, owner_of, pid_namespace, scratch_folder

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    mine = new_scratch("empty")
    owner = owner_of(mine.name)
    assert owner is not None and owner.pid == os.getpid()
    assert owner.pidns == (pid_namespace() or None)
    with scratch_folder("refs") as other:
        assert owner_of(other.name).pid == os.getpid()  # type: ignore[union-attr]
    assert not other.exists()
    neighbour = tmp_path / f"gradebox-{os.getpid()}-n1-x-abc"  # our pid, another namespace
    neighbour.mkdir()
    dead_neighbour = tmp_path / "gradebox-4194304-n1-x-abc"
    dead_neighbour.mkdir()
    assert collect_scratch(owner=os.getpid()) == [mine]
    assert collect_scratch() == []
    assert sorted(collect_scratch(everything=True)) == sorted([neighbour, dead_neighbour])
