"""A cache folder another local user can change is not used (issue 40), end to end.

Root runs ``gradebox grade`` with ``$GRADEBOX_CACHE`` naming a folder another user owns (a
shared machine's ``/tmp/cache``). That user planted a root filesystem in it: on ``oci`` its
files are every program the grader runs. The run must not use it, nor leave anything of
root's (the sealed init, the compiled grader, the seccomp filter) where that user can swap
it; it runs from a private cache instead, says so in one line naming the folder, and its
verdicts are right.

Run as root (as CI does): the tests make a user of their own to play the other one.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import seeded_cache, write

pytestmark = pytest.mark.docker

PLANTED = "planted-by-another-user"


def _theirs(path: Path, user: pwd.struct_passwd) -> None:
    os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)


def _planted_cache(shared: Path, user: pwd.struct_passwd) -> Path:
    """A cache of theirs holding the python image's root (as root once unpacked it there),
    and a file of theirs in that root: what they could put there, they could change."""
    cache = seeded_cache(shared / "cache")
    (entry,) = [p for p in (cache / "rootfs").iterdir() if p.is_dir()]
    write(entry / PLANTED, "theirs\n")
    for path in (cache, cache / "rootfs", entry, entry / PLANTED):
        _theirs(path, user)
    return cache


def grade(grader: Path, payload: Path, workspace: Path, cache: Path, backend: str):
    runtime = {"GRADEBOX_RUNTIME": "runc"} if backend == "oci-runc" else {}
    return subprocess.run(
        [sys.executable, "-m", "gradebox", "grade", str(grader), "-i", str(payload),
         "-W", str(workspace), "--json", "--sandbox", backend.removesuffix("-runc")],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "GRADEBOX_CACHE": str(cache), **runtime},
    )  # fmt: skip


@pytest.mark.parametrize("backend", ["oci", "oci-runc"])
def test_a_root_filesystem_planted_in_their_cache_is_not_what_the_grader_runs(
    shared, other_user, tmp_path, workspace, backend
):
    cache = _planted_cache(shared, other_user)
    # Passes only where the planted file is: in their root filesystem.
    grader = write(tmp_path / "g.yaml", f"type: script\ncommand: [test, -e, /{PLANTED}]\n")
    payload = write(tmp_path / "p.json", json.dumps({"output": "x"}))
    done = grade(grader, payload, workspace, cache, backend)
    assert done.returncode == 1, done.stdout + done.stderr  # failed: not their root
    assert json.loads(done.stdout)["status"] == "failed"
    (line,) = [x for x in done.stderr.splitlines() if "not used" in x]
    assert str(cache) in line


@pytest.mark.parametrize("backend", ["docker", "oci", "oci-runc"])
@pytest.mark.parametrize("payload,code", [("yes", 0), ("no", 1)])
def test_with_their_cache_the_verdict_is_right_and_nothing_of_ours_is_left_there(
    shared, other_user, tmp_path, workspace, backend, payload, code
):
    cache = _planted_cache(shared, other_user)
    before = sorted(str(p) for p in cache.rglob("*"))
    write(tmp_path / "check.py", "import json, sys\nd = json.load(sys.stdin)\n"
          "print(json.dumps({'pass': '42' in d['output'], 'score': 1}))\n")  # fmt: skip
    grader = write(tmp_path / "g.yaml", "type: script\ncommand: [python3, check.py]\n")
    answer = write(tmp_path / "p.json", json.dumps({"output": "42" if payload == "yes" else "41"}))
    done = grade(grader, answer, workspace, cache, backend)
    assert done.returncode == code, done.stdout + done.stderr
    assert json.loads(done.stdout)["status"] == ("passed" if code == 0 else "failed")
    # No sealed init, compiled grader, filter or lock of root's where they can swap it.
    assert sorted(str(p) for p in cache.rglob("*")) == before
    assert sum(str(cache) in x for x in done.stderr.splitlines()) == 1  # one warning
