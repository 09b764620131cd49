"""Issue 40, attacked: holes found by a hostile tester, each pinned by a test."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from gradebox import jsonl
from gradebox.errors import ConfigError
from gradebox.results import load_results, read_results_from


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def test_a_sparse_results_file_another_user_left_is_one_line_not_a_memory_flood(tmp_path):
    """A run folder another user wrote holds a sparse 3 GiB results.jsonl: ``gradebox report``
    (and ``view``, which reads it the same way) read it whole (MemoryError, a traceback)."""
    run = tmp_path / "run"
    run.mkdir()
    with open(run / "results.jsonl", "wb") as f:
        f.truncate(3 << 30)
    proc = subprocess.run(
        [sys.executable, "-m", "gradebox", "report", str(run), "-o", str(tmp_path / "r.html")],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_memory,
        check=False,
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr, proc.stderr
    assert "results.jsonl" in proc.stderr and "MiB" in proc.stderr, proc.stderr


def test_results_past_the_cap_are_refused_from_any_offset(tmp_path, monkeypatch):
    monkeypatch.setattr(jsonl, "RESULTS_CAP", 100)
    (tmp_path / "results.jsonl").write_bytes(b"\n" * 101)
    with pytest.raises(ConfigError, match="MiB"):
        load_results(tmp_path)
    with pytest.raises(ConfigError):
        read_results_from(tmp_path, 0)
    assert read_results_from(tmp_path, 50) == ([], 101)  # only what is new counts
