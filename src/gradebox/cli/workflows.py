"""``gradebox batch``, ``trials``, ``calibrate`` and ``assert``: workflows users bring from
other harnesses, now sandboxed."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..core.atomic import write_atomic
from ..core.scratch import scratch_folder
from ..core.yamlfile import to_config_error
from ..drivers.batch import GradedRecord, Record, grade_records, load_grader_ref, read_records
from ..drivers.calibrate import agreement, load_review_items, review_sheet, sample
from ..drivers.runner import default_workers
from ..drivers.trials import run_target_trials, summarise_trials
from ..errors import ConfigError
from ..graders.config import GraderConfig
from ..graders.custom import GRADER_DIRS, NOT_OURS, discover, grader_for_file
from ..graders.run import run_grader
from ..images import DEFAULT_IMAGE, ImageResolver
from ..protocol.models import Payload, Status
from ..report import STYLE, escape
from ..sandbox import Sandbox
from ..suite.plan import check_grader
from ._common import (
    AllowOpt,
    InFlightOpt,
    JsonOpt,
    LockedOpt,
    Output,
    RayOpt,
    SandboxOpt,
    ScaleUpOpt,
    duration_option,
    exit_code,
)
from .grade_lean import read_payload
from .session import CommandSession

if TYPE_CHECKING:
    from ..cluster import RayExecutor

GraderOpt = Annotated[
    Path, typer.Option("--grader", "-g", help="A grader YAML, or a grader script (.py .sh .js).")
]
MARK = {Status.passed: "pass", Status.failed: "fail", Status.error: "error"}


def _grade(
    out: Output,
    label: str,
    records: list[tuple[int, Record]],
    config: GraderConfig,
    box: Sandbox,
    images: ImageResolver,
    *,
    workspace: Path,
    workers: int,
    out_file: Path | None = None,
    resume: bool = False,
    retry_errors: bool = False,
    remote: RayExecutor | None = None,
) -> list[GradedRecord]:
    """grade_records with a progress bar on stderr (records already in out_file count done)."""
    progress = Progress(
        TextColumn(f"[bold]{label}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=out.err,
    )
    task = progress.add_task(label, total=len(records))

    def start(done: int) -> None:
        progress.update(task, completed=done)
        if done:
            out.info(f"reused {done} verdicts of unchanged records from {out_file}")

    with progress:
        return grade_records(
            records,
            config,
            box,
            images,
            out=out_file,
            workspace=workspace,
            workers=workers,
            resume=resume,
            retry_errors=retry_errors,
            on_start=start,
            on_done=lambda r: progress.advance(task),
            executor=remote,
        )


def _on_cluster(
    stack: ExitStack,
    session: CommandSession,
    address: str,
    grader_file: Path,
    config: GraderConfig,
    images: ImageResolver,
    workspace: Path | None = None,
    more_images: tuple[str, ...] = (),
    scale_up_timeout: float = 300.0,
) -> tuple[RayExecutor, int]:
    """The grader (and its workspace) sent to a Ray cluster, every node checked; the run and
    the number in flight by default."""
    from ..cluster import RayCluster, start_grader  # lazy: the cluster's modules, for --ray only

    cluster = RayCluster(address, scale_up_timeout)
    refs = [r for r in (config.image or DEFAULT_IMAGE, *more_images) if isinstance(r, str)]
    ids = {ref: images.resolve(ref) for ref in refs}  # a grader's own build: on each node
    remote = stack.enter_context(
        start_grader(
            cluster,
            grader_file,
            ids,
            sandbox=session.wanted_sandbox(),
            workspace=workspace,
            allow=session.allowed,
            limits=config.limits,
        )
    )
    session.out.info(f"[dim]ray: {remote.describe()}[/]")
    return remote, cluster.in_flight()


TABLE_ROWS = 50


def _records_table(out: Output, records: list[GradedRecord], title: str) -> None:
    """Errors and failures first; a long batch shows its first rows and says what it left."""
    table = Table(title=title)
    for col in ("line", "id", "verdict", "score", "reason"):
        table.add_column(col, overflow="fold")
    order = {Status.error: 0, Status.failed: 1, Status.passed: 2}
    ranked = sorted(records, key=lambda r: (order[r.status], r.line))
    for r in ranked[:TABLE_ROWS]:
        table.add_row(
            str(r.line),
            escape(r.id),
            f"[{STYLE[r.status]}]{MARK[r.status]}[/]",
            f"{r.score:.2f}",
            escape(r.reasoning[:120]),
        )
    out.console.print(table)
    if len(ranked) > TABLE_ROWS:
        out.console.print(f"[dim]… {len(ranked) - TABLE_ROWS} more rows in the output file[/]")


def _counts(records: list[GradedRecord]) -> dict[str, int]:
    return {s.value: sum(1 for r in records if r.status is s) for s in Status}


def batch(
    records_file: Annotated[Path, typer.Argument(help="Records, one JSON object per line.")],
    grader: GraderOpt,
    out_file: Annotated[Path, typer.Option("--out", "-o", help="Graded records (JSONL).")],
    workers: InFlightOpt = None,
    workspace: Annotated[
        Path | None, typer.Option("--workspace", "-W", help="Mounted read-only for the grader.")
    ] = None,
    fresh: Annotated[
        bool, typer.Option("--fresh", help="Start over instead of resuming from --out.")
    ] = False,
    retry_errors: Annotated[
        bool, typer.Option("--retry-errors", help="Grade again the records that errored.")
    ] = False,
    locked: LockedOpt = None,
    sandbox: SandboxOpt = None,
    allow: AllowOpt = None,
    ray: RayOpt = None,
    scale_up_timeout: ScaleUpOpt = "300s",  # type: ignore[assignment]
    as_json: JsonOpt = False,
) -> None:
    """Grade every record in its own container; each is written to --out as soon as it is done.

    A grader error marks that record `error` and keeps the agent's output; the run goes on.
    An interrupted run resumes from --out. Exit codes as for `run`.
    """
    session = CommandSession(as_json, sandbox=sandbox, allow=allow, locked=locked)
    out = session.out
    config = load_grader_ref(grader)
    records = read_records(records_file)
    wide = (workspace,) if workspace else ()
    check_grader(config, session.allowed, file=str(grader), workspaces=wide)
    with (
        scratch_folder("empty") as empty,
        session.open_sandbox() as box,
        ExitStack() as stack,
    ):
        ws = workspace or Path(empty)
        images = session.images(box)
        remote, slots = None, default_workers()
        if ray is not None:
            remote, slots = _on_cluster(
                stack, session, ray, grader, config, images, workspace, (), scale_up_timeout
            )
        graded = _grade(
            out,
            "batch",
            records,
            config,
            box,
            images,
            workspace=ws,
            workers=workers or slots,
            out_file=out_file,
            resume=not fresh,
            retry_errors=retry_errors,
            remote=remote,
        )
    if as_json:
        out.document({"out": str(out_file), "total": len(graded), **_counts(graded)})
    else:
        _records_table(out, graded, f"{records_file.name}: {len(graded)} records")
        c = _counts(graded)
        out.console.print(
            f"{c['passed']} passed, {c['failed']} failed, {c['error']} errored -> {out_file}"
        )
    raise typer.Exit(exit_code(r.status for r in graded))


def trials(
    records_file: Annotated[Path, typer.Argument(help="Records; lines sharing an id are trials.")],
    grader: GraderOpt,
    k: Annotated[int, typer.Option("-k", min=1, help="Report pass@k and pass^k for k = 1..K.")],
    target: Annotated[
        str | None, typer.Option("--target", help="Run this command K times per prompt instead.")
    ] = None,
    target_image: Annotated[str, typer.Option(help="Image for --target.")] = "python",
    target_timeout: Annotated[
        float,
        typer.Option(
            parser=duration_option,
            metavar="DURATION",
            help="Time for each --target run, e.g. 90s (a trial that does not "
            "finish, or fails, is an error, never graded).",
        ),
    ] = "300s",  # type: ignore[assignment]
    out_file: Annotated[Path | None, typer.Option("--out", "-o", help="Graded trials.")] = None,
    workers: InFlightOpt = None,
    locked: LockedOpt = None,
    sandbox: SandboxOpt = None,
    allow: AllowOpt = None,
    ray: RayOpt = None,
    scale_up_timeout: ScaleUpOpt = "300s",  # type: ignore[assignment]
    as_json: JsonOpt = False,
) -> None:
    """Grade trials and report pass rate, pass@k and pass^k per prompt and overall.

    pass@k = 1 - C(n-c, k)/C(n, k) and pass^k = C(c, k)/C(n, k) for a prompt with n trials of
    which c passed (k <= n); overall figures average over prompts with at least k trials.
    """
    session = CommandSession(as_json, sandbox=sandbox, allow=allow, locked=locked)
    out = session.out
    config = load_grader_ref(grader)
    records = read_records(records_file)
    n_workers = workers or default_workers()
    check_grader(config, session.allowed, file=str(grader))
    with (
        scratch_folder("empty") as empty,
        session.open_sandbox() as box,
        ExitStack() as stack,
    ):
        images = session.images(box)
        remote = None
        if ray is not None:
            more = (target_image,) if target else ()
            remote, slots = _on_cluster(
                stack, session, ray, grader, config, images, None, more, scale_up_timeout
            )
            n_workers = workers or slots
        if target:
            records = run_target_trials(
                records,
                target,
                images.resolve(target_image),
                k,
                box,
                workers=n_workers,
                executor=remote,
                timeout=target_timeout,
            )
        graded = _grade(
            out,
            "trials",
            records,
            config,
            box,
            images,
            workspace=Path(empty),
            workers=n_workers,
            out_file=out_file,
            remote=remote,
        )
    report = summarise_trials(graded, k)
    if as_json:
        out.document(report)
        return
    ks = [str(j) for j in range(1, k + 1)]
    table = Table(title=f"trials: {report.overall.prompts} prompts, {report.overall.trials} runs")
    for col in ["prompt", "n", "c", "pass rate", *(f"pass{s}{j}" for s in "@^" for j in ks)]:
        table.add_column(col, justify="right")

    def row(
        name: str, n: str, c: str, rate: float, at: dict[str, float], hat: dict[str, float]
    ) -> list[str]:
        rates = [f"{by_k[j]:.3f}" if j in by_k else "-" for by_k in (at, hat) for j in ks]
        return [name, n, c, f"{rate:.3f}", *rates]

    for p in report.prompts:
        table.add_row(
            *row(escape(p.id), str(p.n), str(p.c), p.pass_rate, p.pass_at_k, p.pass_hat_k)
        )
    o = report.overall
    table.add_row(*row("[bold]overall[/]", "", "", o.pass_rate, o.pass_at_k, o.pass_hat_k))
    out.console.print(table)


def calibrate(
    results_file: Annotated[Path, typer.Argument(help="Output of `batch` or `run`.")],
    n: Annotated[int, typer.Option("--sample", "-n", min=1, help="Failures to draw.")],
    seed: Annotated[int, typer.Option("--seed", help="Same seed, same sample.")] = 0,
    include_passes: Annotated[
        bool, typer.Option("--include-passes", help="Also draw as many passes.")
    ] = False,
    grader: Annotated[
        Path | None, typer.Option("--grader", "-g", help="Re-score the sample with this grader.")
    ] = None,
    sheet_file: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write the sheet here.")
    ] = None,
    locked: LockedOpt = None,
    sandbox: SandboxOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Draw a reproducible sample of verdicts into a Markdown review sheet."""
    session = CommandSession(as_json, sandbox=sandbox, locked=locked)
    out = session.out
    picked = sample(load_review_items(results_file), n, seed, include_passes)
    second: dict[int, tuple[bool, float, str]] | None = None
    if grader is not None:
        config = load_grader_ref(grader)
        check_grader(config, set(), file=str(grader))
        with (
            scratch_folder("empty") as empty,
            session.open_sandbox() as box,
        ):
            records = [(i.line, Record.model_validate(i.record)) for i in picked]
            rescored = _grade(
                out,
                "re-scoring",
                records,
                config,
                box,
                session.images(box),
                workspace=Path(empty),
                workers=default_workers(),
            )
        second = {r.line: (r.pass_, r.score, r.reasoning) for r in rescored}
    sheet = review_sheet(picked, results_file.name, seed, second)
    rate = agreement(picked, second)[1] if second and picked else None
    if sheet_file:
        write_atomic(sheet_file, sheet)
    if as_json:
        out.document(
            {
                "seed": seed,
                "sample": [i.model_dump(exclude={"record"}) for i in picked],
                "agreement": rate,
                "sheet": str(sheet_file) if sheet_file else None,
            }
        )
    elif sheet_file:
        out.console.print(
            f"{len(picked)} records -> {sheet_file}"
            + (f"; agreement {rate:.0%}" if rate is not None else "")
        )
    else:
        typer.echo(sheet, nl=False)


def assert_(
    name: Annotated[str, typer.Argument(help="A grader in .gradebox/graders/ (or .agentv/).")],
    agent_output: Annotated[str | None, typer.Option("--agent-output", help="The answer.")] = None,
    agent_input: Annotated[str | None, typer.Option("--agent-input", help="The prompt.")] = None,
    criteria: Annotated[str | None, typer.Option("--criteria")] = None,
    file: Annotated[
        Path | None, typer.Option("--file", help="JSON with output, input, criteria.")
    ] = None,
    locked: LockedOpt = None,
    sandbox: SandboxOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run a grader found by name, walking up from here, on one answer; print its JSON result
    (always JSON: --json is accepted for symmetry).

    Exit 0 when the score is at least 0.5, 1 below, 3 when the grader errored.
    """
    session = CommandSession(as_json, sandbox=sandbox, locked=locked)
    refused: dict[str, Path] = {}
    found = discover(Path.cwd(), GRADER_DIRS, refused)
    if name not in found and name in refused:
        raise ConfigError(f"refused: {NOT_OURS}", file=str(refused[name]))
    if name not in found:
        raise ConfigError(
            f"no grader named {name!r} in .gradebox/graders/ or .agentv/graders/ "
            f"from {Path.cwd()} up (found: {', '.join(sorted(found)) or 'none'})"
        )
    data = read_payload(str(file)) if file is not None else {}
    for key, value in (("output", agent_output), ("input", agent_input), ("criteria", criteria)):
        if value is not None:
            data[key] = value
    try:
        payload = Payload.model_validate(data)
    except ValidationError as exc:
        raise to_config_error(exc, file=str(file or "--input"), lines={}) from None
    config = grader_for_file(found[name].path, name=name)
    with (
        scratch_folder("empty") as empty,
        session.open_sandbox() as box,
    ):
        result = run_grader(config, payload, Path(empty), box, images=session.images(box))
    # Like the tool it replaces, `assert` answers in JSON: it is called by other programs.
    session.out.document(result)
    if result.status is Status.error:
        raise typer.Exit(3)
    raise typer.Exit(0 if result.score >= 0.5 else 1)
