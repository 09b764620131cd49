"""The OCI backend's root filesystem cache and backend selection, without a runtime."""

import io
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
