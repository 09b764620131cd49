"""The pure half of `gradebox exec`: what a harness names, found and rewritten (harness.py),
the spec both `grade` and `exec` build (graders/spec.py), and the lean hot path."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gradebox.cli.harness import (
    decode_string,
    image_for,
    passed_env,
    rewrite_top_level,
    top_level_strings,
)
from gradebox.graders.spec import grader_spec
from gradebox.sandbox.defaults import DEFAULT_LIMITS, DEFAULT_SECURITY
from tests.conftest import loaded_by


def rewrite(data: bytes, key: str, value: str) -> bytes:
    spans = top_level_strings(data, (key,)).get(key, [])
    return rewrite_top_level(data, dict.fromkeys(spans, value))


def test_only_the_top_level_value_is_rewritten_and_every_other_byte_stays():
    data = (
        b'{\n  "output": "my \\"workspace_path\\": \\"/etc\\"",\n'
        b'  "metadata": {"workspace_path": "/nested"},\n'
        b'  "list": [{"workspace_path": "/in-list"}, "workspace_path"],\n'
        b'  "workspace_path" :  "/tmp/ws\\u0031",\n  "n": 1.5e3\n}\n'
    )
    out = rewrite(data, "workspace_path", "/workspace")
    assert out == data.replace(b'"/tmp/ws\\u0031"', b'"/workspace"')
    loaded = json.loads(out)
    assert loaded["workspace_path"] == "/workspace"
    assert loaded["metadata"] == {"workspace_path": "/nested"}
    assert loaded["output"] == json.loads(data)["output"]


def test_the_value_is_decoded_as_json_and_a_repeated_key_is_rewritten_everywhere():
    data = b'{"workspace_path": "/a", "x": 1, "workspace_path": "/b\\/c"}'
    spans = top_level_strings(data, ("workspace_path",))["workspace_path"]
    assert [decode_string(data, s) for s in spans] == ["/a", "/b/c"]
    assert json.loads(rewrite(data, "workspace_path", "/w")) == {"workspace_path": "/w", "x": 1}


def test_an_escaped_key_is_the_same_key():
    data = b'{"workspace\\u005fpath": "/ws"}'
    assert json.loads(rewrite(data, "workspace_path", "/w")) == {"workspace_path": "/w"}


@pytest.mark.parametrize(
    "data",
    [b"", b"not json", b'["workspace_path", "/x"]', b'"workspace_path"',
     b'{"workspace_path": null}', b'{"a": {"workspace_path": "/x"}}', b'{"workspace_path": 3}',
     b'{"a": [1, 2 "workspace_path": "/x"}', b'{"workspace_path" "/x"}'],
)  # fmt: skip
def test_nothing_else_is_ever_touched(data):
    assert rewrite(data, "workspace_path", "/w") == data


def test_a_bom_and_whitespace_before_the_object_are_fine():
    data = b'\xef\xbb\xbf \n{"workspace_path": "/ws"}'
    assert rewrite(data, "workspace_path", "/w") == b'\xef\xbb\xbf \n{"workspace_path": "/w"}'


def test_the_scan_is_linear_on_hostile_input():
    # An agent's answer of 6 MiB of quotes, backslashes and brackets, and deep nesting.
    hostile = json.dumps({"output": '\\"[{' * (1 << 20), "workspace_path": "/ws"}).encode()
    deep = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b', "workspace_path": "/ws"}'
    for data in (hostile, deep):
        t = time.perf_counter()
        out = rewrite(data, "workspace_path", "/w")
        assert time.perf_counter() - t < 5.0  # linear: well under a second unloaded
        assert out.endswith(b'"workspace_path": "/w"}')


def test_the_scan_is_linear_on_stdin_that_is_not_json():
    # Not a harness's payload but raw stdin: a value nested past the C scanner's depth, then
    # a string that never ends (each later quote was a fresh scan to the end: 160 KB took
    # two minutes), or thousands of deep values (each re-encoded all text before it).
    unterminated = b'{"a": ' + b"[" * 3000 + b'"' + b'\\"' * 80_000
    deep = b"[" * 1500 + b"]" * 1500
    many = b"{" + b",".join(b'"k%d": %s' % (i, deep) for i in range(1000))
    many += b', "workspace_path": "/ws"}'
    for data, found in (
        (unterminated, {}),
        (many, {"workspace_path": [(len(many) - 6, len(many) - 1)]}),
    ):
        t = time.perf_counter()
        assert top_level_strings(data, ("workspace_path",)) == found
        assert time.perf_counter() - t < 5.0  # linear: under a second unloaded


def test_the_environment_passes_only_the_allow_list():
    host = {"LANG": "C.UTF-8", "LC_ALL": "C", "TZ": "UTC", "OPENAI_API_KEY": "sk-x",
            "AWS_SECRET_ACCESS_KEY": "y", "PATH": "/host/bin", "HOME": "/root",
            "AGENTV_PROVIDER_PROXY_TOKEN": "t", "PYTHONPATH": "/host"}  # fmt: skip
    assert passed_env(host) == {"LANG": "C.UTF-8", "LC_ALL": "C", "TZ": "UTC"}


@pytest.mark.parametrize(
    ("program", "shebang", "image"),
    [("python3", None, "python"), ("/usr/bin/python3.11", None, "python"), ("uv", None, "python"),
     ("node", None, "node"), ("bun", None, "node"), ("npx", None, "node"), ("tsx", None, "node"),
     ("bash", None, "shell"), ("sh", None, "shell"),
     ("./grader.py", b"#!/usr/bin/env python3\nimport x", "python"),
     ("./g.mjs", b"#!/usr/bin/env -S node --no-warnings\n", "node"),
     ("./g.sh", b"#!/bin/bash\n", "shell"), ("./x", b"\x7fELF", None), ("ruby", None, None)],
)  # fmt: skip
def test_the_image_follows_the_command(program, shebang, image):
    assert image_for(program, shebang) == image


def test_grade_and_exec_build_one_spec(tmp_path):
    """The variables naming the workspace and the payload override whatever env says."""
    spec = grader_spec(
        image="sha256:" + "0" * 64, command=["true"], inputs=tmp_path, workspace=tmp_path,
        env={"EVALUATE_WORKSPACE": "/elsewhere", "AGENTV_WORKSPACE_PATH": "/x", "K": "v"},
    )  # fmt: skip
    assert spec.env == {"EVALUATE_WORKSPACE": "/workspace", "AGENTV_WORKSPACE_PATH": "/workspace",
                        "EVALUATE_GRADER_INPUT": "/run/gradebox/input.json", "K": "v"}  # fmt: skip
    mounts = [(m.target, m.read_only) for m in spec.mounts]
    assert mounts == [("/workspace", True), ("/run/gradebox", True)]
    assert spec.limits is DEFAULT_LIMITS and spec.security is DEFAULT_SECURITY


def test_the_hot_path_loads_no_heavy_package():
    hot = ["gradebox.cli.exec", "gradebox.cli.harness", "gradebox.graders.spec",
           "gradebox.graders.grader_run",
           "gradebox.sandbox.oci", "gradebox.sandbox.oci_config", "gradebox.images.catalog",
           "gradebox.core.scratch"]  # fmt: skip
    heavy = ("pydantic", "typer", "rich", "docker", "requests", "yaml", "tenacity", "logging",
             # stdlib, but each costs the hot path milliseconds for nothing it uses: dataclasses
             # (its inspect: ast, dis, tokenize), typing (annotations only), argparse (gettext),
             # tempfile (random, weakref), shutil (bz2, lzma), socket (its enums: the slots
             # speak _socket). pathlib stays: the oci backend works in Paths.
             "dataclasses", "inspect", "typing", "argparse", "tempfile", "shutil", "bz2",
             "lzma", "socket")  # fmt: skip
    assert loaded_by(hot, heavy) == []


# What exec runs before its sandbox starts, with the spellings a harness writes; none of it
# may load what the hot path refuses (argparse, logging: see test above).
_RUN_HOT = """
import sys
from gradebox.cli.exec import parse
from gradebox.core.scratch import new_scratch
from gradebox.sandbox import choose_backend
from gradebox.core.fstree import remove_tree
from gradebox.graders.spec import grader_spec
opts = parse(["--image", "python", "-W", "/tmp", "--timeout=30s", "--env", "A=b", "-e", "C",
              "--allow", "network", "--no-locked", "--max-calls", "7", "--", "python3", "x.py"])
assert (opts.image, opts.workspace, opts.timeout, opts.env, opts.allow, opts.locked,
        opts.max_calls, opts.command) == ("python", "/tmp", 30.0, ["A=b", "C"], ["network"],
        False, 7, ["python3", "x.py"]), opts
scratch = new_scratch()
spec = grader_spec(image="sha256:" + "0" * 64, command=["true"], inputs=scratch, workspace=None)
remove_tree(scratch)
try:
    choose_backend("oci")  # says `sandbox: oci (...)` at info level
except Exception:
    pass  # no runtime here: what it loaded on the way is what counts
print([m for m in WATCHED if m in sys.modules])
"""


def test_what_exec_runs_before_the_sandbox_loads_nothing_it_refuses():
    watched = ("argparse", "logging", "tempfile", "dataclasses", "typing", "pydantic")
    code = f"WATCHED = {watched!r}\n{_RUN_HOT}"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_exec_flags_fail_with_one_line_and_125():
    for argv in (["--bogus", "--", "true"], [], ["--timeout", "30", "--", "true"],
                 ["--env", "EVALUATE_GRADER_INPUT=/x", "--", "true"],
                 ["--allow", "everything", "--", "true"]):  # fmt: skip
        p = subprocess.run([sys.executable, "-m", "gradebox", "exec", *argv],
                           capture_output=True, text=True, stdin=subprocess.DEVNULL)  # fmt: skip
        assert p.returncode == 125, (argv, p.stderr)
        assert p.stderr.count("\n") == 1 and p.stderr.startswith("gradebox exec: error: "), p.stderr
        assert p.stdout == ""


def test_exec_help_lists_the_exit_codes():
    p = subprocess.run([sys.executable, "-m", "gradebox", "exec", "--help"],
                       capture_output=True, text=True, check=True)  # fmt: skip
    for text in ("124", "137", "125", "127", "--workspace", "--target", "--max-calls"):
        assert text in p.stdout
    top = subprocess.run([sys.executable, "-m", "gradebox", "--help"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert "exec" in top.stdout


def test_the_command_starts_at_the_first_word_that_is_not_ours():
    from gradebox.cli.exec import parse

    assert parse(["--timeout", "5s", "--", "python3", "x", "--", "y"]).command == [
        "python3", "x", "--", "y"]  # fmt: skip
    assert parse(["python3", "x", "--timeout", "1s"]).command == ["python3", "x", "--timeout", "1s"]
    assert parse(["-e", "A", "--", "--weird"]).command == ["--weird"]
    assert parse(["--timeout", "500ms", "sh"]).timeout == 0.5


def test_exec_never_opens_a_fifo_or_a_device_it_was_pointed_at(tmp_path):
    # The command's first word in a workspace (Vally runs graders there): an agent's FIFO
    # blocked exec forever before any timeout; a device was opened (as root) before a check.
    import os
    import threading

    from gradebox.cli.exec import _copied_in, _shebang

    os.mkfifo(tmp_path / "check.sh")
    (tmp_path / "tty").symlink_to("/dev/zero")
    found: list[object] = []
    worker = threading.Thread(
        target=lambda: found.extend(
            [
                _shebang(tmp_path, "./check.sh"),
                _shebang(tmp_path, "./tty"),
                _copied_in(tmp_path / "check.sh"),
                _copied_in(tmp_path / "tty"),
            ]
        ),  # fmt: skip
        daemon=True,
    )
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "exec blocked on a FIFO it was pointed at"
    assert found == [None, None, None, None]
    (tmp_path / "g.py").write_bytes(b"#!/usr/bin/env node\n")
    assert _shebang(tmp_path, "./g.py") == b"#!/usr/bin/env node\n"


def test_a_grader_run_refuses_a_folder_above_the_home_folder(tmp_path, monkeypatch):
    from gradebox.errors import ConfigError
    from gradebox.graders.grader_run import refuse_wide

    home = tmp_path / "home" / "me"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for folder in (Path("/"), home, home.parent, tmp_path):
        with pytest.raises(ConfigError, match="above it"):
            refuse_wide(folder, "the current folder")
    refuse_wide(home / "evals", "the workspace")  # below it: fine


@pytest.mark.parametrize("argv", [
    ["--", "true"], ["true", "--image", "x"], ["--image", "python", "python3", "a.py"],
    ["--image=node", "-W", "ws", "--", "node", "-e", "1"], ["--env", "A=1", "-e", "B", "--", "x"],
    ["--allow", "network", "--allow=root", "--", "x"], ["--locked", "--no-locked", "--", "x"],
    ["--max-calls", "3", "--", "x"], ["--max-calls", " +4 ", "--", "x"], ["--image=", "--", "x"],
    ["--env=-x", "--", "x"], ["--timeout", "2m", "--sandbox", "oci", "--runtime", "runc", "x"],
    ["--target", "judge", "--workspace", "/w", "--", "--", "x"], ["", "x"], ["--image", "p"],
    ["--targets", "/etc/t.yaml", "--target", "judge", "--", "x"],
])  # fmt: skip
def test_execs_quick_parser_reads_what_argparse_reads(argv):
    """The hot path's parser and argparse agree wherever the quick one answers."""
    import argparse

    from gradebox.cli.exec import _parser, _quick

    parser = _parser()
    parser.add_argument("command", nargs=argparse.REMAINDER)
    assert _quick(argv) == vars(parser.parse_args(argv))


def test_execs_quick_parser_knows_every_option_argparse_has():
    """An option added to exec's parser and not to the quick one would be silently dropped
    (the quick parser's answer has no such key): every option argparse takes is known."""
    from gradebox.cli.exec import _VALUED, _parser

    flags = {s for a in _parser()._actions for s in a.option_strings}
    assert flags - set(_VALUED) - {"-h", "--help", "--locked", "--no-locked"} == set()


@pytest.mark.parametrize("argv", [
    ["--help"], ["-h"], ["--work", "ws", "--", "x"], ["--bogus", "--", "x"], ["-Wws", "x"],
    ["--env", "-x", "--", "x"], ["--max-calls", "many", "--", "x"], ["--max-calls", "--5", "x"],
    ["--image"], ["--locked=yes", "x"], ["-W=ws", "x"],
])  # fmt: skip
def test_execs_quick_parser_leaves_the_rest_to_argparse(argv):
    from gradebox.cli.exec import _quick

    assert _quick(argv) is None
