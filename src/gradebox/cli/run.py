"""``gradebox run`` and ``gradebox validate``: whole suites."""

from __future__ import annotations

import re
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..graders.assertion import GraderAssertion, leaves
from ..plan import plan_suite
from ..preflight import preflight
from ..protocol import Status, TestResult
from ..report import junit_xml, print_run
from ..runner import RunOptions, read_results, run_suite
from ..suite import load_suite
from ._common import (
    AllowOpt,
    JsonOpt,
    LockedOpt,
    Output,
    RayOpt,
    SandboxOpt,
    WorkersOpt,
    allowed,
    exit_code,
    open_sandbox,
    resolver_for,
    wanted_sandbox,
)

SuiteArg = Annotated[
    Path, typer.Argument(help="The suite file: gradebox or AgentV YAML, or AgentV JSONL cases.")
]
FormatOpt = Annotated[
    str | None,
    typer.Option("--format", help="gradebox or agentv (default: told by the file's shape)."),
]


def run(
    suite_file: SuiteArg,
    workers: WorkersOpt = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Results directory.")] = None,
    junit: Annotated[Path | None, typer.Option("--junit", help="Also write JUnit XML.")] = None,
    filter: Annotated[
        str | None, typer.Option("--filter", "-k", help="Only tests whose id matches this glob.")
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
    as_json: JsonOpt = False,
) -> None:
    """Run every test of a suite, each graded in containers; a table at the end.

    Reads gradebox suites and AgentV eval files (YAML, or JSONL cases with a YAML sidecar),
    told apart by their shape or by --format.

    With --ray ADDRESS each test runs on a node of a Ray cluster; every node is checked first
    (engine, runtime, the driver's image ids, the same suite) and the results are written here,
    each with its node. A test whose node dies is run again elsewhere.

    Results: DIR/results.jsonl (one line per test, written as each finishes) and
    DIR/summary.json. Exit codes: 0 all passed, 1 some failed (or the mean score is below the
    suite's threshold), 2 invalid suite (nothing ran), 3 some errored, 4 engine or cluster
    failure (a refused node: nothing ran), 130 interrupted (finished tests are kept).
    """
    output = Output(as_json)
    suite = load_suite(suite_file, format=format)
    if resume is not None:
        out_dir = resume
    elif out is not None:
        out_dir = out
    else:
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", suite.name)
        out_dir = Path("gradebox-runs") / f"{slug}-{datetime.now():%Y%m%d-%H%M%S}"
    options = RunOptions(
        out_dir=out_dir,
        workers=workers,
        filter=filter,
        resume=resume is not None,
        retry_errors=retry_errors,
        use_cache=not no_cache,
    )
    privileges = allowed(allow)

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
    counts = {"passed": 0, "failed": 0, "errored": 0}
    task = progress.add_task(suite.name, total=None, **counts)

    def on_start(total: int, done: int) -> None:
        progress.update(task, total=total, completed=done)

    def on_result(result: TestResult) -> None:
        key = {Status.passed: "passed", Status.failed: "failed", Status.error: "errored"}
        counts[key[result.status]] += 1
        progress.update(task, advance=1, **counts)

    with open_sandbox(output, sandbox, suite.spec.defaults.sandbox) as box:
        images = resolver_for(box, locked, privileges | set(suite.spec.allow))
        # Every image resolved and every grader checked before the first container starts;
        # then what this machine must give the run (model keys, a coding agent's program).
        plan = plan_suite(suite, images, privileges)
        preflight(suite)
        with ExitStack() as stack:
            remote = None
            if ray is not None:
                from ..cluster import RayCluster, start_suite

                cluster = RayCluster(ray)
                remote = stack.enter_context(start_suite(
                    cluster, suite, plan, allow=privileges, format=format,
                    sandbox=wanted_sandbox(sandbox, suite.spec.defaults.sandbox), options=options,
                ))  # fmt: skip
                options.workers = workers or cluster.slots()
                output.info(f"[dim]ray: {remote.describe()}[/]")
            with progress:
                summary = run_suite(suite, box, images, options, on_result=on_result,
                                    on_start=on_start, executor=remote)  # fmt: skip
    if summary.reused:
        output.info(f"reused {summary.reused} results of unchanged tests from {out_dir}")
    results = [
        r
        for r in read_results(out_dir / "results.jsonl").values()
        if r.id in {t.id for t in suite.tests}
    ]
    if junit:
        junit.parent.mkdir(parents=True, exist_ok=True)
        junit.write_text(junit_xml(results, summary), encoding="utf-8")
    if as_json:
        output.document({"summary": summary, "results_dir": str(out_dir)})
    else:
        print_run(results, summary, output.console)
        output.console.print(f"[dim]results: {out_dir / 'results.jsonl'}[/]")
    code = exit_code(r.status for r in results)
    gate = summary.min_mean_score
    if code == 0 and gate is not None and summary.mean_score < gate - 1e-9:
        output.info(f"mean score {summary.mean_score:.3f} is below the suite's threshold {gate:g}")
        code = 1
    raise typer.Exit(code)


def validate(
    suite_file: SuiteArg,
    locked: LockedOpt = None,
    sandbox: SandboxOpt = None,
    allow: AllowOpt = None,
    format: FormatOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Check a suite, its graders, its assertions, its images and the privileges its graders
    ask for: the plan `run` makes, without running anything (exit 0, or 2 listing every error,
    one per line)."""
    output = Output(as_json)
    suite = load_suite(suite_file, format=format)
    privileges = allowed(allow)
    with open_sandbox(output, sandbox, suite.spec.defaults.sandbox) as box:
        plan = plan_suite(
            suite, resolver_for(box, locked, privileges | set(suite.spec.allow)), privileges
        )
    preflight(suite)
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
        output.document({"valid": True, **info})
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
    from ..scratch import scratch_folder

    output = Output(as_json)
    suite = load_suite(suite_file, format=format)
    checked = [t for t in suite.tests if t.has_reference()]
    privileges = allowed(allow)
    with scratch_folder("refs") as tmp:
        out_dir = out or Path(tmp)
        options = RunOptions(out_dir=out_dir, workers=workers, references=True)
        with open_sandbox(output, sandbox, suite.spec.defaults.sandbox) as box:
            images = resolver_for(box, locked, privileges | set(suite.spec.allow))
            plan_suite(suite, images, privileges)
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
        bad.append({"id": test.id, "status": r.status.value, "error": r.error,
                    "graders": failing})  # fmt: skip
    report = {"checked": len(checked), "without_reference": len(suite.tests) - len(checked),
              "failing": bad}  # fmt: skip
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
