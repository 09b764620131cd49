"""``gradebox run`` and ``gradebox validate``: whole suites."""

from __future__ import annotations

import contextlib
import fnmatch
import os
import re
import shlex
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..core.atomic import lock_folder, writable_folder, write_atomic
from ..core.scores import reaches
from ..core.scratch import scratch_folder
from ..drivers.runner import (
    PLAN,
    RunOptions,
    plan_json,
    read_results,
    run_suite,
    selected_tests,
    summarise,
)
from ..errors import ConfigError, StorageError
from ..graders.assertion import GraderAssertion, leaves
from ..lifecycle.testrun import now
from ..llm.targets import operator_files
from ..protocol.models import RunSummary, Status, TestResult, Usage
from ..report import junit_xml, print_run
from ..report.html import read_summary, write_report
from ..suite import Suite, load_suite
from ..suite.paths import expand_suite_paths, result_folders
from ..suite.plan import plan_suite
from ..suite.preflight import preflight
from ._common import (
    AllowOpt,
    InFlightOpt,
    JsonOpt,
    LockedOpt,
    Output,
    RayOpt,
    SandboxOpt,
    ScaleUpOpt,
    WorkersOpt,
    exit_code,
)
from .session import CommandSession

SuiteArg = Annotated[
    Path, typer.Argument(help="The suite file: gradebox or AgentV YAML, or AgentV JSONL cases.")
]
FormatOpt = Annotated[
    str | None,
    typer.Option("--format", help="gradebox or agentv (default: told by the file's shape)."),
]
TargetsOpt = Annotated[
    Path | None,
    typer.Option(
        "--targets",
        "--providers",
        help="A targets (providers) file of yours, read before the suite's .gradebox/ and "
        ".agentv/ (default: $GRADEBOX_TARGETS).",
    ),
]


def _load(
    session: CommandSession, suite_file: Path, format: str | None, target: str | None = None
) -> Suite:
    return load_suite(
        suite_file, format=format, targets=operator_files(session.targets), target=target
    )


OfflineOpt = Annotated[
    bool,
    typer.Option(
        "--offline",
        help="Fetch no repository: one a workspace names by URL must be in the cache "
        "(default: $GRADEBOX_OFFLINE).",
    ),
]

SuitesArg = Annotated[
    list[str],
    typer.Argument(
        help="Suite files, folders or globs (gradebox or AgentV YAML, or AgentV JSONL cases); "
        "a folder stands for its *.eval.yaml and eval.yaml files (holding none, for its "
        "suite.yaml), **/ matches any depth, "
        "!PATTERN leaves files out.",
        show_default=False,
    ),
]


def run(
    ctx: typer.Context,
    suite_files: SuitesArg,
    workers: InFlightOpt = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Results directory.")] = None,
    junit: Annotated[Path | None, typer.Option("--junit", help="Also write JUnit XML.")] = None,
    report: Annotated[
        Path | None,
        typer.Option("--report", help="Also write the HTML report (see `gradebox report`)."),
    ] = None,
    filter: Annotated[
        list[str] | None,
        typer.Option(
            "--filter",
            "-k",
            "--test-id",
            help="Only tests whose id matches this glob (repeatable: any of them).",
        ),
    ] = None,
    target: Annotated[
        list[str] | None,
        typer.Option(
            "--target",
            help="Run against this target instead of the file's: a provider of AgentV's "
            "targets.yaml, or a model target (.gradebox/targets.yaml).",
            show_default=False,
        ),
    ] = None,
    resume: Annotated[
        Path | None, typer.Option("--resume", help="Continue the run in DIR: only missing tests.")
    ] = None,
    locked: LockedOpt = None,
    sandbox: SandboxOpt = None,
    allow: AllowOpt = None,
    retry_errors: Annotated[
        bool, typer.Option("--retry-errors", help="With --resume: run errored tests again.")
    ] = False,
    format: FormatOpt = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Ask the models again (skip the response cache).")
    ] = False,
    ray: RayOpt = None,
    scale_up_timeout: ScaleUpOpt = "300s",  # type: ignore[assignment]
    targets: TargetsOpt = None,
    offline: OfflineOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Run every test of one or more suites, each graded in containers; a table at the end.

    Reads gradebox suites and AgentV eval files (YAML, or JSONL cases with a YAML sidecar),
    told apart by their shape or by --format. Several files, folders or globs run one after
    the other, as `agentv eval evals/**/*.yaml` does: every file is loaded and checked
    before the first test runs.

    With --ray ADDRESS each test runs on a node of a Ray cluster; every node is checked first
    (engine, runtime, the driver's image ids, the same suite) and the results are written here,
    each with its node. A test whose node dies is run again elsewhere.

    Results: DIR/results.jsonl (one line per test, written as each finishes, naming its
    suite and file), DIR/summary.json, and DIR/plan.json (the tests it will run, written
    first); a run of several files writes each file's in DIR/FILE-PATH/ and the whole run's
    plan and summary in DIR (one --report covers it all). Exit codes: 0 all
    passed, 1 some failed (or a mean score is below its suite's threshold), 2 invalid suite
    or results folder (nothing ran), 3 some errored, 4 engine or cluster failure (a refused
    node: nothing ran), 5 out of space (the results or scratch folder; finished tests are
    kept), 130 interrupted (finished tests are kept, and --report is written of them).
    """
    session = CommandSession(as_json, sandbox=sandbox, allow=allow, locked=locked, targets=targets)
    output = session.out
    if ray is not None and targets is not None:
        raise ConfigError(
            "--targets with --ray: a node reads the suite's own targets; put "
            "yours in the suite's .gradebox/",
            field="--targets",
        )
    files = expand_suite_paths(suite_files)
    if target and len(target) > 1:
        raise ConfigError(
            "one --target per run (AgentV runs a matrix of several; run gradebox once per "
            "target, each with its own --out)",
            field="--target",
        )
    chosen = target[0] if target else None
    suites = [_load(session, f, format, chosen) for f in files]
    if filter and not any(
        fnmatch.fnmatchcase(t.id, p) for s in suites for t in s.tests for p in filter
    ):
        # A typo would run nothing and pass (exit 0), as a glob naming no file would.
        raise ConfigError(
            f"no test matches {' or '.join(map(repr, filter))} in {len(suites)} file(s)",
            field="--filter",
        )
    several = len(suites) > 1
    if resume is not None:
        out_dir = resume
    elif out is not None:
        out_dir = out
    else:
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", suites[0].name if not several else "run")
        out_dir = Path("gradebox-runs") / f"{slug}-{datetime.now():%Y%m%d-%H%M%S}"
    dirs = [out_dir / name for name in result_folders(files)] if several else [out_dir]
    field = "--resume" if resume is not None else "--out"
    _same_layout(out_dir, several, field)
    if several:
        # The whole folder is this run's from the start: a second run given it would run
        # (and replace) each file's results the first had finished, up to the one in use.
        held = lock_folder(writable_folder(out_dir, field=field), field=field)
        ctx.call_on_close(lambda: os.close(held))
        # What the whole run will run, before it starts: `gradebox view` and `report` read
        # it to count "4 of 16" and list what has not run (each file's folder gets its own).
        folders = [
            {
                "folder": d.name,
                "suite": s.name,
                "file": str(s.path),
                "tests": [t.id for t in selected_tests(s, filter or None)],
            }
            for s, d in zip(suites, dirs, strict=True)
        ]
        write_atomic(
            out_dir / PLAN,
            plan_json({"suite": f"{len(suites)} suites", "folders": folders}),
            what="results folder",
        )

    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(
            "[green]{task.fields[passed]}✔ [red]{task.fields[failed]}✘ "
            "[yellow]{task.fields[errored]}!"
        ),
        TimeElapsedColumn(),
        console=output.err,
        transient=False,
    )
    summaries: list[RunSummary] = []
    try:
        with session.open_sandbox(_suite_sandbox(suites, session)) as box:
            # Every image resolved and every grader checked before the first container starts,
            # in every file; then what this machine must give the run (model keys, programs).
            prepared = []
            for suite in suites:
                images = session.images(box, suite.spec.allow)
                prepared.append((suite, images, plan_suite(suite, images, session.allowed)))
            for suite in suites:
                # Repositories named by URL are fetched here, before any container starts.
                lift = "limits" in session.allowed
                preflight(suite, fetch=True, offline=offline, lift_cap=lift)
            with progress:
                for (suite, images, plan), suite_dir in zip(prepared, dirs, strict=True):
                    options = RunOptions(
                        out_dir=suite_dir,
                        workers=workers,
                        filter=filter or None,
                        resume=resume is not None,
                        retry_errors=retry_errors,
                        use_cache=not no_cache,
                    )
                    where = session.wanted_sandbox(suite.spec.defaults.sandbox)
                    summaries.append(
                        _run_one(
                            suite,
                            plan,
                            box,
                            images,
                            options,
                            progress,
                            output,
                            ray=ray,
                            scale_up_timeout=scale_up_timeout,
                            allow=session.allowed,
                            format=format,
                            sandbox=where,
                            target=chosen,
                        )
                    )
    except KeyboardInterrupt:
        _interrupted(suites, dirs, summaries, out_dir, suite_files, report, several, filter)
    results: list[TestResult] = []
    for suite, summary, suite_dir in zip(suites, summaries, dirs, strict=True):
        if summary.reused:
            output.info(f"reused {summary.reused} results of unchanged tests from {suite_dir}")
        ids = {t.id for t in suite.tests}
        mine = [r for r in read_results(suite_dir / "results.jsonl").values() if r.id in ids]
        results += [_labelled(r, suite, suites) for r in mine] if several else mine
    summary = combined(summaries) if several else summaries[0]
    if several:
        write_atomic(
            out_dir / "summary.json",
            summary.model_dump_json(indent=2) + "\n",
            what="results folder",
        )
    if junit:
        write_atomic(junit, junit_xml(results, summary))
    if report:
        # One page for the whole run, a run of several files too (each file's tests labelled).
        write_report([out_dir], report)
        output.info(f"report: {escape(str(report))} (it holds the run's outputs: check it first)")
    if as_json:
        document: dict[str, Any] = {"summary": summary, "results_dir": str(out_dir)}
        if several:
            document["suites"] = [
                {"file": str(f), "results_dir": str(d), "summary": s}
                for f, d, s in zip(files, dirs, summaries, strict=True)
            ]
        output.document(document)
    else:
        print_run(results, summary, output.console)
        where = out_dir / "summary.json" if several else out_dir / "results.jsonl"
        output.console.print(f"[dim]results: {where}[/]")
    code = exit_code(r.status for r in results)
    for s in summaries:
        gate = s.min_mean_score
        if code == 0 and gate is not None and not reaches(s.mean_score, gate):
            output.info(
                f"{s.suite}: mean score {s.mean_score:.3f} is below the suite's threshold {gate:g}"
            )
            code = 1
    raise typer.Exit(code)


def _interrupted(
    suites: list[Suite],
    dirs: list[Path],
    summaries: list[RunSummary],
    out_dir: Path,
    suite_files: list[str],
    report: Path | None,
    several: bool,
    filter: list[str] | None,
) -> None:
    """Ctrl-C: every container is gone (the sandbox closed on the way out). What finished
    stays: a run of several files gets its summary (the file stopped in says how far it got,
    the files not reached count as not run), the report is written of what finished, and the
    line says how to continue and how to see it. Exit 130."""
    if several:
        parts = list(summaries)
        for i, (suite, d) in enumerate(zip(suites, dirs, strict=True)):
            if i < len(summaries):
                continue
            # The file it stopped in wrote its own summary; the ones after it never started.
            own = read_summary(d) if i == len(summaries) else None
            total = len(selected_tests(suite, filter or None))
            parts.append(
                own
                if own is not None and own.interrupted
                else summarise(suite, "-", {}, total, 0, True, now(), 0.0)
            )
        with contextlib.suppress(StorageError):  # a full disk: the line below still says it
            write_atomic(
                out_dir / "summary.json",
                combined(parts).model_dump_json(indent=2) + "\n",
                what="results folder",
            )
    kept = sum(len(read_results(d / "results.jsonl")) for d in dirs)
    resume = f"gradebox run {shlex.join(suite_files)} --resume {shlex.quote(str(out_dir))}"
    seen = f"gradebox report {shlex.quote(str(out_dir))}"
    said = f"{kept} finished result(s) kept in {out_dir}: continue with `{resume}`"
    if report is not None:
        try:
            write_report([out_dir], report)
            said += f"; the report of what finished: {report} (`{seen} -o {report}` again later)"
        except (ConfigError, StorageError, OSError) as exc:
            said += f"; no report ({exc}); `{seen}` writes one of what finished"
    else:
        said += f"; `{seen}` writes the report of what finished"
    typer.echo(
        f"gradebox: error: interrupted; every container of this run was removed; {said}",
        err=True,
    )
    raise typer.Exit(130)


def _run_one(
    suite: Suite,
    plan: Any,
    box: Any,
    images: Any,
    options: RunOptions,
    progress: Progress,
    output: Output,
    *,
    ray: str | None,
    scale_up_timeout: float,
    allow: set[str],
    format: str | None,
    sandbox: str,
    target: str | None,
) -> RunSummary:
    """One suite of the run, with its progress bar (on a Ray cluster when asked)."""
    counts = {"passed": 0, "failed": 0, "errored": 0}
    task = progress.add_task(suite.name, total=None, **counts)

    def on_start(total: int, done: int) -> None:
        progress.update(task, total=total, completed=done)

    def on_result(result: TestResult) -> None:
        key = {Status.passed: "passed", Status.failed: "failed", Status.error: "errored"}
        counts[key[result.status]] += 1
        progress.update(task, advance=1, **counts)

    with ExitStack() as stack:
        remote = None
        if ray is not None:
            # The cluster's modules (Ray's client with them): only a run given --ray loads them.
            from ..cluster import RayCluster, start_suite

            cluster = RayCluster(ray, scale_up_timeout)
            remote = stack.enter_context(
                start_suite(
                    cluster,
                    suite,
                    plan,
                    allow=allow,
                    format=format,
                    sandbox=sandbox,
                    options=options,
                    target=target,
                )
            )
            options.workers = options.workers or cluster.in_flight()
            output.info(f"[dim]ray: {remote.describe()}[/]")

            def on_wait(text: str | None) -> None:
                # While no node can take the work: said on the progress line, then taken back.
                name = escape(suite.name)
                progress.update(task, description=f"{name} ({escape(text)})" if text else name)
                if text:  # and once as a line (unwrapped): a log or a pipe shows no bar
                    output.err.print(f"[dim]ray: {escape(text)}[/]", soft_wrap=True)

            remote.on_wait = on_wait
        return run_suite(
            suite, box, images, options, on_result=on_result, on_start=on_start, executor=remote
        )


def _same_layout(out_dir: Path, several: bool, field: str) -> None:
    """A results folder holds a run of one file (its ``results.jsonl``) or of several (one
    folder each, ``summary.json`` over all): a run of the other kind over it would leave the
    old results beside a new ``summary.json`` (a report of the folder then mixes both), and a
    ``--resume`` of the other kind would find nothing to resume and run everything again."""
    top = out_dir / "results.jsonl"
    if several and top.exists():
        raise ConfigError(
            f"{out_dir} holds the results of a run of one suite file ({top}); a run of several "
            "files keeps each file's in a folder of its own: give another folder, or the one "
            "file",
            field=field,
        )
    # (Its summary.json at the top, no results.jsonl there: a folder that merely holds run
    # folders, as gradebox-runs/ does, is not one.)
    if not several and not top.exists() and (out_dir / "summary.json").is_file():
        theirs = sorted(p.parent.name for p in out_dir.glob("*/results.jsonl"))
        if theirs:
            raise ConfigError(
                f"{out_dir} holds a run of several suite files ({', '.join(theirs[:3])}"
                f"{', ...' if len(theirs) > 3 else ''}); name the same files to resume it, "
                "or give another folder",
                field=field,
            )


def _suite_sandbox(suites: list[Suite], session: CommandSession) -> str | None:
    """The files' ``defaults.sandbox`` when they agree: one run has one sandbox."""
    asked = {s.spec.defaults.sandbox for s in suites} - {None}
    if len(asked) > 1 and session.sandbox is None and not session.settings.sandbox:
        raise ConfigError(
            f"the suite files ask for different sandboxes ({', '.join(sorted(asked))}) in "
            "defaults.sandbox; choose one with --sandbox",
            field="--sandbox",
        )
    return next(iter(asked), None)


def _labelled(result: TestResult, suite: Suite, suites: list[Suite]) -> TestResult:
    """A result of a run of several files, its id prefixed by its suite for the table (by its
    file when two suites share a name)."""
    names = [s.name for s in suites]
    label = suite.name if names.count(suite.name) == 1 else str(suite.path)
    return result.model_copy(update={"id": f"{label}: {result.id}"})


def combined(summaries: list[RunSummary]) -> RunSummary:
    """The summary of a run of several suites: their tests counted together."""
    total = sum(s.total for s in summaries)
    ran = sum(s.passed + s.failed + s.errored for s in summaries)
    usage = None
    for s in summaries:
        if s.usage is not None:
            usage = usage or Usage()
            usage.merge(s.usage)
    return RunSummary(
        suite=f"{len(summaries)} suites",
        run_id=summaries[0].run_id,
        total=total,
        passed=sum(s.passed for s in summaries),
        failed=sum(s.failed for s in summaries),
        errored=sum(s.errored for s in summaries),
        not_run=sum(s.not_run for s in summaries),
        pass_rate=round(sum(s.passed for s in summaries) / ran, 6) if ran else 0.0,
        mean_score=round(
            sum(s.mean_score * (s.passed + s.failed + s.errored) for s in summaries) / ran, 6
        )
        if ran
        else 0.0,
        duration_s=round(sum(s.duration_s for s in summaries), 3),
        workers=max(s.workers for s in summaries),
        interrupted=any(s.interrupted for s in summaries),
        reused=sum(s.reused for s in summaries),
        usage=usage,
        warnings=[w for s in summaries for w in s.warnings],
        started_at=summaries[0].started_at,
        finished_at=summaries[-1].finished_at,
    )


def validate(
    suite_file: SuiteArg,
    locked: LockedOpt = None,
    sandbox: SandboxOpt = None,
    allow: AllowOpt = None,
    format: FormatOpt = None,
    targets: TargetsOpt = None,
    target: Annotated[
        str | None,
        typer.Option(
            "--target",
            help="Check it against this target, as `run --target` would run it (a file with "
            "several execution.targets is refused without one).",
            show_default=False,
        ),
    ] = None,
    offline: OfflineOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Check a suite, its graders, its assertions, its images and the privileges its graders
    ask for: the plan `run` makes, without running anything (exit 0, or 2 listing every error,
    one per line). It needs no secrets: an unset key or variable is a warning."""
    session = CommandSession(as_json, sandbox=sandbox, allow=allow, locked=locked, targets=targets)
    output = session.out
    suite = _load(session, suite_file, format, target)
    with session.open_sandbox(suite.spec.defaults.sandbox) as box:
        plan = plan_suite(suite, session.images(box, suite.spec.allow), session.allowed)
    warnings: list[str] = []
    preflight(suite, warn=warnings.append, offline=offline)
    for line in warnings:
        output.info(f"[yellow]warning:[/] {escape(line)}")
    every = [a for t in suite.tests for a in leaves(t.every_assertion())]
    containers = sum(isinstance(a, GraderAssertion) for a in every)
    host = len(every) - containers
    info = {
        "suite": suite.name,
        "tests": len(suite.tests),
        "container_assertions": containers,
        "builtin_assertions": host,
        "custom_assertions": sorted(suite.customs),
        "target": suite.spec.target is not None,
        "images": plan.images,
    }
    if as_json:
        output.document({"valid": True, **info, "warnings": warnings})
    else:
        output.console.print(
            f"[green]✔[/] {suite_file}: {len(suite.tests)} tests, {containers} container "
            f"assertions, {host} built-in; custom: {', '.join(info['custom_assertions']) or '-'}"
        )


def validate_refs(
    suite_file: SuiteArg,
    workers: WorkersOpt = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Results directory.")] = None,
    locked: LockedOpt = None,
    sandbox: SandboxOpt = None,
    allow: AllowOpt = None,
    format: FormatOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Grade every test's reference answer as if the agent had given it: its
    `expected_output` as the answer, its `reference_workspace` laid over the workspace, its
    `reference_patch` applied (the target is not run). A grader that fails its own reference
    is a grader bug. Exit 0 when every reference passes, 1 when one does not, 2 invalid suite.
    """
    session = CommandSession(as_json, sandbox=sandbox, allow=allow, locked=locked)
    output = session.out
    suite = load_suite(suite_file, format=format)
    checked = [t for t in suite.tests if t.has_reference()]
    with scratch_folder("refs") as tmp:
        out_dir = out or Path(tmp)
        options = RunOptions(out_dir=out_dir, workers=workers, references=True)
        with session.open_sandbox(suite.spec.defaults.sandbox) as box:
            images = session.images(box, suite.spec.allow)
            plan_suite(suite, images, session.allowed)
            run_suite(suite, box, images, options)
        results = read_results(out_dir / "results.jsonl")
    bad = []
    for test in checked:
        r = results.get(test.id)
        if r is None:  # no result is no evidence that the reference passes
            bad.append({"id": test.id, "status": "not run", "error": "no result", "graders": []})
            continue
        if r.status is Status.passed:
            continue
        failing = [f"{g.name}: {g.evidence[:200]}" for g in r.graders if not g.passed]
        bad.append({"id": test.id, "status": r.status.value, "error": r.error, "graders": failing})
    report = {
        "checked": len(checked),
        "without_reference": len(suite.tests) - len(checked),
        "failing": bad,
    }
    if as_json:
        output.document(report)
    else:
        for item in bad:
            why = item["error"] or "; ".join(item["graders"])
            output.console.print(f"[red]✘[/] {item['id']}: its grader fails its reference: {why}")
        output.console.print(
            f"{len(checked) - len(bad)}/{len(checked)} references pass their graders"
            f" ({report['without_reference']} tests have no reference)"
        )
    raise typer.Exit(1 if bad else 0)
