"""Code found by walking up from a suite is run only when it is the project's (issue 40).

Custom assertions (``.gradebox/assertions/``), ``gradebox assert``'s graders
(``.gradebox/graders/``) and AgentV's provider scripts (``.agentv/providers/*.ts``) are found
in the suite's folder and every folder above it, which passes shared ones (``/tmp``, a folder
of another user's). They follow the rule ``targets.yaml`` and ``.env`` follow
(``untrusted.trusted``): ours or root's, no link, in a folder others cannot write. Anything
else is skipped with one line naming it, or, where the user named it (``gradebox assert
NAME``), refused in one line.

The tests run as root (as CI does) and make a user of their own to play the other one.
"""

from __future__ import annotations

import logging
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from gradebox.core.untrusted import trusted
from gradebox.errors import ConfigError
from gradebox.formats.agentv._base import dotenv
from gradebox.formats.agentv.providers import _discovered
from gradebox.graders.custom import GRADER_DIRS, discover
from gradebox.llm.targets import load_targets
from gradebox.suite import load_suite
from tests.conftest import write

CHECK = "import json, sys\nprint(json.dumps({'pass': True, 'score': 1}))\n"


def _theirs(path: Path, user: pwd.struct_passwd) -> None:
    os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)


def _plant(top: Path, sub: str, file: str, user: pwd.struct_passwd, how: str) -> Path:
    """``top/sub/file``, left by the other user in one of the ways they can; the suite's
    folder is ``top/suite``, root's."""
    path = top / sub / file
    if how == "their-folder-above":  # a folder of theirs above root's suite, all theirs in it
        write(path, CHECK)
        _theirs(top, user)
        for part in (*path.relative_to(top).parents, path.relative_to(top)):
            if str(part) != ".":
                _theirs(top / part, user)
    elif how == "their-file":  # in folders of root's: their file only
        write(path, CHECK)
        _theirs(path, user)
    elif how == "open-folder":  # a file of root's in a folder every user may write (no sticky)
        write(path, CHECK)
        os.chmod(path.parent, 0o777)
    elif how == "world-writable-file":
        write(path, CHECK)
        os.chmod(path, 0o666)
    elif how == "a-link-to-theirs":  # root's link, to a file of theirs
        elsewhere = write(top / "elsewhere" / file, CHECK)
        _theirs(elsewhere, user)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(elsewhere)
    (top / "suite").mkdir(exist_ok=True)
    if how == "their-folder-above":
        os.chown(top / "suite", 0, 0)
    return path


WAYS = ["their-folder-above", "their-file", "open-folder", "world-writable-file",
        "a-link-to-theirs"]  # fmt: skip


# --- custom assertions ----------------------------------------------------------------------


@pytest.mark.parametrize("how", WAYS)
def test_a_custom_assertion_that_is_not_ours_is_skipped_with_a_line_naming_it(
    shared, other_user, caplog, how
):
    planted = _plant(shared, ".gradebox/assertions", "sneaky.py", other_user, how)
    write(shared / "suite" / ".gradebox" / "assertions" / "mine.py", CHECK)  # control
    with caplog.at_level(logging.WARNING, logger="gradebox.assertions"):
        found = discover(shared / "suite")
    # Below a folder of theirs, root's suite is theirs too: they can rename it away.
    assert "sneaky" not in found and ("mine" in found) == (how != "their-folder-above")
    (line,) = [r.getMessage() for r in caplog.records if "sneaky" in r.getMessage()]
    assert str(planted) in line and "\n" not in line


@pytest.mark.parametrize("how", ["their-folder-above", "their-file", "open-folder"])
def test_a_suite_naming_their_assertion_does_not_load(shared, other_user, how):
    _plant(shared, ".gradebox/assertions", "sneaky.py", other_user, how)
    suite = write(shared / "suite" / "suite.yaml",
                  "name: s\ntests:\n  - id: t\n    input: hi\n    assert:\n"
                  "      - {type: sneaky}\n")  # fmt: skip
    with pytest.raises(ConfigError) as err:
        load_suite(suite)
    assert "unknown assertion type 'sneaky'" in str(err.value) and "\n" not in str(err.value)


def test_our_own_assertion_above_the_suite_and_in_sticky_tmp_folders_is_found(shared):
    os.chmod(shared, 0o1777)  # sticky, as /tmp is: only its owner renames what is in it
    write(shared / ".gradebox" / "assertions" / "above.py", CHECK)
    write(shared / "suite" / ".agentv" / "assertions" / "near.sh", "exit 0\n")
    found = discover(shared / "suite")
    assert {"above", "near"} <= set(found)
    suite = write(shared / "suite" / "suite.yaml",
                  "name: s\ntests:\n  - id: t\n    input: hi\n    assert:\n"
                  "      - {type: above}\n")  # fmt: skip
    (custom,) = load_suite(suite).tests[0].assertions
    assert custom.grader.command == ["python3", "above.py"]


def test_a_nearer_one_that_is_not_ours_does_not_hide_ours_further_up(shared, other_user):
    write(shared / ".gradebox" / "assertions" / "same.py", CHECK)
    near = write(shared / "suite" / ".gradebox" / "assertions" / "same.py", CHECK)
    _theirs(near, other_user)
    found = discover(shared / "suite")
    assert found["same"].path == shared / ".gradebox" / "assertions" / "same.py"


# --- a file of ours below a folder another user can change -----------------------------------


def _project_below(shared: Path, user: pwd.struct_passwd, how: str) -> tuple[Path, Path]:
    """A project folder of ours, ``proj``, below a folder another local user can change
    (``how``), and that folder: as the suite's project is reached, and where it really is."""
    top = shared / "top"
    top.mkdir()
    if how in ("their-folder", "through-our-link"):
        _theirs(top, user)
    elif how == "open-folder":  # root's, every user may write, not sticky
        os.chmod(top, 0o777)
    elif how == "their-group":  # root's, writable by their group (not sticky)
        os.chown(top, 0, user.pw_gid)
        os.chmod(top, 0o775)
    (top / "proj").mkdir(mode=0o755)
    if how == "through-our-link":  # our own link to the project, which sits in their folder
        (shared / "proj").symlink_to(top / "proj")
        return shared / "proj", top
    return top / "proj", top


BELOW = ["their-folder", "open-folder", "their-group", "through-our-link"]


@pytest.mark.parametrize("how", BELOW)
def test_a_file_of_ours_below_a_folder_another_user_can_change_is_not_the_projects(
    shared, other_user, how
):
    """``/tmp/theirs/proj/.gradebox/targets.yaml``: the file, its folder and ``proj`` are
    ours, but whoever may write ``/tmp/theirs`` runs ``mv proj proj.old; mkdir proj`` and
    puts their own file at the name, between our check and our read."""
    proj, top = _project_below(shared, other_user, how)
    targets = write(proj / ".gradebox" / "targets.yaml",
                    "targets:\n  - {name: gbx_below, model: m}\n")  # fmt: skip
    env = write(proj / ".env", "GBX_BELOW=ours\n")
    write(proj / ".gradebox" / "assertions" / "mine.py", CHECK)
    assert not trusted(targets) and not trusted(env)
    assert "gbx_below" not in load_targets(proj).targets
    assert "GBX_BELOW" not in dotenv(proj)
    assert "mine" not in discover(proj)
    # What the test models is real: they can swap the project for one of their own.
    swap = f"cd {top} && mv proj proj.old && mkdir proj && echo GBX_BELOW=theirs > proj/.env"
    done = subprocess.run(["runuser", "-u", other_user.pw_name, "--", "sh", "-c", swap],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "GBX_BELOW" not in dotenv(proj)


@pytest.mark.parametrize("how", ["sticky-folder", "own-group-folder", "our-link"])
def test_control_a_file_of_ours_below_folders_only_we_and_root_can_change_is_read(shared, how):
    """Sticky and world-writable, as ``/tmp`` is (only its owner renames what is in it);
    writable by our own group (a umask of 002); reached through a link of ours."""
    top = shared / "top"
    top.mkdir()
    os.chmod(top, {"sticky-folder": 0o1777, "own-group-folder": 0o775}.get(how, 0o755))
    proj = top / "proj"
    write(proj / ".gradebox" / "targets.yaml", "targets:\n  - {name: gbx_below, model: m}\n")
    write(proj / ".env", "GBX_BELOW=ours\n")
    if how == "our-link":
        (shared / "link").symlink_to(proj)
        proj = shared / "link"
    assert "gbx_below" in load_targets(proj).targets
    assert dotenv(proj)["GBX_BELOW"] == "ours"


# --- gradebox assert NAME --------------------------------------------------------------------


@pytest.mark.parametrize("how", ["their-folder-above", "their-file", "a-link-to-theirs"])
def test_gradebox_assert_refuses_their_grader_in_one_line(shared, other_user, how):
    planted = _plant(shared, ".gradebox/graders", "judge.py", other_user, how)
    assert "judge" not in discover(shared / "suite", GRADER_DIRS)
    done = subprocess.run([sys.executable, "-m", "gradebox", "assert", "judge",
                           "--agent-output", "anything"],
                          cwd=shared / "suite", capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(planted) in lines[0] and "refused" in lines[0]


# --- AgentV provider scripts -----------------------------------------------------------------


@pytest.mark.parametrize("how", WAYS)
def test_their_provider_script_is_not_run(shared, other_user, caplog, how):
    planted = _plant(shared, ".agentv/providers", "echoer.ts", other_user, how)
    with caplog.at_level(logging.WARNING, logger="gradebox.agentv"):
        assert _discovered("echoer", {}, shared / "suite") is None
    (line,) = [r.getMessage() for r in caplog.records if "echoer" in r.getMessage()]
    assert str(planted) in line and "\n" not in line


def test_our_provider_script_is_run_and_the_command_names_the_one_checked(shared, other_user):
    write(shared / ".agentv" / "providers" / "echoer.ts", "// ours\n")
    assert _discovered("echoer", {}, shared) == "bun run .agentv/providers/echoer.ts {PROMPT}"
    # Theirs nearer, ours further up: the command runs ours, never theirs by the same name.
    near = write(shared / "suite" / ".agentv" / "providers" / "echoer.ts", "// theirs\n")
    _theirs(near, other_user)
    assert _discovered("echoer", {}, shared / "suite") == (
        "bun run ../.agentv/providers/echoer.ts {PROMPT}"
    )
