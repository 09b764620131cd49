"""The image lock is read only when no other local user could have written it (issue 40).

``images.lock.json`` pins the id of every image a grader runs on. It is kept in
``$GRADEBOX_IMAGES_DIR``, a checkout's ``images/`` or the user's data folder
(``$XDG_DATA_HOME/gradebox``), and gradebox often runs as root on a machine others share: a
lock another user planted, linked, or could rewrite (a folder everyone may write, a file their
group may write) would decide which image a grader runs on. Such a lock is refused in one line
naming it (ignored, it would unpin every image), on every path that reads it: ``read_lock``
(run, grade, doctor, images) and ``exec``'s own lean read. A lock is written only into a
folder no other user can change, never through a link. The catalogue itself
(``$GRADEBOX_IMAGES_DIR``, a checkout's ``images/``: the Dockerfiles every image is built
from) is refused the same way, naming it, and so is an image's own tree when it is built;
root's checkout is fine for another user.

The tests run as root (as CI does) and make a user of their own to play the other one.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from gradebox.errors import GradeboxError, ImageError
from gradebox.images import catalog, lock
from gradebox.images.build import ImageStatus

IID = "sha256:" + "a" * 64
BODY = json.dumps({"version": 1, "images": {"python": {"id": IID}}})


@pytest.fixture(params=["images-dir", "data-folder"])
def folder(request, tmp_path, monkeypatch) -> Path:
    """Where this gradebox keeps its lock: ``$GRADEBOX_IMAGES_DIR``, or (an installed gradebox,
    no checkout) ``$XDG_DATA_HOME/gradebox``. Made by root, 0755."""
    if request.param == "images-dir":
        where = tmp_path / "images"
        monkeypatch.setenv("GRADEBOX_IMAGES_DIR", str(where))
    else:
        monkeypatch.delenv("GRADEBOX_IMAGES_DIR", raising=False)
        monkeypatch.setattr(catalog, "_checkout", lambda: None)
        monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
        where = tmp_path / "data" / "gradebox"
    where.mkdir(parents=True, mode=0o755)
    where.chmod(0o755)
    assert catalog.lock_dir() == where
    return where


def _plant(where: Path, user: pwd.struct_passwd, how: str) -> Path:
    """``where/images.lock.json`` as another local user could leave it (``how``)."""
    path = where / catalog.LOCK_FILE
    path.write_text(BODY)
    path.chmod(0o644)
    if how == "their-file":  # in root's folder, a file of theirs (made while it was open)
        os.chown(path, user.pw_uid, user.pw_gid)
    elif how == "link":  # a link to a lock of root's: its text is whoever can write there
        elsewhere = where.parent / "elsewhere.json"
        path.rename(elsewhere)
        path.symlink_to(elsewhere)
    elif how == "dangling-link":  # a link to nothing yet: theirs to fill in later
        path.unlink()
        path.symlink_to(where.parent / "not-yet.json")
    elif how == "open-folder":  # root's file, in a folder every user may write (not sticky)
        where.chmod(0o777)
    elif how == "their-group":  # root's file, writable by a group root is not: theirs
        os.chown(path, 0, user.pw_gid)
        path.chmod(0o664)
    elif how == "their-group-folder":  # root's folder, writable by their group: swappable
        os.chown(where, 0, user.pw_gid)
        where.chmod(0o775)
    elif how == "their-folder":  # the folder is theirs ($GRADEBOX_IMAGES_DIR pointed at it)
        os.chown(where, user.pw_uid, user.pw_gid)
    elif how == "their-parent":  # root's folder and file, below theirs: they rename it away
        os.chown(where.parent, user.pw_uid, user.pw_gid)
    else:
        raise AssertionError(how)
    return path


HOW = [
    "their-file",
    "link",
    "dangling-link",
    "open-folder",
    "their-group",
    "their-group-folder",
    "their-folder",
    "their-parent",
]


@pytest.mark.parametrize("how", HOW)
def test_a_lock_another_user_could_have_written_is_refused_naming_it(folder, other_user, how):
    path = _plant(folder, other_user, how)
    with pytest.raises(ImageError) as caught:
        lock.read_lock()
    message = str(caught.value)
    assert str(path) in message and "\n" not in message, message
    assert "gradebox images lock" in message, message  # what to do


@pytest.mark.parametrize("how", HOW)
def test_exec_refuses_it_too(folder, other_user, how):
    """``exec`` and ``grade``'s lean path read the lock on their own (no pydantic): the same
    rule, never an unpinned fallback."""
    from gradebox.cli.exec import _locked_id

    path = _plant(folder, other_user, how)
    with pytest.raises(ImageError, match=str(path)):
        _locked_id("python")


@pytest.mark.parametrize("how", ["their-file", "open-folder", "their-folder"])
def test_the_cli_says_it_in_one_line(other_user, how, tmp_path):
    """``gradebox images verify`` and ``exec``: one line naming the file, no traceback."""
    where = tmp_path / "images"
    where.mkdir(mode=0o755)
    path = _plant(where, other_user, how)
    env = {**os.environ, "GRADEBOX_IMAGES_DIR": str(where)}
    work = tmp_path / "work"
    work.mkdir(mode=0o755)
    for argv in (["images", "verify"], ["exec", "--image", "python", "--", "true"]):
        done = subprocess.run(
            [sys.executable, "-m", "gradebox", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=work,
        )
        assert done.returncode != 0, (argv, done.stdout, done.stderr)
        assert str(path) in done.stderr, (argv, done.stderr)
        assert "Traceback" not in done.stderr, (argv, done.stderr)


@pytest.mark.parametrize("how", ["mine", "own-group", "sticky-folder"])
def test_control_our_own_lock_is_read(folder, how):
    """Control: root's lock in root's folder; group-writable with our own group (a umask of
    002); in a world-writable sticky folder (as ``/tmp``), whose files others cannot swap."""
    path = folder / catalog.LOCK_FILE
    path.write_text(BODY)
    if how == "own-group":
        path.chmod(0o664)
    elif how == "sticky-folder":
        folder.chmod(0o1777)
    read = lock.read_lock()
    assert read is not None and read.images["python"].id == IID
    from gradebox.cli.exec import _locked_id

    assert _locked_id("python") == IID


def test_control_no_lock_is_no_lock(folder):
    assert lock.read_lock() is None


# -- writing ------------------------------------------------------------------------------------


def _statuses(monkeypatch) -> None:
    built = ImageStatus(
        name="base", ref="gradebox/base:latest", id=IID, size=1, inputs="x", expected_inputs="x"
    )
    monkeypatch.setattr(lock, "status", lambda engine: [built])


@pytest.mark.parametrize("how", ["their-folder", "open-folder", "their-parent"])
def test_a_lock_is_never_written_where_another_user_could_change_it(
    folder, other_user, monkeypatch, how
):
    _statuses(monkeypatch)
    if how == "their-folder":
        os.chown(folder, other_user.pw_uid, other_user.pw_gid)
    elif how == "open-folder":
        folder.chmod(0o777)
    else:  # ours, below a folder of theirs: they can rename ours away and put theirs there
        os.chown(folder.parent, other_user.pw_uid, other_user.pw_gid)
    with pytest.raises(GradeboxError) as caught:
        lock.write_lock(engine=None)
    assert str(folder) in str(caught.value) and "\n" not in str(caught.value)
    assert not (folder / catalog.LOCK_FILE).exists()


def test_a_link_left_under_the_name_is_replaced_not_written_through(folder, monkeypatch):
    _statuses(monkeypatch)
    target = folder.parent / "theirs.txt"
    target.write_text("untouched\n")
    (folder / catalog.LOCK_FILE).symlink_to(target)
    lock.write_lock(engine=None)
    assert target.read_text() == "untouched\n"
    assert not (folder / catalog.LOCK_FILE).is_symlink()
    assert lock.read_lock().images["base"].id == IID


def test_control_a_lock_is_written_into_a_folder_made_for_it(folder, monkeypatch):
    _statuses(monkeypatch)
    folder.rmdir()  # made by write_lock, then checked
    lock.write_lock(engine=None)
    assert lock.read_lock().images["base"].id == IID


# -- the catalogue ------------------------------------------------------------------------------


def _catalogue(tmp_path: Path, monkeypatch, source: str) -> Path:
    """An images folder of root's (0755, with a base image), as ``$GRADEBOX_IMAGES_DIR`` or
    as the ``images/`` of the checkout gradebox runs from."""
    checkout = tmp_path / "checkout"
    where = checkout / "images"
    (where / "base").mkdir(parents=True, mode=0o755)
    (where / "base" / "Dockerfile").write_text("FROM scratch\n")
    where.chmod(0o755)
    if source == "variable":
        monkeypatch.setenv("GRADEBOX_IMAGES_DIR", str(where))
    else:
        monkeypatch.delenv("GRADEBOX_IMAGES_DIR", raising=False)
        (checkout / "pyproject.toml").write_text("")
        monkeypatch.setattr(catalog, "_HERE", checkout / "src/gradebox/images/catalog.py")
    assert catalog.images_dir() == where
    return where


@pytest.mark.parametrize("source", ["variable", "checkout"])
@pytest.mark.parametrize(
    "how", ["their-folder", "open-folder", "sticky-open-folder", "their-group-folder",
            "their-parent", "their-link"]
)  # fmt: skip
def test_an_image_catalogue_another_user_could_change_is_refused_naming_it(
    tmp_path, monkeypatch, other_user, source, how
):
    """The catalogue's Dockerfiles and lock decide what every grader runs on: a folder
    another local user could change (theirs, writable by all or their group, even sticky:
    they could add an image folder; below theirs; reached through their link) is refused in
    one line naming it, never built from."""
    where = _catalogue(tmp_path, monkeypatch, source)
    uid, gid = other_user.pw_uid, other_user.pw_gid
    named = where
    if how == "their-folder":
        os.chown(where, uid, gid)
    elif how == "open-folder":
        where.chmod(0o777)
    elif how == "sticky-open-folder":
        where.chmod(0o1777)
    elif how == "their-group-folder":
        os.chown(where, 0, gid)
        where.chmod(0o775)
    elif how == "their-parent":
        os.chown(where.parent, uid, gid)
    elif source == "variable":  # their link to our folder: they can point it elsewhere
        named = tmp_path / "link"
        named.symlink_to(where)
        os.chown(named, uid, gid, follow_symlinks=False)
        monkeypatch.setenv("GRADEBOX_IMAGES_DIR", str(named))
    else:  # the checkout's images/ is their link
        where.rename(tmp_path / "real")
        where.symlink_to(tmp_path / "real")
        os.chown(where, uid, gid, follow_symlinks=False)
    with pytest.raises(ImageError) as caught:
        catalog.images_dir()
    message = str(caught.value)
    assert str(named) in message and "\n" not in message, message
    assert "GRADEBOX_IMAGES_DIR" in message, message  # what to do


@pytest.mark.parametrize("how", ["ours", "own-group", "roots-seen-by-another-user"])
def test_control_our_catalogue_and_roots_checkout_are_used(tmp_path, monkeypatch, how):
    """Ours; writable by our own group (a umask of 002); root's, to a user who is not root
    (the docker-group user reads root's checkout: modelled by our uid as another's)."""
    where = _catalogue(tmp_path, monkeypatch, "checkout")
    if how == "own-group":
        where.chmod(0o775)
    elif how == "roots-seen-by-another-user":
        monkeypatch.setattr(os, "geteuid", lambda: 12345)
        monkeypatch.setattr(os, "getegid", lambda: 12345)
    assert catalog.images_dir() == where


def test_a_catalogue_that_is_not_there_is_one_line_naming_it(tmp_path, monkeypatch):
    """Was a FileNotFoundError traceback, then a refusal for "another local user"."""
    missing = tmp_path / "nope"
    monkeypatch.setenv("GRADEBOX_IMAGES_DIR", str(missing))
    with pytest.raises(ImageError, match=f"{missing}: no such folder"):
        catalog.images_dir()


def test_a_catalogue_whose_name_is_too_long_is_one_line_naming_it(tmp_path, monkeypatch):
    """``Path.is_dir`` raises ``File name too long`` (only ENOENT and the like are a no): was an
    OSError traceback, not an ``ImageError``."""
    missing = tmp_path / ("x" * 300)
    monkeypatch.setenv("GRADEBOX_IMAGES_DIR", str(missing))
    with pytest.raises(ImageError, match="no such folder"):
        catalog.images_dir()


# -- an image's own folder, when it is built ------------------------------------------------------


class _Engine:
    """Records each build it is asked for; builds nothing."""

    def __init__(self) -> None:
        self.built: list[str] = []

    def build(self, **kwargs):
        self.built.append(kwargs["tag"])
        return iter(())

    def image(self, ref):
        return {"Id": IID}


def _image(where: Path, tmp_path: Path) -> Path:
    """``where/python``: root's, 0755, a Dockerfile, a build-context file in a subfolder and a
    link of root's to a file of root's outside it (as the ``sdk`` links into ``src/``)."""
    image = where / "python"
    (image / "gradebox").mkdir(parents=True, mode=0o755)
    (image / "Dockerfile").write_text("ARG BASE\nFROM $BASE\n")
    (image / "gradebox" / "__init__.py").write_text("")
    sdk = tmp_path / "checkout" / "src" / "sdk.py"
    sdk.parent.mkdir(mode=0o755)
    sdk.write_text("")
    (image / "gradebox" / "sdk.py").symlink_to(sdk)
    for path in (image, image / "gradebox", sdk.parent):
        path.chmod(0o755)
    return image


@pytest.mark.parametrize(
    "how", ["their-dockerfile", "open-image-folder", "their-context-file",
            "open-context-file", "their-link", "link-into-an-open-folder"]
)  # fmt: skip
def test_an_image_another_user_could_change_is_not_built(tmp_path, monkeypatch, other_user, how):
    """The catalogue's folder was asked (``images_dir``), the image's own tree was not: their
    Dockerfile, a folder or file below that everyone may write, a link of theirs, or one
    leading into a folder everyone may write would let them choose what `images build`
    builds (and `images lock` pins next). Refused in one line naming it, before any build."""
    from gradebox.images.build import build_image

    where = _catalogue(tmp_path, monkeypatch, "variable")
    image = _image(where, tmp_path)
    uid, gid = other_user.pw_uid, other_user.pw_gid
    named = image / "gradebox" / "__init__.py"
    if how == "their-dockerfile":
        named = image / "Dockerfile"
        os.chown(named, uid, gid)
    elif how == "open-image-folder":
        named = image
        image.chmod(0o777)
    elif how == "their-context-file":
        os.chown(named, uid, gid)
    elif how == "open-context-file":
        named.chmod(0o666)
    elif how == "their-link":
        named = image / "gradebox" / "sdk.py"
        os.chown(named, uid, gid, follow_symlinks=False)
    else:  # root's link, to a folder every user may write (not sticky): they swap the file
        named = tmp_path / "checkout" / "src"
        named.chmod(0o777)
    engine = _Engine()
    with pytest.raises(ImageError) as caught:
        build_image(engine, "python", IID, say=lambda _: None)
    message = str(caught.value)
    assert str(named) in message and "\n" not in message, message
    assert engine.built == []


def test_an_image_link_out_to_a_shared_folder_is_named_in_the_refusal(tmp_path, monkeypatch):
    """A link in the image to ``/`` leads the walk to ``/tmp``: the refusal named only
    ``/tmp``, not the image's link that reached it, so the user could not tell what to fix."""
    from gradebox.images.build import build_image

    where = _catalogue(tmp_path, monkeypatch, "variable")
    link = _image(where, tmp_path) / "gradebox" / "escape"
    link.symlink_to("/")
    with pytest.raises(ImageError) as caught:
        build_image(_Engine(), "python", IID, say=lambda _: None)
    assert str(link) in str(caught.value), caught.value


def test_an_image_folder_nested_deeper_than_the_bound_is_one_line(tmp_path, monkeypatch):
    """1100 folders each in the one before: ``os.walk`` (recursive on Python 3.11) raised
    RecursionError before the walk's bound on entries was reached; now the bound says so."""
    from gradebox.images.build import IMAGE_ENTRIES, build_image

    where = _catalogue(tmp_path, monkeypatch, "variable")
    image = _image(where, tmp_path)
    fd = os.open(image, os.O_RDONLY)
    for _ in range(IMAGE_ENTRIES + 100):  # by descriptor: the path passes PATH_MAX
        os.mkdir("d", dir_fd=fd)
        fd, old = os.open("d", os.O_RDONLY, dir_fd=fd), fd
        os.close(old)
    os.close(fd)
    try:
        with pytest.raises(ImageError, match=f"more than {IMAGE_ENTRIES} entries"):
            build_image(_Engine(), "python", IID, say=lambda _: None)
    finally:  # taken apart from the top: shutil.rmtree recurses too
        top = image / "d"
        while (top / "d").is_dir():
            os.rename(top / "d", image / "next")
            os.rmdir(top)
            os.rename(image / "next", top)
        os.rmdir(top)


@pytest.mark.parametrize("how", ["roots", "roots-seen-by-another-user"])
def test_control_roots_image_is_built(tmp_path, monkeypatch, how):
    """Control: root's image folder, its link into root's ``src/`` followed; for root, and
    for the docker-group user on root's checkout (our uid modelled as another's)."""
    from gradebox.images.build import build_image

    where = _catalogue(tmp_path, monkeypatch, "variable")
    _image(where, tmp_path)
    if how == "roots-seen-by-another-user":
        monkeypatch.setattr(os, "geteuid", lambda: 12345)
        monkeypatch.setattr(os, "getegid", lambda: 12345)
    engine = _Engine()
    assert build_image(engine, "python", IID, say=lambda _: None) == IID
    assert engine.built == ["gradebox/python:latest"]


def test_doctor_says_to_mend_the_operators_catalogue_not_to_reinstall(tmp_path, monkeypatch):
    """A refused or missing GRADEBOX_IMAGES_DIR is the operator's folder: a reinstall brings
    back only the package's definitions, never theirs."""
    from gradebox.cli import machine

    monkeypatch.setenv("GRADEBOX_IMAGES_DIR", str(tmp_path / "nope"))
    (row,) = machine._images(None)
    assert row.name == "image definitions" and "no such folder" in row.detail
    assert "GRADEBOX_IMAGES_DIR" in row.fix and "reinstall" not in row.fix
