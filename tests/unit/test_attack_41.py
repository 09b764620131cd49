"""Red-team findings on issue 41's changes (remote repositories, command judges, the live view,
the command session): each test is an attack that must fail."""

from __future__ import annotations

import os
import subprocess
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


# --------------------------------------------------------------------------------------------
# Judges that are commands (AgentV's llm-grader naming a cli provider).


@pytest.mark.parametrize(
    "template",
    [
        'judge --prompt "{PROMPT}"',
        'judge --prompt="{PROMPT}" --out {OUTPUT_FILE}',
        "judge --prompt '{PROMPT}'",  # the quote closed around the reference
        "sh -c 'judge --prompt {PROMPT}'",  # a shell the template nests: it parses again
        "judge --prompt {PROMPT}",
    ],
)
def test_an_answer_in_a_double_quoted_prompt_stays_text(template, tmp_path):
    from gradebox.lifecycle.steps import PROMPT_ENV, render_cli_command

    answer = 'the answer $(echo INJECTED) " ; echo INJECTED; echo "'
    try:
        command, _ = render_cli_command(
            template, test_id="t", prompt_text=answer, files=[], files_format="{path}", cwd=None
        )
    except (GradeboxError, ValueError):
        return  # refused: as good as quoted
    # The judge's words as sh hands them over: the prompt reaches the command as PROMPT_ENV.
    judge = tmp_path / "judge"
    judge.write_text("#!/bin/sh\nprintf '%s\\0' \"$@\"\n")
    judge.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", PROMPT_ENV: answer}
    out = subprocess.run(
        ["sh", "-c", command], capture_output=True, check=False, text=True, env=env
    )
    assert "INJECTED" not in out.stdout.replace(answer, "")
    assert any(answer in w for w in out.stdout.split("\0")), (command, out.stdout)


def test_a_file_name_holding_a_placeholder_does_not_unquote_the_prompt():
    from gradebox.lifecycle.steps import render_cli_command

    command, _ = render_cli_command(
        "agent {FILES} {PROMPT}", test_id="t", prompt_text="x; echo INJECTED",
        files=["/run/gradebox-io-files/0/a{PROMPT}"], files_format="{path}", cwd=None,
    )  # fmt: skip
    out = subprocess.run(
        ["sh", "-c", f"agent() {{ printf '%s\\0' \"$@\"; }}; {command}"],
        capture_output=True, check=False, text=True,
    )  # fmt: skip
    assert "INJECTED\n" not in out.stdout


def test_a_command_judge_does_not_start_in_the_agents_workspace(tmp_path, monkeypatch):
    from gradebox.graders.llm import CommandJudge
    from gradebox.lifecycle import llm_runtime
    from gradebox.suite import TargetConfig

    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "bunfig.toml").write_text('preload = ["./judge-hook.ts"]\n')  # the agent's
    seen: list[Path] = []

    def fake_run(target, prompt, folder, box, **kw):
        seen.append(folder)
        raise GradeboxError("stop here")

    monkeypatch.setattr(llm_runtime, "run_cli_command", fake_run)
    runtime = llm_runtime.LlmRuntime(
        None,
        object(),
        lambda ref, src: "img",
        tmp_path,
        {},
        workspace,  # type: ignore[arg-type]
    )
    target = TargetConfig(provider="cli", command="bun run judge.ts {PROMPT}")
    with pytest.raises(GradeboxError):
        runtime.ask_command_judge(CommandJudge(label="j", kind="cli", target=target), "p", "j")
    (folder,) = seen
    assert not (folder / "bunfig.toml").exists()


# --------------------------------------------------------------------------------------------
# The live view and report over a run folder someone else wrote (plan.json).


def test_a_plan_of_many_folders_is_read_in_linear_time(tmp_path):
    import json
    import time

    from gradebox.report.html import layout

    folders = [{"folder": "a", "suite": "s"} for _ in range(80_000)]
    (tmp_path / "plan.json").write_text(json.dumps({"gradebox_plan": 1, "folders": folders}))
    start = time.monotonic()
    layout(tmp_path)
    assert time.monotonic() - start < 2.5  # linear: well under a second


def test_a_plan_naming_one_folder_twice_reads_it_once(tmp_path):
    import json

    from gradebox.report.html import layout

    folders = [{"folder": "a", "suite": f"s{i}"} for i in range(1000)]
    (tmp_path / "plan.json").write_text(json.dumps({"gradebox_plan": 1, "folders": folders}))
    (tmp_path / "a").mkdir()
    found = layout(tmp_path)
    assert found is not None and len({file for _, file in found.parts}) == len(found.parts)


def test_a_small_mirror_that_checks_out_huge_is_refused(server, tmp_path):
    # One blob of zeros named by many paths: kilobytes fetched, each staging writes them all.
    zeros = "\0" * (1 << 20)
    _, sha = make_repo(server.base, "bomb", {f"f{i}": zeros for i in range(64)})
    with pytest.raises(GradeboxError, match="allow limits"):
        repos.resolve(server.url("bomb"), sha, max_bytes=16 << 20)
    repos.forget()
    assert repos.resolve(server.url("bomb"), sha, max_bytes=None).commit == sha  # lifted


@pytest.mark.parametrize("config", [".gitconfig", ".config/git/config"])
def test_a_gitconfig_in_the_stage_runs_nothing_on_the_host(tmp_path, config):
    # The template (or a repository checked out at the workspace's root) holds a git config
    # with core.fsmonitor: git placing a local repository at a ref must not read it.
    marker = tmp_path / "PWNED"
    lib = tmp_path / "suite" / "lib"
    lib.mkdir(parents=True)
    git(lib, "init", "-q")
    (lib / "a").write_text("x\n")
    git(lib, "add", "a")
    git(lib, "commit", "-qm", "one")
    stage = tmp_path / "stage"
    (stage / config).parent.mkdir(parents=True, exist_ok=True)
    (stage / config).write_text(f'[core]\n\tfsmonitor = "touch {marker}; false"\n')
    materialise_repo(tmp_path / "suite", "lib", stage, "lib", "HEAD")
    assert (stage / "lib" / "a").read_text() == "x\n"
    assert not marker.exists()


def test_a_gitconfig_a_fetched_repository_brings_runs_nothing_on_the_host(server, tmp_path):
    marker = tmp_path / "PWNED"
    config = f'[core]\n\tfsmonitor = "touch {marker}; false"\n'
    _, one = make_repo(server.base, "one", {".gitconfig": config, ".config/git/config": config})
    _, two = make_repo(server.base, "two", {"b": "y\n"})
    stage = tmp_path / "stage"
    stage.mkdir()
    repos.checkout(repos.resolve(server.url("one"), one), stage, ".")
    repos.checkout(repos.resolve(server.url("two"), two), stage, "two")
    assert (stage / "two" / "b").read_text() == "y\n" and not marker.exists()


def test_a_local_repositorys_ref_is_never_an_option(tmp_path):
    lib = tmp_path / "suite" / "lib"
    lib.mkdir(parents=True)
    git(lib, "init", "-q")
    (lib / "a").write_text("x\n")
    git(lib, "add", "a")
    git(lib, "commit", "-qm", "one")
    stage = tmp_path / "stage"
    stage.mkdir()
    with pytest.raises(GradeboxError, match="not a commit, branch or tag"):
        materialise_repo(tmp_path / "suite", "lib", stage, "lib", "--orphan=x")


@pytest.mark.parametrize(
    ("source", "ref", "why"),
    [("/r", "--orphan=x", "not a commit, branch or tag"), ("--upload-pack=touch x", "HEAD",
     "starts with '-'")],
)  # fmt: skip
def test_clone_into_itself_refuses_an_option_before_git_runs(
    tmp_path, monkeypatch, source, ref, why
):
    """Its one door: a caller that forgot the check cannot hand git an option."""
    monkeypatch.setattr(repos.subprocess, "run", lambda *a, **k: pytest.fail("git ran"))
    with pytest.raises(GradeboxError, match=why):
        repos.clone_into(tmp_path, source, ref, where="r", what="r", timeout=5)


@pytest.mark.parametrize(
    "url",
    [
        "ssh://-oProxyCommand=touch${IFS}pwned/x",
        "ssh://u@-oProxyCommand=touch${IFS}pwned/x",
        "ssh://%2doProxyCommand=touch${IFS}pwned/x",
        "ssh://-u@host/x",
        "ssh://host:-p/x",
        "git://-host/x",
    ],
)
def test_an_option_in_a_urls_authority_is_refused_before_git_runs(url):
    assert repos.refuse_url(url) is not None
    with pytest.raises(GradeboxError, match="refused"):
        repos.resolve(url, None)


def test_a_cap_lifted_at_preflight_holds_when_the_run_stages_the_commit(server):
    # preflight resolves the branch with --allow limits; the run then stages the commit it
    # recorded (testrun: resolve(url, commit)), which must not meet the cap again.
    zeros = "\0" * (1 << 20)
    _, sha = make_repo(server.base, "big", {f"f{i}": zeros for i in range(32)})
    assert repos.resolve(server.url("big"), "main", max_bytes=None).commit == sha
    assert repos.resolve(server.url("big"), sha, max_bytes=8 << 20).commit == sha
