"""Other local users are attackers too: what gradebox writes into a results folder, and what
``gradebox view`` serves, on a machine shared with users who read our code.

- A link another user left where gradebox writes (``results.jsonl``, ``summary.json``, the
  folder itself) is never followed: root must not create, empty or append to a file of their
  choosing, with agent text in it.
- A results folder that another user could swap or plant files in (a link, theirs, writable
  by others and not sticky, or below a folder of theirs) is refused in one line naming it.
- ``gradebox view`` answers only to the URL it printed: its random token is in every path, so
  another user on the machine reaching 127.0.0.1 reads nothing, not even the page.

The tests run as root (as CI does) and make a user of their own to play the other one.
"""

from __future__ import annotations

import http.client
import json
import os
import pwd
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gradebox.core.atomic import writable_folder, write_atomic
from gradebox.core.jsonl import JsonlWriter, open_jsonl_for_append, rewrite_jsonl
from gradebox.errors import ConfigError, GradeboxError
from gradebox.protocol.models import Status, TestResult
from gradebox.report.view import ViewServer

AGENT_TEXT = "agent wrote this"


def _result(key: str = "t1") -> TestResult:
    return TestResult(id=key, status=Status.passed, passed=True, score=1.0, output=AGENT_TEXT)


def _theirs(path: Path, user: pwd.struct_passwd) -> Path:
    os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)
    return path


# --- results.jsonl, summary.json: never through a link -------------------------------------


@pytest.mark.parametrize("opener", [open_jsonl_for_append, JsonlWriter])
def test_a_dangling_link_for_results_jsonl_is_not_followed(tmp_path, opener):
    victim = tmp_path / "elsewhere" / "made-by-root"
    victim.parent.mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "results.jsonl").symlink_to(victim)
    with pytest.raises(GradeboxError) as err:
        opener(tmp_path / "out" / "results.jsonl")
    assert "results.jsonl" in str(err.value) and "\n" not in str(err.value)
    assert not victim.exists()  # not created


def test_a_link_to_an_existing_file_is_neither_emptied_nor_appended_to(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"torn line without its newline")  # would be cut back to nothing
    (tmp_path / "results.jsonl").symlink_to(victim)
    with pytest.raises(GradeboxError):
        JsonlWriter(tmp_path / "results.jsonl").append(_result())
    assert victim.read_bytes() == b"torn line without its newline"


def test_a_fifo_for_results_jsonl_is_refused_not_written(tmp_path):
    os.mkfifo(tmp_path / "results.jsonl")
    with pytest.raises(GradeboxError):
        open_jsonl_for_append(tmp_path / "results.jsonl")


def test_another_users_file_planted_as_results_jsonl_is_not_appended_to(tmp_path, other_user):
    # A sticky folder others may write (as /tmp is): they can plant a file under our name.
    planted = tmp_path / "results.jsonl"
    planted.write_text("")
    _theirs(planted, other_user)
    with pytest.raises(GradeboxError) as err:
        JsonlWriter(planted)
    assert "results.jsonl" in str(err.value)
    assert planted.read_text() == ""


def test_summary_and_rewrite_replace_a_link_never_write_through_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    for name in ("summary.json", "results.jsonl"):
        (tmp_path / name).unlink(missing_ok=True)
        (tmp_path / name).symlink_to(victim)
    write_atomic(tmp_path / "summary.json", "{}\n", what="results folder")
    rewrite_jsonl(tmp_path / "results.jsonl", [_result()])
    assert victim.read_text() == "keep"
    assert not (tmp_path / "summary.json").is_symlink()
    assert not (tmp_path / "results.jsonl").is_symlink()


def test_control_results_are_appended_to_a_file_of_ours(tmp_path):
    writer = JsonlWriter(tmp_path / "out" / "results.jsonl")
    writer.append(_result("a"))
    writer.append(_result("b"))
    writer.close()
    lines = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == ["a", "b"]
    writer = JsonlWriter(tmp_path / "out" / "results.jsonl")  # again, to resume
    writer.append(_result("c"))
    writer.close()
    assert len((tmp_path / "out" / "results.jsonl").read_text().splitlines()) == 3


# --- the results folder: one another user cannot swap or plant in -------------------------


def _refused(path: Path) -> str:
    with pytest.raises(ConfigError) as err:
        writable_folder(path, field="--out")
    message = str(err.value)
    assert "--out" in message and str(path) in message and "\n" not in message, message
    return message


def test_a_results_folder_that_is_a_link_of_another_user_is_refused(tmp_path, other_user):
    target = tmp_path / "target"
    target.mkdir()
    _theirs(target, other_user)
    (tmp_path / "out").symlink_to(target)
    _theirs(tmp_path / "out", other_user)
    assert "owned by uid" in _refused(tmp_path / "out")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    _theirs(tmp_path / "dangling", other_user)
    assert "owned by uid" in _refused(tmp_path / "dangling")
    assert not (tmp_path / "nowhere").exists()  # nothing made through their link
    # A link of theirs to a folder of ours: they can point it elsewhere once checked.
    (tmp_path / "mine").mkdir()
    (tmp_path / "via").symlink_to(tmp_path / "mine")
    _theirs(tmp_path / "via", other_user)
    assert "owned by uid" in _refused(tmp_path / "via" / "out")
    assert not (tmp_path / "mine" / "out").exists()


def test_a_results_folder_of_another_user_is_refused(tmp_path, other_user):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    _theirs(theirs, other_user)
    assert "owned by uid" in _refused(theirs)
    # Below a folder of theirs: they can rename ours away and put a link in its place.
    (tmp_path / "parent" / "out").mkdir(parents=True)
    _theirs(tmp_path / "parent", other_user)
    assert "owned by uid" in _refused(tmp_path / "parent" / "out")
    assert "owned by uid" in _refused(tmp_path / "parent" / "new")
    assert not (tmp_path / "parent" / "new").exists()


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o1777])
def test_a_results_folder_writable_by_others_is_refused(tmp_path, mode, other_user):
    out = tmp_path / "shared"
    out.mkdir()
    os.chown(out, 0, other_user.pw_gid)  # a group with another user in it
    out.chmod(mode)  # sticky too: others may still plant a file under a name we write
    assert "written by others" in _refused(out)
    below = tmp_path / "open"
    below.mkdir()
    below.chmod(0o777)  # not sticky: anyone can rename what is in it
    assert "written by others" in _refused(below / "out")


def test_control_folders_of_ours_are_fine(tmp_path):
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)  # as /tmp: others can write in it, not rename what is ours
    assert writable_folder(sticky / "new" / "run", field="--out") == sticky / "new" / "run"
    mode = (sticky / "new" / "run").stat().st_mode
    assert not mode & 0o022, oct(mode)  # made writable by us alone
    mine = tmp_path / "mine"
    mine.mkdir()
    mine.chmod(0o755)
    assert writable_folder(mine, field="--out") == mine
    (tmp_path / "latest").symlink_to(mine)  # a link of our own is ours to follow
    assert writable_folder(tmp_path / "latest", field="--out") == tmp_path / "latest"


def test_gradebox_run_refuses_a_linked_results_folder_in_one_line(tmp_path, other_user):
    (tmp_path / "suite.yaml").write_text(
        "tests:\n  - id: t\n    output: x\n    assert: [{type: contains, value: x}]\n"
    )
    (tmp_path / "out").symlink_to(tmp_path / "nowhere")
    _theirs(tmp_path / "out", other_user)
    suite, out = tmp_path / "suite.yaml", tmp_path / "out"
    argv = ["run", str(suite), "--out", str(out), "--sandbox", "host"]
    p = subprocess.run(
        [sys.executable, "-m", "gradebox", *argv], capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and "--out" in p.stderr and str(out) in p.stderr
    errors = [x for x in p.stderr.splitlines() if x.startswith("gradebox: error:")]
    assert len(errors) == 1 and p.stderr.rstrip().endswith(errors[0]), p.stderr
    assert not (tmp_path / "nowhere").exists()


# --- gradebox view: a secret in its URL -------------------------------------------------


def _get(port: int, path: str, host: str | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.putrequest("GET", path, skip_host=True)
    conn.putheader("Host", host or f"127.0.0.1:{port}")
    conn.endheaders()
    resp = conn.getresponse()
    return resp.status, resp.read()


@pytest.fixture
def served(tmp_path) -> Iterator[ViewServer]:
    run = tmp_path / "private-run"
    run.mkdir(mode=0o700)
    (run / "results.jsonl").write_text(_result("secret-test").model_dump_json() + "\n")
    (run / "summary.json").write_text("{}")
    server = ViewServer(run)
    server.start()
    yield server
    server.shutdown()


def test_the_view_refuses_every_request_without_its_token(served):
    token = served.token
    wrong = ("x" if token[0] != "x" else "y") + token[1:]
    guesses = ["/", "/api/results?offset=0&file=", "/favicon.ico", "/index.html"]
    near = [f"/{wrong}/", f"/{wrong}/api/results?offset=0&file=", f"/{token[:-1]}/"]
    near += [f"/{token}x/", f"/x/{token}/", f"/?{token}"]
    for path in guesses + near:
        code, body = _get(served.port, path)
        assert code == 403, path
        assert b"secret-test" not in body and AGENT_TEXT.encode() not in body, path


def test_a_path_that_is_not_ascii_is_refused_not_a_crash(served):
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as conn:
        host = f"127.0.0.1:{served.port}".encode()
        conn.sendall(b"GET /" + "é".encode() * 43 + b"/ HTTP/1.0\r\nHost: " + host + b"\r\n\r\n")
        answer = b"".join(iter(lambda: conn.recv(65536), b""))
    assert answer.startswith(b"HTTP/1.0 403 ") and b"secret-test" not in answer


def test_the_view_answers_its_printed_url(served):
    assert served.url == f"http://127.0.0.1:{served.port}/{served.token}/"
    assert len(served.token) >= 40  # 256 bits
    path = served.url.removeprefix(f"http://127.0.0.1:{served.port}")
    code, body = _get(served.port, path)
    assert code == 200 and b"secret-test" in body
    code, body = _get(served.port, path + "api/results?offset=0&file=")
    assert code == 200 and json.loads(body)["rows"][0]["id"] == "secret-test"
    assert _get(served.port, path.rstrip("/"))[0] == 308  # on to the page, with its slash
    # The Host check stays: the token does not let a rebinding page in.
    assert _get(served.port, path, host=f"attacker.example:{served.port}")[0] == 403


def test_each_view_has_its_own_token(tmp_path):
    tokens = set()
    for _ in range(3):
        view = ViewServer(tmp_path)
        tokens.add(view.token)
        view.httpd.server_close()
    assert len(tokens) == 3


def test_another_local_user_reads_nothing_through_the_port(served, other_user):
    # What they can do: connect to 127.0.0.1:PORT, guess paths (not read our terminal).
    probe = (
        "import http.client, sys\n"
        "for path in sys.argv[2:]:\n"
        "    c = http.client.HTTPConnection('127.0.0.1', int(sys.argv[1]), timeout=30)\n"
        "    c.request('GET', path)\n"
        "    r = c.getresponse()\n"
        "    print(r.status, r.read().decode(errors='replace').replace(chr(10), ' ')[:200])\n"
    )
    paths = ["/", "/api/results?offset=0&file=", "/favicon.ico"]
    as_them = ["runuser", "-u", other_user.pw_name, "--", "/usr/bin/python3", "-I", "-c", probe]
    p = subprocess.run(
        [*as_them, str(served.port), *paths], capture_output=True, text=True, timeout=60, cwd="/"
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 3 and all(x.startswith("403 ") for x in lines), lines
    assert "secret-test" not in p.stdout
    # Control: the private folder itself is closed to them; only the port was open.
    assert stat.S_IMODE(served.file.parent.stat().st_mode) == 0o700


def test_gradebox_view_prints_a_url_with_its_token(tmp_path):
    (tmp_path / "results.jsonl").write_text(_result("printed").model_dump_json() + "\n")
    argv = [sys.executable, "-m", "gradebox", "view", str(tmp_path)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        port = int(url.split(":")[2].split("/")[0])
        token = url.rstrip("/").rsplit("/", 1)[1]
        assert len(token) >= 40, url
        code, body = _get(port, f"/{token}/")
        assert code == 200 and b"printed" in body
        assert _get(port, "/")[0] == 403
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_hostile_run_folder_neither_hangs_nor_floods_the_view(tmp_path):
    # A run folder another user wrote: summary.json a link to /dev/zero (read whole: memory
    # without end), results.jsonl a FIFO (opened: a request that never ends).
    (tmp_path / "summary.json").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "results.jsonl")
    view = ViewServer(tmp_path)
    view.start()
    try:
        base = f"/{view.token}/"
        for path in (
            base,
            base + "api/results?offset=0&file=",
            base + "api/results?offset=9&file=x",
        ):
            conn = http.client.HTTPConnection("127.0.0.1", view.port, timeout=20)
            conn.request("GET", path)
            assert conn.getresponse().status in (200, 500), path
    finally:
        view.shutdown()


def test_reading_results_back_never_opens_a_fifo(tmp_path):
    from gradebox.protocol.results import read_results, read_results_from

    os.mkfifo(tmp_path / "results.jsonl")  # no writer: an open for reading would block
    assert read_results(tmp_path / "results.jsonl") == {}
    assert read_results_from(tmp_path / "results.jsonl", 0) == ([], 0)
