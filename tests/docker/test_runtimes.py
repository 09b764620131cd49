"""crun on this hybrid host: run in a mount namespace of ours (runtime.py), which must still
see every mount the runner makes after it was created (userns.Holder)."""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

import pytest

from gradebox.images.catalog import qualified
from gradebox.sandbox.base import Mount, SandboxSpec
from gradebox.sandbox.oci import OciSandbox
from gradebox.sandbox.runtime import hybrid_v2

pytestmark = pytest.mark.docker

_libc = ctypes.CDLL(None, use_errno=True)


def _tmpfs(path: Path) -> None:
    """A tmpfs at ``path``, as the runner mounts a workspace (a host whose / is private
    propagates it into no other mount namespace)."""
    path.mkdir()
    if _libc.mount(b"gbx-test", str(path).encode(), b"tmpfs", 0, b"size=1m") != 0:
        raise OSError(ctypes.get_errno(), f"mount {path}")


def _umount(path: Path) -> None:
    _libc.umount2(str(path).encode(), 2)  # MNT_DETACH


@pytest.fixture(scope="module")
def crun_box(engine):
    box = OciSandbox(engine, runtime="crun")
    yield box
    box.close()


def _cat(box: OciSandbox, image: str, folder: Path) -> str:
    spec = SandboxSpec(image=image, command=["cat", "/ws/answer.txt"], timeout=60,
                       mounts=[Mount(source=folder, target="/ws", read_only=True)])  # fmt: skip
    out = box.run(spec)
    assert out.exit_code == 0, (out.start_error, out.stderr)
    return out.stdout.decode()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs: root's workspaces are mounts")
def test_a_workspace_mounted_after_the_runtime_started_is_seen(crun_box, engine, tmp_path):
    assert crun_box.runtime.name == "crun" and crun_box.runtime.hide_v2 == hybrid_v2()
    image = crun_box.resolve_image(qualified("shell"))
    first = tmp_path / "first"
    first.mkdir()
    (first / "answer.txt").write_text("plain\n")
    assert _cat(crun_box, image, first) == "plain\n"  # the runtime's namespace now exists
    later = tmp_path / "later"
    _tmpfs(later)
    try:
        (later / "answer.txt").write_text("mounted since\n")
        # Without a fresh namespace, crun would bind the empty folder under the tmpfs.
        assert _cat(crun_box, image, later) == "mounted since\n"
    finally:
        _umount(later)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs: root's workspaces are mounts")
def test_containers_started_together_each_see_their_own_mount(crun_box, tmp_path):
    # Many threads at once, each with a mount made just before: a holder replaced for one
    # must not end before another thread's container has joined it.
    image = crun_box.resolve_image(qualified("shell"))
    folders, got, errors = [], {}, []
    for i in range(8):
        folder = tmp_path / f"ws{i}"
        _tmpfs(folder)
        (folder / "answer.txt").write_text(f"{i}\n")
        folders.append(folder)

    def one(i: int) -> None:
        try:
            got[i] = _cat(crun_box, image, folders[i])
        except AssertionError as exc:
            errors.append(exc)

    try:
        threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for folder in folders:
            _umount(folder)
    assert not errors, errors
    assert got == {i: f"{i}\n" for i in range(8)}
