"""A suite run's results as read back: the one reader behind every output.

The terminal table, JUnit, ``compare`` (its table and Markdown) and the HTML report all read a
run through ``read_results`` / ``load_results`` (``results.jsonl`` through ``gradebox.core.jsonl``
into ``protocol.TestResult``, ``summary.json`` into ``protocol.RunSummary``): none parses the
files on its own. This module reads; it renders nothing and writes nothing.

Example::

    run = load_results(Path("gradebox-runs/demo"))
    print(run.summary.suite if run.summary else run.name, len(run.results))
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from ..core import untrusted
from ..core.jsonl import read_jsonl, read_jsonl_from
from ..errors import ConfigError
from .models import RunSummary, TestResult

__all__ = ["RunResults", "load_results", "read_results", "read_results_from", "results_file"]


def results_file(path: Path) -> Path:
    """``results.jsonl`` of a run folder, or the file itself."""
    path = Path(path)
    return path / "results.jsonl" if path.is_dir() else path


def read_results(path: Path) -> dict[str, TestResult]:
    """Finished tests of a run, by id (a later line for the same id wins)."""
    return {r.id: r for r in read_jsonl(results_file(path), TestResult)}


def read_results_from(path: Path, offset: int) -> tuple[list[TestResult], int]:
    """The results appended since byte ``offset``, and where the next read starts."""
    return read_jsonl_from(results_file(path), TestResult, offset)


@dataclass
class RunResults:
    """One run: its folder's name, its summary (none while it is still running, or for a
    bare ``results.jsonl``) and its results in file order, one per test id."""

    name: str
    path: Path
    summary: RunSummary | None
    results: list[TestResult]


def load_results(path: Path) -> RunResults:
    """A run folder (or its ``results.jsonl``) with its ``summary.json`` when there is one."""
    path = Path(path)
    file = results_file(path)
    if not file.is_file():
        raise ConfigError("no results.jsonl here (is this a gradebox run folder?)", file=str(path))
    summary = None
    summary_file = file.with_name("summary.json")
    if summary_file.is_file():
        try:
            summary = RunSummary.model_validate_json(untrusted.read_file(summary_file))
        except OSError as exc:  # a FIFO or a device under the name, a file too big
            raise ConfigError(
                f"cannot read: {exc.strerror or exc}", file=str(summary_file)
            ) from None
        except (ValidationError, ValueError) as exc:
            raise ConfigError(
                f"not a run summary ({str(exc).splitlines()[0]})", file=str(summary_file)
            ) from None
    name = (file.parent if file.name == "results.jsonl" else file).name or str(path)
    return RunResults(name, file.parent, summary, list(read_results(file).values()))
