"""A cluster's nodes stage the remote repositories the driver resolved: the same commit (never
a branch that moved since the driver's preflight), and offline when the run is."""

from __future__ import annotations

import pytest

from gradebox.cluster.node import RunSpec, _pin_repos, repo_key
from gradebox.lifecycle import testrun
from gradebox.suite import load_suite
from gradebox.suite.preflight import remote_repos

SHA = "a" * 40


def _suite(tmp_path):
    path = tmp_path / "r.eval.yaml"
    path.write_text(
        "workspace:\n  repos:\n    - {path: ./r, repo: 'git://127.0.0.1/r.git', commit: main}\n"
        "tests:\n  - id: a\n    input: x\n    assertions:\n      - {type: contains, value: x}\n"
    )
    return load_suite(path)


def _spec(**fields):
    return RunSpec(run_id="r", kind="suite", bundle=None, entry="r.eval.yaml", images={}, **fields)


def test_a_node_checks_out_the_drivers_commit_offline_as_the_driver(tmp_path):
    suite = _suite(tmp_path)
    (repo,) = remote_repos(suite)
    assert repo_key(repo) == "git://127.0.0.1/r.git\0main"
    assert _pin_repos(suite, _spec(repos={repo_key(repo): SHA}, offline=True)) == []
    assert (repo._commit, repo._offline) == (SHA, True)


def test_a_node_given_no_commit_for_a_repository_is_refused(tmp_path):
    suite = _suite(tmp_path)
    (problem,) = _pin_repos(suite, _spec())
    assert problem == "the driver resolved no commit for repository git://127.0.0.1/r.git"


def test_staging_fetches_the_pinned_commit_and_honours_the_runs_offline(tmp_path, monkeypatch):
    suite = _suite(tmp_path)
    (repo,) = remote_repos(suite)
    repo._commit, repo._offline = SHA, True
    asked = []

    def resolve(source, ref, *, offline_run):
        asked.append((source, ref, offline_run))
        raise RuntimeError("stop")

    monkeypatch.setattr(testrun, "resolve", resolve)
    context = testrun.SuiteContext.__new__(testrun.SuiteContext)
    context.suite = suite
    with pytest.raises(RuntimeError, match="stop"):
        context._stage(tmp_path / "stage", None, suite.spec.workspace)
    assert asked == [("git://127.0.0.1/r.git", SHA, True)]
