"""The door's rule for a grader's folders (``untrusted.look_through``): special files are
refused naming the entry, keys are masked at any depth, and hashing never opens what is not a
regular file. The docker tests (tests/docker/test_helper_folders.py) run it through every
command."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gradebox.core.untrusted import Refused, TooMany, hash_regular, look_through
from tests.conftest import write


def checkout(root: Path) -> Path:
    for rel in (
        "cfg/.env",
        "cfg/deep/.env.production",
        ".git/config",
        ".git/config.worktree",
        ".git/HEAD",
        ".git/modules/lib/config",
        ".git/modules/lib/HEAD",
        ".git/modules/vendor/deep/config",
        ".git/modules/lib/modules/inner/config",
        ".git/worktrees/feature/config.worktree",
        ".git/worktrees/feature/HEAD",
        "lib/.git",
        "lib/code.py",
        "nested/.git/config",
        "cfg/settings.toml",
        ".env.d/.keep",
        "keys/real.txt",
    ):
        write(root / rel, "x")
    write(root / ".git" / "objects" / "ab" / "config", "an object, not looked at")
    os.symlink("../keys/real.txt", root / "cfg" / ".env.local")  # a key under another name
    return root


def test_every_key_below_the_top_is_masked_and_nothing_else(tmp_path):
    held = look_through(checkout(tmp_path / "c"), 1000)
    assert held.masked == {
        "cfg/.env",
        "cfg/deep/.env.production",
        ".git/config",
        ".git/config.worktree",
        ".git/modules/lib/config",
        ".git/modules/vendor/deep/config",
        ".git/modules/lib/modules/inner/config",
        ".git/worktrees/feature/config.worktree",
        "lib/.git",
        "nested/.git/config",
        "keys/real.txt",
    }
    assert held.masked_folders == {".env.d"}  # a folder of .env.* whole
    assert {".git", "nested/.git", "cfg/.env"} <= set(held.secrets)
    assert "lib/.git" not in held.secrets  # a submodule's pointer: masked, not refused


def test_a_folder_named_env_is_masked_whole(tmp_path):
    write(tmp_path / "c" / "app" / ".env" / "keys", "x")
    held = look_through(tmp_path / "c", 1000)
    assert held.masked_folders == {"app/.env"} and held.secrets == ["app/.env"]


def special(folder: Path, kind: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    name = f"x-{kind}"
    if kind == "fifo":
        os.mkfifo(folder / name)
    elif kind == "socket":
        bind = f"import socket; socket.socket(socket.AF_UNIX).bind({name!r})"
        subprocess.run([sys.executable, "-c", bind], cwd=folder, check=True)
    else:
        os.symlink(f"/dev/{kind}", folder / name)
    return name


@pytest.mark.parametrize("kind", ["fifo", "socket", "ptmx", "zero"])
@pytest.mark.parametrize("place", [".", "sub", "sub/deeper"])
@pytest.mark.parametrize("links_out", [True, False])
def test_a_special_file_at_any_depth_is_refused_naming_it(tmp_path, kind, place, links_out):
    write(tmp_path / "c" / "ok.py", "x")
    name = special(tmp_path / "c" / place, kind)
    started = time.monotonic()
    with pytest.raises(Refused) as caught:
        look_through(tmp_path / "c", 1000, links_out=links_out)
    assert time.monotonic() - started < 5
    assert caught.value.entry == os.path.normpath(f"{place}/{name}")
    assert "\n" not in str(caught.value)
    assert any(w in caught.value.why for w in ("FIFO", "socket", "device")), caught.value.why


def test_links_out_are_refused_only_where_the_folder_is_copied_or_hashed(tmp_path):
    write(tmp_path / "c" / "ok.py", "x")
    os.symlink("/usr/bin/python3", tmp_path / "c" / "python")  # a venv's
    os.symlink("ok.py", tmp_path / "c" / "same.py")  # the control: inside
    os.symlink("nowhere", tmp_path / "c" / "dangling")
    os.symlink("loop", tmp_path / "c" / "loop")  # leads nowhere, as a dangling one
    assert look_through(tmp_path / "c", 1000).masked == set()
    with pytest.raises(Refused, match="python is a link out of its folder"):
        look_through(tmp_path / "c", 1000, links_out=False)
    (tmp_path / "c" / "python").unlink()
    assert look_through(tmp_path / "c", 1000, links_out=False).secrets == []


def test_a_folder_too_big_to_look_through_is_said(tmp_path):
    for i in range(11):
        write(tmp_path / "c" / str(i), "")
    with pytest.raises(TooMany):
        look_through(tmp_path / "c", 10)
    assert look_through(tmp_path / "c", 11).secrets == []


def test_hash_regular_never_opens_a_fifo_a_device_or_a_link(tmp_path, monkeypatch):
    write(tmp_path / "f", "bytes")
    h = hashlib.sha256()
    assert hash_regular(tmp_path / "f", h) and h.digest() == hashlib.sha256(b"bytes").digest()
    os.mkfifo(tmp_path / "fifo")
    os.symlink("/dev/zero", tmp_path / "zero")
    os.symlink("f", tmp_path / "link")
    sock = socket.socket(socket.AF_UNIX)
    monkeypatch.chdir(tmp_path)  # sun_path is 108 bytes: bound by a short name
    sock.bind("sock")
    for name in ("fifo", "zero", "link", "sock", "missing"):
        h = hashlib.sha256()
        assert not hash_regular(tmp_path / name, h), name
        assert h.digest() == hashlib.sha256().digest()
    assert not hash_regular(tmp_path / "zero", hashlib.sha256(), follow=True)
    assert hash_regular(tmp_path / "link", hashlib.sha256(), follow=True)
    sock.close()


def test_run_and_grade_refuse_before_anything_runs_naming_the_argument(tmp_path):
    """The folder a command's script lies in is looked through as the suite is checked: the
    refusal names the argument that named the script (not the last helper's field)."""
    from gradebox.errors import ConfigError
    from gradebox.graders.run import check_grader_files
    from gradebox.suite import load_suite

    write(tmp_path / "p" / "graders" / "check.py", "print('{}')\n")
    write(tmp_path / "p" / "helpers" / "ok.txt", "x")
    special(tmp_path / "p" / "graders" / "sub", "fifo")
    suite = write(
        tmp_path / "p" / "suite.yaml",
        "tests:\n  - id: a\n    output: x\n    assert:\n      - {type: script, command: "
        "[python3, graders/check.py], files: [helpers]}\n",
    )
    (a,) = load_suite(suite).graders()
    with pytest.raises(ConfigError) as caught:
        check_grader_files(a.grader, file=a.file, field=a.field, line=a.line)
    text = str(caught.value)
    assert "tests.0.assert.0.command.1: 'graders/sub/x-fifo' is a FIFO" in text, text


@pytest.mark.parametrize("kind", ["fifo", "socket", "ptmx"])
def test_a_helper_file_itself_special_is_refused(tmp_path, kind):
    """``files:`` naming a FIFO or a socket (hashed and mounted as a file): refused; a link
    to a device leads out of the project, refused as such."""
    from gradebox.errors import ConfigError
    from gradebox.graders.run import check_grader_files
    from gradebox.suite import load_suite

    write(tmp_path / "p" / "graders" / "check.py", "print('{}')\n")
    name = special(tmp_path / "p" / "helpers", kind)
    suite = write(
        tmp_path / "p" / "suite.yaml",
        "tests:\n  - id: a\n    output: x\n    assert:\n      - {type: script, command: "
        f"[python3, graders/check.py], files: [helpers/{name}]}}\n",
    )
    (a,) = load_suite(suite).graders()
    with pytest.raises(ConfigError, match=f"files.0: 'helpers/{name}' (is a|leads out)"):
        check_grader_files(a.grader, file=a.file, field=a.field, line=a.line)


def test_a_named_file_closed_to_the_container_is_copied_by_the_door(tmp_path):
    """A script the container user could not read is copied (by descriptor: a FIFO swapped
    in under its name is an error at once, never a read that waits)."""
    from gradebox.core.fstree import copy_file
    from gradebox.graders.run import source_mounts

    write(tmp_path / "p" / "check.py", "print('{}')\n").chmod(0o600)
    (tmp_path / "scratch").mkdir()
    (mount,) = source_mounts(tmp_path / "p", ["check.py"], "65534:65534", tmp_path / "scratch")
    assert mount.source != tmp_path / "p" / "check.py" and mount.target == "/grader/check.py"
    assert mount.source.read_text() == "print('{}')\n" and mount.source.stat().st_mode & 0o004
    os.mkfifo(tmp_path / "p" / "fifo")
    started = time.monotonic()
    with pytest.raises(OSError):
        copy_file(tmp_path / "p" / "fifo", tmp_path / "scratch" / "fifo-copy", 0o644)
    assert time.monotonic() - started < 5
