"""Where the oci backend keeps its state and bundles (``oci.state_root``): in memory where it
can, and never in a folder of a shared place that anyone else made."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gradebox.sandbox import oci

MOUNTINFO = """\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
23 22 0:21 / /dev/shm rw,nosuid,nodev - tmpfs shm rw,size=65536k
24 22 0:22 / /run rw,nosuid,nodev - tmpfs tmpfs rw,mode=755
25 24 0:23 / /run/user/1000 rw,nosuid,nodev - tmpfs tmpfs rw,mode=700
26 22 254:1 / /srv/data rw - xfs /dev/vdb rw
"""


@pytest.mark.parametrize(("path", "in_memory"), [
    ("/dev/shm", True), ("/dev/shm/x/y", True), ("/run/gradebox", True),
    ("/run/user/1000/gradebox", True), ("/srv/data/run", False), ("/srv", False),
    ("/dev/shmx", False), ("/", False),
])  # fmt: skip
def test_a_path_is_in_memory_when_the_mount_that_holds_it_is_a_tmpfs(tmp_path, path, in_memory):
    info = tmp_path / "mountinfo"
    info.write_text(MOUNTINFO)
    assert oci._in_memory(Path(path), str(info)) is in_memory


def test_the_variable_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("GRADEBOX_OCI_STATE", str(tmp_path / "s"))
    assert oci.state_root() == tmp_path / "s"


def test_a_shared_folder_is_ours_alone_or_not_used(tmp_path):
    mine = tmp_path / "gradebox-x"
    assert oci._own_folder(mine) and (mine.stat().st_mode & 0o777) == 0o700
    assert oci._own_folder(mine)  # found again as we left it
    mine.chmod(0o770)
    assert not oci._own_folder(mine)  # others may write into it
    link = tmp_path / "gradebox-link"
    link.symlink_to(mine)
    assert not oci._own_folder(link)
    afile = tmp_path / "gradebox-file"
    afile.write_text("")
    assert not oci._own_folder(afile)
    if os.geteuid() == 0:  # a folder another user made first, with our name
        theirs = tmp_path / "gradebox-theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)
        assert not oci._own_folder(theirs)


def test_root_without_a_tmpfs_run_keeps_its_state_in_dev_shm(monkeypatch, tmp_path):
    monkeypatch.delenv("GRADEBOX_OCI_STATE", raising=False)
    monkeypatch.setattr(oci.os, "geteuid", lambda: 0)
    seen: list[str] = []

    def in_memory(path: Path) -> bool:
        seen.append(str(path))
        return str(path) == "/dev/shm"

    monkeypatch.setattr(oci, "_in_memory", in_memory)
    monkeypatch.setattr(oci, "_own_folder", lambda path: str(path) == "/dev/shm/gradebox-0")
    assert oci.state_root() == Path("/dev/shm/gradebox-0")
    assert seen == ["/run", "/dev/shm"]
    monkeypatch.setattr(oci, "_own_folder", lambda path: False)  # taken by someone else
    assert oci.state_root() == Path("/run/gradebox")
    monkeypatch.setattr(oci, "_in_memory", lambda path: True)
    assert oci.state_root() == Path("/run/gradebox")


def _candidates(monkeypatch, tmp_path):
    monkeypatch.delenv("GRADEBOX_OCI_STATE", raising=False)
    usual, shm = tmp_path / "run" / "gradebox", tmp_path / "shm" / f"gradebox-{os.geteuid()}"
    last = tmp_path / "cache" / "run"
    usual.parent.mkdir()
    shm.parent.mkdir()
    shm.parent.chmod(0o1777)  # as /dev/shm: everyone writes, sticky
    monkeypatch.setattr(oci, "_state_candidates", lambda: (usual, shm, last))
    monkeypatch.setattr(oci, "_in_memory", lambda path: path == shm.parent)
    return usual, shm, last


def test_gc_looks_in_every_folder_the_state_could_have_been_kept_in(monkeypatch, tmp_path):
    """A runner killed while the state was kept on disk (before /dev/shm was ours, say)
    left its bundle there: gc finds it, wherever the state is kept now."""
    usual, shm, _ = _candidates(monkeypatch, tmp_path)
    left = usual / "bundles" / f"{oci.ID_PREFIX}{_dead_pid()}-s1-grader-abc"
    left.mkdir(parents=True)
    (left / "config.json").write_text("{}")
    assert oci.state_roots() == [shm, usual]
    assert left.name in oci.collect_garbage()
    assert not left.exists()


def test_a_sticky_less_shared_parent_is_never_ours(monkeypatch, tmp_path):
    _, shm, _ = _candidates(monkeypatch, tmp_path)
    shm.parent.chmod(0o777)  # anyone could move our folder away and put theirs there
    assert not oci._own_folder(shm)
    shm.parent.chmod(0o1777)
    assert oci._own_folder(shm)


def _dead_pid() -> int:
    import subprocess

    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid
