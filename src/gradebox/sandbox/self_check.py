"""Conformance checks every sandbox backend must pass.

``self_check(box, image)`` runs each named check against a live backend and returns
``{name: True | "FAILED: why"}``; it never raises for a failing check, so one report shows
everything a new backend still lacks. ``image`` must provide POSIX sh, coreutils and python3.
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .base import ImageSource, Limits, Mount, Prepared, RunOutcome, Sandbox, SandboxSpec
from .hardening import HOME

__all__ = ["CHECKS", "self_check"]

Check = Callable[[Sandbox, str], None]
CHECKS: dict[str, Check] = {}


def check(fn: Check) -> Check:
    CHECKS[fn.__name__] = fn
    return fn


def _run(box: Sandbox, image: str, command: list[str], **kw: object) -> RunOutcome:
    return box.run(SandboxSpec(image=image, command=command, name="self-check", **kw))


def _sh(box: Sandbox, image: str, script: str, **kw: object) -> RunOutcome:
    return _run(box, image, ["/bin/sh", "-c", script], **kw)


def _expect(cond: bool, why: str) -> None:
    if not cond:
        raise AssertionError(why)


@check
def stdout_and_exit_code(box: Sandbox, image: str) -> None:
    out = _sh(box, image, "echo hello; exit 3")
    _expect(out.stdout == b"hello\n", f"stdout {out.stdout!r}")
    _expect(out.exit_code == 3, f"exit code {out.exit_code}")


@check
def stderr_is_separate(box: Sandbox, image: str) -> None:
    out = _sh(box, image, "echo out; echo err >&2")
    _expect(out.stdout == b"out\n" and out.stderr == b"err\n", f"{out.stdout!r} {out.stderr!r}")


@check
def stdin_is_delivered(box: Sandbox, image: str) -> None:
    data = os.urandom(2 << 20).hex().encode()  # 4 MiB: more than any pipe buffer
    out = _sh(box, image, "wc -c", stdin=data)
    _expect(out.stdout.strip() == str(len(data)).encode(), f"wc said {out.stdout!r}")


@check
def output_is_passed_on_byte_for_byte(box: Sandbox, image: str) -> None:
    # What the sandbox itself reports never shares the command's streams: lines that look like
    # an init's or the gate's reach the caller untouched, newlines and all.
    text = (
        "a[INFO  tini (1)] Main child exited normally (with status '0')\n{}\n"
        "[gradebox:0123456789abcdef0123456789abcdef] error x\n[WARN  tini (7)] y"
    )
    quoted = shlex.quote(text)
    out = _sh(box, image, f"printf '%s' {quoted}; printf '%s' {quoted} >&2")
    _expect(out.stdout == text.encode(), f"stdout {out.stdout!r}")
    _expect(out.stderr == text.encode(), f"stderr {out.stderr!r}")
    _expect(out.start_error is None and out.signal is None, f"{out.start_error} {out.signal}")


@check
def signals_and_failed_starts_are_the_sandboxs_to_report(box: Sandbox, image: str) -> None:
    killed = _sh(box, image, "kill -9 $$")
    _expect((killed.exit_code, killed.signal) == (137, 9), f"{killed.exit_code} {killed.signal}")
    chose = _sh(box, image, "exit 137")  # an exit code of its own, not a signal
    _expect((chose.exit_code, chose.signal) == (137, None), f"{chose.exit_code} {chose.signal}")
    missing = _run(box, image, ["no-such-program"])
    _expect(bool(missing.start_error), f"no start error: {missing}")
    faked = _sh(box, image, "echo 'no-such-program: command not found' >&2; exit 127")
    _expect(faked.start_error is None, f"a printed failure taken for a failed start: {faked}")


@check
def env_and_workdir(box: Sandbox, image: str) -> None:
    out = _sh(box, image, 'echo "$GB_X"; pwd', env={"GB_X": "42"}, workdir="/tmp")
    _expect(out.stdout == b"42\n/tmp\n", f"got {out.stdout!r}")


@check
def runs_as_non_root(box: Sandbox, image: str) -> None:
    out = _sh(box, image, "id -u")
    _expect(out.stdout.strip() not in (b"0", b""), f"uid {out.stdout!r}")


@check
def no_capabilities(box: Sandbox, image: str) -> None:
    out = _sh(box, image, "grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs)' /proc/self/status")
    text = out.stdout.decode()
    for key in ("CapEff", "CapPrm", "CapBnd"):
        _expect(f"{key}:\t0000000000000000" in text, f"{key} not empty: {text}")
    _expect("NoNewPrivs:\t1" in text, f"no_new_privs unset: {text}")


@check
def root_fs_is_read_only(box: Sandbox, image: str) -> None:
    out = _sh(box, image, "touch /etc/gb-x 2>&1; touch /gb-x 2>&1; echo done")
    _expect(out.stdout.count(b"Read-only file system") == 2, f"got {out.stdout!r}")


@check
def tmp_and_home_are_writable(box: Sandbox, image: str) -> None:
    # A name of this shell's own, removed after: on the host backend /tmp is the host's.
    script = (
        'f=/tmp/gb-check-$$; echo a > "$f" && echo b > "$HOME/y" && cat "$f" "$HOME/y"; rm -f "$f"'
    )
    out = _sh(box, image, script)
    _expect(out.stdout == b"a\nb\n", f"got {out.stdout!r} {out.stderr!r}")


@check
def read_only_mount_is_unwritable(box: Sandbox, image: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o777)
        Path(tmp, "f").write_text("keep")
        out = _sh(
            box,
            image,
            "echo x > /w/f; touch /w/new; cat /w/f",
            mounts=(Mount(Path(tmp), "/w", read_only=True),),
        )
        _expect(out.stdout == b"keep", f"got {out.stdout!r}")
        _expect(
            sorted(os.listdir(tmp)) == ["f"] and Path(tmp, "f").read_text() == "keep",
            "host directory changed",
        )


@check
def read_write_mount_is_writable(box: Sandbox, image: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o777)
        _sh(box, image, "echo made > /w/new", mounts=(Mount(Path(tmp), "/w", read_only=False),))
        _expect(Path(tmp, "new").read_text() == "made\n", "write did not reach the mount")


@check
def network_is_loopback_only(box: Sandbox, image: str) -> None:
    out = _sh(
        box,
        image,
        "tail -n +3 /proc/net/dev | cut -d: -f1; echo --; tail -n +2 /proc/net/route | wc -l",
    )
    names, _, routes = out.stdout.decode().partition("--")
    _expect([n.strip() for n in names.split()] == ["lo"], f"interfaces: {names!r}")
    _expect(routes.strip() == "0", f"routes: {routes.strip()}")


@check
def loopback_works(box: Sandbox, image: str) -> None:
    script = (
        "import socket, threading\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1)\n"
        "port = s.getsockname()[1]\n"
        "threading.Thread(target=lambda: s.accept()[0].sendall(b'pong'), daemon=True).start()\n"
        "c = socket.create_connection(('127.0.0.1', port), timeout=5)\n"
        "print(c.recv(4).decode())\n"
    )
    out = _run(box, image, ["python3", "-c", script])
    _expect(out.stdout.strip() == b"pong", f"got {out.stdout!r} {out.stderr!r}")


@check
def no_docker_socket(box: Sandbox, image: str) -> None:
    out = _sh(box, image, "ls /var/run/docker.sock /run/docker.sock 2>/dev/null | wc -l")
    _expect(out.stdout.strip() == b"0", "a docker socket is visible")


def _python(box: Sandbox, image: str, code: str) -> dict[str, object]:
    """Run ``code`` with python3 in the sandbox; it prints one JSON object."""
    out = _run(box, image, ["python3", "-c", code])
    try:
        seen = json.loads(out.stdout or b"{}")
    except ValueError:
        seen = None
    _expect(
        isinstance(seen, dict), f"exit {out.exit_code}: {out.stdout[-300:]!r} {out.stderr[-300:]!r}"
    )
    return seen  # type: ignore[return-value]


_SYSCALL_PROBE = """
import ctypes, json, os, platform
libc = ctypes.CDLL(None, use_errno=True)
out = {"seccomp": [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp:")]}
def call(nr, *args):
    rc = libc.syscall(ctypes.c_long(nr), *(ctypes.c_long(a) for a in args))
    return ctypes.get_errno() if rc == -1 else 0
def in_child(nr):  # a call the filter may answer by killing the caller
    pid = os.fork()
    if pid == 0:
        call(nr)
        os._exit(0)
    return os.waitpid(pid, 0)[1]
if platform.machine() == "x86_64":
    ring = ctypes.create_string_buffer(120)
    for name, nr, args in (("keyctl", 250, (0, -3, 0)), ("unshare", 272, (0x10000000,)),
                           ("add_key", 248, (0, 0, 0, 0, 0)),
                           ("io_uring_setup", 425, (4, ctypes.addressof(ring))),
                           ("socket(AF_VSOCK)", 41, (40, 1, 0)),
                           ("process_mrelease", 448, (-1, 0))):  # named nowhere: EPERM
        out[name] = call(nr, *args)
    out["inet"] = call(41, 2, 1, 0)  # the control: what graders use still works
    out["x32"] = in_child(0x40000000 | 39)  # getpid through the x32 ABI
print(json.dumps(out))
"""


@check
def seccomp_denies_escape_syscalls(box: Sandbox, image: str) -> None:
    # Syscalls an unprivileged process may normally make: only a seccomp filter says no. The
    # filter is an allow-list: a call it does not name is refused too, and so is a call
    # through another ABI than the native one.
    seen = _python(box, image, _SYSCALL_PROBE)
    _expect(seen.get("seccomp") == ["2"], f"no seccomp filter: {seen}")
    for name in (
        "keyctl",
        "unshare",
        "add_key",
        "io_uring_setup",
        "socket(AF_VSOCK)",
        "process_mrelease",
    ):
        _expect(seen.get(name, 1) == 1, f"{name} was not refused with EPERM: {seen}")
    _expect(seen.get("inet", 0) == 0, f"an IPv4 socket was refused: {seen}")
    _expect(seen.get("x32", 31) & 0x7F == 31, f"an x32 call was not stopped: {seen}")


_INIT_PROBE = """
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *args):
    rc = libc.syscall(ctypes.c_long(nr), *(ctypes.c_long(a) for a in args))
    return ctypes.get_errno() if rc == -1 else 0
def opened(path, flags):
    try:
        os.close(os.open(path, flags))
        return 0
    except OSError as exc:
        return exc.errno
out = {"init": open("/proc/1/comm").read().strip()}
if out["init"] in ("gradebox-init", "docker-init", "tini"):  # never a host's own PID 1
    out.update({
        "ptrace(SEIZE, 1)": call(101, 0x4206, 1, 0, 0),  # attaches without stopping it
        "/proc/1/mem": opened("/proc/1/mem", os.O_RDWR),
        "/proc/1/task/1/mem": opened("/proc/1/task/1/mem", os.O_RDWR),
        "/proc/1/environ": opened("/proc/1/environ", os.O_RDONLY),
        "self": opened("/proc/self/mem", os.O_RDWR),
    })
print(json.dumps(out))
"""


@check
def init_is_out_of_reach(box: Sandbox, image: str) -> None:
    # PID 1 (the init) runs with the grader's uid and says how the command ended: a process
    # of the grader must not stop it, read it or write its memory, by any route.
    seen = _python(box, image, _INIT_PROBE)
    _expect("self" in seen, f"PID 1 is not an init of ours: {seen}")
    _expect(seen.get("ptrace(SEIZE, 1)") == 1, f"ptrace of PID 1 was not refused: {seen}")
    for path in ("/proc/1/mem", "/proc/1/task/1/mem", "/proc/1/environ"):
        _expect(seen.get(path) == 13, f"{path} could be opened: {seen}")
    _expect(seen.get("self") == 0, f"its own memory could not be opened: {seen}")


@check
def scratch_is_not_executable(box: Sandbox, image: str) -> None:
    # /tmp, $HOME and /dev/shm are data (noexec), on every backend alike; a script there
    # still runs through its interpreter, and a program from the image runs.
    script = (
        'for d in /tmp "$HOME" /dev/shm; do cp /bin/true "$d/t" && chmod 755 "$d/t"'
        ' && { "$d/t" 2>/dev/null && echo "ran $d" || echo "refused $d"; }; done;'
        " echo 'print(6 * 7)' > /tmp/s.py && python3 /tmp/s.py; /bin/true && echo image"
    )
    out = _sh(box, image, script)
    want = f"refused /tmp\nrefused {HOME}\nrefused /dev/shm\n42\nimage\n".encode()
    _expect(out.stdout == want, f"got {out.stdout!r} {out.stderr[-300:]!r}")


@check
def timeout_kills_every_process(box: Sandbox, image: str) -> None:
    # A child that ignores SIGTERM must die too; the whole environment goes.
    started = time.monotonic()
    out = _sh(box, image, "trap '' TERM; (trap '' TERM; sleep 300) & sleep 300", timeout=1.0)
    elapsed = time.monotonic() - started
    _expect(out.timed_out, "not reported as timed out")
    _expect(elapsed < 15, f"took {elapsed:.1f}s to stop")


@check
def memory_limit_kills(box: Sandbox, image: str) -> None:
    code = "x = bytearray(3 << 30); print('survived')"
    out = _run(box, image, ["python3", "-c", code], limits=Limits(memory=256 << 20), timeout=60)
    _expect(b"survived" not in out.stdout, "allocated 3 GiB under a 256 MiB limit")
    _expect(out.oom_killed or out.exit_code not in (0, None), f"exit {out.exit_code}")


@check
def pids_limit_holds(box: Sandbox, image: str) -> None:
    out = _sh(
        box,
        image,
        "i=0; while [ $i -lt 100 ]; do sleep 5 & i=$((i+1)); done 2>&1; echo spawned",
        limits=Limits(pids=16),
        timeout=30,
    )
    _expect(
        b"fork" in out.stdout.lower() or b"resource" in out.stdout.lower(),
        f"100 processes under a 16-process limit: {out.stdout[-200:]!r}",
    )


@check
def file_size_limit_holds(box: Sandbox, image: str) -> None:
    out = _sh(
        box,
        image,
        "head -c 3000000 /dev/zero > /tmp/big; ls -l /tmp/big 2>&1",
        limits=Limits(file_size=1 << 20),
    )
    _expect(b"3000000" not in out.stdout, "wrote 3 MB past a 1 MiB file-size limit")


@check
def stdout_is_capped(box: Sandbox, image: str) -> None:
    out = _sh(box, image, "head -c 50000000 /dev/zero", limits=Limits(output=1 << 20))
    _expect(len(out.stdout) == 1 << 20, f"kept {len(out.stdout)} bytes")
    _expect(out.stdout_dropped > 0, "overflow not reported")


@check
def stderr_keeps_its_tail(box: Sandbox, image: str) -> None:
    out = _sh(
        box, image, "head -c 3000000 /dev/zero >&2; echo END >&2", limits=Limits(output=1 << 20)
    )
    _expect(len(out.stderr) <= 1 << 20 and out.stderr.endswith(b"END\n"), "tail lost")
    _expect(out.stderr_dropped > 0, "overflow not reported")


@check
def prepared_waits_for_release(box: Sandbox, image: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o777)
        spec = SandboxSpec(
            image=image,
            command=["/bin/sh", "-c", "date +%s%N > /w/ran; cat"],
            mounts=(Mount(Path(tmp), "/w", read_only=False),),
            name="self-check",
        )
        ready = box.prepare(spec)
        time.sleep(0.5)
        _expect(not Path(tmp, "ran").exists(), "the command ran before its release")
        out = ready.execute(b"payload")
        _expect(out.stdout == b"payload", f"stdin after release: {out.stdout!r}")
        _expect(Path(tmp, "ran").exists(), "never ran")
    spec = SandboxSpec(image=image, command=["true"], name="self-check")
    box.prepare(spec).discard()  # discarded unused: must leave nothing behind


@check
def nothing_is_left_behind(box: Sandbox, image: str) -> None:
    _sh(box, image, "sleep 60 &", timeout=2)
    _expect(box.leftovers() == [], f"left behind: {box.leftovers()}")


class _Warm(Sandbox):
    """Runs every check through ``prepare(warm=True)`` then ``execute``: containers started
    ahead of their input must keep every promise a plain run keeps."""

    def __init__(self, box: Sandbox) -> None:
        self.box = box

    def run(self, spec: SandboxSpec) -> RunOutcome:
        ready = self.box.prepare(spec, warm=True)
        time.sleep(0.05)  # it really waits: nothing runs before the release
        return ready.execute(spec.stdin)

    def prepare(self, spec: SandboxSpec, *, warm: bool = True) -> Prepared:
        return self.box.prepare(spec, warm=warm)

    def resolve_image(self, ref: str) -> str:
        return self.box.resolve_image(ref)

    def images(self, **options: Any) -> ImageSource:
        return self.box.images(**options)

    def leftovers(self) -> list[str]:
        return self.box.leftovers()


def self_check(
    box: Sandbox, image: str, only: list[str] | None = None, *, warm: bool = False
) -> dict[str, bool | str]:
    """Run every conformance check (or ``only`` these) and report each one; ``warm`` runs them
    through containers prepared ahead of their input."""
    if warm:
        box = _Warm(box)
    results: dict[str, bool | str] = {}
    for name, fn in CHECKS.items():
        if only and name not in only:
            continue
        try:
            fn(box, image)
            results[name] = True
        except Exception as exc:  # a report, not a crash: every check runs
            results[name] = f"FAILED: {type(exc).__name__}: {exc}"
    return results
