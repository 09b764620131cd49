"""Remote repositories (``gradebox.files.repos``): fetched from a ``git daemon`` this test
starts on 127.0.0.1 (no other network), cached, reused, refused offline, hostile URLs and
submodules refused; and their mapping from AgentV's ``workspace.repos``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gradebox.errors import ConfigError
from gradebox.files import repos
from gradebox.suite import load_suite

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        [*GIT, *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


@dataclass
class Server:
    base: Path  # the daemon's folder: repositories are base/NAME.git
    port: int
    proc: subprocess.Popen | None = None

    def url(self, name: str) -> str:
        return f"git://127.0.0.1:{self.port}/{name}.git"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["git", "daemon", "--reuseaddr", "--export-all", "--listen=127.0.0.1",
             f"--port={self.port}", f"--base-path={self.base}", str(self.base)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError("git daemon did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(5)
            self.proc = None


def make_repo(base: Path, name: str, files: dict[str, str]) -> tuple[Path, str]:
    """A repository served as ``name``: one commit of ``files`` on main; its commit."""
    work = base / f"{name}-work"
    work.mkdir()
    git(work, "init", "-q")
    for rel, text in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    git(work, "add", "-A")
    git(work, "commit", "-qm", "one")
    git(base, "clone", "-q", "--bare", str(work), f"{name}.git")
    return work, git(work, "rev-parse", "HEAD")


def push_commit(base: Path, name: str, rel: str, text: str) -> str:
    work = base / f"{name}-work"
    (work / rel).write_text(text)
    git(work, "commit", "-qam", "next")
    git(work, "push", "-q", str(base / f"{name}.git"), "main")
    return git(work, "rev-parse", "HEAD")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = tmp_path / "served"
    base.mkdir()
    srv = Server(base, port)
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("GRADEBOX_CACHE", str(folder))
    monkeypatch.delenv("GRADEBOX_OFFLINE", raising=False)
    repos.forget()
    return folder


def test_a_full_commit_is_fetched_once_and_reused_without_the_server(server, tmp_path):
    _, sha = make_repo(server.base, "calc", {"calc.py": "def add(a, b): return a - b\n"})
    got = repos.resolve(server.url("calc"), sha)
    assert got.commit == sha and got.mirror.is_dir()
    server.stop()  # cached for good: no fetch, the server is not asked again
    repos.forget()  # a new run
    again = repos.resolve(server.url("calc"), sha)
    assert again.commit == sha
    stage = tmp_path / "stage"
    stage.mkdir()
    repos.checkout(again, stage, "./repo")
    assert (stage / "repo/calc.py").read_text().startswith("def add")
    assert git(stage / "repo", "rev-parse", "HEAD") == sha
    assert git(stage / "repo", "remote", "get-url", "origin") == server.url("calc")
    # The checkout holds its own objects: nothing in it points into the cache.
    assert not (stage / "repo/.git/objects/info/alternates").exists()


def test_a_branch_is_resolved_once_per_run_and_again_in_the_next(server):
    _, first = make_repo(server.base, "lib", {"a.txt": "1\n"})
    assert repos.resolve(server.url("lib"), "main").commit == first
    second = push_commit(server.base, "lib", "a.txt", "2\n")
    # the same run: the branch keeps the commit it resolved to
    assert repos.resolve(server.url("lib"), "main").commit == first
    repos.forget()  # the next run fetches and resolves again
    assert repos.resolve(server.url("lib"), "main").commit == second
    assert repos.resolve(server.url("lib"), None).commit == second  # the default branch


def test_offline_refuses_what_is_not_cached_in_one_line_and_uses_what_is(server, monkeypatch):
    _, sha = make_repo(server.base, "tool", {"t.txt": "x\n"})
    with pytest.raises(ConfigError) as exc:
        repos.resolve(server.url("tool"), sha, offline_run=True)
    line = str(exc.value)
    assert "\n" not in line and server.url("tool") in line and "offline" in line
    assert not repos.cached(server.url("tool"), sha)
    repos.resolve(server.url("tool"), "main")
    server.stop()
    repos.forget()
    monkeypatch.setenv("GRADEBOX_OFFLINE", "1")
    assert repos.offline() is True
    assert repos.resolve(server.url("tool"), "main", offline_run=repos.offline()).commit == sha
    assert repos.cached(server.url("tool"), sha)


@pytest.mark.parametrize(
    "url",
    [
        "ext::sh -c touch% /tmp/pwned",
        "-uhack",
        "--upload-pack=touch /tmp/pwned",
        "file:///etc",
        "file::/etc",
        "fd::3",
        "ftp://example.invalid/x.git",
        "https://user:token@example.invalid/x.git",
        "/srv/repo.git",
        "host:-oProxyCommand=x",
        "https://example.invalid/x\nb",
    ],
)
def test_a_hostile_url_is_refused_before_git_runs(url, tmp_path):
    assert repos.refuse_url(url) is not None
    with pytest.raises(ConfigError) as exc:
        repos.resolve(url, None)
    assert "refused" in str(exc.value) and "\n" not in str(exc.value)
    assert not (tmp_path / "cache" / "repos").exists()  # nothing made, nothing run


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/EntityProcess/agentv.git",
        "http://127.0.0.1:9/x.git",
        "git://127.0.0.1/x.git",
        "ssh://git@example.invalid/x.git",
        "git@github.com:org/x.git",
    ],
)
def test_the_protocols_allowed(url):
    assert repos.refuse_url(url) is None and repos.is_remote(url)


@pytest.mark.parametrize("ref", ["--output=/tmp/x", "main..evil", "a b", "HEAD:secret", "x^{}"])
def test_a_hostile_ref_is_refused(ref):
    assert repos.refuse_ref(ref) is not None


def test_a_submodule_is_refused_in_one_line(server):
    make_repo(server.base, "inner", {"i.txt": "i\n"})
    work, _ = make_repo(server.base, "outer", {"o.txt": "o\n"})
    git(
        work, "-c", "protocol.file.allow=always", "submodule", "add", "-q",
        str(server.base / "inner.git"), "vendor/inner",
    )  # fmt: skip
    git(work, "commit", "-qm", "submodule")
    git(work, "push", "-q", str(server.base / "outer.git"), "main")
    with pytest.raises(ConfigError) as exc:
        repos.resolve(server.url("outer"), "main")
    line = str(exc.value)
    assert "\n" not in line and "submodule (vendor/inner)" in line


def test_git_lfs_files_are_refused_in_one_line(server):
    make_repo(server.base, "big", {".gitattributes": "*.bin filter=lfs diff=lfs merge=lfs\n"})
    with pytest.raises(ConfigError) as exc:
        repos.resolve(server.url("big"), "main")
    assert "Git LFS (.gitattributes)" in str(exc.value) and "\n" not in str(exc.value)


def test_a_mirror_past_its_cap_is_stopped_removed_and_says_how_to_lift_it(server, cache):
    make_repo(server.base, "huge", {"blob.bin": os.urandom(200_000).hex()})
    with pytest.raises(ConfigError) as exc:
        repos.resolve(server.url("huge"), "main", max_bytes=10_000)
    assert "--allow limits" in str(exc.value)
    assert not any(
        p.name.startswith("huge") and p.suffix == ".git" for p in (cache / "repos").iterdir()
    )
    assert repos.resolve(server.url("huge"), "main", max_bytes=None).commit


def test_a_missing_branch_or_server_is_one_line(server):
    make_repo(server.base, "one", {"a": "a\n"})
    with pytest.raises(ConfigError, match="has no commit, branch or tag 'nope'"):
        repos.resolve(server.url("one"), "nope")
    with pytest.raises(ConfigError, match="git clone failed"):
        repos.resolve(server.url("absent"), "main")


def test_a_shared_cache_folder_is_refused(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(ConfigError, match="another user"):
        repos.resolve("https://example.invalid/x.git", "main", root=shared)


# --- AgentV's workspace.repos, both trees' spellings -----------------------------------------


def _load(tmp_path: Path, repos_yaml: str):
    path = tmp_path / "r.eval.yaml"
    path.write_text(
        "workspace:\n  repos:\n" + repos_yaml + "tests:\n  - id: a\n    input: x\n"
        "    assertions:\n      - {type: contains, value: x}\n"
    )
    return load_suite(path)


@pytest.mark.parametrize(
    ("entry", "source", "ref"),
    [
        (
            "    - {path: ./r, repo: https://example.invalid/r.git, commit: main}\n",
            "https://example.invalid/r.git",
            "main",
        ),
        (
            "    - {path: ./r, repo: EntityProcess/agentv, base_commit: '6e446b7'}\n",
            "https://github.com/EntityProcess/agentv.git",
            "6e446b7",
        ),
        (
            "    - {path: ./r, repo: 'git://127.0.0.1/r.git', commit: v1, ancestor: 2}\n",
            "git://127.0.0.1/r.git",
            "v1~2",
        ),
        (
            "    - path: ./r\n      source: {type: git, url: 'https://example.invalid/r.git'}\n"
            "      checkout: {ref: dev}\n",
            "https://example.invalid/r.git",
            "dev",
        ),
    ],
)
def test_agentv_repos_map_onto_ours(tmp_path, entry, source, ref):
    suite = _load(tmp_path, entry)
    repo = suite.spec.workspace.repos[0]
    assert (repo.path, repo.source, repo.ref) == ("./r", source, ref)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("    - {path: ./r, repo: 'ext::sh -c id'}\n", "transport"),
        ("    - {path: ./r, repo: '-uhack'}\n", "starts with '-'"),
        ("    - {path: ./r, repo: https://x.invalid/r.git, commit: '--all'}\n", "not a commit"),
        ("    - {path: ./r, repo: https://x.invalid/r.git, sparse: [src]}\n", "sparse"),
        (
            "    - {path: ./r, repo: https://x.invalid/r.git, commit: a, base_commit: b}\n",
            "must match",
        ),
    ],
)
def test_agentv_repos_refused_at_load_in_one_line(tmp_path, entry, message):
    with pytest.raises(ConfigError) as exc:
        _load(tmp_path, entry)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_concurrent_runs_sharing_the_cache_make_one_mirror(server, cache):
    _, sha = make_repo(server.base, "shared", {"s.txt": "s\n"})
    code = (
        "import sys; from gradebox.files import repos; "
        "print(repos.resolve(sys.argv[1], 'main').commit)"
    )
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", code, server.url("shared")],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "GRADEBOX_CACHE": str(cache)},
        )  # fmt: skip
        for _ in range(4)
    ]
    assert [p.communicate(timeout=120)[0].strip() for p in runs] == [sha] * 4
    mirrors = [p.name for p in (cache / "repos").iterdir() if not p.name.endswith(".lock")]
    assert len(mirrors) == 1 and mirrors[0].endswith(".git")  # no temporary clone left


# --- the Docker image an AgentV file names: one mapping for v4 and 5.x ------------------------


@pytest.mark.parametrize(
    ("image", "ours"),
    [("python:3.11-slim", "python"), ("docker.io/library/node:20", "node"), ("mine:1", "mine:1")],
)
def test_a_docker_environments_image_maps_as_v4s_workspace_docker(tmp_path, image, ours):
    path = tmp_path / "d.eval.yaml"
    path.write_text(
        f"environment:\n  type: docker\n  image: '{image}'\n  workdir: /w\n"
        "tests:\n  - id: a\n    vars: {input: x}\n"
        "    assert: [{type: script, command: [python3, -c, 'print(1)']}]\n"
    )
    suite = load_suite(path)
    assert suite.spec.defaults.image == ours
    assert suite.tests[0].assertions[0].grader.image == ours


def test_the_suites_own_git_config_never_steers_a_fetch(server, tmp_path, monkeypatch):
    """Run from the suite's folder (as `gradebox run` is), whose `.git/config` (the eval's
    author's, or whoever cloned it) redirects the URL elsewhere: the fetch reads only the
    operator's settings, never that folder's."""
    _, good = make_repo(server.base, "good", {"a.py": "good\n"})
    _, evil = make_repo(server.base, "evil", {"a.py": "evil\n"})
    suite = tmp_path / "suite"
    suite.mkdir()
    git(suite, "init", "-q")
    git(suite, "config", f"url.{server.url('evil')}.insteadOf", server.url("good"))
    git(suite, "config", "core.sshCommand", "touch /tmp/should-not-run")
    monkeypatch.chdir(suite)
    got = repos.resolve(server.url("good"), "main")
    assert got.commit == good != evil


def test_a_resumed_run_does_not_reuse_a_result_of_the_commit_a_branch_named_before(
    server, tmp_path
):
    """``--resume`` reuses a result whose fingerprint is unchanged; a branch that moved
    between the runs left it unchanged, so the new commit's test was never run."""
    from gradebox.suite.preflight import preflight

    _, first = make_repo(server.base, "lib", {"a.txt": "1\n"})
    suite_file = tmp_path / "r.eval.yaml"
    suite_file.write_text(
        f"workspace:\n  repos:\n    - {{path: ./r, repo: '{server.url('lib')}', commit: main}}\n"
        "tests:\n  - id: a\n    input: x\n    assertions:\n      - {type: contains, value: x}\n"
    )

    def print_of_a_run() -> str:
        repos.forget()  # a new run resolves the branch again
        suite = load_suite(suite_file)
        preflight(suite, fetch=True)
        return suite.fingerprint(suite.tests[0])

    before = print_of_a_run()
    assert print_of_a_run() == before  # the branch did not move: the result stands
    push_commit(server.base, "lib", "a.txt", "2\n")
    assert print_of_a_run() != before


def test_a_resumed_run_does_not_reuse_a_result_of_what_a_local_repository_was_before(tmp_path):
    """A local repository is the workspace's too: its branch moving (a checkout at ``ref``) or
    its files changing (a copy) changes the test's fingerprint, so ``--resume`` runs it again."""
    lib, plain = tmp_path / "lib", tmp_path / "plain"
    lib.mkdir()
    plain.mkdir()
    git(lib, "init", "-q")
    (lib / "a.txt").write_text("1\n")
    git(lib, "add", "a.txt")
    git(lib, "commit", "-qm", "one")
    (plain / "b.txt").write_text("1\n")
    suite_file = tmp_path / "r.yaml"
    suite_file.write_text(
        "workspace:\n  repos:\n    - {path: ./r, source: lib, ref: main}\n"
        "    - {path: ./p, source: plain}\n"
        "tests:\n  - id: a\n    input: x\n    assert:\n      - {type: contains, value: x}\n"
    )

    def print_of_a_run() -> str:
        suite = load_suite(suite_file)
        return suite.fingerprint(suite.tests[0])

    before = print_of_a_run()
    assert print_of_a_run() == before  # nothing moved: the result stands
    (lib / "a.txt").write_text("2\n")
    git(lib, "commit", "-qam", "two")
    moved = print_of_a_run()
    assert moved != before
    (plain / "b.txt").write_text("2\n")
    assert print_of_a_run() != moved
