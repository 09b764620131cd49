"""`gradebox grade`'s lean path, without an engine: its hand readings held to the models they
stand for (wire), the one writer of a result (report.plain), the private cache of validated
grader files (compiled, private_cache), and its options. The path end to end:
tests/docker/test_grade_lean.py."""

from __future__ import annotations

import io
import json
import os
import random
import sys
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from gradebox.core.private_cache import PrivateCache
from gradebox.graders import compiled, config, load_grader
from gradebox.graders.run import LARGE_OUTPUT_CHARS
from gradebox.graders.verdict import result_of, verdict
from gradebox.protocol import models as protocol
from gradebox.protocol import wire
from gradebox.sandbox.base import RunOutcome
from gradebox.sandbox.defaults import DEFAULT_LIMITS

# -- wire: each hand reading is the model's, or Unsure ---------------------------------------

SCALARS = [None, True, False, 0, 1, 2.5, -1, 1e-7, 1e20, "", "x", "42", [], {}, [1], {"a": 1}]


def _values(rng: random.Random, depth: int = 0) -> object:
    pick = rng.random()
    if depth < 2 and pick < 0.15:
        return [_values(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if depth < 2 and pick < 0.25:
        return {rng.choice(["role", "content", "text", "k"]): _values(rng, depth + 1)
                for _ in range(rng.randint(0, 3))}  # fmt: skip
    return rng.choice(SCALARS)


def test_payload_dump_is_the_models_or_unsure():
    rng = random.Random(7)
    fields = [*wire.PAYLOAD_FIELDS, "extra", "other"]
    vouched = 0
    cases = [{}, {"output": "The answer is 42."}, {"input": "q", "expected_output": ["a"]},
             {"input": [{"role": "user", "content": "x", "name": "n"}], "cost_usd": 3}]  # fmt: skip
    for _ in range(4000):
        cases.append({rng.choice(fields): _values(rng) for _ in range(rng.randint(0, 4))})
    for data in cases:
        try:
            ours = wire.payload_dump(data)
        except wire.Unsure:
            continue
        model = protocol.Payload.model_validate(data).model_dump(mode="json")
        assert json.dumps(ours) == json.dumps(model), data  # values, types and key order
        vouched += 1
    assert vouched > 500  # most plain payloads are read by hand


def test_payload_fields_are_the_models():
    assert tuple(protocol.Payload.model_fields) == wire.PAYLOAD_FIELDS
    assert LARGE_OUTPUT_CHARS == protocol.LARGE_OUTPUT_CHARS


def test_result_fields_are_the_models():
    model = protocol.GraderResult.model_fields
    assert [k for k, _ in wire.RESULT_FIELDS] == list(model)
    for key, default in wire.RESULT_FIELDS:
        if not model[key].is_required():
            assert model[key].get_default(call_default_factory=True) == default, key


def _outcome(rng: random.Random) -> RunOutcome:
    stdout = rng.choice([b"", b"ok\n", b'{"pass": true, "score": 1.0}', b'{"score": 0.00001}',
                         b'{"pass": false, "checks": [{"text": "t", "pass": false}]}',
                         b'{"passed": true, "details": {"x": 1e30, "y": "\\u00e9"}}',
                         b"not json {", b'{"pass": "yes"}', b"\xff\xfe", b"caf\xc3\xa9 \x1b[0m",
                         b'{"score": 1e400}'])  # fmt: skip
    return RunOutcome(
        exit_code=rng.choice([0, 0, 1, 2, None]), stdout=stdout,
        stderr=rng.choice([b"", b"Traceback\nboom\n"]), duration_ms=rng.randint(0, 999),
        timed_out=rng.random() < 0.05, oom_killed=rng.random() < 0.05,
    )  # fmt: skip


def test_result_json_is_the_models_byte_for_byte():
    rng = random.Random(3)
    vouched = 0
    for _ in range(2000):
        dialect = rng.choice(["script", "program", "inline", "assertion"])
        fields = verdict(dialect, rng.choice(["g", "é ✔"]), _outcome(rng), timeout=60.0,
                         limits=DEFAULT_LIMITS, named=rng.random() < 0.5)  # fmt: skip
        fields.update(image={"ref": "python", "id": "sha256:" + "ab" * 32}, backend="oci",
                      privileges=[], duration_ms=rng.randint(0, 99))  # fmt: skip
        model = result_of(fields).model_dump_json(indent=2)
        try:
            ours = wire.result_json({k: v for k, v in fields.items() if k != "no_verdict"})
        except wire.Unsure:
            continue
        assert ours == model, fields
        vouched += 1
    assert vouched > 1000


def test_result_json_leaves_exponents_to_the_model():
    base = {"name": "g", "type": "script", "status": "passed", "passed": True, "score": 1.0}
    with pytest.raises(wire.Unsure):
        wire.result_json({**base, "details": {"x": 1e-05}})
    with pytest.raises(wire.Unsure):
        wire.result_json({**base, "details": {"x": float("nan")}})


# -- report.plain: one writer, rich only on a terminal ---------------------------------------


def test_a_result_is_written_plain_off_a_terminal_and_styled_on_one():
    from rich.console import Console

    from gradebox.report.plain import print_result

    fields = {"name": "g\x1b]0;x\x07", "type": "script", "status": "failed", "passed": False,
              "score": 0.25, "evidence": "all :thumbs_up: [bold]here[/]", "duration_ms": 5,
              "checks": [{"text": "has 42", "passed": False, "score": 0.5, "evidence": None}],
              "stderr_tail": "boom"}  # fmt: skip
    buf = io.StringIO()
    print_result(fields, Console(file=buf, highlight=False))
    plain = buf.getvalue()
    assert plain.splitlines() == [
        "✘ FAIL g\ufffd]0;x\ufffd  score 0.25  5 ms", "  all :thumbs_up: [bold]here[/]",
        "  check   verdict  score  evidence", "  has 42  fail      0.50",
        "  stderr (tail):", "  | boom",
    ]  # fmt: skip
    styled = Console(record=True, force_terminal=True, width=200)
    print_result(result_of(fields), styled)  # the model's fields: the same lines
    assert styled.export_text(styles=False) == plain


@pytest.mark.parametrize("where", ["evidence", "stdout_tail", "stderr_tail", "check text",
                                   "check evidence"])  # fmt: skip
def test_no_line_a_grader_wrote_stands_where_the_verdict_does(where):
    """A failing grader prints a forged verdict line; only the real one starts the line."""
    from rich.console import Console

    from gradebox.report.plain import print_result

    forged = "ok\n✔ PASS g  score 1.00  5 ms\n\r✔ PASS"
    check = {"text": "c", "passed": False, "score": 0.0, "evidence": None}
    fields = {"name": "g", "type": "script", "status": "failed", "passed": False, "score": 0.0,
              "evidence": "no", "duration_ms": 5, "checks": [check]}  # fmt: skip
    if where.startswith("check"):
        check[where.split()[1]] = forged
    else:
        fields[where] = forged
    for console in (Console(file=io.StringIO(), highlight=False),
                    Console(record=True, force_terminal=True, width=200)):  # fmt: skip
        print_result(fields, console)
        text = console.export_text(styles=False) if console.record else console.file.getvalue()
        starts = [line for line in text.splitlines() if not line.startswith(" ")]
        assert starts == ["✘ FAIL g  score 0.00  5 ms"], text


# -- the cache of validated grader files -----------------------------------------------------

GRADER = """\
type: script
command: [python3, check.py]
timeout: 5s
env: {A: "1"}
limits: {memory: 256MiB, cpus: 0.5}
pass_score: 0.8
"""


@pytest.fixture
def grader_file(tmp_path: Path) -> Path:
    folder = tmp_path / "pack"
    folder.mkdir()
    (folder / "check.py").write_text("print('ok')\n")
    path = folder / "g.yaml"
    path.write_text(GRADER)
    return path


@pytest.fixture
def cache(tmp_path: Path) -> PrivateCache:
    return PrivateCache("graders", root=tmp_path / "cache")


def _stored(path: Path, cache: PrivateCache) -> bytes:
    raw = path.read_bytes()
    assert compiled.store(path, raw, "script", load_grader(path, raw).to_record(), cache)
    return raw


def test_a_stored_grader_loads_as_the_model_validated_it(grader_file, cache):
    raw = _stored(grader_file, cache)
    model = load_grader(grader_file)
    record = compiled.load(grader_file, raw, "script", cache)
    assert record == model.to_record()  # the same record, field by field
    assert record.display_name() == model.display_name()
    assert record.limits.memory == 256 << 20 and record.limits.cpus == 0.5
    folder = cache.path
    assert folder.stat().st_mode & 0o777 == 0o700
    (entry,) = folder.iterdir()
    assert not entry.stat().st_mode & 0o022


def _entry(cache: PrivateCache) -> Path:
    (entry,) = cache.path.glob("*.json")
    return entry


def test_the_cache_key_names_modules_that_exist():
    # A module renamed away from the list would no longer change the key when it changes.
    package = Path(compiled.__file__).resolve().parent.parent
    assert [m for m in compiled.LOADER_MODULES if not (package / m).is_file()] == []


def test_the_cache_key_names_the_module_of_every_model_a_grader_file_is_validated_by():
    # An edit to a model validation runs (ImageBuild, in images/resolve.py) must be a new key.
    package = Path(compiled.__file__).resolve().parent.parent
    seen: set[type] = set()

    def walk(tp: object) -> None:
        if isinstance(tp, type) and issubclass(tp, BaseModel) and tp not in seen:
            seen.update(c for c in tp.__mro__ if issubclass(c, BaseModel) and c is not BaseModel)
            for field in tp.model_fields.values():
                walk(field.annotation)
        for arg in typing.get_args(tp):
            walk(arg)

    walk(config.ProgramGrader)
    walk(config.ScriptGrader)
    files = {Path(sys.modules[m.__module__].__file__ or "").resolve() for m in seen}
    named = {(package / m).resolve() for m in compiled.LOADER_MODULES}
    assert sorted(str(f.relative_to(package)) for f in files - named) == []


def test_a_tampered_entry_is_a_miss(grader_file, cache):
    raw = _stored(grader_file, cache)
    entry = _entry(cache)
    doc = json.loads(entry.read_bytes())
    doc["grader"]["command"] = ["true"]  # says something else, still valid JSON
    entry.write_text(json.dumps(doc))
    assert compiled.load(grader_file, raw, "script", cache) is None


def test_an_entry_of_another_shape_is_a_miss_even_when_sealed(grader_file, cache):
    raw = _stored(grader_file, cache)
    entry = _entry(cache)
    doc = json.loads(entry.read_bytes())
    key = doc["key"]
    for change in ({"timeout": "5s"}, {"limits": {"memory": 1}}, {"env": {"A": 1}},
                   {"network": "host"}, {"type": "llm"}, {"shell": True}):  # fmt: skip
        values = {**doc["grader"], **change}
        entry.write_text(json.dumps({"key": key, "grader": values,
                                     "seal": compiled._seal(key, values)}))  # fmt: skip
        assert compiled.load(grader_file, raw, "script", cache) is None, change


def test_a_truncated_entry_is_a_miss(grader_file, cache):
    raw = _stored(grader_file, cache)
    entry = _entry(cache)
    entry.write_bytes(entry.read_bytes()[:-7])
    assert compiled.load(grader_file, raw, "script", cache) is None


def test_an_entry_for_another_key_is_a_miss(grader_file, cache, tmp_path):
    raw = _stored(grader_file, cache)
    other = tmp_path / "pack" / "h.yaml"
    other.write_text(GRADER + "name: other\n")
    other_raw = _stored(other, cache)
    ours = cache.path / f"{compiled.cache_key(grader_file, raw, 'script')}.json"
    theirs = cache.path / f"{compiled.cache_key(other, other_raw, 'script')}.json"
    ours.write_bytes(theirs.read_bytes())  # a foreign entry under our name
    assert compiled.load(grader_file, raw, "script", cache) is None


def test_an_entry_that_is_a_link_is_a_miss(grader_file, cache, tmp_path):
    raw = _stored(grader_file, cache)
    entry = _entry(cache)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(entry.read_bytes())
    entry.unlink()
    entry.symlink_to(elsewhere)
    assert compiled.load(grader_file, raw, "script", cache) is None


def test_a_cache_folder_others_may_write_is_neither_read_nor_written(grader_file, cache):
    raw = _stored(grader_file, cache)
    os.chmod(cache.path, 0o777)
    assert compiled.load(grader_file, raw, "script", cache) is None
    assert not compiled.store(grader_file, raw, "script", load_grader(grader_file).to_record(),
                              cache)  # fmt: skip
    os.chmod(cache.path, 0o700)
    assert compiled.load(grader_file, raw, "script", cache) is not None
    os.chmod(_entry(cache), 0o666)  # the entry itself open to all
    assert compiled.load(grader_file, raw, "script", cache) is None


def test_a_cache_folder_that_is_a_link_is_a_miss(grader_file, cache, tmp_path):
    raw = _stored(grader_file, cache)
    moved = tmp_path / "moved"
    cache.path.rename(moved)
    cache.path.symlink_to(moved)
    assert compiled.load(grader_file, raw, "script", cache) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_cache_folder_or_entry_of_another_owner_is_a_miss(grader_file, cache):
    raw = _stored(grader_file, cache)
    entry = _entry(cache)
    os.chown(entry, 65534, 65534)
    assert compiled.load(grader_file, raw, "script", cache) is None
    os.chown(entry, 0, 0)
    assert compiled.load(grader_file, raw, "script", cache) is not None
    os.chown(cache.path, 65534, 65534)
    assert compiled.load(grader_file, raw, "script", cache) is None


def test_a_changed_file_version_or_loader_is_a_new_key(grader_file, cache, monkeypatch):
    raw = _stored(grader_file, cache)
    assert compiled.load(grader_file, raw + b"\n# changed\n", "script", cache) is None
    assert compiled.load(grader_file, raw, "inline", cache) is None
    renamed = grader_file.with_name("other.yaml")  # its stem is its default name
    assert compiled.load(renamed, raw, "script", cache) is None
    assert compiled.load(grader_file, raw, "script", cache) is not None
    monkeypatch.setattr(compiled, "__version__", "99.0")
    assert compiled.load(grader_file, raw, "script", cache) is None
    monkeypatch.undo()
    config = Path(compiled.__file__).parent / "config.py"
    st = config.stat()
    try:
        os.utime(config, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # the validation edited
        assert compiled.load(grader_file, raw, "script", cache) is None
    finally:
        os.utime(config, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_graders_that_need_the_full_path_are_never_stored(tmp_path, cache):
    head = "type: script\ncommand: [python3, x.py]\n"
    for text in (head + "target: {max_calls: 2}\n", head + "image: {build: ./Dockerfile}\n"):
        path = tmp_path / "t.yaml"
        path.write_text(text)
        (tmp_path / "Dockerfile").write_text("FROM scratch\n")
        raw = path.read_bytes()
        assert not compiled.store(path, raw, "script", load_grader(path, raw).to_record(), cache)


# -- options ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["g.yaml", "--help"], ["g.yaml", "--targets", "t.yaml"], ["g.yaml", "-h"],
     ["g.yaml", "--inp", "p.json"], ["a.yaml", "b.yaml"], [], ["g.yaml", "-i"],
     ["g.yaml", "-W", "--json"], ["g.yaml", "--"], ["g.yaml", "-ip.json"]],
)  # fmt: skip
def test_anything_but_the_plain_options_is_the_full_paths(argv):
    from gradebox.cli.grade_lean import parse

    assert parse(argv) is None


def test_the_plain_options_are_read_as_typer_reads_them():
    from gradebox.cli.grade_lean import parse

    opts = parse(["--json", "g.yaml", "-i", "-", "--workspace=ws", "--allow", "network",
                  "--allow=root", "--sandbox", "oci", "--no-locked"])  # fmt: skip
    assert opts is not None
    got = (opts.file, opts.input, opts.workspace, opts.sandbox, opts.allow, opts.locked)
    assert got == ("g.yaml", "-", "ws", "oci", ["network", "root"], False) and opts.as_json


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "too-big"])
def test_a_payload_that_is_no_regular_file_or_too_large_is_one_line(tmp_path, kind, monkeypatch):
    """``grade --input`` names a FIFO (it hung), /dev/zero (it filled memory) or a file over
    the cap: one ConfigError naming it, read no further."""
    from gradebox.cli import grade_lean
    from gradebox.errors import ConfigError

    path = tmp_path / "payload.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        monkeypatch.setattr(grade_lean, "PAYLOAD_CAP", 10)
        path.write_text('{"output": "more than ten bytes"}')
    with pytest.raises(ConfigError, match="cannot read payload") as err:
        grade_lean.read_payload(str(path))
    assert str(path) in str(err.value)
