"""``gradebox run --out`` on a machine shared with another local user who read our code.

Root (as CI runs it) writes the agent's text into ``results.jsonl``: a link that user left
there, or a results folder they can change, must never make root create, empty or append to a
file of their choosing. Each attack on each isolating backend, with a control: a folder of our
own still takes the run, even over a dangling link we left there ourselves.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from gradebox.drivers.runner import read_results
from tests.conftest import write

pytestmark = pytest.mark.docker

BACKENDS = ["docker", "oci"]
AGENT_TEXT = f"agent-text-{os.getpid()}"
SUITE = (
    "tests:\n"
    f"  - id: t1\n    output: {AGENT_TEXT}\n"
    "    assert: [{type: script, command: [python3, g.py]}]\n"
)


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    write(tmp_path / "g.py", "print('{\"pass\": true}')\n")
    return write(tmp_path / "suite.yaml", SUITE)


def _theirs(path: Path, user: pwd.struct_passwd) -> Path:
    os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)
    return path


def gradebox(*args: object) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "gradebox", *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=600)


def refused(p: subprocess.CompletedProcess[str], out: Path, field: str = "--out") -> str:
    """One line, exit 2, naming the option (``--out``) and the folder; no traceback."""
    assert "Traceback" not in p.stderr, p.stderr
    errors = [x for x in p.stderr.splitlines() if x.startswith("gradebox: error:")]
    assert len(errors) == 1 and p.stderr.rstrip().endswith(errors[0]), p.stderr
    assert p.returncode == 2 and field in errors[0] and str(out) in errors[0], p.stderr
    return errors[0]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", [0o1777, 0o777, 0o2775])
def test_a_link_planted_in_a_shared_results_folder_is_never_followed(
    tmp_path, suite, other_user, backend, mode
):
    # A drop folder others may write (sticky as /tmp, open, or a shared group's).
    out = tmp_path / "shared"
    out.mkdir()
    os.chown(out, 0, other_user.pw_gid)
    out.chmod(mode)
    victim = tmp_path / "root-only" / "made-by-root"
    victim.parent.mkdir(mode=0o700)
    (out / "results.jsonl").symlink_to(victim)
    _theirs(out / "results.jsonl", other_user)
    p = gradebox("run", suite, "--out", out, "--sandbox", backend)
    assert "written by others" in refused(p, out)
    assert not victim.exists()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_results_folder_of_another_user_is_refused_with_their_link_in_it(
    tmp_path, suite, other_user, backend
):
    out = tmp_path / "theirs"
    out.mkdir()
    _theirs(out, other_user)
    victim = tmp_path / "victim"
    victim.write_bytes(b"root's secret, a torn last line to cut")  # resume would empty it
    (out / "results.jsonl").symlink_to(victim)
    _theirs(out / "results.jsonl", other_user)
    for how in ("--out", "--resume"):
        p = gradebox("run", suite, how, out, "--sandbox", backend)
        assert "owned by uid" in refused(p, out, how)
    assert victim.read_bytes() == b"root's secret, a torn last line to cut"
    # Their link to a folder of ours: pointed elsewhere once checked.
    (tmp_path / "mine").mkdir()
    (tmp_path / "via").symlink_to(tmp_path / "mine")
    _theirs(tmp_path / "via", other_user)
    p = gradebox("run", suite, "--out", tmp_path / "via", "--sandbox", backend)
    assert "owned by uid" in refused(p, tmp_path / "via")
    assert list((tmp_path / "mine").iterdir()) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_control_a_folder_of_ours_takes_the_run_over_a_dangling_link(tmp_path, suite, backend):
    out = tmp_path / "out"
    out.mkdir(mode=0o700)
    victim = tmp_path / "elsewhere"
    (out / "results.jsonl").symlink_to(victim)  # left there (by us): removed, not followed
    p = gradebox("run", suite, "--out", out, "--sandbox", backend)
    assert p.returncode == 0, p.stderr
    assert not victim.exists()
    assert not (out / "results.jsonl").is_symlink()
    assert AGENT_TEXT in (out / "results.jsonl").read_text()
    assert [r.status.value for r in read_results(out).values()] == ["passed"]
    p = gradebox("run", suite, "--resume", out, "--sandbox", backend)  # and again, resumed
    assert p.returncode == 0, p.stderr
