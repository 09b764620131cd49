from pathlib import Path

import pytest

from gradebox.errors import ImageError
from gradebox.images import apt_mirror, input_hash, qualified
from tests.conftest import write


def test_mirror_from_deb822(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("GRADEBOX_APT_MIRROR", raising=False)
    monkeypatch.delenv("GRADEBOX_APT_SUITE", raising=False)
    write(
        tmp_path / "etc/apt/sources.list.d/debian.sources",
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\n\nTypes: deb\nURIs: http://mirror.example/debian-security\n"
        "Suites: bookworm-security\nComponents: main\n",
    )
    m = apt_mirror(tmp_path)
    assert (m.uri, m.suite) == ("http://mirror.example/debian", "bookworm")


def test_mirror_from_sources_list(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("GRADEBOX_APT_MIRROR", raising=False)
    monkeypatch.delenv("GRADEBOX_APT_SUITE", raising=False)
    write(
        tmp_path / "etc/apt/sources.list",
        "# comment\ndeb [arch=amd64] http://m.example/debian/ trixie main\n",
    )
    m = apt_mirror(tmp_path)
    assert (m.uri, m.suite) == ("http://m.example/debian", "trixie")


def test_no_mirror_is_a_clear_error(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("GRADEBOX_APT_MIRROR", raising=False)
    with pytest.raises(ImageError, match="GRADEBOX_APT_MIRROR"):
        apt_mirror(tmp_path)


def test_input_hash_tracks_files_and_base(tmp_path: Path):
    write(tmp_path / "Dockerfile", "FROM x\n")
    h1 = input_hash(tmp_path, "sha256:a")
    assert h1 == input_hash(tmp_path, "sha256:a")
    assert h1 != input_hash(tmp_path, "sha256:b")
    write(tmp_path / "Dockerfile", "FROM y\n")
    assert h1 != input_hash(tmp_path, "sha256:a")


def test_qualified_names(monkeypatch):
    monkeypatch.delenv("GRADEBOX_IMAGE_REPO", raising=False)
    assert qualified("python") == "gradebox/python:latest"
    assert qualified("debian:bookworm") == "debian:bookworm"
    assert qualified("x/y@sha256:00") == "x/y@sha256:00"


def test_image_repo_from_the_environment(monkeypatch):
    """Two checkouts of different versions on one engine keep their images apart."""
    monkeypatch.setenv("GRADEBOX_IMAGE_REPO", "gradebox-dev")
    assert qualified("python") == "gradebox-dev/python:latest"
    monkeypatch.setenv("GRADEBOX_IMAGE_REPO", "Bad Name")
    with pytest.raises(ImageError, match="GRADEBOX_IMAGE_REPO"):
        qualified("python")


def test_status_without_apt_configuration(monkeypatch, tmp_path):
    """`images list` works on a host without Debian's apt files when the images are built."""
    from gradebox.errors import ImageError
    from gradebox.images import build

    def no_apt(*a, **k):
        raise ImageError("no Debian mirror found")

    (tmp_path / "base").mkdir()
    monkeypatch.setenv("GRADEBOX_IMAGES_DIR", str(tmp_path))
    monkeypatch.setattr(build, "apt_mirror", no_apt)
    monkeypatch.setattr(build, "_current", lambda engine, name: ("sha256:" + "1" * 64, 1, "x"))
    [base] = build.status(engine=None)
    assert base.up_to_date
