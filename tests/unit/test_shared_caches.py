"""Caches in a folder another local user can write are not ours (issue 40).

``$GRADEBOX_CACHE`` or ``$XDG_CACHE_HOME`` may name a folder another user owns, or one every
user may write (a CI's ``/tmp/cache``). Root filesystems, the sealed init and the seccomp
filter are handed to the runtime by name, so such a folder could swap them between our check
and the runtime's open: ``cache_dir()`` refuses it with one line naming it, and gradebox
caches in a private folder instead; a filter planted there is not loaded.

The tests run as root (as CI does) and make a user of their own to play the other one.
"""

from __future__ import annotations

import base64
import logging
import os
import pwd
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from gradebox.core import private_cache
from gradebox.core.pathnames import resolve_path
from gradebox.core.private_cache import cache_dir
from gradebox.core.untrusted import trusted, unshared
from gradebox.errors import ConfigError, EngineError
from gradebox.sandbox import seccomp, seccomp_bpf
from gradebox.sandbox.init import sealed_init
from gradebox.sandbox.rootfs import RootfsCache

_ALLOW_ALL = struct.pack("HBBI", 0x06, 0, 0, 0x7FFF0000)  # one instruction: RET ALLOW


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    # Each test asks cache_dir() anew.
    monkeypatch.setattr(private_cache, "_chosen", {}, raising=False)
    monkeypatch.setattr(seccomp_bpf, "_memo", {})


def _theirs(path: Path, user: pwd.struct_passwd) -> Path:
    os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)
    return path


def _made_theirs(path: Path, user: pwd.struct_passwd) -> Path:
    path.mkdir(mode=0o755)
    return _theirs(path, user)


def _as(user: pwd.struct_passwd, script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", user.pw_name, "--", "sh", "-c", script],
                          capture_output=True, text=True)  # fmt: skip


# --- the rule: unshared ---------------------------------------------------------------------


def _their_folder(shared, user):
    return _made_theirs(shared / "c", user)


def _open_folder(shared, user):
    (shared / "c").mkdir()
    os.chmod(shared / "c", 0o777)  # not sticky: anyone renames what is in it
    return shared / "c"


def _below_theirs(shared, user):
    _theirs(shared, user)
    (shared / "c").mkdir(mode=0o700)  # ours, but they can rename it away and put theirs
    return shared / "c"


def _their_link_to_ours(shared, user):
    (shared / "mine").mkdir(mode=0o700)
    (shared / "c").symlink_to(shared / "mine")
    return _theirs(shared / "c", user)


def _our_link_to_theirs(shared, user):
    _made_theirs(shared / "theirs", user)
    (shared / "c").symlink_to("theirs")
    return shared / "c"


def _sticky_open_folder(shared, user):
    (shared / "c").mkdir()
    os.chmod(shared / "c", 0o1777)  # sticky: the folder itself is still everyone's cache
    return shared / "c"


def _dotdot_through_our_link_into_theirs(shared, user):
    # Read as written, mine/l/../c is mine/c (ours); the kernel takes .. where l led: theirs/c.
    _made_theirs(shared / "theirs", user)
    for folder in ("theirs/sub", "theirs/c", "mine", "mine/c"):
        (shared / folder).mkdir(mode=0o700)
    (shared / "mine" / "l").symlink_to(shared / "theirs" / "sub")
    return shared / "mine" / "l" / ".." / "c"


def _ending_in_dotdot_at_a_sticky_folder(shared, user):
    # A sticky folder is on the way to ours/, but ours/.. is the sticky folder itself.
    _sticky_open_folder(shared, user)
    (shared / "c" / "ours").mkdir(mode=0o700)
    (shared / "up").symlink_to("c/ours/..")
    return shared / "c" / "ours" / ".."


def _our_link_ending_in_dotdot(shared, user):
    _ending_in_dotdot_at_a_sticky_folder(shared, user)
    return shared / "up"


SHARED = [_their_folder, _open_folder, _below_theirs, _their_link_to_ours, _our_link_to_theirs,
          _sticky_open_folder, _dotdot_through_our_link_into_theirs,
          _ending_in_dotdot_at_a_sticky_folder, _our_link_ending_in_dotdot]  # fmt: skip


@pytest.mark.parametrize("make", SHARED)
def test_a_folder_another_user_can_change_is_not_unshared(shared, other_user, make):
    folder = make(shared, other_user)
    why = unshared(folder)
    assert why is not None and "\n" not in why


def test_a_folder_of_ours_is_unshared_through_sticky_tmp_and_our_own_links(shared):
    (shared / "mine").mkdir(mode=0o700)
    (shared / "link").symlink_to("mine")
    (shared / "open").mkdir()
    os.chmod(shared / "open", 0o1777)
    (shared / "open" / "ours").mkdir(mode=0o700)  # in a sticky folder: only we rename it
    for folder in (shared / "mine", shared / "link", shared / "open" / "ours"):
        assert unshared(folder) is None, folder
    assert unshared(shared / "not-there-yet" / "below", missing_ok=True) is None  # made next


@pytest.mark.parametrize("door", ["unshared", "trusted", "resolve_path"])
def test_a_folder_taken_away_while_walked_is_no_pass(tmp_path, monkeypatch, door):
    # Another user renames their folder (in a sticky /tmp) away as the walk reaches it and
    # back after, in a loop: a walk that ends there with no reason passes their file, read
    # next by name (a race won 1 to 8 times in 100 before). Modelled: the folder is gone
    # for the walk's one look at it.
    theirs = tmp_path / "theirs"
    file = theirs / "prompt.md"
    theirs.mkdir()
    file.write_text("planted\n")
    lstat, looked = os.lstat, []

    def renamed_away_once(path, *args, **kwargs):
        if os.fspath(path) == str(theirs) and not looked:
            looked.append(path)
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", renamed_away_once)
    if door == "unshared":
        assert unshared(file) is not None
    elif door == "trusted":
        assert not trusted(file)
    else:
        with pytest.raises(ConfigError, match="another local user could have written it"):
            resolve_path("theirs/prompt.md", [tmp_path])
    assert looked


# --- cache_dir(): a shared folder is refused, in one line naming it --------------------------


def _xdg_with_their_gradebox(shared, user, monkeypatch):
    os.chmod(shared, 0o1777)  # a shared /tmp/cache; they made its gradebox/ first
    _made_theirs(shared / "gradebox", user)
    monkeypatch.delenv("GRADEBOX_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(shared))
    return shared / "gradebox"


@pytest.mark.parametrize("make", [_their_folder, _open_folder, _below_theirs,
                                  _their_link_to_ours, _xdg_with_their_gradebox])  # fmt: skip
def test_a_shared_cache_folder_is_not_used_and_a_warning_names_it(
    shared, other_user, monkeypatch, caplog, make
):
    if make is _xdg_with_their_gradebox:
        wanted = make(shared, other_user, monkeypatch)
    else:
        wanted = make(shared, other_user)
        monkeypatch.setenv("GRADEBOX_CACHE", str(wanted))
    with caplog.at_level(logging.WARNING, logger="gradebox.cache"):
        chosen = cache_dir()
        assert cache_dir() == chosen  # asked once
    assert str(shared) not in str(chosen.resolve())
    assert unshared(chosen) is None and chosen.is_dir()
    (line,) = [r.getMessage() for r in caplog.records if r.name == "gradebox.cache"]
    assert str(wanted) in line and str(chosen) in line and "\n" not in line


def test_a_private_cache_folder_is_used_as_it_is(shared, monkeypatch, caplog):
    monkeypatch.setenv("GRADEBOX_CACHE", str(shared / "cache"))
    with caplog.at_level(logging.WARNING, logger="gradebox.cache"):
        assert cache_dir() == shared / "cache"
    assert (shared / "cache").stat().st_mode & 0o777 == 0o700  # made private
    assert not [r for r in caplog.records if r.name == "gradebox.cache"]
    monkeypatch.setattr(private_cache, "_chosen", {}, raising=False)
    os.chmod(shared / "cache", 0o775)  # a umask of 002: our own group may write
    assert cache_dir() == shared / "cache"


# --- the sealed init: never in a folder another user can swap it in --------------------------


def test_the_sealed_init_is_not_left_where_another_user_can_swap_it(shared, other_user,
                                                                    monkeypatch):  # fmt: skip
    tini = shared / "tini-static"
    tini.write_bytes(b"\x7fELF the real tini")
    cache = _made_theirs(shared / "cache", other_user)
    monkeypatch.setenv("GRADEBOX_CACHE", str(cache))
    sealed = sealed_init(tini)
    assert sealed is not None
    # The other user swaps the init folder for one of theirs, with their own PID 1 in it.
    swap = _as(other_user, f"cd {cache} && mv init old && mkdir init && "
               f"printf evil > init/{sealed.name} && chmod 111 init/{sealed.name}")  # fmt: skip
    assert swap.returncode != 0 or cache not in sealed.parents, swap.stderr
    assert sealed.stat().st_uid == 0 and cache not in sealed.parents


# --- the seccomp filter: a planted one is not loaded -----------------------------------------


@pytest.mark.parametrize("how", ["theirs", "open", "a-link-to-theirs"])
def test_a_filter_in_a_folder_others_can_write_is_not_loaded(shared, other_user, how):
    profile = seccomp.seccomp_profile()
    mine = shared / "mine"
    mine.mkdir(mode=0o700)
    real = base64.b64decode(seccomp_bpf.compiled(profile, str(mine / "seccomp")))
    (entry,) = (mine / "seccomp").iterdir()
    folder = shared / "seccomp"
    folder.mkdir(mode=0o700)
    if how == "theirs":
        _theirs(folder, other_user)
    elif how == "open":
        os.chmod(folder, 0o777)
    else:  # our link to a folder of theirs
        folder.rmdir()
        folder.symlink_to(_made_theirs(shared / "theirs", other_user))
    # A filter that allows every call, named as ours, a file of root's (one we wrote
    # elsewhere, moved in by the folder's owner).
    (folder / entry.name).write_bytes(_ALLOW_ALL)
    os.chmod(folder / entry.name, 0o600)
    seccomp_bpf._memo.clear()
    assert base64.b64decode(seccomp_bpf.compiled(profile, str(folder))) == real
    # Nothing of ours is written where others can change it.
    assert [p.name for p in folder.iterdir()] == [entry.name]


# --- root filesystems: a planted one is not used ---------------------------------------------


class _Engine:
    def __init__(self):
        self.exports = 0

    def export_image(self, image, sink):
        import io
        import tarfile

        self.exports += 1
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            data = b"#!/bin/sh\n"
            info = tarfile.TarInfo("bin/sh")
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
        sink(buf.getvalue())


def test_a_root_filesystem_planted_in_a_shared_cache_is_not_used(shared, other_user,
                                                                  monkeypatch):  # fmt: skip
    digest = os.urandom(32).hex()
    cache = _made_theirs(shared / "cache", other_user)
    planted = cache / "rootfs" / digest
    (planted / "bin").mkdir(parents=True)
    (planted / "bin" / "sh").write_text("#!/bin/sh\necho planted\n")
    (planted / ".gradebox-complete").write_text(f"sha256:{digest}\n")
    for path in (cache / "rootfs", planted, planted / "bin", planted / "bin" / "sh"):
        _theirs(path, other_user)
    monkeypatch.setenv("GRADEBOX_CACHE", str(cache))
    engine = _Engine()
    found = RootfsCache(engine).path_for(f"sha256:{digest}")
    try:
        assert cache not in found.parents and engine.exports == 1  # unpacked afresh
        assert (found / "bin" / "sh").read_text() == "#!/bin/sh\n"
        assert unshared(found.parent) is None
    finally:
        shutil.rmtree(found, ignore_errors=True)
        for leftover in found.parent.glob(f"{digest}*"):
            leftover.unlink(missing_ok=True)


@pytest.mark.parametrize("how", ["their-entry", "open-entry", "a-link-to-their-entry"])
def test_an_entry_not_ours_in_a_cache_given_its_own_root_is_unpacked_again(shared, other_user, how):
    digest = os.urandom(32).hex()
    planted = shared / "elsewhere" if how == "a-link-to-their-entry" else shared / "rootfs" / digest
    (planted / "bin").mkdir(parents=True)
    (planted / "bin" / "sh").write_text("#!/bin/sh\necho planted\n")
    (planted / ".gradebox-complete").write_text(f"sha256:{digest}\n")
    if how == "open-entry":
        os.chmod(planted, 0o777)
    else:
        _theirs(planted, other_user)
    if how == "a-link-to-their-entry":
        (shared / "rootfs").mkdir()
        (shared / "rootfs" / digest).symlink_to(planted)
    engine = _Engine()
    found = RootfsCache(engine, root=shared).path_for(f"sha256:{digest}")
    assert engine.exports == 1 and (found / "bin" / "sh").read_text() == "#!/bin/sh\n"
    assert not found.is_symlink() and found.stat().st_uid == 0


def test_a_link_where_the_lock_goes_is_not_followed(shared):
    digest = os.urandom(32).hex()
    victim = shared / "victim"
    victim.write_text("root's file")
    (shared / "rootfs").mkdir()
    (shared / "rootfs" / f"{digest}.lock").symlink_to(victim)
    with pytest.raises(EngineError) as err:
        RootfsCache(_Engine(), root=shared).path_for(f"sha256:{digest}")
    assert f"{digest}.lock" in str(err.value) and "\n" not in str(err.value)
    assert victim.read_text() == "root's file"  # not emptied
