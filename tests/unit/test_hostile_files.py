"""Files an operator hands gradebox, hostile or broken, and files gradebox writes under faults:
each bad input is exit 2 with one line naming the file, never a traceback; a failed write
leaves the previous file whole."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gradebox.core.atomic import write_atomic
from gradebox.core.jsonl import JsonlWriter, load_json, read_jsonl
from gradebox.errors import ConfigError, StorageError
from gradebox.protocol.models import Status, TestResult

HOSTILE = {
    "deep-100k": b"[" * 100_000 + b"]" * 100_000,
    "deep-free-form": b'{"metadata": {"x": ' + b"[" * 3000 + b"]" * 3000 + b"}}",
    "binary": bytes(range(256)) * 4,
    "utf-16": '{"output": "hello"}'.encode("utf-16"),
    "lone-surrogate": b'{"output": "a\\ud800b"}',
}


def gradebox(*args: object, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gradebox", *map(str, args)],
        capture_output=True, text=True, cwd=cwd, timeout=120,
    )  # fmt: skip


def one_line(p: subprocess.CompletedProcess, name: str) -> str:
    assert "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gradebox: error: "), p.stderr
    assert name in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_grade_input_hostile_payload_is_one_line(tmp_path, case):
    grader = tmp_path / "g.yaml"
    grader.write_text("type: program\nprogram: 'true'\n")
    bad = tmp_path / f"{case}.json"
    bad.write_bytes(HOSTILE[case])
    p = gradebox("grade", grader, "--input", bad, "--workspace", tmp_path, "--sandbox", "host")
    assert p.returncode == 2
    one_line(p, f"{case}.json")


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_compare_hostile_results_file_is_one_line(tmp_path, case):
    good = tmp_path / "a.jsonl"
    good.write_text(json.dumps({"id": "t", "status": "passed", "passed": True, "score": 1.0,
                                "graders": []}) + "\n")  # fmt: skip
    bad = tmp_path / f"{case}.jsonl"
    bad.write_bytes(good.read_bytes() + HOSTILE[case] + b"\n")
    p = gradebox("compare", good, bad)
    assert p.returncode == 2
    assert ":2:" in one_line(p, f"{case}.jsonl")  # the line, too


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_batch_hostile_records_file_is_one_line(tmp_path, case):
    grader = tmp_path / "g.yaml"
    grader.write_text("type: program\nprogram: 'true'\n")
    bad = tmp_path / f"{case}.jsonl"
    bad.write_bytes(b'{"id": "1", "output": "x"}\n' + HOSTILE[case] + b"\n")
    out = tmp_path / "out.jsonl"
    p = gradebox("batch", bad, "--grader", grader, "--out", out, "--sandbox", "host")
    assert p.returncode == 2
    one_line(p, f"{case}.jsonl")


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_line_in_results_is_refused_by_line_number(tmp_path, case):
    """What ``--resume`` reads (pydantic's parser: bounded already): a control."""
    path = tmp_path / "results.jsonl"
    path.write_bytes(HOSTILE[case] + b"\n")
    with pytest.raises(ConfigError, match=r"results.jsonl:1: "):
        list(read_jsonl(path, TestResult))


def test_load_json_bounds():
    assert load_json(b'{"a": [1, "\\u00e9"]}', file="f") == {"a": [1, "é"]}
    assert load_json("[" * 100 + "]" * 100, file="f") is not None  # at the limit
    with pytest.raises(ConfigError, match="f:3: JSON nested deeper than 100"):
        load_json("[" * 101 + "]" * 101, file="f", line=3)
    with pytest.raises(ConfigError, match="lone surrogate"):
        load_json('{"\\udc80": 1}', file="f")  # in a key too


def _result(i: int, size: int = 10) -> TestResult:
    return TestResult(id=f"t{i}", status=Status.passed, passed=True, score=1.0, output="x" * size)


def test_a_failed_write_leaves_the_previous_summary_whole(tmp_path, monkeypatch):
    summary = tmp_path / "summary.json"
    write_atomic(summary, '{"passed": 2}\n')
    real_write = os.write

    def half(fd: int, data: bytes) -> int:  # the disk takes half, then is full
        if len(data) > 100:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", half)
    with pytest.raises(StorageError, match=rf"results folder {tmp_path}: no space left"):
        write_atomic(summary, '{"passed": 8, "pad": "' + "p" * 5000 + '"}\n',
                     what="results folder")  # fmt: skip
    assert summary.read_text() == '{"passed": 2}\n'
    assert sorted(os.listdir(tmp_path)) == ["summary.json"]  # no temporary file left


@pytest.mark.parametrize("writer", ["summary", "rewrite"])
def test_a_signal_mid_write_leaves_no_temporary_file(tmp_path, monkeypatch, writer):
    """SIGTERM is a KeyboardInterrupt in the runner (cli.app): one that lands while
    summary.json, a report or a resumed results.jsonl is written (the fsync of a large
    file is the widest window) left the .tmp file beside it for good."""
    from gradebox.core.jsonl import rewrite_jsonl

    target = tmp_path / ("summary.json" if writer == "summary" else "results.jsonl")
    target.write_text("{}\n")

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        if writer == "summary":
            write_atomic(target, '{"passed": 8}\n')
        else:
            rewrite_jsonl(target, [_result(0)])
    assert target.read_text() == "{}\n"  # the previous file, whole
    assert sorted(os.listdir(tmp_path)) == [target.name]  # and nothing beside it


def test_a_results_line_is_appended_whole_or_not_at_all(tmp_path, monkeypatch):
    path = tmp_path / "results.jsonl"
    writer = JsonlWriter(path)
    writer.append(_result(0))
    before = path.read_bytes()
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, data[: len(data) // 3]))
    with pytest.raises(StorageError, match="cannot write results.jsonl"):
        writer.append(_result(1, size=60_000))
    monkeypatch.setattr(os, "write", real_write)
    assert path.read_bytes() == before  # the short write was taken back
    writer.append(_result(2))  # once there is room, appends go on, each line whole
    writer.close()
    assert [r.id for r in read_jsonl(path, TestResult)] == ["t0", "t2"]


def test_a_torn_tail_longer_than_one_read_is_dropped(tmp_path):
    path = tmp_path / "results.jsonl"
    whole = _result(0).model_dump_json().encode() + b"\n"
    path.write_bytes(whole + b'{"id": "t1", "output": "' + b"x" * 200_000)  # killed mid-line
    JsonlWriter(path).close()
    assert path.read_bytes() == whole
    path.write_bytes(b'{"id": "t1", "out')  # only a torn line: nothing stands
    JsonlWriter(path).close()
    assert path.read_bytes() == b""


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_any_out_of_space_reaching_the_cli_is_one_line(capsys, code):
    import typer

    from gradebox.cli.app import EXIT_STORAGE, handled

    def full() -> None:
        raise OSError(code, os.strerror(code), "/x/y")

    with pytest.raises(typer.Exit) as exit_:
        handled(full)()
    assert exit_.value.exit_code == EXIT_STORAGE == 5
    err = capsys.readouterr().err
    assert err == f"gradebox: error: out of space: /x/y: {os.strerror(code).lower()}\n"

    def broken() -> None:  # any other OSError is a bug of ours: its traceback stays
        raise OSError(errno.EIO, "I/O error")

    with pytest.raises(OSError):
        handled(broken)()


def test_a_full_disk_names_the_folder_it_happened_in(tmp_path, monkeypatch):
    import tempfile

    from gradebox.core.scratch import scratch_error

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    full = errno.ENOSPC, "No space left on device"
    assert str(scratch_error(OSError(*full, b"a.txt"))) == (
        f"scratch folder {tmp_path} ($TMPDIR): no space left on device (ENOSPC)"
    )  # a name relative to a descriptor says nothing: the scratch folder is named
    assert str(scratch_error(OSError(*full, "/var/lib/gradebox/x"))).startswith(
        "cannot write /var/lib/gradebox/x: no space left"
    )  # the OCI backend's own storage, say


def _quota_exceeded(*args: object, **kwargs: object) -> None:
    raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))


def test_a_full_quota_is_out_of_space_at_every_step_that_asks(tmp_path, monkeypatch):
    """EDQUOT (a user's quota, which no tmpfs in tests/docker gives) ends a run as ENOSPC
    does, at each step that tells a full disk from the data's or the test's own error."""
    from gradebox.core.atomic import writable_folder
    from gradebox.files import baseline, workspace
    from gradebox.graders.grader_run import GraderRun
    from gradebox.sandbox.defaults import DEFAULT_SECURITY
    from gradebox.sandbox.host import HostSandbox

    real_open = os.open

    def probe_full(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if ".gradebox-probe" in str(path):
            _quota_exceeded()
        return real_open(path, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(os, "open", probe_full)
        with pytest.raises(StorageError, match=r"results folder .*: disk quota exceeded"):
            writable_folder(tmp_path / "out", field="--out")

    ws = tmp_path / "ws"
    ws.mkdir()
    with monkeypatch.context() as m:
        m.setattr(baseline._Store, "init", _quota_exceeded)
        with pytest.raises(OSError) as raised:  # not this test's WorkspaceError: the run's
            baseline.Baseline.take(ws, store=tmp_path / "store-1")
        assert raised.value.errno == errno.EDQUOT
    base = baseline.Baseline.take(ws, store=tmp_path / "store-2")
    with monkeypatch.context() as m:
        m.setattr(baseline.Baseline, "_snapshot", _quota_exceeded)
        with pytest.raises(OSError) as raised:
            base.changes()
        assert raised.value.errno == errno.EDQUOT

    monkeypatch.setattr(workspace, "safe_copy", _quota_exceeded)
    with pytest.raises(OSError) as raised:  # unmounted: the scratch folder's, not the quota's
        workspace.Workspace(tmp_path / "w", workspace.Quota(), False).fill(ws)
    assert raised.value.errno == errno.EDQUOT
    with pytest.raises(workspace.WorkspaceError, match="exceeds the workspace quota"):
        workspace.Workspace(tmp_path / "w", workspace.Quota(), True).fill(ws)

    with GraderRun(HostSandbox(), security=DEFAULT_SECURITY) as run:
        run.prepare(image="sha256:" + "0" * 64, command=["true"], workspace=None)
        monkeypatch.setattr(Path, "write_bytes", _quota_exceeded)
        with pytest.raises(StorageError, match="disk quota exceeded"):
            run.execute(b"{}", files={"input.json": b"{}"})


def test_a_full_quota_in_a_test_ends_the_run(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from gradebox.cli.app import EXIT_STORAGE, app
    from gradebox.lifecycle import testrun

    (tmp_path / "tpl").mkdir()
    suite = tmp_path / "suite.yaml"
    suite.write_text("workspace: {template: ./tpl}\ntests:\n"
                     "  - {id: t, output: a, assert: [{type: equals, value: a}]}\n")  # fmt: skip
    monkeypatch.setattr(testrun.Baseline, "take", _quota_exceeded)
    argv = ["run", str(suite), "--out", str(tmp_path / "out"), "--sandbox", "host"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == EXIT_STORAGE, result.output
    assert "disk quota exceeded" in result.output and "internal error" not in result.output


def test_out_of_space_is_asked_through_one_predicate():
    """Whether an error is a full disk is ``core.atomic.out_of_space``: a second spelling
    (``exc.errno in (errno.ENOSPC, errno.EDQUOT)``, or the numbers) drifts from it."""
    src = Path(__file__).resolve().parents[2] / "src" / "gradebox"
    spelled = [
        f"{path.relative_to(src)}:{line}"
        for path in sorted(src.rglob("*.py"))
        if path != src / "core" / "atomic.py"
        for line in _asks_for_a_full_disk(path.read_text(encoding="utf-8"))
    ]
    assert spelled == [], "use gradebox.core.atomic.out_of_space"
    for spelling in ("x.errno in (errno.ENOSPC, errno.EDQUOT)", "e.errno == ENOSPC",
                     "exc.errno in {28, 122}", "errno.EDQUOT == exc.errno"):  # fmt: skip
        assert _asks_for_a_full_disk(spelling) == [1], spelling


def _asks_for_a_full_disk(source: str) -> list[int]:
    """Lines comparing an ``errno`` with ENOSPC or EDQUOT, by name or number."""
    import ast

    full = {"ENOSPC", "EDQUOT", errno.ENOSPC, errno.EDQUOT}

    def names(node: ast.AST) -> set[object]:
        out: set[object] = set()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name):
                out.add(sub.id)
            elif isinstance(sub, ast.Attribute):
                out.add(sub.attr)
            elif isinstance(sub, ast.Constant) and type(sub.value) is int:
                out.add(sub.value)
        return out

    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Compare) and "errno" in (seen := names(node)) and seen & full
    ]


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_assert_file_hostile_payload_is_one_line(tmp_path, case):
    (tmp_path / ".gradebox" / "graders").mkdir(parents=True)
    (tmp_path / ".gradebox" / "graders" / "g.py").write_text("print('{\"pass\": true}')\n")
    bad = tmp_path / f"{case}.json"
    bad.write_bytes(HOSTILE[case])
    p = gradebox("assert", "g", "--file", bad, cwd=tmp_path)
    assert p.returncode == 2
    one_line(p, f"{case}.json")


def test_assert_file_of_the_wrong_shape_is_one_line(tmp_path):
    (tmp_path / ".gradebox" / "graders").mkdir(parents=True)
    (tmp_path / ".gradebox" / "graders" / "g.py").write_text("print('{\"pass\": true}')\n")
    for name, body in (("list.json", b"[1]"), ("field.json", b'{"output": 5}')):
        (tmp_path / name).write_bytes(body)
        p = gradebox("assert", "g", "--file", tmp_path / name, cwd=tmp_path)
        assert p.returncode == 2
        one_line(p, name)
