"""The one YAML loader: bounded (aliases, depth, scalars, integers, size), with line numbers
from the same pass, and the same for every file gradebox reads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gradebox.core import yamlfile as _yaml
from gradebox.core.yamlfile import MAX_DEPTH, load_yaml_file
from gradebox.errors import ConfigError
from gradebox.graders.config import load_grader
from gradebox.suite import load_suite

LAUGHS = "\n".join(
    ["type: script", "command: [python3, -c, 'print(1)']",
     "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]" for i in range(8)]
)  # fmt: skip
"""A billion laughs: 9**9 strings from a file of 11 lines."""


def _write(tmp_path: Path, text: str, name: str = "f.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _refused(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_yaml_file(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    return info.value


def test_alias_bomb_refused_at_its_anchor(tmp_path):
    error = _refused(_write(tmp_path, LAUGHS))
    assert "aliases expand past" in error.message
    # The line of an anchor whose aliases went past the limit (&e to &h: lines 7-10).
    assert error.line in (7, 8, 9, 10) and f"{tmp_path}/f.yaml:{error.line}: " in str(error)


def test_alias_bomb_in_a_grader_file_is_one_line(tmp_path):
    grader = _write(tmp_path, LAUGHS, "grader.yaml")
    with pytest.raises(ConfigError, match="aliases expand past"):
        load_grader(grader)


def test_alias_bomb_through_the_cli_is_exit_2(tmp_path):
    """`gradebox grade` and `validate` with a bomb: exit 2 and one line (before: 3.7 GB and a
    hang). The timeout only guards the test run: it is no measure of speed."""
    grader = _write(tmp_path, LAUGHS, "grader.yaml")
    (tmp_path / "p.json").write_text('{"output": "x"}')
    suite = _write(tmp_path, "name: s\ntests:\n  - id: t\n    output: x\n    assert: [contains]\n"
                   "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
                   + "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n"
                             for p, c in zip("abcdefg", "bcdefgh", strict=True))  # fmt: skip
                   , "suite.yaml")  # fmt: skip
    limit = "import resource; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))"
    for argv in (["grade", str(grader), "-i", str(tmp_path / "p.json"), "--sandbox", "host"],
                 ["validate", str(suite), "--sandbox", "host"]):  # fmt: skip
        code = f"{limit}; import sys; sys.argv = ['gradebox', *sys.argv[1:]]; " \
               "from gradebox.cli import main; main()"  # fmt: skip
        p = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                           timeout=300, stdin=subprocess.DEVNULL)  # fmt: skip
        assert p.returncode == 2, p.stderr[-2000:]
        (line,) = p.stderr.splitlines()
        assert line.startswith("gradebox: error: ") and "aliases expand past" in line


def test_alias_inside_its_own_anchor(tmp_path):
    assert "inside its own anchor" in _refused(_write(tmp_path, "a: &a [1, *a]\n")).message


def test_aliases_within_the_limit_load_shared(tmp_path):
    data, lines = load_yaml_file(
        _write(tmp_path, "base: &b {x: 1}\none: *b\ntwo: {<<: *b, y: 2}\n")
    )
    assert data == {"base": {"x": 1}, "one": {"x": 1}, "two": {"x": 1, "y": 2}}
    assert lines.get(("two", "y")) == 3


def test_deep_nesting_refused(tmp_path):
    ok = "a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)
    assert isinstance(load_yaml_file(_write(tmp_path, ok, "ok.yaml"))[0]["a"], list)
    deep = "x: 1\na: " + "[" * 500 + "]" * 500
    error = _refused(_write(tmp_path, deep))
    assert "nested more than" in error.message and error.line == 2
    _refused(_write(tmp_path, "a: " + "[" * 100_000))  # libyaml's own limit says so first


def test_deep_block_nesting_refused(tmp_path):
    text = "".join("  " * i + "k:\n" for i in range(300)) + "  " * 300 + "v\n"
    assert "nested more than" in _refused(_write(tmp_path, text)).message


def test_huge_scalar_refused(tmp_path):
    text = "a: 1\nb: '" + "x" * (_yaml.MAX_SCALAR_CHARS + 1) + "'\n"
    error = _refused(_write(tmp_path, text))
    assert "longer than" in error.message and error.line == 2


@pytest.mark.parametrize("number", ["1" * 5000, "-" + "9" * 4301, "0x" + "f" * 3600])
def test_huge_integers_refused_at_their_line(tmp_path, number):
    error = _refused(_write(tmp_path, f"a: 1\nb: {number}\n"))
    assert "integer of more than 4,300 digits" in error.message and error.line == 2


def test_a_time_is_its_text_not_a_base_60_number(tmp_path):
    """YAML 1.1 read ``12:30`` as 750 (an ``equals: 12:30`` expected 750); 1.2, as AgentV
    reads its files, has no base-60 numbers. Other numbers are as they were."""
    text = "a: 12:30\nb: -190:20:30.5\nc: " + ":".join(["59"] * 3000) + "\nd: 1_000\ne: 0x1f\n"
    data, _ = load_yaml_file(_write(tmp_path, text))
    assert data["a"] == "12:30" and data["b"] == "-190:20:30.5" and data["c"].count(":") == 2999
    assert data["d"] == 1000 and data["e"] == 31


# (A date, even a wrong one, is its text: tests/unit/test_yaml_nodes.py.)
@pytest.mark.parametrize("value", ["!!float abc", "!!int abc", "!!bool maybe"])
def test_scalars_pyyaml_cannot_construct_are_errors_at_their_line(tmp_path, value):
    """Each was a ValueError, KeyError or AttributeError out of PyYAML's constructors."""
    error = _refused(_write(tmp_path, f"a: 1\nb: [{value}]\n"))
    assert error.line == 2 and "not a valid" in error.message


def test_integers_that_fit_still_load(tmp_path):
    text = f"a: {'9' * 4300}\nb: 0x{'f' * 3000}\nc: 1_000\nd: -{'9' * 4300}\n"
    data, _ = load_yaml_file(_write(tmp_path, text))
    assert data["a"] == int("9" * 4300) and data["b"] == int("f" * 3000, 16)
    assert data["c"] == 1000 and data["d"] == -data["a"]
    assert len(str(data["a"])) == 4300


def test_file_too_large_refused_unread(tmp_path, monkeypatch):
    monkeypatch.setattr(_yaml, "MAX_FILE_BYTES", 1000)
    error = _refused(_write(tmp_path, "a: '" + "x" * 2000 + "'\n"))
    assert "larger than" in error.message


def test_line_numbers_without_a_second_parse(tmp_path, monkeypatch):
    """Lines come from the composing pass: nothing parses the file again."""
    path = _write(tmp_path, "a: 1\nlist:\n  - x: 1\n    y: 2\n  - z\nb: 2\nb: 3\n")

    def no(*args, **kwargs):
        raise AssertionError("parsed a second time")

    monkeypatch.setattr(yaml, "compose", no)
    monkeypatch.setattr(yaml, "load", no)
    monkeypatch.setattr(yaml, "SafeLoader", None)
    data, lines = load_yaml_file(path)
    assert data == {"a": 1, "list": [{"x": 1, "y": 2}, "z"], "b": 3}
    assert lines.get(("list", "0", "y")) == 4 and lines[("list", "1")] == 5
    assert lines.get(("b",)) == 7  # a duplicate key: the last one, as in the data
    assert ("list", "0", "x") in lines and ("list", "7") not in lines
    assert lines.get(("nothing",)) is None and lines.get(("a", "deeper")) is None


def test_the_loader_uses_libyaml_when_pyyaml_has_it():
    if yaml.__with_libyaml__:
        assert issubclass(_yaml._Loader, yaml.cyaml.CParser)


def test_without_libyaml_the_same_limits_and_lines(tmp_path):
    """PyYAML built without libyaml: the pure-Python parser under the same composer."""
    _write(tmp_path, LAUGHS, "bomb.yaml")
    _write(tmp_path, "a: 1\nb:\n  c: [x, y]\n", "ok.yaml")
    code = (
        "import yaml; yaml.__with_libyaml__ = False\n"
        "from pathlib import Path\n"
        "from gradebox.core import yamlfile as _yaml\n"
        "assert not issubclass(_yaml._Loader, getattr(yaml, 'CParser', ()))\n"
        f"data, lines = _yaml.load_yaml_file(Path({str(tmp_path / 'ok.yaml')!r}))\n"
        "assert data == {'a': 1, 'b': {'c': ['x', 'y']}} and lines.get(('b', 'c')) == 3\n"
        "try:\n"
        f"    _yaml.load_yaml_file(Path({str(tmp_path / 'bomb.yaml')!r}))\n"
        "except _yaml.ConfigError as exc:\n"
        "    print(exc)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "aliases expand past" in p.stdout


@pytest.mark.parametrize("text", ['a: 1\nb: "x\0y"\n', "\ufeffa: é\nb: \x07\n"])
def test_a_character_yaml_refuses_is_named_at_its_line(tmp_path, text):
    """Was an error without a line, its message spread over two lines."""
    error = _refused(_write(tmp_path, text))
    assert error.line == 2 and "control characters are not allowed" in error.message


def test_a_nul_character_in_a_value_is_refused(tmp_path):
    """A NUL (``"\\0"``) was ValueError (embedded null byte) wherever a path was resolved."""
    error = _refused(_write(tmp_path, 'a: 1\nb: [x, "./a\\0b"]\n'))
    assert error.line == 2 and "NUL" in error.message


def test_duplicate_anchor_names_both_lines(tmp_path):
    error = _refused(_write(tmp_path, "a: &x 1\nb: &x 2\n"))
    assert error.line == 2 and "line 1" in error.message


def test_every_yaml_read_goes_through_the_loader():
    """No module of gradebox parses YAML any other way (the SDK is stdlib-only and runs
    inside the grader's sandbox, on the grader's own files)."""
    src = Path(__file__).resolve().parents[2] / "src" / "gradebox"
    offenders = []
    for path in src.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if str(path.relative_to(src)) in ("core/yamlfile.py", "sdk/__init__.py"):
            continue
        for needle in ("yaml.load(", "yaml.safe_load(", "yaml.compose(", "yaml.full_load(",
                       "yaml.unsafe_load(", "yaml.load_all(", "yaml.safe_load_all("):  # fmt: skip
            if needle in text:
                offenders.append(f"{path.name}: {needle}")
    assert offenders == []


def test_suite_with_a_bomb_is_refused(tmp_path):
    suite = _write(tmp_path, "name: s\ntests:\n  - id: t\n    output: x\n    assert: [contains]\n"
                   + "\n".join(LAUGHS.splitlines()[2:]) + "\n", "suite.yaml")  # fmt: skip
    with pytest.raises(ConfigError, match="aliases expand past"):
        load_suite(suite)


def test_a_big_suite_keeps_its_lines(tmp_path):
    tests = "".join(f"  - id: t{i}\n    output: x\n    assert: [{{type: contains, value: x}}]\n"
                    for i in range(3000))  # fmt: skip
    suite = _write(tmp_path, f"name: big\ntests:\n{tests}  - id: bad\n    nope: 1\n", "s.yaml")
    with pytest.raises(ConfigError) as info:
        load_suite(suite)
    assert info.value.line == 2 + 3 * 3000 + 2 and os.path.basename(info.value.file) == "s.yaml"
