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


def test_input_hash_leaves_out_bytecode_caches(tmp_path: Path):
    """pip compiles the .py files of the definitions it installs from a wheel: the installed
    folder hashes as the checkout's, so images built from either are up to date for both."""
    write(tmp_path / "Dockerfile", "FROM x\n")
    write(tmp_path / "gradebox" / "sdk.py", "x = 1\n")
    before = input_hash(tmp_path, "sha256:a")
    write(tmp_path / "gradebox" / "__pycache__" / "sdk.cpython-311.pyc", "compiled")
    write(tmp_path / "__pycache__" / "t.cpython-311.pyc", "compiled")
    write(tmp_path / "stray.pyc", "compiled")
    assert input_hash(tmp_path, "sha256:a") == before


def test_the_wheel_holds_the_definitions_and_not_the_lock(tmp_path: Path):
    """``pip wheel`` of the checkout: every file of images/ (links followed) is package data
    of gradebox.images, byte for byte, and the user's lock is not (~1 s, no index)."""
    import zipfile

    from gradebox.images import catalog
    from tests.wheel import ROOT, build_wheel

    wheel = build_wheel(tmp_path)
    prefix = f"gradebox/images/{catalog.DEFINITIONS}/"
    with zipfile.ZipFile(wheel) as whl:
        shipped = {n[len(prefix) :]: whl.read(n) for n in whl.namelist() if n.startswith(prefix)}
    images = ROOT / "images"
    expected = {
        p.relative_to(images).as_posix(): p.read_bytes()
        for p in images.rglob("*")
        if p.is_file() and p.name != catalog.LOCK_FILE and "__pycache__" not in p.parts
    }
    assert shipped.keys() == expected.keys()
    assert shipped == expected


def test_pip_is_declared_for_the_wheels_an_image_pins():
    """``images build`` runs ``python -m pip download``: a venv of only the declared
    dependencies (``uv tool install``) must have it."""
    import tomllib

    from tests.wheel import ROOT

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(d.split(">")[0].split("=")[0].strip() == "pip" for d in deps), deps


def test_the_lock_of_an_installed_gradebox_is_in_the_data_folder(tmp_path, monkeypatch):
    from gradebox.images import catalog, lock_path

    monkeypatch.delenv("GRADEBOX_IMAGES_DIR", raising=False)
    monkeypatch.setattr(catalog, "_checkout", lambda: None)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert lock_path() == tmp_path / "data" / "gradebox" / "images.lock.json"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert lock_path() == tmp_path / "home" / ".local/share/gradebox/images.lock.json"
    monkeypatch.setenv("GRADEBOX_IMAGES_DIR", str(tmp_path / "mine"))
    assert lock_path() == tmp_path / "mine" / "images.lock.json"


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
