"""A real ``gradebox run`` of an AgentV eval file whose workspace names a repository by URL,
served by a ``git daemon`` on 127.0.0.1 that the test starts: fetched before the run, checked
out in each test's workspace, its commit in each result; cached (a second run needs no server),
``--offline`` refusing what is not cached in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write
from tests.unit.test_repos import (
    make_repo,
    push_commit,
    server,  # noqa: F401 - the loopback git daemon, a fixture
)

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]

# The agent under test reads the repository AgentV placed in its workspace.
AGENT = 'cat repo/calc.py > "$1"\n'


def gradebox(*args: object, cwd: Path, cache: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gradebox", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT / "src"),
            "GRADEBOX_CACHE": str(cache),
            "GRADEBOX_OFFLINE": "",
            **env,
        },
        timeout=600,
    )


def eval_file(folder: Path, url: str, ref: str, value: str) -> Path:
    write(folder / "agent.sh", AGENT)
    write(
        folder / ".agentv" / "providers.yaml",
        "- id: cli\n  label: reader\n  command: sh agent.sh {OUTPUT_FILE}\n",
    )
    return write(
        folder / "repo.eval.yaml",
        f"providers: [reader]\nworkspace:\n  repos:\n    - path: ./repo\n"
        f"      repo: '{url}'\n      commit: {ref}\n"
        "tests:\n  - id: reads-the-repo\n    vars: {input: show calc.py}\n"
        f"    assert: [{{type: contains, value: '{value}'}}]\n",
    )


def results(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_a_remote_repository_is_fetched_cached_and_recorded(server, tmp_path):  # noqa: F811
    _, first = make_repo(server.base, "calc", {"calc.py": "# version-one\n"})
    second = push_commit(server.base, "calc", "calc.py", "# version-two\n")
    cache = tmp_path / "cache"
    suite = tmp_path / "suite"
    # A branch: resolved once for the run, the commit in the result.
    path = eval_file(suite, server.url("calc"), "main", "version-two")
    proc = gradebox("run", path, "--out", tmp_path / "a", cwd=suite, cache=cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (result,) = results(tmp_path / "a")
    assert result["status"] == "passed"
    assert result["repos"] == {"./repo": f"{server.url('calc')}@{second}"}
    # A full commit: the older one, fetched already; then the server stops and the cache
    # alone answers, --offline too.
    path = eval_file(suite, server.url("calc"), first, "version-one")
    server.stop()
    proc = gradebox("run", path, "--offline", "--out", tmp_path / "b", cwd=suite, cache=cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (result,) = results(tmp_path / "b")
    assert result["status"] == "passed" and result["repos"]["./repo"].endswith(first)
    # Not in the cache, offline: refused before anything runs, one line naming it.
    path = eval_file(suite, server.url("other"), "main", "x")
    proc = gradebox("run", path, "--out", tmp_path / "c", cwd=suite, cache=cache,
                    GRADEBOX_OFFLINE="1")  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [x for x in proc.stderr.splitlines() if "error" in x]
    assert len(lines) == 1 and server.url("other") in lines[0] and "offline" in lines[0]
    assert not (tmp_path / "c" / "results.jsonl").exists()
    proc = gradebox("validate", path, "--offline", cwd=suite, cache=cache)
    assert proc.returncode == 2 and server.url("other") in proc.stderr


def test_a_hostile_repository_url_is_refused_before_the_run(tmp_path):
    suite = tmp_path / "suite"
    marker = tmp_path / "pwned"
    path = eval_file(suite, f"ext::sh -c touch% {marker}", "main", "x")
    proc = gradebox("run", path, "--out", tmp_path / "o", cwd=suite, cache=tmp_path / "cache")
    assert proc.returncode == 2 and "refused" in proc.stderr, proc.stderr
    assert not marker.exists()
