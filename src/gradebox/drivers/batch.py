"""Batch grading of recorded agent outputs (``gradebox batch``, ``trials``, ``calibrate``).

Each line of a records file (JSONL) is graded in its own container and written to the output
file the moment it is done, with the record kept whole: a grader that crashes marks its
record ``error`` and loses nothing. An interrupted run resumes from its output file.

Each record is a ``jobs.GradeJob``; an executor (``gradebox.lifecycle.executor``) runs them here or
on a cluster, and this module writes what comes back the same way for both."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from contextlib import ExitStack, closing
from pathlib import Path

from pydantic import Field, ValidationError

from ..core import untrusted
from ..core.jsonl import JsonlWriter, digest, load_json, read_jsonl, rewrite_jsonl
from ..errors import ConfigError
from ..graders.config import GraderConfig, ScriptGrader, load_grader
from ..graders.custom import grader_for_file
from ..graders.run import grader_fingerprint
from ..lifecycle.executor import Executor, LocalExecutor
from ..lifecycle.jobs import GradeJob, Record, Worker
from ..protocol.models import GraderResult, Status
from ..sandbox.base import ImageSource, Sandbox

RECORDS_CAP = 1 << 30  # a batch's records file: large, but never the whole disk

__all__ = ["GradedRecord", "Record", "grade_records", "load_grader_ref", "read_records"]

log = logging.getLogger("gradebox.batch")


class GradedRecord(Record):
    """A record with its verdict. ``pass``/``score``/``reasoning`` are the inline-grader
    result; ``status`` adds ``error``; ``result`` is the full gradebox result; ``line`` is the
    record's 1-based line in the input file."""

    line: int
    fingerprint: str | None = None  # the record and the grader: resume reuses only a match
    status: Status
    pass_: bool = Field(alias="pass")
    score: float
    reasoning: str = ""
    result: GraderResult


def read_records(path: Path) -> list[tuple[int, Record]]:
    """``(line number, record)`` for every non-empty line; a bad line is a ConfigError."""
    out = []
    try:
        text = untrusted.read_file(path, RECORDS_CAP)
    except OSError as exc:
        raise ConfigError(f"cannot read records: {exc.strerror or exc}", file=str(path)) from None
    for number, line in enumerate(text.split(b"\n"), 1):
        if not line.strip():
            continue
        data = load_json(line, file=str(path), line=number)
        if isinstance(data, dict) and isinstance(data.get("id"), int | float):
            data["id"] = str(data["id"])
        try:
            out.append((number, Record.model_validate(data)))
        except ValidationError as exc:
            detail = exc.errors(include_url=False)[0]
            field = ".".join(str(p) for p in detail["loc"])
            raise ConfigError(detail["msg"], file=str(path), line=number, field=field) from None
    return out


def read_graded(path: Path) -> dict[int, GradedRecord]:
    """Records already graded in an output file, by input line."""
    return {r.line: r for r in read_jsonl(path, GradedRecord)}


def record_fingerprint(record: Record, grader_print: str) -> str:
    return digest(grader_print, record.model_dump(mode="json", by_alias=True))


def reusable(
    path: Path, records: list[tuple[int, Record]], grader_print: str, retry_errors: bool
) -> dict[int, GradedRecord]:
    """Graded records in ``path`` whose record and grader are unchanged, by current line.

    Matched by content, not position: records may have been added, removed or reordered.
    Identical records (trials of one prompt) are matched one for one."""
    by_print: dict[str, list[GradedRecord]] = {}
    for g in read_jsonl(path, GradedRecord):
        if g.fingerprint and not (retry_errors and g.status is Status.error):
            by_print.setdefault(g.fingerprint, []).append(g)
    out = {}
    for n, record in records:
        found = by_print.get(record_fingerprint(record, grader_print))
        if found:
            g = found.pop(0)
            g.line = n
            out[n] = g
    return out


def load_grader_ref(ref: str | Path, dialect: str = "inline") -> GraderConfig:
    """``--grader``: a grader YAML/JSON file, or a grader script (``.py``, ``.sh``, ``.js``...)."""
    path = Path(ref)
    if path.suffix.lower() in (".yaml", ".yml", ".json"):
        grader = load_grader(path)
        if dialect == "inline" and isinstance(grader, ScriptGrader) and not grader.dialect_given:
            # batch, trials and calibrate speak the inline protocol: a result on stdout is
            # owed, and exit 0 with none is an error, never the exit-code pass of a script.
            grader.dialect = "inline"
        return grader
    return grader_for_file(path, dialect=dialect)


def graded(
    line: int, record: Record, result: GraderResult, fingerprint: str | None = None
) -> GradedRecord:
    return GradedRecord.model_validate(
        {
            **record.model_dump(),
            "line": line,
            "fingerprint": fingerprint,
            "status": result.status,
            "pass": result.passed,
            "score": result.score,
            "reasoning": result.evidence,
            "result": result,
        }
    )


def grade_records(
    records: list[tuple[int, Record]],
    grader: GraderConfig,
    box: Sandbox,
    images: ImageSource,
    *,
    out: Path | None,
    workspace: Path,
    workers: int,
    resume: bool = True,
    retry_errors: bool = False,
    on_done: Callable[[GradedRecord], None] = lambda r: None,
    on_start: Callable[[int], None] = lambda done: None,
    executor: Executor | None = None,
) -> list[GradedRecord]:
    """Grade every record not yet in ``out`` (by content: a changed record or grader is graded
    again); append each as it finishes. Ctrl-C stops cleanly: containers removed, finished
    records kept. ``executor``: where each record is graded (default: threads of this process
    with containers started ahead; ``gradebox.cluster.RayExecutor``: a Ray cluster's nodes)."""
    grader_print = grader_fingerprint(grader)
    done = reusable(out, records, grader_print, retry_errors) if (out and resume) else {}
    if out and resume:
        rewrite_jsonl(out, [done[n] for n in sorted(done)])  # what stands, nothing stale
    elif out and out.exists():
        out.unlink()
    todo = [(n, r) for n, r in records if n not in done]
    on_start(len(records) - len(todo))
    with ExitStack() as stack:
        sink = stack.enter_context(closing(JsonlWriter(out))) if out else None
        if executor is None:
            executor = stack.enter_context(
                LocalExecutor(
                    Worker(
                        box,
                        images,
                        secrets.token_hex(6),
                        grader=grader,
                        workspace=workspace,
                        threads=workers,
                    )
                )
            )
        for fin in executor.map([GradeJob(n, r) for n, r in todo], workers):
            job = fin.job
            assert isinstance(job, GradeJob)
            result = fin.value
            if result is None:  # a record no one could grade is an error, never a pass
                result = GraderResult.errored(
                    grader.display_name(), grader.type, fin.error or "not run"
                )
            item = graded(
                job.line, job.record, result, record_fingerprint(job.record, grader_print)
            )
            done[job.line] = item
            if sink:
                sink.append(item)
            on_done(item)
    return [done[n] for n, _ in records if n in done]
