"""A run under the machine's faults: a full or unwritable results folder, a full scratch
folder, two runs given one folder, the engine lost mid-run. Each ends in one clear line and a
documented exit code, loses no finished result, leaves nothing behind, and ``--resume``
continues once the fault is gone. Disk cases use a small tmpfs (the tests run as root)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gradebox.drivers.runner import read_results
from tests.conftest import leftovers_of, write

pytestmark = pytest.mark.docker

EXIT_STORAGE = 5  # docs/cli.md: out of space

# Each test's result is ~60 KiB (a grader printing big evidence): four fill 256 KiB.
BIG = (
    "import json, random, string\n"
    "r = random.Random(0)\n"  # incompressible enough; tmpfs does not compress anyway
    "print(json.dumps({'pass': True, "
    "'reason': ''.join(r.choice(string.ascii_letters) for _ in range(60000))}))\n"
)


def suite_of(n: int, grader: str = "g.py", template: str | None = None) -> str:
    head = f"workspace:\n  template: ./{template}\n" if template else ""
    check = f"[{{type: script, command: [python3, {grader}]}}]"
    tests = "".join(f"  - id: t{i}\n    output: alpha\n    assert: {check}\n" for i in range(n))
    return f"{head}tests:\n{tests}"


def gradebox(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gradebox", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=600,
    )


def one_line(p: subprocess.CompletedProcess) -> str:
    """The error line; the run printed no traceback and no second line after it."""
    assert "Traceback" not in p.stderr, p.stderr
    errors = [x for x in p.stderr.splitlines() if x.startswith("gradebox: error:")]
    assert len(errors) == 1, p.stderr
    assert p.stderr.rstrip().endswith(errors[0]), p.stderr  # nothing after it
    return errors[0]


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[callable]:
    """``tmpfs(path, size)`` mounts a tmpfs of that size at ``path``; all unmounted after."""
    mounted: list[Path] = []

    def mount(path: Path, size: str, *extra: str) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        # mode=755: a tmpfs is 1777 by default, a results folder others may write (refused)
        opts = ",".join([f"size={size}", "mode=755", *extra])
        subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], check=True)
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], check=False)


def grow(path: Path, size: str) -> None:
    """Make room: the tmpfs at ``path`` is given more space."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True)


def mounts_under(path: Path) -> list[str]:
    return [
        line
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if f" {path}/" in line
    ]


@pytest.mark.parametrize("backend", ["docker", "oci"])
def test_a_full_results_folder_ends_the_run_keeping_every_result(tmp_path, tmpfs, backend):
    write(tmp_path / "g.py", BIG)
    suite = write(tmp_path / "suite.yaml", suite_of(2))
    out = tmpfs(tmp_path / "out", "256k")
    # An earlier run whose summary must survive the later one failing to write.
    p = gradebox("run", suite, "--out", out, "--sandbox", backend)
    assert p.returncode == 0, p.stderr
    before = json.loads((out / "summary.json").read_text())
    assert before["passed"] == 2

    write(tmp_path / "suite.yaml", suite_of(8))
    p = gradebox("run", suite, "--resume", out, "--sandbox", backend, "--workers", "2")
    line = one_line(p)
    assert p.returncode == EXIT_STORAGE, p.stderr
    assert f"results folder {out}" in line and "no space left on device" in line, line
    assert f"--resume {out}" in line
    # Every line on disk is whole; the finished ones are all there, each a pass.
    kept = read_results(out / "results.jsonl")
    assert 2 <= len(kept) < 8 and all(r.status.value == "passed" for r in kept.values())
    assert (out / "results.jsonl").read_bytes().endswith(b"\n")
    # summary.json is whole: the earlier one, or this run's (stopped), never a torn one.
    after = json.loads((out / "summary.json").read_text())
    assert after == before or after["interrupted"] is True
    assert not [x for x in os.listdir(out) if x.endswith(".tmp")]

    grow(out, "4m")  # room again: the run is continued, each test once
    p = gradebox("run", suite, "--resume", out, "--sandbox", backend, "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["summary"]["reused"] == len(kept)
    lines = (out / "results.jsonl").read_text().splitlines()
    assert sorted(json.loads(x)["id"] for x in lines) == sorted(f"t{i}" for i in range(8))
    assert json.loads((out / "summary.json").read_text())["passed"] == 8


@pytest.mark.parametrize("backend", ["docker", "oci"])
def test_a_full_scratch_folder_is_named_and_ends_the_run(tmp_path, tmpfs, backend):
    write(tmp_path / "g.py", "print('{\"pass\": true}')\n")
    (tmp_path / "tpl").mkdir()
    (tmp_path / "tpl" / "a.txt").write_bytes(os.urandom(100_000).hex().encode())  # 200 KB
    suite = write(tmp_path / "suite.yaml", suite_of(4, template="tpl"))
    scratch = tmpfs(tmp_path / "scratch", "256k")
    out = tmp_path / "out"
    p = gradebox("run", suite, "--out", out, "--sandbox", backend, env={"TMPDIR": str(scratch)})
    line = one_line(p)
    assert p.returncode == EXIT_STORAGE, p.stderr
    assert f"scratch folder {scratch}" in line and "no space left on device" in line, line
    assert "FileExistsError" not in p.stderr and "internal error" not in p.stderr
    # Nothing is left in the scratch folder, nothing mounted below it.
    assert os.listdir(scratch) == [] and mounts_under(scratch) == []
    assert all(r.status.value == "passed" for r in read_results(out / "results.jsonl").values())

    grow(scratch, "8m")
    p = gradebox("run", suite, "--resume", out, "--sandbox", backend, env={"TMPDIR": str(scratch)})
    assert p.returncode == 0, p.stderr
    assert len(read_results(out / "results.jsonl")) == 4


def test_a_results_folder_that_cannot_be_written_is_one_line(tmp_path, tmpfs):
    write(tmp_path / "g.py", "print('{\"pass\": true}')\n")
    suite = write(tmp_path / "suite.yaml", suite_of(1))
    a_file = write(tmp_path / "results", "not a folder\n")
    p = gradebox("run", suite, "--out", a_file, "--sandbox", "host")
    assert p.returncode == 2 and "--out" in one_line(p) and str(a_file) in p.stderr
    assert a_file.read_text() == "not a folder\n"
    p = gradebox("run", suite, "--out", a_file / "below", "--sandbox", "host")
    assert p.returncode == 2 and "--out" in one_line(p)
    read_only = tmpfs(tmp_path / "ro", "64k", "ro")
    p = gradebox("run", suite, "--out", read_only / "run", "--sandbox", "host")
    line = one_line(p)
    assert p.returncode == 2 and "read-only file system" in line and str(read_only) in line
    p = gradebox("run", suite, "--out", read_only, "--sandbox", "host")
    assert p.returncode == 2 and "read-only file system" in one_line(p)
    # Control: a missing parent is made, and the run is what its grader says.
    p = gradebox("run", suite, "--out", tmp_path / "new" / "deeper", "--sandbox", "host")
    assert p.returncode == 0, p.stderr


def _started_run(suite: Path, out: Path, sandbox: str,
                 env: dict[str, str] | None = None) -> subprocess.Popen[str]:  # fmt: skip
    """`gradebox run` in a process of its own, its output captured (to communicate with)."""
    return subprocess.Popen(
        [sys.executable, "-m", "gradebox", "run", str(suite), "--out", str(out),
         "--sandbox", sandbox],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def test_two_runs_given_one_results_folder(tmp_path):
    write(tmp_path / "slow.py", "import time; time.sleep(8); print('{\"pass\": true}')\n")
    suite = write(tmp_path / "suite.yaml", suite_of(2, grader="slow.py"))
    out = tmp_path / "out"
    first = _started_run(suite, out, "host")
    deadline = time.monotonic() + 120
    while not (out / ".gradebox.lock").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    p = gradebox("run", suite, "--out", out, "--sandbox", "host")
    line = one_line(p)
    assert p.returncode == 2 and "in use by another run" in line and str(out) in line
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert sorted(read_results(out / "results.jsonl")) == ["t0", "t1"]
    # Once the first is over, the folder is free again.
    assert gradebox("run", suite, "--resume", out, "--sandbox", "host").returncode == 0


class Relay:
    """A unix socket that forwards to the Docker engine's until ``cut``: then every
    connection drops and nothing more is accepted (the engine is gone)."""

    def __init__(self, path: Path, target: str = "/var/run/docker.sock") -> None:
        self.path, self.target = path, target
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(path))
        self.server.listen(64)
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        self.cut_ = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(self.target)
            with self.lock:
                if self.cut_:
                    client.close()
                    upstream.close()
                    return
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                b.sendall(data)
        for s in (a, b):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        with self.lock:
            self.cut_ = True
            self.server.close()
            for s in self.conns:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
        self.path.unlink(missing_ok=True)


def test_an_engine_lost_mid_run_is_an_error_never_a_pass(tmp_path, engine):
    sock = tmp_path / "relay.sock"
    relay = Relay(sock)
    write(tmp_path / "slow.py", "import time; time.sleep(600); print('{\"pass\": true}')\n")
    suite = write(tmp_path / "suite.yaml", suite_of(2, grader="slow.py"))
    out = tmp_path / "out"
    runner = _started_run(suite, out, "docker", {**os.environ, "DOCKER_HOST": f"unix://{sock}"})
    deadline = time.monotonic() + 120
    while not leftovers_of(engine, runner.pid, running=True):
        assert time.monotonic() < deadline, "the runner never started its graders"
        time.sleep(0.2)
    relay.cut()
    _, err = runner.communicate(timeout=300)
    assert "Traceback" not in err and "Retrying" not in err, err  # no line per attempt
    # docs/cli.md: the engine lost mid-run is exit 3, every test in flight or still to come
    # an `error`. (This allowed exit 4 with no result at all: `all()` of nothing held, so a
    # run that dropped its tests in flight passed the test.)
    assert runner.returncode == 3, err
    results = read_results(out / "results.jsonl")
    assert {k: r.status.value for k, r in results.items()} == {"t0": "error", "t1": "error"}
    # The relay dropped only the connection: the graders still run on the real engine, where
    # no one could reach them. `gradebox gc` (through the engine) removes what the runner left.
    assert gradebox("gc").returncode == 0
    left = leftovers_of(engine, runner.pid)
    for name in left:  # never leave them to the next test either
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    assert left == []


def test_an_engine_gone_from_the_start_and_a_missing_runtime_are_one_line(tmp_path):
    write(tmp_path / "g.py", "print('{\"pass\": true}')\n")
    suite = write(tmp_path / "suite.yaml", suite_of(2))
    gone = {"DOCKER_HOST": f"unix://{tmp_path}/no.sock"}
    p = gradebox("run", suite, "--out", tmp_path / "a", "--sandbox", "docker", env=gone)
    assert p.returncode == 4 and f"unix://{tmp_path}/no.sock" in one_line(p)
    bare = {"PATH": str(Path(sys.executable).parent)}  # python, but no runc on PATH
    p = gradebox("run", suite, "--out", tmp_path / "b", "--sandbox", "oci", env=bare)
    assert p.returncode == 4 and "runc" in one_line(p)
    assert not (tmp_path / "a" / "results.jsonl").exists()


@pytest.mark.parametrize("backend", ["docker", "oci"])
def test_graders_that_spin_or_fill_memory_are_errors_and_the_run_goes_on(tmp_path, backend):
    write(tmp_path / "spin.py", "while True:\n    pass\n")
    write(tmp_path / "eat.py", "x = bytearray(3 << 30)\nprint('{\"pass\": true}')\n")
    write(tmp_path / "ok.py", "print('{\"pass\": true}')\n")
    suite = write(
        tmp_path / "suite.yaml",
        "tests:\n"
        "  - {id: spin, output: a, assert: [{type: script, command: [python3, spin.py],"
        " timeout: 2s}]}\n"
        "  - {id: eat, output: a, assert: [{type: script, command: [python3, eat.py]}]}\n"
        "  - {id: ok, output: a, assert: [{type: script, command: [python3, ok.py]}]}\n",
    )
    out = tmp_path / "out"
    p = gradebox("run", suite, "--out", out, "--sandbox", backend)
    assert p.returncode == 3 and "Traceback" not in p.stderr, p.stderr
    results = read_results(out / "results.jsonl")
    assert {k: r.status.value for k, r in results.items()} == {
        "spin": "error", "eat": "error", "ok": "passed",
    }  # fmt: skip
    assert results["spin"].graders[0].timed_out
    assert results["eat"].graders[0].oom_killed


@pytest.mark.parametrize("backend", ["docker", "oci"])
def test_grade_with_a_full_scratch_folder_is_one_line(tmp_path, tmpfs, backend):
    grader = write(tmp_path / "g.yaml", "type: program\nprogram: 'true'\n")
    payload = write(tmp_path / "p.json", json.dumps({"output": "x" * 400_000}))  # a file
    (tmp_path / "ws").mkdir()
    scratch = tmpfs(tmp_path / "scratch", "256k")
    p = gradebox(
        "grade", grader, "--input", payload, "--workspace", tmp_path / "ws", "--sandbox", backend,
        env={"TMPDIR": str(scratch)},
    )  # fmt: skip
    assert p.returncode == EXIT_STORAGE, p.stderr
    assert f"scratch folder {scratch}" in one_line(p)
    assert os.listdir(scratch) == [] and mounts_under(scratch) == []


def test_batch_into_a_full_folder_keeps_every_line_whole(tmp_path, tmpfs):
    write(tmp_path / "big.py", BIG)
    grader = write(tmp_path / "g.yaml", "type: program\nprogram: python3\nargs: [big.py]\n")
    records = write(
        tmp_path / "records.jsonl", "".join(f'{{"id": "{i}", "output": "x"}}\n' for i in range(8))
    )
    out = tmpfs(tmp_path / "out", "256k") / "graded.jsonl"
    p = gradebox("batch", records, "--grader", grader, "--out", out, "--sandbox", "host")
    assert p.returncode == EXIT_STORAGE, p.stderr
    assert f"results folder {out.parent}" in one_line(p)
    lines = out.read_bytes().split(b"\n")
    assert lines[-1] == b"" and 2 <= len(lines) - 1 < 8
    assert all(json.loads(x)["pass"] for x in lines[:-1])
    grow(out.parent, "4m")
    p = gradebox("batch", records, "--grader", grader, "--out", out, "--sandbox", "host")
    assert p.returncode == 0, p.stderr
    assert len(out.read_text().splitlines()) == 8


def test_resume_needs_no_room_for_a_second_copy_of_the_results(tmp_path, tmpfs):
    write(tmp_path / "g.py", BIG)
    suite = write(tmp_path / "suite.yaml", suite_of(3))
    out = tmpfs(tmp_path / "out", "256k")
    assert gradebox("run", suite, "--out", out, "--sandbox", "host").returncode == 0
    # ~180 KiB of results in 256 KiB: room for one more result, not for a copy of them all
    # (which resuming wrote beside them first, even with nothing to drop).
    write(tmp_path / "suite.yaml", suite_of(4))
    p = gradebox("run", suite, "--resume", out, "--sandbox", "host", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["summary"]["reused"] == 3
    assert sorted(read_results(out / "results.jsonl")) == ["t0", "t1", "t2", "t3"]


@pytest.mark.parametrize("backend", ["docker", "oci", "oci-runc"])
def test_closing_a_sandbox_under_graders_in_flight_is_one_ordered_path(engine, backend):
    """However a run stops (a full disk, a signal, the engine lost), it ends in the sandbox's
    ``close()`` from another thread while graders are still in ``execute``. Each of them
    returns an outcome or raises ``SandboxClosed``, never anything else (its pipes were once
    closed under its ``select``: ``ValueError: I/O operation on closed file``), and nothing
    is left. Repeated, at varied moments, to catch the race."""
    from gradebox.errors import SandboxClosed
    from gradebox.images import qualified
    from gradebox.sandbox import get_sandbox
    from gradebox.sandbox.base import SandboxSpec
    from gradebox.sandbox.docker import DockerSandbox
    from gradebox.sandbox.oci import OciSandbox

    def make():
        if backend == "docker":
            return DockerSandbox(engine)
        return OciSandbox(engine, runtime="runc") if backend == "oci-runc" else get_sandbox("oci")

    image = DockerSandbox(engine).resolve_image(qualified("shell"))
    data = b"x" * (1 << 20)  # still being fed when the close comes: stdin in the select
    for round_ in range(6):
        box = make()
        spec = SandboxSpec(
            image=image,
            command=["/bin/sh", "-c", "sleep 0.2; cat; sleep 30"],
            name="close-race",
            timeout=60,
        )
        ready = [box.prepare(spec) for _ in range(3)]
        box.prepare(SandboxSpec(image=image, command=["true"], name="close-race"))  # never run
        ended: list[object] = []

        def run(handle, ended=ended) -> None:
            try:
                ended.append(handle.execute(data))
            except SandboxClosed:
                ended.append("closed")
            except BaseException as exc:  # the bug: anything else escapes a grader's run
                ended.append(exc)

        threads = [threading.Thread(target=run, args=(h,)) for h in ready]
        for t in threads:
            t.start()
        time.sleep(0.1 + 0.15 * (round_ % 4))
        box.close()
        for t in threads:
            t.join(90)
        assert not any(t.is_alive() for t in threads), "a grader's run outlived close()"
        odd = [e for e in ended if e != "closed" and not hasattr(e, "exit_code")]
        assert odd == [], odd
        assert box.leftovers() == [], box.leftovers()
