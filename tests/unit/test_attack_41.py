"""Red-team findings on issue 41's changes (remote repositories, command judges, the live view,
the command session): each test is an attack that must fail."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gradebox.errors import GradeboxError
from gradebox.files import repos
from gradebox.files.workspace import materialise_repo
from tests.unit import test_repos
from tests.unit.test_repos import git, make_repo

# test_repos' fixtures: a git daemon on 127.0.0.1 and a private cache per test
server = test_repos.server
cache = test_repos.cache


def _linked_repo(base: Path, name: str, link: str, target: str) -> str:
    """A served repository whose tree holds ``link``, a symlink to ``target``; its commit."""
    work = base / f"{name}-work"
    work.mkdir()
    git(work, "init", "-q")
    (work / "README").write_text("x\n")
    os.symlink(target, work / link)
    git(work, "add", "-A")
    git(work, "commit", "-qm", "one")
    git(base, "clone", "-q", "--bare", str(work), f"{name}.git")
    return git(work, "rev-parse", "HEAD")


def test_a_repository_checked_out_through_anothers_link_stays_in_the_stage(server, tmp_path):
    # The eval file's first repository holds a link out of the workspace; its second is placed
    # under that link: the clone (and its chown) must not land on the host outside the stage.
    outside = tmp_path / "outside"
    outside.mkdir()
    sha1 = _linked_repo(server.base, "one", "out", str(outside))
    _, sha2 = make_repo(server.base, "two", {"payload": "planted\n"})
    stage = tmp_path / "stage"
    stage.mkdir()
    repos.checkout(repos.resolve(server.url("one"), sha1), stage, "a")
    with pytest.raises(GradeboxError):
        repos.checkout(repos.resolve(server.url("two"), sha2), stage, "a/out/evil")
    assert not (outside / "evil").exists()


def test_a_repository_path_that_is_a_link_to_an_empty_folder_is_refused(server, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    sha1 = _linked_repo(server.base, "one", "out", str(outside))
    _, sha2 = make_repo(server.base, "two", {"payload": "planted\n"})
    stage = tmp_path / "stage"
    stage.mkdir()
    repos.checkout(repos.resolve(server.url("one"), sha1), stage, "a")
    with pytest.raises(GradeboxError):
        repos.checkout(repos.resolve(server.url("two"), sha2), stage, "a/out")
    assert list(outside.iterdir()) == []


def test_a_local_repository_placed_through_a_link_in_the_stage_stays_in_it(tmp_path):
    # The template (the suite author's) holds a link out; a local repository placed under it.
    outside = tmp_path / "outside"
    outside.mkdir()
    stage = tmp_path / "stage"
    stage.mkdir()
    os.symlink(outside, stage / "out")
    src = tmp_path / "suite" / "lib"
    src.mkdir(parents=True)
    (src / "payload").write_text("planted\n")
    with pytest.raises(GradeboxError):
        materialise_repo(tmp_path / "suite", "lib", stage, "out/evil", None)
    assert not (outside / "evil").exists()
