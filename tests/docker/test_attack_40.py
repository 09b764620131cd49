"""Issue 40, attacked on both backends: a key under another name in a folder mounted whole."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.docker.test_exec import BACKENDS, gbx

pytestmark = pytest.mark.docker


@pytest.fixture
def grader_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "grader"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    return folder


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_key_under_another_name_in_the_current_folder_is_masked(engine, backend, grader_dir):
    """``.ENV`` (in a case-folding folder the file ``.env`` opens) and ``keys.txt``, a hard
    link to ``app/.env``: both were mounted as they are for exec's command. The control: a
    file of another name is read."""
    (grader_dir / "app").mkdir(mode=0o755)
    for rel, text in ((".ENV", "sk-upper"), ("app/.env", "sk-linked"), ("notes.txt", "plain")):
        (grader_dir / rel).write_text(f"OPENAI_API_KEY={text}\n")
        (grader_dir / rel).chmod(0o644)
    os.link(grader_dir / "app" / ".env", grader_dir / "keys.txt")
    p = gbx(engine, backend, ["--", "sh", "-c", "cat .ENV keys.txt; cat notes.txt"], cwd=grader_dir)
    assert p.returncode == 0, p.stderr
    assert b"sk-upper" not in p.stdout and b"sk-linked" not in p.stdout, p.stdout
    assert b"plain" in p.stdout, p.stdout
