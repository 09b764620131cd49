"""`gradebox run` over several files and globs, with AgentV's `--target` and `--test-id`.

Built-in assertions over recorded answers or mock targets, on the host sandbox: nothing here
needs a container, and everything goes through the real command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradebox.cli.app import app
from gradebox.errors import ConfigError
from gradebox.suite import load_suite
from gradebox.suite.paths import expand_suite_paths, result_folders
from tests.conftest import write


def suite(answer: str, name: str, ids: tuple[str, ...] = ("t1", "t2")) -> str:
    body = "".join(
        f"  - id: {i}\n    output: {answer}\n    assert: [{{type: equals, value: right}}]\n"
        for i in ids
    )
    return f"name: {name}\ntests:\n{body}"


def gradebox(*args: object) -> tuple[int, str]:
    # *.eval.yaml reads as AgentV's by its name; these are gradebox suites (output: ...)
    gradebox_format = ["--format", "gradebox"] if "--target" not in args else []
    result = CliRunner().invoke(app, [*map(str, args), "--sandbox", "host", *gradebox_format])
    # --json: the document on stdout; else what the terminal shows (stdout and stderr)
    return result.exit_code, result.stdout if "--json" in args else result.output


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GRADEBOX_SANDBOX", raising=False)
    write(tmp_path / "evals" / "a" / "first.eval.yaml", suite("right", "first"))
    write(tmp_path / "evals" / "b" / "deep" / "eval.yaml", suite("wrong", "second"))
    write(tmp_path / "evals" / ".hidden" / "third.eval.yaml", suite("right", "third", ("t3",)))
    write(tmp_path / "evals" / "notes.md", "not a suite\n")
    write(tmp_path / "evals" / "b" / "other.yaml", suite("right", "other", ("o",)))
    return tmp_path


def test_globs_are_expanded_here_recursively_sorted_and_once(tree: Path) -> None:
    found = expand_suite_paths(["evals/**/*.yaml", "evals/a/first.eval.yaml"], tree)
    assert found == [Path("evals/.hidden/third.eval.yaml"), Path("evals/a/first.eval.yaml"),
                     Path("evals/b/deep/eval.yaml"), Path("evals/b/other.yaml")]  # fmt: skip
    # a folder stands for its eval files (AgentV's names), and !pattern leaves some out
    assert expand_suite_paths(["evals", "!evals/.hidden/**"], tree) == [
        Path("evals/a/first.eval.yaml"), Path("evals/b/deep/eval.yaml"),
    ]  # fmt: skip
    with pytest.raises(ConfigError, match="no suite file matches 'evals/\\*\\*/\\*.yml'"):
        expand_suite_paths(["evals/**/*.yml"], tree)
    # a plain path stays as written: a missing one is load_suite's "file not found"
    assert expand_suite_paths(["nope.yaml"], tree) == [Path("nope.yaml")]
    names = result_folders([Path("evals/a/x.yaml"), Path("evals-a/x.yaml"), Path("/abs/s.yaml")])
    assert names == ["evals-a-x.yaml", "evals-a-x.yaml-2", "abs-s.yaml"]


def test_several_files_one_results_folder_one_table(tree: Path) -> None:
    code, text = gradebox("run", "evals/**/*eval.yaml", "--out", "o", "--json")
    assert code == 1, text  # the second suite's answers are wrong
    doc = json.loads(text)
    summary = doc["summary"]
    assert (summary["total"], summary["passed"], summary["failed"]) == (5, 3, 2)
    assert [s["file"] for s in doc["suites"]] == [
        "evals/.hidden/third.eval.yaml", "evals/a/first.eval.yaml", "evals/b/deep/eval.yaml",
    ]  # fmt: skip
    assert json.loads((tree / "o" / "summary.json").read_text())["total"] == 5
    # each suite's results in its own folder, each result naming its suite and file
    lines = (tree / "o" / "evals-b-deep-eval.yaml" / "results.jsonl").read_text().splitlines()
    rows = [json.loads(x) for x in lines]
    assert {(r["id"], r["suite"], r["file"], r["status"]) for r in rows} == {
        ("t1", "second", "evals/b/deep/eval.yaml", "failed"),
        ("t2", "second", "evals/b/deep/eval.yaml", "failed"),
    }
    # the table covers every file, each test under its suite's name
    code, text = gradebox("run", "evals", "--out", "o2")
    assert code == 1 and "first: t1" in text and "second: t2" in text and "third: t3" in text
    assert "3 passed" in text and "2 failed" in text
    # --resume finds each suite's results again: nothing runs
    code, text = gradebox("run", "evals/**/*eval.yaml", "--resume", "o", "--json")
    assert code == 1 and json.loads(text)["summary"]["reused"] == 5, text


def test_test_id_is_filter_repeatable(tree: Path) -> None:
    code, text = gradebox("run", "evals/a/first.eval.yaml", "evals/b/deep/eval.yaml",
                          "--test-id", "t1", "--filter", "zz*", "--out", "o", "--json")  # fmt: skip
    assert json.loads(text)["summary"]["total"] == 2, text
    code, text = gradebox("run", "evals/a/first.eval.yaml", "--test-id", "t1", "--test-id",
                          "t2", "--out", "o3", "--json")  # fmt: skip
    assert code == 0 and json.loads(text)["summary"]["total"] == 2


def test_a_glob_that_matches_nothing_runs_nothing(tree: Path) -> None:
    code, text = gradebox("run", "evals/**/*.yml", "--out", "o")
    assert code == 2 and "no suite file matches 'evals/**/*.yml'" in text
    assert not (tree / "o").exists()
    # every file is loaded before anything runs: a broken one stops the run before it starts
    write(tree / "evals" / "z.eval.yaml", "tests: 3\n")
    code, text = gradebox("run", "evals", "--out", "o")
    assert code == 2 and "z.eval.yaml" in text and not (tree / "o").exists()


def test_a_folder_holding_one_suite_yaml_runs_it(tree: Path) -> None:
    # `gradebox run examples/quickstart` was refused ("holds no eval file") with no word of
    # the suite.yaml in it: a folder with no eval file stands for its one suite file.
    write(tree / "qs" / "suite.yaml", suite("right", "qs"))
    write(tree / "qs" / "fixtures" / "suite.yaml", suite("right", "below"))  # not below
    assert expand_suite_paths(["qs"], tree) == [Path("qs/suite.yaml")]
    code, text = gradebox("run", "qs", "--out", "o", "--json")
    assert code == 0 and json.loads(text)["summary"]["suite"] == "qs", text
    write(tree / "qs" / "suite.yml", suite("right", "twin"))  # two: which one is not ours
    code, text = gradebox("run", "qs", "--out", "o2")
    assert code == 2 and "holds both suite.yaml and suite.yml" in text, text
    # No suite file: the error names a YAML file the folder holds, to give instead.
    write(tree / "other" / "checks.yaml", suite("right", "checks"))
    code, text = gradebox("run", "other", "--out", "o3")
    assert code == 2 and "name a file, e.g. 'other/checks.yaml'" in text, text
    assert not (tree / "o2").exists() and not (tree / "o3").exists()
    # Eval files, where a folder holds them, are what it stands for (AgentV's rule); beside a
    # suite file of its own, which one is asked (test_attack_42_run_folder.py).
    write(tree / "evals" / "suite.yaml", suite("right", "ignored"))
    code, text = gradebox("run", "evals", "--out", "o4")
    assert code == 2 and "holds suite.yaml and eval files below it" in text, text


def test_a_filter_that_selects_no_test_runs_nothing(tree: Path) -> None:
    # A typo in --test-id / --filter ran no test and exited 0 ("0 passed"): a pass it did not
    # earn, as a glob naming no file would be (that one is exit 2 already).
    for files in (["evals/a/first.eval.yaml"], ["evals/a/first.eval.yaml", "evals/b/other.yaml"]):
        code, text = gradebox("run", *files, "--test-id", "tl*", "--filter", "x", "--out", "o")
        assert code == 2 and "--filter" in text and "tl*" in text, text
        assert not (tree / "o").exists()
    # control: one pattern of several selects a test in one file of two: that runs
    code, text = gradebox("run", "evals/a/first.eval.yaml", "evals/b/other.yaml",
                          "--test-id", "o", "--test-id", "zz*", "--out", "o", "--json")  # fmt: skip
    assert code == 0 and json.loads(text)["summary"]["total"] == 1, text


def _agentv(tmp_path: Path) -> Path:
    write(tmp_path / ".agentv" / "config.yaml", "providers: file://providers.yaml\n")
    write(
        tmp_path / ".agentv" / "providers.yaml",
        "- {id: mock, label: polite, response: 'hello there'}\n"
        "- {id: mock, label: rude, response: 'go away'}\n",
    )
    return write(
        tmp_path / "evals" / "greet.eval.yaml",
        "target: polite\ntests:\n  - id: greet\n    input: say hello\n"
        "    assert: [{type: contains, value: hello}]\n",
    )


def test_target_picks_the_run_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = _agentv(tmp_path)
    assert gradebox("run", path, "--out", "a", "--target", "polite")[0] == 0
    code, text = gradebox("run", path, "--target", "rude", "--out", "b", "--json")
    assert code == 1, text
    row = json.loads((tmp_path / "b" / "results.jsonl").read_text())
    assert row["output"] == "go away"
    # over execution.target and providers too, as AgentV's --target
    write(path, path.read_text().replace("target: polite", "execution: {target: polite}"))
    assert load_suite(path, target="rude").spec.target.response == "go away"
    # a gradebox suite: the model target of that name
    plain = write(tmp_path / "plain.yaml", suite("right", "plain"))
    target = load_suite(plain, target="judge").spec.target
    assert target is not None and (target.provider, target.model) == ("model", "judge")
    code, text = gradebox("run", path, "--target", "rude", "--target", "polite", "--out", "c")
    assert code == 2 and "one --target per run" in text


def test_a_results_folder_of_one_file_and_one_of_several_are_not_mixed(tree: Path) -> None:
    """A run of one file keeps results.jsonl at the folder's top; a run of several, one
    folder per file and summary.json over all. Resuming (or reusing) one kind as the other
    ran everything again and left the old results.jsonl beside a summary.json of other
    suites: `gradebox report` of the folder then showed one suite's rows under the other
    run's totals."""
    one, other = "evals/a/first.eval.yaml", "evals/b/deep/eval.yaml"
    assert gradebox("run", one, "--out", "single")[0] == 0
    before = (tree / "single" / "summary.json").read_text()
    for flag in ("--resume", "--out"):
        code, text = gradebox("run", one, other, flag, "single")
        assert code == 2 and "holds the results of a run of one suite file" in text, text
        assert (tree / "single" / "summary.json").read_text() == before  # nothing ran
        assert sorted(p.name for p in (tree / "single").iterdir() if p.is_dir()) == []
    assert gradebox("run", one, other, "--out", "several")[0] == 1
    before = (tree / "several" / "summary.json").read_text()
    code, text = gradebox("run", one, "--resume", "several")
    assert code == 2 and "holds a run of several suite files" in text, text
    assert (tree / "several" / "summary.json").read_text() == before
    assert not (tree / "several" / "results.jsonl").exists()
    # control: the same files resume their own run, each test once, nothing run again
    code, text = gradebox("run", one, other, "--resume", "several", "--json")
    assert code == 1 and json.loads(text)["summary"]["reused"] == 4, text
    code, text = gradebox("run", one, "--resume", "single", "--json")
    assert code == 0 and json.loads(text)["summary"]["reused"] == 2, text


def test_a_glob_never_walks_into_linked_folders(tree: Path) -> None:
    """`**` followed links to folders: three links to "." made glob.glob walk 3^40 paths
    (the run never started), and one link found each file again under a new name, run
    again under a results folder of its own."""
    import os
    import threading

    for name in ("x", "y", "z"):
        os.symlink(".", tree / "evals" / "a" / name)
    os.symlink("first.eval.yaml", tree / "evals" / "a" / "again.eval.yaml")  # a linked file
    found: list[list[Path]] = []
    search = threading.Thread(
        target=lambda: found.append(expand_suite_paths(["evals/**/*.yaml"], tree)), daemon=True
    )
    search.start()
    search.join(120)  # generous: the machine is shared; the walk takes milliseconds
    assert not search.is_alive(), "the glob walked the link loop"
    assert found == [[Path("evals/.hidden/third.eval.yaml"), Path("evals/a/again.eval.yaml"),
                      Path("evals/b/deep/eval.yaml"), Path("evals/b/other.yaml")]]  # fmt: skip
    # the folder form too, and a file named twice (itself and a link to it) runs once
    assert expand_suite_paths(["evals/a", "evals/a/first.eval.yaml"], tree) == [
        Path("evals/a/again.eval.yaml")
    ]


def test_a_second_run_over_a_folder_of_several_files_runs_nothing(tree: Path) -> None:
    """Each file's folder was locked only while that file ran: a second run given the same
    folder ran (and replaced) the results of every file the first had finished, up to the
    one still running, and only then was refused. The whole folder is held now."""
    import os

    from gradebox.core.atomic import lock_folder

    one, other = "evals/a/first.eval.yaml", "evals/b/deep/eval.yaml"
    assert gradebox("run", one, other, "--out", "o")[0] == 1
    first = tree / "o" / "evals-a-first.eval.yaml" / "results.jsonl"
    before = first.read_bytes()
    # the first run, now at its second file: it holds that file's folder (and the whole)
    held = [lock_folder(tree / "o", field="--out"),
            lock_folder(tree / "o" / "evals-b-deep-eval.yaml", field="--out")]  # fmt: skip
    try:
        code, text = gradebox("run", one, other, "--out", "o")
        assert code == 2 and "is in use by another run" in text, text
        assert first.read_bytes() == before  # its finished results untouched, nothing ran
    finally:
        for fd in held:
            os.close(fd)
    # control: once the first run has ended, the folder is free again (in this process too)
    assert gradebox("run", one, other, "--out", "o")[0] == 1
    assert gradebox("run", one, other, "--resume", "o")[0] == 1


V4_MATRIX = (
    "execution:\n  targets:\n    - one\n    - {name: two, use_target: one}\n"
    "tests:\n  - id: a\n    input: hi\n    criteria: says hi\n"
    "    assertions:\n      - {type: contains, value: hi}\n"
)
V4_DOCKER = V4_MATRIX.replace(
    "execution:\n  targets:\n    - one\n    - {name: two, use_target: one}\n",
    "execution: {target: one}\nworkspace:\n  docker: {image: 'swebench/x:1', memory: 2g}\n",
)


@pytest.mark.parametrize("command", ["run", "validate"])
def test_v4_matrix_and_workspace_image_are_one_line_from_the_command_line(tmp_path, command):
    """Issue 31: ``workspace.docker`` with an image we do not have refused in one line, from
    the real command (no traceback, exit 2); issue 41: ``execution.targets`` runs every test
    per target (``tests/unit/test_matrix.py``), and ``--target`` still picks one."""
    import subprocess
    import sys

    write(tmp_path / ".agentv" / "targets.yaml",
          "targets:\n  - {name: one, provider: mock, response: hi there}\n")  # fmt: skip
    matrix = write(tmp_path / "evals" / "m.eval.yaml", V4_MATRIX)
    docker = write(tmp_path / "evals" / "d.eval.yaml", V4_DOCKER)

    def cli(*args: object) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "gradebox", command, *map(str, args), "--sandbox", "host"]
        out = ["--out", tmp_path / f"o-{len(list(tmp_path.iterdir()))}"] if command == "run" else []
        return subprocess.run([*argv, *map(str, out)], capture_output=True, text=True,
                              cwd=tmp_path, timeout=300)  # fmt: skip

    for path, field, words in ((docker, "workspace.docker.image", "swebench/x:1"),):
        done = cli(path)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2, done.stderr
        assert [x for x in lines if x.startswith("gradebox: error:")] == lines[-1:], lines
        assert "Traceback" not in done.stderr and field in lines[-1] and words in lines[-1]
    done = cli(matrix)  # both targets
    assert done.returncode == 0, done.stderr
    if command == "run":
        assert "a@one" in done.stdout and "a@two" in done.stdout, done.stdout
    done = cli(matrix, "--target", "two")  # the matrix's second entry, redirected to `one`
    assert done.returncode == 0, done.stderr
