"""Issue 40, attacked: holes found by a hostile tester, each pinned by a test."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from gradebox.core import jsonl
from gradebox.errors import ConfigError
from gradebox.protocol.results import load_results, read_results_from


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def test_a_sparse_results_file_another_user_left_is_one_line_not_a_memory_flood(tmp_path):
    """A run folder another user wrote holds a sparse 3 GiB results.jsonl: ``gradebox report``
    (and ``view``, which reads it the same way) read it whole (MemoryError, a traceback)."""
    run = tmp_path / "run"
    run.mkdir()
    with open(run / "results.jsonl", "wb") as f:
        f.truncate(3 << 30)
    proc = subprocess.run(
        [sys.executable, "-m", "gradebox", "report", str(run), "-o", str(tmp_path / "r.html")],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_memory,
        check=False,
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr, proc.stderr
    assert "results.jsonl" in proc.stderr and "MiB" in proc.stderr, proc.stderr


def test_results_past_the_cap_are_refused_from_any_offset(tmp_path, monkeypatch):
    monkeypatch.setattr(jsonl, "RESULTS_CAP", 100)
    (tmp_path / "results.jsonl").write_bytes(b"\n" * 101)
    with pytest.raises(ConfigError, match="MiB"):
        load_results(tmp_path)
    with pytest.raises(ConfigError):
        read_results_from(tmp_path, 0)
    assert read_results_from(tmp_path, 50) == ([], 101)  # only what is new counts


def test_view_bounds_the_connections_another_local_user_may_hold_open(tmp_path):
    """Any local user reaches 127.0.0.1: each idle connection was a thread, never ended (2000
    were 2000: toward the owner's process limit, then no fork at all). Now at most
    ``CONNECTIONS`` at once, and the owner's page is served again once they are gone."""
    import socket
    import time
    import urllib.request

    (tmp_path / "results.jsonl").write_text("")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gradebox", "view", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        url = proc.stdout.readline().strip()
        port = int(url.split(":")[2].split("/")[0])
        socks = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(200)]
        time.sleep(1.0)
        threads = len(os.listdir(f"/proc/{proc.pid}/task"))
        for s in socks:
            s.close()
        assert threads <= 40, threads  # CONNECTIONS (32), the main thread and a few
        time.sleep(0.5)
        with urllib.request.urlopen(url, timeout=10) as reply:
            assert reply.status == 200
    finally:
        proc.terminate()
        proc.wait(10)


def test_view_closes_a_connection_that_sends_nothing(tmp_path, monkeypatch):
    import socket

    from gradebox.report import view

    assert view._Handler.timeout is not None and view._Handler.timeout <= 30
    monkeypatch.setattr(view._Handler, "timeout", 0.5)
    (tmp_path / "results.jsonl").write_text("")
    server = view.ViewServer(tmp_path)
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
            assert s.recv(1) == b""  # closed by the server, not our timeout
    finally:
        server.shutdown()


def test_view_ends_on_sigterm_that_lands_as_a_request_thread_starts(tmp_path, monkeypatch):
    """SIGTERM is a KeyboardInterrupt in the main thread; landing in the wait for a request's
    thread to start (after the start), the slot was released there and by the thread: the
    semaphore's ValueError replaced the interrupt, the server loop caught it and went on
    serving, and `gradebox view` ignored SIGTERM (seen in CI, and 1 in 25 under load)."""
    import socket
    import threading

    from gradebox.report import view

    start = threading.Thread.start

    def start_then_interrupt(thread: threading.Thread) -> None:
        start(thread)
        thread.join(5)  # the request is served and its slot released first, as under load
        raise KeyboardInterrupt

    (tmp_path / "results.jsonl").write_text("")
    server = view.ViewServer(tmp_path)
    a, b = socket.socketpair()
    b.close()  # the handler reads nothing and ends at once
    monkeypatch.setattr(threading.Thread, "start", start_then_interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            server.httpd.process_request(a, ("127.0.0.1", 0))
    finally:
        monkeypatch.undo()
        server.shutdown()
    slots = server.httpd.slots
    assert all(slots.acquire(blocking=False) for _ in range(view.CONNECTIONS))
    assert not slots.acquire(blocking=False)


def test_grade_output_on_a_terminal_keeps_a_wrapped_grader_line_off_the_margin():
    """On a terminal rich wraps a long line to its width, and the continuation started at the
    margin: a failing grader's evidence of 78 x's then "✔ PASS ..." printed a line that began
    "✔ PASS", where the verdict stands. Every line but the verdict's is padded, wrapped too."""
    import io

    from rich.console import Console

    from gradebox.report.plain import print_result

    buf = io.StringIO()
    console = Console(file=buf, width=80, force_terminal=True, color_system=None)
    forged = "✔ PASS grader  score 1.00  12 ms"
    print_result(
        {
            "status": "failed",
            "name": "g",
            "score": 0.0,
            "duration_ms": 5,
            "evidence": "x" * 78 + " " + forged,
            "checks": [{"text": "t" * 70 + " " + forged, "passed": False, "evidence": "e"}],
            "stdout_tail": "y" * 76 + " " + forged,
        },
        console=console,
    )
    lines = buf.getvalue().splitlines()
    assert lines[0].startswith("✘ FAIL g")
    assert all(line.startswith("  ") for line in lines[1:] if line.strip()), lines


@pytest.mark.parametrize("name", [".ENV", ".Env", ".ENV.local", ".env.LOCAL"])
def test_a_dotenv_in_another_case_is_masked(tmp_path, name):
    """In a case-folding folder (ext4 +F, macOS) ``.ENV`` is the file ``open('.env')`` reads:
    it was mounted for a grader whole, its keys readable."""
    from gradebox.core.untrusted import look_through, secret_name

    (tmp_path / "g").mkdir()
    (tmp_path / "g" / name).write_text("OPENAI_API_KEY=sk-x\n")
    assert secret_name(name)
    assert name in look_through(tmp_path / "g", 100).masked


def test_a_hard_link_to_a_dotenv_is_masked_as_the_dotenv_is(tmp_path):
    """``keys.txt`` another name (a hard link) of the grader folder's ``.env``: the ``.env``
    was masked, the same bytes under the other name mounted (and copied) as they were."""
    from gradebox.core.untrusted import look_through

    g = tmp_path / "g"
    (g / "sub").mkdir(parents=True)
    (g / "sub" / ".env").write_text("OPENAI_API_KEY=sk-x\n")
    os.link(g / "sub" / ".env", g / "keys.txt")
    os.link(g / "sub" / ".env", g / "sub" / "z.txt")
    (g / "grade.py").write_text("print(1)\n")
    held = look_through(g, 100)
    assert {"sub/.env", "keys.txt", "sub/z.txt"} <= held.masked
    assert "keys.txt" in held.secrets  # a folder copied or hashed holding it is refused
    assert "grade.py" not in held.masked


def test_a_sparse_file_in_a_graders_build_context_is_hashed_in_bounded_memory(tmp_path):
    """A grader's build context is the pack's: input_hash read each file whole
    (``read_bytes``), so a sparse 1.5 GiB file there took 1.5 GiB (a MemoryError under a
    1 GiB limit; 100 GiB, the host's memory). Streamed now: the same digest, in bounded memory."""
    import hashlib

    from gradebox.images.catalog import input_hash

    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text("FROM scratch\n")
    with open(ctx / "big", "wb") as f:
        f.truncate(3 << 29)
    code = (
        "import pathlib, sys; from gradebox.images.catalog import input_hash; "
        "print(input_hash(pathlib.Path(sys.argv[1]), 'b'))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(ctx)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_memory,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-500:]
    (ctx / "big").unlink()
    (ctx / "small").write_bytes(b"abc")
    h = hashlib.sha256(b"b")
    for name, data in (("Dockerfile", b"FROM scratch\n"), ("small", b"abc")):
        h.update(b"\0" + name.encode() + b"\0" + data)
    assert input_hash(ctx, "b") == "sha256:" + h.hexdigest()  # digests as before


@pytest.mark.parametrize("secret", [".env", "svc/.env.local", "keys.txt"])
def test_a_build_context_holding_a_dotenv_is_refused_before_the_engine_sees_it(tmp_path, secret):
    """A grader's own Dockerfile (``allow: [build]``) with the grader file's folder as its
    context: the project's ``.env`` was sent to the engine whole and ``COPY . /grader`` baked
    it into the image every grader on it reads (keys.txt: a hard link to it)."""
    from gradebox.errors import ImageError
    from gradebox.images.resolve import ImageBuild, ImageResolver

    class NoEngine:
        def __getattr__(self, name):
            raise AssertionError(f"the engine was asked: {name}")

    (tmp_path / "svc").mkdir()
    (tmp_path / "Dockerfile").write_text("FROM scratch\nCOPY . /grader\n")
    (tmp_path / "grade.py").write_text("print(1)\n")
    if secret == "keys.txt":
        (tmp_path / ".env").write_text("OPENAI_API_KEY=sk-x\n")
        os.link(tmp_path / ".env", tmp_path / "keys.txt")
    else:
        (tmp_path / secret).write_text("OPENAI_API_KEY=sk-x\n")
    resolver = ImageResolver(NoEngine(), build=True)  # type: ignore[arg-type]
    with pytest.raises(ImageError, match="keys are never sent"):
        resolver._build(ImageBuild(build="Dockerfile"), tmp_path)


def test_a_cluster_bundle_leaves_out_a_dotenv_in_any_case(tmp_path):
    """The Ray bundle had its own rule for a key file's name (``.env``, ``.env.*``): ``.ENV``
    (what opening ``.env`` reads in a case-folding folder) left the driver for every node."""
    import io
    import tarfile

    from gradebox.cluster.bundle import pack

    (tmp_path / "suite.yaml").write_text("tests: []\n")
    (tmp_path / ".ENV").write_text("OPENAI_API_KEY=sk-x\n")
    (tmp_path / ".Env.local").write_text("OPENAI_API_KEY=sk-y\n")
    with tarfile.open(fileobj=io.BytesIO(pack(tmp_path))) as tar:
        names = tar.getnames()
    assert "suite.yaml" in names and not {".ENV", ".Env.local"} & set(names), names


def test_the_folder_of_every_users_home_is_wide_for_root_too(tmp_path, monkeypatch):
    """``is_wide`` said /home (every user's) is never mounted, but knew only ``$HOME``: as root
    (``/root``) ``cd /home && gradebox exec`` mounted every user's home for the grader."""
    import pwd

    from gradebox.graders.grader_run import is_wide

    homes = tmp_path / "home"
    (homes / "alice").mkdir(parents=True)
    (tmp_path / "root").mkdir()
    alice = pwd.struct_passwd(("alice", "x", 1001, 1001, "", str(homes / "alice"), "/bin/sh"))
    monkeypatch.setattr(pwd, "getpwall", lambda: [alice])
    monkeypatch.setenv("HOME", str(tmp_path / "root"))
    assert is_wide(homes) and is_wide(homes / "alice") and is_wide(tmp_path / "root")
    assert not is_wide(homes / "alice" / "project")


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deep"),
        (b'{"a":' + b"1" * 5000 + b"}", "too many digits"),
    ],
)
@pytest.mark.parametrize("kind", ["openai", "anthropic", "azure"])
def test_a_model_reply_nested_too_deep_is_one_line_not_a_recursion_error(
    kind, body, said, monkeypatch, tmp_path
):
    """200 KB of ``[[[...]]]`` (far under the 16 MiB cap) as a model's reply: the SDK's
    ``json.loads`` raised RecursionError, which left the grader as it was (an internal
    error, a traceback in ``grade``); so did a 5000-digit number (ValueError: Python's digit
    limit). Now the judge's error, in one line naming the target."""
    from gradebox.protocol.models import Status
    from tests.unit.test_model_bounds import Scripted, _grade, _head, _hub, _target

    monkeypatch.setenv("GRADEBOX_LLM_BACKOFF", "0.01")
    monkeypatch.setenv("GRADEBOX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("FAKE_KEY", "sk-test-secret")

    def answer(conn, path):
        conn.sendall(_head(Content_Length=len(body)) + body)

    with Scripted(answer) as server:
        target = _target(kind, server.origin + ("/v1" if kind == "openai" else ""), 20)
        result = _grade(target, _hub(target))
    assert result.status is Status.error
    assert said in (result.evidence or "") and "\n" not in result.evidence
