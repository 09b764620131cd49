"""A grader's helper files (`files`, a PYTHONPATH under /grader) are checked before anything
runs: a path out of the project folder, absolute, through a link out, a `.env` (or a folder
holding one), or the suite's own folder is refused in one line naming the file and field."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gradebox.errors import ConfigError
from gradebox.graders.run import check_grader_files, helper_files, uv_src_layout
from gradebox.suite import load_suite
from tests.conftest import write


@pytest.fixture
def proj(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    write(root / "src" / "pkg" / "__init__.py", "")
    write(root / "scripts" / "check.py", "print('{}')\n")
    write(tmp_path / "outside" / "secret.py", "KEY = 1\n")
    return root


def check(root: Path, extra: str) -> None:
    suite = write(
        root / "evals" / "suite.yaml",
        "tests:\n  - id: a\n    output: x\n    assert:\n"
        f"      - {{type: script, command: [python3, ../scripts/check.py], {extra}}}\n",
    )
    for a in load_suite(suite).graders():
        check_grader_files(a.grader, file=a.file, field=a.field, line=a.line)


def refused(root: Path, extra: str) -> str:
    with pytest.raises(ConfigError) as caught:
        check(root, extra)
    text = str(caught.value)
    assert "\n" not in text and "suite.yaml:5: tests.0.assert.0." in text, text
    return text


def test_helpers_inside_the_project_are_accepted(proj: Path) -> None:
    check(proj, "files: [../src, ../src/pkg/__init__.py]")
    check(proj, "env: {PYTHONPATH: '/grader-up1/src:/usr/lib/python3'}")
    # a PYTHONPATH at /grader itself, or at nothing, mounts nothing more (as before)
    check(proj, "env: {PYTHONPATH: '/grader:/grader/nope:/grader-up1'}")


def test_hostile_helpers_are_refused_in_one_line(proj: Path) -> None:
    assert "files.0: '..' is the grader file's folder or one above" in refused(proj, "files: [..]")
    assert "is the grader file's folder" in refused(proj, "files: [.]")
    assert "leads out of the project folder" in refused(proj, "files: [../../outside]")
    assert "does not exist" in refused(proj, "files: [../nope]")
    os.symlink(proj.parent / "outside", proj / "src" / "out")
    assert "'../src/out' leads out of the project folder" in refused(
        proj, "files: [../src/out]")  # fmt: skip
    (proj / "src" / "out").unlink()
    write(proj / "config" / ".env", "KEY=1\n")
    assert "is a .env file" in refused(proj, "files: [../config/.env]")
    assert "holds config/.env" in refused(proj, "files: [../config]")
    assert "env.PYTHONPATH: '../../outside' leads out" in refused(
        proj, "env: {PYTHONPATH: /grader-up2/outside}")  # fmt: skip
    # an absolute path is refused as the suite loads
    with pytest.raises(ConfigError, match=r"suite.yaml:5: tests.0.assert.0.files: '/etc' is abs"):
        check(proj, "files: [/etc]")


def test_pythonpath_names_helpers_and_uv_run_finds_a_src_layout(proj: Path) -> None:
    suite = write(
        proj / "evals" / "suite.yaml",
        "tests:\n  - id: a\n    output: x\n    assert:\n      - {type: script, command: "
        "[python3, ../scripts/check.py], env: {PYTHONPATH: '/grader/lib:/grader-up1/src:/x'}}\n",
    )
    (proj / "evals" / "lib").mkdir()
    (grader,) = [a.grader for a in load_suite(suite).graders()]
    assert helper_files(grader) == [("lib", "env.PYTHONPATH"), ("../src", "env.PYTHONPATH")]
    argv = ["uv", "run", "python", "../scripts/check.py"]
    assert uv_src_layout(argv, proj / "evals") is None  # no pyproject.toml
    write(proj / "pyproject.toml", "[project]\nname = 'x'\n")
    assert uv_src_layout(argv, proj / "evals") == "/grader-up1/src"
    assert uv_src_layout(["python3", "x.py"], proj / "evals") is None


def test_a_repositorys_git_folder_is_never_a_helper(proj: Path) -> None:
    """CI's checkout keeps its token in ``.git/config`` (an ``extraheader``): a grader pack
    inside the project must not name it, the folder, nor a folder holding one. The control:
    a folder without one is accepted."""
    write(proj / ".git" / "config", "[http]\n\textraheader = AUTHORIZATION: basic c2VjcmV0\n")
    assert "is in a repository's .git" in refused(proj, "files: [../.git]")
    assert "is in a repository's .git" in refused(proj, "files: [../.git/config]")
    assert "is in a repository's .git" in refused(
        proj, "env: {PYTHONPATH: /grader-up1/.git}")  # fmt: skip
    (proj / "vendor" / "lib" / ".git").mkdir(parents=True)
    assert "holds vendor/lib/.git" in refused(proj, "files: [../vendor]")
    check(proj, "files: [../src]")


def test_a_command_naming_a_file_in_git_mounts_nothing_of_it(proj: Path) -> None:
    from gradebox.graders.run import grader_file

    write(proj / ".git" / "config", "[http]\n\textraheader = AUTHORIZATION: basic c2VjcmV0\n")
    assert grader_file("../.git/config", proj / "evals") is None
    assert grader_file("../scripts/check.py", proj / "evals") == "../scripts/check.py"
