"""The OCI backend's root filesystem cache and backend selection, without a runtime."""

import io
import os
import tarfile
import threading
import time

import pytest

from gradebox.sandbox import choose_backend
from gradebox.sandbox.rootfs import RootfsCache


class FakeEngine:
    """Exports a tiny image, slowly, and counts the exports."""

    def __init__(self):
        self.exports = 0

    def export_image(self, image, sink):
        self.exports += 1
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            data = b"#!/bin/sh\n"
            info = tarfile.TarInfo("bin/sh")
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
        raw = buf.getvalue()
        for i in range(0, len(raw), 512):
            time.sleep(0.01)  # a slow export: concurrent callers overlap
            sink(raw[i : i + 512])


def test_an_image_is_unpacked_once_under_concurrent_runs(tmp_path):
    engine = FakeEngine()
    image = "sha256:" + "ab" * 32
    found = []
    caches = [RootfsCache(engine, root=tmp_path, mount_points=("/workspace", "/tmp"),
                          open_points=("/tmp",)) for _ in range(4)]  # fmt: skip
    threads = [threading.Thread(target=lambda c=c: found.append(c.path_for(image))) for c in caches]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert engine.exports == 1 and len(set(found)) == 1
    root = found[0]
    assert (root / "bin" / "sh").read_bytes() == b"#!/bin/sh\n"
    assert (root / "workspace").is_dir() and (root / "sbin" / "gradebox-init").exists()
    assert oct((root / "tmp").stat().st_mode & 0o7777) == "0o1777"
    assert [e.image_id for e in caches[0].entries()] == [image]
    assert not [p for p in (tmp_path / "rootfs").iterdir() if p.name.startswith(".")]
    caches[0].remove(image)
    assert caches[0].entries() == []


def test_a_half_unpacked_image_is_never_used(tmp_path):
    class Broken(FakeEngine):
        def export_image(self, image, sink):
            sink(b"not a tar at all" * 100)

    with pytest.raises(Exception, match="unpacking"):
        RootfsCache(Broken(), root=tmp_path).path_for("sha256:" + "cd" * 32)
    assert [p for p in (tmp_path / "rootfs").iterdir() if not p.name.endswith(".lock")] == []


def test_backend_selection(monkeypatch):
    monkeypatch.delenv("GRADEBOX_SANDBOX", raising=False)
    assert choose_backend("docker") == "docker"
    monkeypatch.setenv("GRADEBOX_SANDBOX", "host")
    assert choose_backend(None) == "host"
    monkeypatch.setattr("gradebox.sandbox.oci.oci_usable", lambda runtime=None: "no runtime")
    assert choose_backend("auto") == "docker"
    monkeypatch.setattr("gradebox.sandbox.oci.oci_usable", lambda runtime=None: None)
    assert choose_backend("auto") == "oci"


class LinkedEngine:
    """An image whose tree links out of itself where the unpack makes things: a grader's
    Dockerfile (``image: {build: ...}``) chooses every link of its image."""

    def __init__(self, links, files=()):
        self.links, self.files = links, files

    def export_image(self, image, sink):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name in ("usr", "usr/sbin", "etc"):
                info = tarfile.TarInfo(name)
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            for name, target in self.links:
                info = tarfile.TarInfo(name)
                info.type, info.linkname = tarfile.SYMTYPE, target
                tar.addfile(info)
        sink(buf.getvalue())


def test_links_in_an_image_never_make_or_change_anything_on_the_host(tmp_path):
    """The mount points, the init's and the marker were made by following the image's links
    on the host, as root: ``/home`` -> a host folder made ``grader`` there with mode 1777, a
    ``/sbin`` link an empty ``gradebox-init``, and a ``.gradebox-complete`` link rewrote the
    host file it named. Now each is resolved inside the tree, as the runtime resolves it."""
    host = tmp_path / "host"
    host.mkdir()
    victim = host / "victim"
    victim.write_text("the host's\n")
    engine = LinkedEngine(
        [("home", str(host)), ("workspace", str(host / "ws")), ("sbin", str(host)),
         (".gradebox-complete", str(victim))]
    )  # fmt: skip
    cache = RootfsCache(
        engine, root=tmp_path / "cache", mount_points=("/home/grader", "/tmp", "/workspace"),
        open_points=("/home/grader", "/tmp"),
    )  # fmt: skip
    root = cache.path_for("sha256:" + "ef" * 32)
    assert sorted(p.name for p in host.iterdir()) == ["victim"]  # nothing made on the host
    assert victim.read_text() == "the host's\n"
    inside = root / str(host).lstrip("/")  # where the runtime finds /home/grader
    assert (inside / "grader").is_dir()
    assert oct((inside / "grader").stat().st_mode & 0o7777) == "0o1777"
    assert (inside / "gradebox-init").is_file()
    assert (root / ".gradebox-complete").read_text() == "sha256:" + "ef" * 32 + "\n"
    assert not (root / ".gradebox-complete").is_symlink()


def test_a_relative_link_in_the_tree_is_followed_inside_it(tmp_path):
    """A merged /usr (``/sbin -> usr/sbin``, as Debian's): the init's mount point is made
    where the link leads, in the tree; ``..`` never climbs above the tree's top."""
    engine = LinkedEngine([("sbin", "usr/sbin"), ("home", "../../../../etc")])
    cache = RootfsCache(engine, root=tmp_path / "cache", mount_points=("/home/grader",))
    root = cache.path_for("sha256:" + "fe" * 32)
    assert (root / "usr" / "sbin" / "gradebox-init").is_file()
    assert (root / "etc" / "grader").is_dir()


class RawEngine:
    """Exports the tar members it is given: a Dockerfile chooses the image's files, owners,
    modes and set-user-id bits; an engine may also send the tree's top (``./``)."""

    def __init__(self, members):
        self.members = members

    def export_image(self, image, sink):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for info, data in self.members:
                tar.addfile(info, io.BytesIO(data) if data is not None else None)
        sink(buf.getvalue())


def _member(name, kind=tarfile.REGTYPE, mode=0o644, uid=0, data=None, link=""):
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.uid, info.gid, info.linkname = kind, mode, uid, uid, link
    info.size = len(data) if data is not None else 0
    return info, data


def test_the_trees_top_stays_ours_whatever_the_export_says(tmp_path):
    """A ``./`` member handed the tree's top to another id (uid 1000: a host user, for a root
    runner), who could then swap any of its folders under the running containers."""
    engine = RawEngine(
        [_member("./", tarfile.DIRTYPE, 0o777, uid=1000), _member("bin/sh", data=b"x")]
    )
    image = "sha256:" + "aa" * 32
    root = RootfsCache(engine, root=tmp_path, mount_points=("/tmp",)).path_for(image)
    st = root.stat()
    assert (st.st_uid, oct(st.st_mode & 0o7777)) == (os.geteuid(), "0o755")


def test_other_local_users_cannot_reach_the_unpacked_trees(tmp_path):
    """Unpacked as root with its owners and modes, an image's set-user-id-root shell (or a
    device node, a 1777 folder) is the host's: the cache's ``rootfs`` folder lets no other
    local user reach it, even in a cache folder others may read (``GRADEBOX_CACHE``)."""
    tmp_path.chmod(0o755)
    engine = RawEngine([_member("bin/sh", mode=0o4755, data=b"#!/bin/sh\n")])
    cache = RootfsCache(engine, root=tmp_path)
    cache.path_for("sha256:" + "bb" * 32)
    assert (tmp_path / "rootfs").stat().st_mode & 0o077 == 0
