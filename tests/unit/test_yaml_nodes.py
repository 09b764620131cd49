"""The YAML loader bounds what a file stands for, not only its bytes: nodes (and what aliases
expand to) are counted as they are composed, and past ``MAX_NODES`` the file is refused in one
line naming it and the line reached, before the heap grows with it. Tags that make values no
JSON holds (``!!binary``, ``!!set``, ``!!omap``, ``!!pairs``) are refused the same way, and a
date is its text, as AgentV reads it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gradebox.core.yamlfile import MAX_NODES, load_yaml_file
from gradebox.errors import ConfigError
from gradebox.suite import load_suite
from tests.conftest import write

ROOT = Path(__file__).resolve().parents[2]

# Loads one file in a fresh interpreter: its verdict, and the peak RSS it took (the memory
# the loader costs, beside the interpreter's own).
_PROBE = """
import json, resource, sys
from pathlib import Path
from gradebox.core.yamlfile import load_yaml_file
from gradebox.errors import ConfigError
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    load_yaml_file(Path(sys.argv[1]))
    said = None
except ConfigError as exc:
    said = str(exc)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"said": said, "grew_kib": peak - before}))
"""
BOUND_KIB = 160 << 10
"""The growth a refused file may cost (today's loader took 440 MiB on the 2 MB list)."""


def _probe(path: Path) -> dict:
    p = subprocess.run(
        [sys.executable, "-c", _PROBE, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


FLOODS = {
    "flow-list": "[" + "1," * 1_000_000 + "1]\n",  # 2 MB
    "block-list": "- 1\n" * 500_000,
    "flow-map": "{" + ",".join(f"k{i}: 1" for i in range(250_000)) + "}\n",
    "strings": "[" + "a," * 1_000_000 + "a]\n",
    "nested-lists": "- [[[1]], [[1]]]\n" * 120_000,
    # One anchor of 1,000 nodes aliased 1,000 times: a million nodes once expanded.
    "wide-aliases": "a: &a ["
    + ", ".join(["x"] * 1000)
    + "]\nb: ["
    + ", ".join(["*a"] * 1000)
    + "]\n",
    # A billion laughs: 9**9 strings from 11 lines.
    "laughs": "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
    + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
    ),
    # Many small aliases beside many nodes: neither alone at its limit, together past it.
    "mixed": "a: &a [1, 2, 3]\nb:\n" + "  - [*a, 1]\n" * 70_000,
}


@pytest.mark.parametrize("name", list(FLOODS))
def test_a_file_of_too_many_nodes_is_refused_in_one_line_and_bounded_memory(tmp_path, name):
    path = write(tmp_path / f"{name}.yaml", FLOODS[name])
    seen = _probe(path)
    said = seen["said"]
    assert said is not None, f"{name} loaded"
    assert said.startswith(f"{path}:") and "\n" not in said, said
    assert "nodes" in said, said
    assert seen["grew_kib"] < BOUND_KIB, (name, seen["grew_kib"] >> 10, "MiB")


def test_control_a_file_just_under_the_limit_loads(tmp_path):
    items = MAX_NODES - 10
    data, _ = load_yaml_file(write(tmp_path / "ok.yaml", "[" + "1," * (items - 1) + "1]\n"))
    assert len(data) == items


def test_control_aliases_within_the_limit_still_load_shared(tmp_path):
    data, _ = load_yaml_file(write(tmp_path / "a.yaml", "a: &a [1, 2]\nb: [*a, *a, *a]\n"))
    assert data["b"] == [[1, 2]] * 3 and data["b"][0] is data["a"]


def _suites() -> list[Path]:
    found = [
        *ROOT.glob("examples/**/*.yaml"),
        *ROOT.glob("tests/fixtures/**/*.yaml"),
        *ROOT.glob("examples/**/*.yml"),
        *ROOT.glob("tests/fixtures/**/*.yml"),
    ]
    return sorted(p for p in found if p.is_file())


def test_control_every_shipped_yaml_file_still_loads():
    """The node bound and the tags refused leave every YAML file of examples/ and
    tests/fixtures/ as it was: each loads (or is refused for the reason it always was)."""
    files = _suites()
    assert len(files) > 10
    for path in files:
        try:
            load_yaml_file(path)
        except ConfigError as exc:
            assert "nodes" not in exc.message and "tag" not in exc.message, exc


def test_control_the_example_suites_load():
    for suite in ("examples/quickstart/suite.yaml",):
        assert load_suite(ROOT / suite).tests


SUITE = (
    "name: s\ntests:\n  - id: t\n    output: '4'\n    assert:\n      - {type: regex, value: V}\n"
)


@pytest.mark.parametrize(
    "value",
    [
        '!!binary "Lio="',
        '!!binary ""',
        '!!binary "!!!"',
        '!<tag:yaml.org,2002:binary> "Lio="',
        "!!set {a: null}",
        "!!omap [{a: 1}]",
        "!!pairs [{a: 1}]",
    ],
)
def test_a_tag_no_json_value_has_is_refused_in_one_line_at_its_line(tmp_path, value):
    """``regex: !!binary ...`` ended in a traceback (bytes are no JSON), and ``!!set`` and
    ``!!omap`` gave values no check reads: refused where they are written."""
    path = write(tmp_path / "suite.yaml", SUITE.replace("V", value))
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    assert info.value.file == str(path) and info.value.line == 6, info.value
    assert "\n" not in str(info.value), info.value


ONE = "name: s\ntests: [{id: T, output: x, assert: [A]}]\n"


@pytest.mark.parametrize(
    "text",
    [
        "name: !!binary 'eA=='\n"
        + ONE.split("\n", 1)[1].replace("T", "t").replace("A", "contains"),
        ONE.replace("T", "!!binary 'eA=='").replace("A", "contains"),
        ONE.replace("T", "t, metadata: {!!binary 'eA==': 1}").replace("A", "contains"),
        ONE.replace("T", "t, metadata: {a: !!set {b: null}}").replace("A", "contains"),
        ONE.replace("T", "t").replace("A", "{type: regex, value: x, flags: !!binary 'aQ=='}"),
        ONE.replace("T", "t").replace("A", "{type: script, command: [!!binary 'eA==']}"),
    ],
)
def test_an_odd_tag_anywhere_is_refused_in_one_line(tmp_path, text):
    path = write(tmp_path / "suite.yaml", text)
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    assert info.value.file == str(path) and info.value.line is not None, info.value
    assert "\n" not in str(info.value), info.value


@pytest.mark.parametrize(
    "value", ["2001-01-01", "!!timestamp 2001-01-01", "2001-12-14t21:59:43.10-05:00"]
)
def test_a_date_is_its_text(tmp_path, value):
    """A plain date resolves to a timestamp in YAML 1.1 (a traceback in a regex, an odd
    refusal elsewhere); AgentV's YAML reads it as text, and so does this loader."""
    path = write(tmp_path / "suite.yaml", SUITE.replace("V", value))
    (check,) = load_suite(path).tests[0].assertions
    text = value.removeprefix("!!timestamp ")
    assert check.check.value == text
    data, _ = load_yaml_file(write(tmp_path / "d.yaml", f"when: {value}\n"))
    assert data == {"when": text}


def test_yes_no_on_off_are_their_text_and_only_true_false_are_booleans(tmp_path):
    """YAML 1.1 reads ``no`` as false (a check for the answer "no" checked "False"); AgentV's
    YAML (1.2) reads it as written, and so does this loader: a flag written ``yes`` is named
    by its strict field rather than taken for true."""
    text = "on: yes\nNO: Off\nflags: [true, True, FALSE, y, n]\n"
    data, _ = load_yaml_file(write(tmp_path / "d.yaml", text))
    assert data == {"on": "yes", "NO": "Off", "flags": [True, True, False, "y", "n"]}
    path = write(tmp_path / "suite.yaml", SUITE.replace("regex, value: V", "equals, value: no"))
    (check,) = load_suite(path).tests[0].assertions
    assert check.check.value == "no"
    flagged = SUITE.replace("value: V", "value: x, negate: yes")
    with pytest.raises(ConfigError) as info:
        load_suite(write(tmp_path / "suite.yaml", flagged))
    assert info.value.field == "tests.0.assert.0.negate"


@pytest.mark.parametrize(
    "value", ["2001-13-45", "2001-02-30 25:61:61", "9999-12-31 23:59:59 -24:00"]
)
def test_a_date_no_calendar_has_is_its_text_too(tmp_path, value):
    """Once a ValueError out of PyYAML's date constructor; as text there is nothing to get
    wrong."""
    data, _ = load_yaml_file(write(tmp_path / "d.yaml", f"a: 1\nb: [{value}]\n"))
    assert data["b"] == [value]


_LOAD = """
import sys
from pathlib import Path
from gradebox.core.yamlfile import load_yaml_file
from gradebox.errors import ConfigError
try:
    load_yaml_file(Path(sys.argv[1]))
    print("loaded")
except ConfigError as exc:
    print(exc)
"""


@pytest.mark.parametrize("kind", ["fifo", "link-to-fifo", "dev-zero", "folder"])
def test_a_yaml_file_that_is_no_regular_file_is_refused_unopened(tmp_path, kind):
    """A suite (or grader, targets, cases) file that is a FIFO hung the loader in open();
    /dev/zero was read to the size cap. Only a regular file is read: anything else is a
    one-line error naming it. (In a fresh interpreter, so a hang is a timeout, not a stuck
    test run.)"""
    import os

    path = tmp_path / "suite.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "link-to-fifo":
        os.mkfifo(tmp_path / "pipe")
        path.symlink_to(tmp_path / "pipe")
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    p = subprocess.run(
        [sys.executable, "-c", _LOAD, str(path)],
        capture_output=True,
        text=True,
        timeout=20,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    (line,) = p.stdout.splitlines()
    assert line.startswith(f"{path}: ") and "not a regular file" in line, line


def test_control_a_link_to_a_regular_yaml_file_loads(tmp_path):
    write(tmp_path / "real.yaml", "a: 1\n")
    (tmp_path / "suite.yaml").symlink_to(tmp_path / "real.yaml")
    assert load_yaml_file(tmp_path / "suite.yaml")[0] == {"a": 1}
    with pytest.raises(ConfigError, match="file not found"):
        load_yaml_file(tmp_path / "missing.yaml")
