"""What a model endpoint, or another local user, can do to a model call: the answer cache is
read only from a private folder; a reply is bounded in time (the target's timeout bounds the
whole call) and in decoded size; and a redirect never carries the key elsewhere. Every model
here is a scripted server on loopback."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from gradebox.graders.llm import LlmAssertion
from gradebox.llm import ModelHub, ModelTarget, TargetSet
from gradebox.llm.client import ModelError
from gradebox.protocol.models import GraderResult, Payload, Status
from tests.fake_models import FakeModel

KINDS = ["openai", "anthropic", "azure"]
KEY = "sk-test-secret"


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path):
    monkeypatch.setenv("GRADEBOX_LLM_BACKOFF", "0.01")
    monkeypatch.setenv("GRADEBOX_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("FAKE_KEY", KEY)


@pytest.fixture(scope="module", autouse=True)
def _sdks_imported() -> None:
    """The SDKs take seconds to import on a busy machine: not a part of any call timed here."""
    from gradebox.llm.client import _sdks

    _sdks()


def _target(kind: str, base_url: str, timeout: float = 120.0, **more: object) -> ModelTarget:
    return ModelTarget(
        name="judge",
        provider=kind,
        model="m",
        base_url=base_url,
        api_key_env="FAKE_KEY",
        timeout=timeout,
        **more,
    )


def _hub(target: ModelTarget, **kw: object) -> ModelHub:
    return ModelHub(TargetSet({"judge": target}, "judge"), **kw)


class _Runtime:
    def __init__(self, hub: ModelHub) -> None:
        self.hub = hub

    def candidate_text(self, payload: Payload, preprocessors: list) -> str:
        return payload.output or ""

    def prompt_from_command(self, command: list, config: dict, payload: Payload) -> str:
        raise AssertionError("no prompt command here")


def _grade(target: ModelTarget, hub: ModelHub) -> GraderResult:
    grader = LlmAssertion(target=target, rubrics=[])
    return grader.grade(Payload(input="What is 2+2?", output="5"), _Runtime(hub), "judge")


def _verdict(score: float, why: str) -> str:
    return json.dumps({"score": score, "checks": [], "reasoning": why})


PASSING = _verdict(1.0, "ok")
FAILING = _verdict(0.0, "the answer is wrong")


def _reply(kind: str, text: str) -> bytes:
    """A whole, valid reply of ``kind`` whose text is ``text`` (as tests/fake_models.py)."""
    usage = {"input_tokens": 1, "output_tokens": 1}
    if kind == "anthropic":
        body = {
            "id": "m",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "content": [{"type": "text", "text": text}],
            "usage": usage,
        }
    elif kind == "azure":
        body = {
            "id": "r",
            "object": "response",
            "created_at": 0,
            "model": "m",
            "status": "completed",
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {**usage, "total_tokens": 2},
            "output": [
                {
                    "type": "message",
                    "id": "m",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            ],
        }
    else:
        body = {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": text},
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    return json.dumps(body).encode()


class Scripted:
    """A loopback HTTP server that reads each request whole and answers it with
    ``answer(conn, path)``, raw bytes written on the socket by the test."""

    def __init__(self, answer: Callable[[socket.socket, str], None]) -> None:
        self.answer = answer
        self.requests: list[tuple[str, dict[str, str]]] = []
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def __enter__(self) -> Scripted:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                more = conn.recv(65536)
                if not more:
                    return
                data += more
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
            headers = {k.lower(): v for k, v in headers.items()}
            want = int(headers.get("content-length", "0"))
            while len(body) < want:
                more = conn.recv(65536)
                if not more:
                    break
                body += more
            path = lines[0].split(" ")[1]
            self.requests.append((path, headers))
            with contextlib.suppress(OSError):  # the client gave up: what these tests want
                self.answer(conn, path)


def _head(status: str = "200 OK", **headers: object) -> bytes:
    lines = [f"HTTP/1.1 {status}", "Content-Type: application/json", "Connection: close"]
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _base(kind: str, origin: str) -> str:
    return origin + ("/v1" if kind == "openai" else "")


# -- 1. the answer cache: ours alone ----------------------------------------------------------


def _chown_all(top: Path, user: pwd.struct_passwd) -> None:
    for path in [top, *top.rglob("*")]:
        os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)


def _entries(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


def _plant(variant: str, answers: Path, cache: Path, user: pwd.struct_passwd) -> None:
    """The passing answers in ``answers`` (a cache folder of ours, written by a real call),
    planted where gradebox reads its cache (``cache``/llm), as ``variant`` says."""
    llm = cache / "llm"
    cache.mkdir(mode=0o700, exist_ok=True)
    if variant == "linked_folder":  # llm is a link to another user's folder
        theirs = cache.parent / "theirs"
        shutil.copytree(answers, theirs)
        _chown_all(theirs, user)
        llm.symlink_to(theirs)
        return
    shutil.copytree(answers, llm)
    if variant == "stranger_folder":
        _chown_all(llm, user)
    elif variant == "stranger_entries":  # a folder of ours, entries of theirs
        for entry in _entries(llm):
            os.chown(entry, user.pw_uid, user.pw_gid)
    elif variant == "world_writable":  # a folder anyone may write into: entries of theirs
        for path in [llm, *llm.rglob("*")]:
            if path.is_dir():
                path.chmod(0o777)
            else:
                os.chown(path, user.pw_uid, user.pw_gid)
    elif variant == "group_writable_entries":
        for entry in _entries(llm):
            entry.chmod(0o664)
    elif variant == "linked_entry":  # each entry a link to a file elsewhere
        elsewhere = cache.parent / "elsewhere"
        elsewhere.mkdir()
        for i, entry in enumerate(_entries(llm)):
            target = elsewhere / f"{i}.json"
            shutil.copy(entry, target)
            entry.unlink()
            entry.symlink_to(target)
    else:
        assert variant == "own", variant


def _answered_then_planted(
    variant: str, tmp_path: Path, monkeypatch, user: pwd.struct_passwd
) -> tuple[GraderResult, FakeModel]:
    """A judge that would say "pass" answers once into a scratch cache of ours; those
    answers are planted (``variant``); then the same grader runs against the same judge,
    which now says "fail"."""
    with FakeModel("openai", answers=[PASSING], default=FAILING) as fake:
        target = _target("openai", fake.base_url)
        monkeypatch.setenv("GRADEBOX_CACHE", str(tmp_path / "scratch"))
        first = _grade(target, _hub(target))
        assert first.status is Status.passed, first
        answers = tmp_path / "scratch" / "llm"
        assert _entries(answers), "the first run cached nothing"
        _plant(variant, answers, tmp_path / "cache", user)
        monkeypatch.setenv("GRADEBOX_CACHE", str(tmp_path / "cache"))
        return _grade(target, _hub(target)), fake


@pytest.mark.parametrize(
    "variant",
    [
        "stranger_folder",
        "stranger_entries",
        "world_writable",
        "group_writable_entries",
        "linked_entry",
        "linked_folder",
    ],
)
def test_a_planted_passing_answer_outside_our_private_cache_is_not_used(
    variant, tmp_path, monkeypatch, other_user, caplog
):
    caplog.set_level("WARNING")
    result, fake = _answered_then_planted(variant, tmp_path, monkeypatch, other_user)
    assert result.status is Status.failed, result
    assert len(fake.requests) == 2  # the real model was asked again
    if variant in ("stranger_folder", "world_writable", "linked_folder"):
        warned = [r.getMessage() for r in caplog.records if "model cache" in r.getMessage()]
        assert len(warned) == 1 and str(tmp_path / "cache" / "llm") in warned[0], warned
        assert "\n" not in warned[0]


def test_our_own_cache_still_answers(tmp_path, monkeypatch, other_user, caplog):
    caplog.set_level("WARNING")
    result, fake = _answered_then_planted("own", tmp_path, monkeypatch, other_user)
    assert result.status is Status.passed, result
    assert len(fake.requests) == 1
    assert not [r for r in caplog.records if "model cache" in r.getMessage()]


def test_a_refused_cache_folder_is_never_written_into(tmp_path, monkeypatch, other_user):
    """The answer of a call whose cache folder is another user's is not left there for them
    (nor anywhere they could swap it)."""
    llm = tmp_path / "cache" / "llm"
    llm.mkdir(parents=True)
    _chown_all(llm, other_user)
    with FakeModel("openai", default=FAILING) as fake:
        target = _target("openai", fake.base_url)
        _hub(target).complete(target, [{"role": "user", "content": "q"}])
    assert _entries(llm) == []


# -- 2. bounded replies: a whole-call deadline, a cap on the decoded size ---------------------


def _trickle(kind: str, where: str, hold: float = 6.0, step: float = 0.05):
    """An answer that trickles for ``hold`` s (a space a step, valid JSON whitespace, or a
    header's bytes), then ends as a valid reply: a per-read timeout never fires."""
    body = _reply(kind, FAILING)
    n = int(hold / step)

    def answer(conn: socket.socket, path: str) -> None:
        if where == "headers":
            conn.sendall(b"HTTP/1.1 200 OK\r\nX-Pad: ")
            for _ in range(n):
                conn.sendall(b"a")
                time.sleep(step)
            conn.sendall(b"\r\n" + _head(Content_Length=len(body)).split(b"\r\n", 1)[1] + body)
            return
        conn.sendall(_head(Content_Length=n + len(body)))
        for _ in range(n):
            conn.sendall(b" ")
            time.sleep(step)
        conn.sendall(body)

    return answer


@pytest.mark.parametrize("where", ["body", "headers"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_trickled_reply_ends_at_the_timeout_of_the_whole_call(kind, where):
    with Scripted(_trickle(kind, where)) as server:
        target = _target(kind, _base(kind, server.origin), timeout=1.0)
        started = time.monotonic()
        with pytest.raises(ModelError, match="1 s timeout") as caught:
            _hub(target, use_cache=False).complete(target, [{"role": "user", "content": "q"}])
        took = time.monotonic() - started
    assert took < 3.0, took
    assert "\n" not in str(caught.value)
    assert len(server.requests) == 1  # a reply that outran the deadline is not asked again


def test_a_trickled_judge_is_an_error_verdict():
    with Scripted(_trickle("openai", "body")) as server:
        target = _target("openai", _base("openai", server.origin), timeout=1.0)
        started = time.monotonic()
        result = _grade(target, _hub(target, use_cache=False))
    assert time.monotonic() - started < 3.0
    assert result.status is Status.error, result
    assert "1 s timeout" in result.evidence and "\n" not in result.evidence


@pytest.mark.parametrize("kind", KINDS)
def test_a_slow_but_timely_reply_still_works(kind):
    """The control: a reply trickled over 0.5 s within a 2 s timeout."""
    with Scripted(_trickle(kind, "body", hold=0.5)) as server:
        target = _target(kind, _base(kind, server.origin), timeout=2.0)
        done = _hub(target, use_cache=False).complete(target, [{"role": "user", "content": "q"}])
    assert done.text == FAILING


def _padded(kind: str, size: int) -> bytes:
    """A valid reply after ``size`` bytes of JSON whitespace: one that parses, so only a
    bound on its size stops it."""
    return b" " * size + _reply(kind, PASSING)


def _compressed(data_size: int, kind: str, encoding: str) -> bytes:
    wbits = {"gzip": 31, "deflate": 15, "raw-deflate": -15}[encoding]
    packer = zlib.compressobj(6, zlib.DEFLATED, wbits)
    chunk = b" " * (1 << 20)
    parts = [packer.compress(chunk) for _ in range(data_size >> 20)]
    parts += [packer.compress(_reply(kind, PASSING)), packer.flush()]
    return b"".join(parts)


def _sends(head: bytes, body: bytes, chunked: bool = False):
    def answer(conn: socket.socket, path: str) -> None:
        conn.sendall(head)
        if not chunked:
            conn.sendall(body)
            return
        for i in range(0, len(body), 1 << 16):
            part = body[i : i + (1 << 16)]
            conn.sendall(f"{len(part):x}\r\n".encode() + part + b"\r\n")
        conn.sendall(b"0\r\n\r\n")

    return answer


@pytest.mark.parametrize(
    "shape", ["gzip", "deflate", "raw-deflate", "identity", "identity-chunked", "gzip-chunked"]
)
@pytest.mark.parametrize("kind", KINDS)
def test_a_reply_over_the_decoded_cap_is_an_error(kind, shape):
    size = 40 << 20  # 40 MiB decoded, over the 16 MiB default
    encoding = shape.removesuffix("-chunked")
    chunked = shape.endswith("-chunked")
    body = _padded(kind, size) if encoding == "identity" else _compressed(size, kind, encoding)
    headers = {"Transfer_Encoding": "chunked"} if chunked else {"Content_Length": len(body)}
    if encoding != "identity":
        headers["Content_Encoding"] = encoding.removeprefix("raw-")
    with Scripted(_sends(_head(**headers), body, chunked)) as server:
        target = _target(kind, _base(kind, server.origin))
        with pytest.raises(ModelError, match="16 MiB") as caught:
            _hub(target, use_cache=False).complete(target, [{"role": "user", "content": "q"}])
    assert "\n" not in str(caught.value)
    assert len(server.requests) == 1


def test_an_oversized_judge_reply_is_an_error_verdict():
    body = _compressed(40 << 20, "openai", "gzip")
    with Scripted(_sends(_head(Content_Length=len(body), Content_Encoding="gzip"), body)) as s:
        target = _target("openai", _base("openai", s.origin))
        result = _grade(target, _hub(target, use_cache=False))
    assert result.status is Status.error, result
    assert "16 MiB" in result.evidence and "\n" not in result.evidence


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "identity"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_normal_reply_in_any_encoding_still_works(kind, encoding):
    """The control: real servers compress their replies."""
    plain = _padded(kind, 1 << 20)  # 1 MiB: well under the cap
    if encoding == "identity":
        body, headers = plain, {}
    else:
        packer = zlib.compressobj(6, zlib.DEFLATED, 31 if encoding == "gzip" else 15)
        body, headers = packer.compress(plain) + packer.flush(), {"Content_Encoding": encoding}
    with Scripted(_sends(_head(Content_Length=len(body), **headers), body)) as server:
        target = _target(kind, _base(kind, server.origin))
        done = _hub(target, use_cache=False).complete(target, [{"role": "user", "content": "q"}])
    assert done.text == PASSING


@pytest.mark.parametrize("kind", KINDS)
def test_a_reply_claiming_absurd_token_counts_counts_none(kind):
    """A count no reply can have (10**4000 made the cost an OverflowError, a traceback) is no
    count, as a negative one is; the largest a float holds exactly is still one."""
    body = json.loads(_reply(kind, PASSING))
    sent, received = ("prompt", "completion") if kind == "openai" else ("input", "output")
    for counts, kept in (((10**4000, 1 << 60), (0, 0)), ((1 << 53, 7), (1 << 53, 7))):
        body["usage"].update({f"{sent}_tokens": counts[0], f"{received}_tokens": counts[1]})
        data = json.dumps(body).encode()
        with Scripted(_sends(_head(Content_Length=len(data)), data)) as server:
            price = {"input": 1.0, "output": 2.0}
            target = _target(kind, _base(kind, server.origin), price=price)
            done = _hub(target, use_cache=False).complete(
                target, [{"role": "user", "content": "q"}]
            )
        assert (done.input_tokens, done.output_tokens) == kept
        assert done.text == PASSING and done.cost_usd == target.cost(*kept)


@pytest.mark.parametrize(
    ("encoding", "body", "why"),
    [
        ("br", b"\x1b\x03\x00", "Content-Encoding 'br'"),
        ("gzip, gzip", b"", "Content-Encoding 'gzip, gzip'"),
        ("gzip", b"\x1f\x8b\x08\x00garbage-that-is-no-deflate-stream", "gzip stream is corrupt"),
    ],
)
def test_a_reply_in_an_encoding_we_do_not_read_is_an_error(encoding, body, why):
    """Nothing is passed on undecoded, and an error is one line, never retried."""
    with Scripted(_sends(_head(Content_Length=len(body), Content_Encoding=encoding), body)) as s:
        target = _target("openai", _base("openai", s.origin))
        with pytest.raises(ModelError, match=why) as caught:
            _hub(target, use_cache=False).complete(target, [{"role": "user", "content": "q"}])
    assert "\n" not in str(caught.value) and len(s.requests) == 1


_BOMB_CALL = """
import json, sys
from gradebox.llm import ModelHub, ModelTarget, TargetSet
from gradebox.llm.client import ModelError
target = ModelTarget(name="judge", provider=sys.argv[1], model="m", base_url=sys.argv[2],
                     api_key_env="FAKE_KEY")
hub = ModelHub(TargetSet({"judge": target}, "judge"), use_cache=False)
try:
    out = "answered: " + hub.complete(target, [{"role": "user", "content": "q"}]).text[:40]
except ModelError as exc:
    out = str(exc)
# VmHWM, not ru_maxrss: the latter keeps the forking parent's peak across exec.
status = open("/proc/self/status").read().split("VmHWM:")[1].split()
peak = int(status[0]) * 1024
print(json.dumps({"out": out, "peak": peak}))
"""


@pytest.fixture(scope="module")
def bomb() -> dict[str, bytes]:
    """~600 KB of gzip that inflates to 600 MiB of JSON whitespace and a passing reply."""
    return {kind: _compressed(600 << 20, kind, "gzip") for kind in ("openai", "anthropic")}


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_gzip_bomb_leaves_the_process_small(kind, bomb, tmp_path):
    body = bomb[kind]
    assert len(body) < 1 << 20
    head = _head(Content_Length=len(body), Content_Encoding="gzip")
    with Scripted(_sends(head, body)) as server:
        env = {**os.environ, "GRADEBOX_CACHE": str(tmp_path / "c"), "FAKE_KEY": KEY}
        run = subprocess.run(
            [sys.executable, "-c", _BOMB_CALL, kind, _base(kind, server.origin)],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert "16 MiB" in got["out"], got
    assert got["peak"] < 300 << 20, f"peak RSS {got['peak'] >> 20} MiB"


# -- 3. redirects: the key stays with its endpoint --------------------------------------------


def _redirect(status: str, to: Callable[[], str]):
    def answer(conn: socket.socket, path: str) -> None:
        conn.sendall(_head(status, Location=to() + path, Content_Length=0))

    return answer


@pytest.mark.parametrize("status", ["307 Temporary Redirect", "308 Permanent Redirect"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_redirect_to_another_origin_is_not_followed_with_the_key(kind, status):
    with FakeModel(kind) as elsewhere:
        other = elsewhere.base_url.removesuffix("/v1")
        with Scripted(_redirect(status, lambda: other)) as server:
            target = _target(kind, _base(kind, server.origin))
            with pytest.raises(ModelError, match="redirect") as caught:
                _hub(target, use_cache=False).complete(target, [{"role": "user", "content": "q"}])
    assert elsewhere.requests == [] and elsewhere.headers == []
    assert other in str(caught.value) and KEY not in str(caught.value)
    assert len(server.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_redirect_within_the_origin_is_refused_too(kind):
    """The rule chosen: a model endpoint's redirect is never followed (a POST API does not
    redirect; the error names where it pointed, for the operator's base_url)."""
    holder: list[str] = []
    with Scripted(_redirect("307 Temporary Redirect", lambda: holder[0])) as server:
        holder.append(server.origin)
        target = _target(kind, _base(kind, server.origin))
        with pytest.raises(ModelError, match="redirect"):
            _hub(target, use_cache=False).complete(target, [{"role": "user", "content": "q"}])
    assert len(server.requests) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_the_key_still_reaches_its_own_endpoint(kind):
    """The control: no redirect, the key is sent as the provider wants it."""
    with FakeModel(kind, default="fine") as fake:
        target = _target(kind, fake.base_url)
        done = _hub(target, use_cache=False).complete(target, [{"role": "user", "content": "q"}])
    assert done.text == "fine"
    assert KEY in " ".join(fake.headers[0].values())


def test_the_graders_proxy_has_the_same_bounds():
    """A script grader's model proxy calls through the same hub: a trickled reply ends at
    the timeout there too, as a 502 with the one-line reason."""
    from gradebox.llm.proxy import TargetProxy

    with Scripted(_trickle("openai", "body")) as server:
        target = _target("openai", _base("openai", server.origin), timeout=1.0)
        proxy = TargetProxy(_hub(target, use_cache=False), target, max_calls=5)
        started = time.monotonic()
        status, answer = proxy.invoke({"question": "q"})
        took = time.monotonic() - started
        proxy.close()
    assert (status, took < 3.0) == (502, True), (status, took, answer)
    assert "1 s timeout" in answer["error"] and len(server.requests) == 1
