"""The HTML report: one self-contained file (``gradebox report``), or the live page
``gradebox view`` serves.

The page is a fixed skeleton (the standard library writes it: the only text this module puts
into HTML is the JSON below and our own assets, so a template engine would escape nothing) with
our stylesheet and script inline, and the run's data as JSON in a ``<script
type="application/json">``. The script builds every element itself and inserts data only as
text (``textContent``, never markup). A Content-Security-Policy lets nothing else run or load:
only the two inline blocks whose SHA-256 it names, no image, font, frame or request (the live
view may fetch its own origin). What agents and graders wrote never becomes HTML.

This module reads runs through ``gradebox.results`` and computes with ``gradebox.compare`` and
``gradebox.trials``; it never runs anything.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import re
import stat
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._version import __version__
from ..core.atomic import write_atomic
from ..core.untrusted import read_within
from ..drivers.runner import PLAN
from ..drivers.trials import pass_at_k, pass_hat_k
from ..errors import ConfigError
from ..protocol.models import Message, RunSummary, Status, TestResult, TrialRecord
from ..protocol.results import RunResults, load_results, read_results, results_file
from .compare import compare_runs, outcomes, unrelated
from .terminal import reason

if TYPE_CHECKING:
    from ..drivers.batch import GradedRecord

__all__ = [
    "csp",
    "Layout",
    "layout",
    "live_row",
    "load_run",
    "not_a_run",
    "page",
    "page_data",
    "read_summary",
    "real_folder",
    "relabelled",
    "result_detail",
    "result_row",
    "Run",
    "write_report",
]

PLAN_CAP = 64 << 20  # a plan names every test: 100,000 ids of 100 bytes are 10 MiB
SUMMARY_CAP = 16 << 20  # a summary.json gradebox wrote is a few KiB

# Trials past this many keep their marks but pass@k / pass^k stop here (one column per k).
MAX_K = 10
WARNING = (
    "This report holds the run's outputs: answers, evidence, diffs, logs. Check it before you "
    "publish it."
)
# Characters JSON leaves as they are that would end or confuse the <script> element holding
# it (</script>, <!--) or a JavaScript line (U+2028/9 in old parsers): escaped as \\uXXXX,
# which JSON.parse reads back as the same characters.
_SCRIPT_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028",
                  "\u2029": "\\u2029"}  # fmt: skip
# A lone surrogate (a result may hold one from a \\udXXX escape) cannot be UTF-8 encoded.
_SURROGATE = re.compile("[\ud800-\udfff]")


@cache
def _asset(name: str) -> str:
    return resources.files(__package__).joinpath("assets", name).read_text(encoding="utf-8")


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()


def csp(live: bool = False) -> str:
    """The page's Content-Security-Policy: our two inline blocks, nothing else; the live
    view may also fetch from its own origin. The regex search's worker is a ``blob:`` our
    script makes (no other script runs to make one)."""
    connect = "'self'" if live else "'none'"
    return (
        f"default-src 'none'; script-src '{_sha256(_asset('report.js'))}'; "
        f"style-src '{_sha256(_asset('report.css'))}'; img-src 'none'; "
        f"connect-src {connect}; worker-src blob:; base-uri 'none'; form-action 'none'"
    )


def script_json(data: Any) -> str:
    """``data`` as JSON that can sit inside a ``<script>`` element whatever its strings hold.
    NaN and Infinity (a results file from elsewhere may hold them: no JSON, and JSON.parse
    would refuse the whole page) become null, which the page shows as "–"."""
    try:
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError:
        text = json.dumps(_finite(data), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return _script_safe(text)


def _finite(data: Any) -> Any:
    """``data`` with every NaN and infinity made None (page data: a few levels deep)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_finite(v) for v in data]
    return data


def _script_safe(text: str) -> str:
    text = _SURROGATE.sub("\ufffd", text)
    for char, escaped in _SCRIPT_UNSAFE.items():
        text = text.replace(char, escaped)
    return text


def _trial_stats(result: TestResult) -> dict[str, Any] | None:
    trials = result.trials or []
    if not trials:
        return None
    n = len(trials)
    c = sum(t.status is Status.passed for t in trials)
    ks = range(1, min(n, MAX_K) + 1)
    return {
        "n": n,
        "c": c,
        "at": [round(pass_at_k(n, c, k), 6) for k in ks],
        "hat": [round(pass_hat_k(n, c, k), 6) for k in ks],
    }


def result_row(result: TestResult) -> dict[str, Any]:
    """What the table, the filters, the header and the charts read of one test (small: the
    page parses every row at once), with the trials' pass@k / pass^k (``trials``'
    estimators) and why it did not pass (``report.reason``, as the terminal table says it)."""
    target = result.target_name or result.metadata.get("target")  # a matrix's target first
    row: dict[str, Any] = {
        "id": result.id,
        "status": result.status.value,
        "score": result.score,
        "graders": [
            {"name": g.name, "status": g.status.value, "passed": g.passed, "backend": g.backend}
            for g in result.graders
        ],
        "why": "" if result.passed else reason(result)[:300],
        "duration": result.timings_ms.get("total"),
        "node": result.node,
        "target": target if isinstance(target, str) else None,
        "images": result.images,
        "started_at": result.started_at,
    }
    if result.trials:
        row["trials"] = [{"status": t.status.value, "score": t.score} for t in result.trials]
        row["_trials"] = _trial_stats(result)
    return {k: v for k, v in row.items() if v is not None}


def result_detail(result: TestResult) -> str:
    """The whole result as JSON (what an opened test shows), without the fields left at
    their defaults (the page knows them): pydantic's serialiser, ~10x faster than model_dump
    and json.dumps over 10,000 results."""
    try:
        return result.model_dump_json(exclude_defaults=True, exclude={"fingerprint"})
    except ValueError:  # a lone surrogate cannot be UTF-8: the slow way, which replaces it
        row = result.model_dump(mode="json", exclude_defaults=True, exclude={"fingerprint"})
        return _SURROGATE.sub("\ufffd", json.dumps(row, ensure_ascii=False))


def live_row(result: TestResult) -> dict[str, Any]:
    """A row with its detail, as ``gradebox view`` sends a result appended since."""
    return {**result_row(result), "_full": json.loads(result_detail(result))}


def _suite(run: RunResults) -> str | None:
    """The suite a run ran, as its summary names it (none while it runs, or for a bare file)."""
    return run.summary.suite if run.summary else None


def _comparison(a: RunResults, b: RunResults, ia: int, ib: int) -> dict[str, Any]:
    oa, ob = outcomes(a.results), outcomes(b.results)
    warning = unrelated(a.name, oa.keys(), _suite(a), b.name, ob.keys(), _suite(b))
    try:
        report = compare_runs(oa, ob, seed=0)
    except ConfigError as exc:
        return {"a": ia, "b": ib, "error": exc.message, "unrelated": warning}
    flips: dict[str, list[int]] = {}
    for key in set(oa) & set(ob):
        for name, passed in oa[key].graders.items():
            other = ob[key].graders.get(name)
            if other is None or other == passed:
                continue
            counts = flips.setdefault(name, [0, 0])
            counts[0 if passed else 1] += 1  # [pass->fail, fail->pass]
    return {
        "a": ia,
        "b": ib,
        "unrelated": warning,
        **report.to_json(),
        "significantly_worse": report.significantly_worse(0.05),
        "grader_flips": [
            {"name": k, "regressions": v[0], "fixes": v[1]} for k, v in sorted(flips.items())
        ],
    }


def run_data(run: RunResults) -> dict[str, Any]:
    return {
        "name": run.name,
        "summary": run.summary.model_dump(mode="json") if run.summary else None,
        "rows": [result_row(r) for r in run.results],
        "plan": getattr(run, "plan", None),
    }


def page_data(runs: list[RunResults], *, live: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything the page shows at once, as JSON-able data; comparisons of each run with
    the first. Each test's whole result goes beside it (``page``), read when opened. Runs of
    different suites get a title naming each (else the page takes the last run's suite)."""
    suites = list(dict.fromkeys(s for s in map(_suite, runs) if s))
    return {
        "version": __version__,
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "warning": WARNING,
        "max_k": MAX_K,
        "live": live,
        "title": " vs ".join(suites) if len(suites) > 1 else None,
        "runs": [run_data(r) for r in runs],
        "comparisons": [_comparison(runs[0], r, 0, i) for i, r in enumerate(runs) if i],
    }


def page(data: dict[str, Any], runs: list[RunResults] = ()) -> str:
    """The whole page: skeleton, our stylesheet and script, ``data``, and each test's whole
    result in a data block of its own (``gbx-RUN-ROW``) that the script parses when the test
    is opened: a 10,000-test page parses small rows at first, not every evidence and diff."""
    live = bool(data.get("live"))
    details = "".join(
        f'<script type="application/json" id="gbx-{i}-{j}">'
        f"{_script_safe(result_detail(r))}</script>\n"
        for i, run in enumerate(runs)
        for j, r in enumerate(run.results)
    )
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{csp(live)}">\n'
        '<meta name="referrer" content="no-referrer">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="color-scheme" content="light dark">\n'
        "<title>gradebox report</title>\n"
        f"<style>{_asset('report.css')}</style>\n"
        "</head><body>\n"
        '<noscript><p class="noscript">This report needs JavaScript to show the run.</p>'
        "</noscript>\n"
        '<main id="app"></main>\n'
        f'<script type="application/json" id="gradebox-data">{script_json(data)}</script>\n'
        f"{details}"
        f"<script>{_asset('report.js')}</script>\n"
        "</body></html>\n"
    )


@dataclass
class Run(RunResults):
    """A run as the page shows it: its results and, when its folder holds a plan, the ids
    of every test it set out to run (those without a result are listed as not run)."""

    plan: list[str] | None = None


@dataclass
class Layout:
    """What a path holds: the results file of each part of a run (one; or one per suite file
    of a run of several, each with the label its ids get), and the plan's test ids."""

    path: Path
    name: str
    parts: list[tuple[str | None, Path]]
    plan: list[str] | None
    several: bool
    run_id: str | None = None  # the plan's: a summary of another run id is an older run's


def _json(path: Path, cap: int) -> Any:
    """The JSON in ``path`` (a regular file, never through a link: a run folder is written by
    agents and graders), or None when there is none or it is not JSON."""
    data = read_within(path, cap, follow=False)
    try:
        return json.loads(data) if data is not None else None
    except ValueError:
        return None


def real_folder(path: Path) -> bool:
    """A folder, not a link to one (a link in a run folder could lead anywhere)."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _plain(name: object) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name


def _ids(value: object) -> list[str]:
    return [i for i in value if isinstance(i, str)] if isinstance(value, list) else []


def _labels(entries: list[tuple[str, str, str]]) -> list[str]:
    """Each part's label, as ``gradebox run`` prefixes its ids: the suite's name, or its
    file when two suites share a name (``(folder, suite, file)`` each)."""
    names = Counter(suite for _, suite, _ in entries)  # counted once: linear in the plan
    return [
        suite if suite and names[suite] == 1 else (file or folder)
        for folder, suite, file in entries
    ]


def _runs_below(path: Path) -> list[str]:
    """The names of the run folders inside ``path`` (not through links), sorted."""
    try:
        names = sorted(e.name for e in os.scandir(path) if e.is_dir(follow_symlinks=False))
    except OSError:
        return []
    return [
        n
        for n in names
        if any((path / n / f).is_file() for f in ("results.jsonl", PLAN, "summary.json"))
    ]


# A run folder's own files that hold no results: named, each stands for its folder
# (`gradebox report run/summary.json` is the run, not a results file that does not parse).
_FOLDER_FILES = ("summary.json", PLAN)


def layout(path: Path) -> Layout | None:
    """What ``path`` holds, or None when it is no run (not yet, or not at all)."""
    path = Path(path)
    if path.name in _FOLDER_FILES and path.is_file() and real_folder(path.parent):
        path = path.parent
    if not real_folder(path):
        if path.is_file():  # a results.jsonl, or a `trials` / `batch` output, named
            return Layout(path, path.stem, [(None, path)], None, False)
        return None
    plan = _json(path / PLAN, PLAN_CAP)
    plan = plan if isinstance(plan, dict) and plan.get("gradebox_plan") else None
    folders = plan.get("folders") if plan else None
    name = path.resolve().name or str(path)
    if isinstance(folders, list):  # a run of several files, from its start
        entries, seen = [], set()
        for f in folders:  # a folder named twice is read once (the plan is no one's to trust)
            if isinstance(f, dict) and _plain(f.get("folder")) and f["folder"] not in seen:
                seen.add(f["folder"])
                suite, file = str(f.get("suite") or ""), str(f.get("file") or "")
                entries.append((f["folder"], suite, file, _ids(f.get("tests"))))
        labels = _labels([e[:3] for e in entries])
        return Layout(
            path,
            name,
            [
                (label, path / e[0] / "results.jsonl")
                for label, e in zip(labels, entries, strict=True)
            ],
            [f"{label}: {i}" for label, e in zip(labels, entries, strict=True) for i in e[3]],
            True,
        )
    # Whatever is under the name (a FIFO, a link: read later through the door, or refused).
    if os.path.lexists(path / "results.jsonl") or plan is not None:
        run_id = plan.get("run_id") if plan else None
        return Layout(
            path,
            name,
            [(None, path / "results.jsonl")],
            _ids(plan.get("tests")) if plan else None,
            False,
            run_id if isinstance(run_id, str) else None,
        )
    below = [n for n in _runs_below(path) if (path / n / "results.jsonl").is_file()]
    if below and (path / "summary.json").is_file():  # a run of several before plans were written
        entries = []
        for n in below:
            summary = _json(path / n / "summary.json", SUMMARY_CAP)
            suite = summary.get("suite") if isinstance(summary, dict) else None
            entries.append((n, suite if isinstance(suite, str) else "", n))
        labels = _labels(entries)
        return Layout(
            path,
            name,
            [(lb, path / n / "results.jsonl") for lb, n in zip(labels, below, strict=True)],
            None,
            True,
        )
    if os.path.lexists(path / "summary.json"):
        return Layout(path, name, [(None, path / "results.jsonl")], None, False)
    return None


def not_a_run(path: Path, command: str) -> ConfigError:
    """Why ``path`` is no run, and what to give ``command`` instead (the run folders inside
    it, when it holds some)."""
    below = _runs_below(Path(path)) if real_folder(Path(path)) else []
    if below:
        shown = ", ".join(below[:5]) + (", ..." if len(below) > 5 else "")
        return ConfigError(
            f"not a run folder, but it holds {len(below)} run folder(s): {shown}; give one, "
            f"e.g. `{command} {Path(path) / below[0]}`",
            file=str(path),
        )
    if not Path(path).exists():
        return ConfigError(
            f"no such run folder: check the path (`gradebox run SUITE --out {path}` writes one)",
            file=str(path),
        )
    return ConfigError(
        "not a run folder: no results.jsonl, plan.json or summary.json here; give the folder "
        "`gradebox run --out` wrote (or its results.jsonl)",
        file=str(path),
    )


def read_summary(path: Path) -> RunSummary | None:
    """A folder's ``summary.json``, or None when there is none (yet) or it does not read as
    one (being written: the next look has it)."""
    data = read_within(path / "summary.json", SUMMARY_CAP, follow=False)
    try:
        return RunSummary.model_validate_json(data) if data is not None else None
    except ValueError:
        return None


def relabelled(label: str | None, results: list[TestResult]) -> list[TestResult]:
    if label is None:
        return results
    return [r.model_copy(update={"id": f"{label}: {r.id}"}) for r in results]


def load_run(path: Path) -> Run:
    """A suite run (``gradebox.results``), a run of several suite files (one run, each
    file's ids labelled as ``gradebox run`` prints them), or a ``gradebox trials`` /
    ``batch`` output: its graded records, read through their model, one test per prompt id
    with a trial per record (``compare`` reads those outputs the same way)."""
    found = layout(path)
    path = found.path if found is not None else Path(path)  # a summary.json: its folder
    if found is not None and found.several:
        results: list[TestResult] = []
        for label, file in found.parts:
            if real_folder(file.parent) and file.is_file():
                results += relabelled(label, list(read_results(file).values()))
        return Run(found.name, path, read_summary(path), results, found.plan)
    if found is not None and real_folder(path) and not found.parts[0][1].is_file():
        # Stopped before its first result: its plan still says what it did not run.
        return Run(found.name, path, read_summary(path), [], found.plan)
    try:
        run = load_results(path)
        return Run(run.name, run.path, run.summary, run.results, found.plan if found else None)
    except ConfigError as suite_error:
        from ..drivers.batch import read_graded  # only for a trials / batch output

        file = results_file(path)
        try:
            graded = [g for _, g in sorted(read_graded(file).items())]
        except ConfigError:
            graded = []
        if not graded:
            if found is None:
                raise not_a_run(path, "gradebox report") from None
            raise suite_error from None
        return Run(file.stem, file.parent, None, _as_tests(graded))


def _as_tests(graded: list[GradedRecord]) -> list[TestResult]:
    groups: dict[str, list[GradedRecord]] = {}
    for g in graded:
        groups.setdefault(g.id, []).append(g)
    tests = []
    for key, runs in groups.items():
        best = max(runs, key=lambda g: (g.pass_, g.score))
        statuses = [g.status for g in runs]
        status = (  # as `repeat`'s default (pass_any): a pass passes, all errors are an error
            Status.passed
            if Status.passed in statuses
            else Status.error
            if all(s is Status.error for s in statuses)
            else Status.failed
        )
        asked = best.input if isinstance(best.input, list) else [best.input]
        tests.append(
            TestResult(
                id=key,
                status=status,
                passed=status is Status.passed,
                score=best.score,
                input=[Message(role="user", content=text) for text in asked],
                output=best.output,
                graders=[best.result],
                error=best.target_error,
                metadata=best.metadata or {},
                trials=[  # each trial's answer and verdict: a failing one can be opened
                    TrialRecord(
                        sample=i,
                        status=g.status,
                        score=g.score,
                        error=g.target_error,
                        output=g.output,
                        graders=[g.result],
                    )
                    for i, g in enumerate(runs)
                ]
                if len(runs) > 1
                else None,
            )
        )
    return tests


def write_report(dirs: list[Path], out: Path) -> Path:
    """Read each run and write one HTML file comparing the others with the first."""
    if not dirs:
        raise ConfigError("name at least one run folder")
    runs = [load_run(d) for d in dirs]
    write_atomic(out, page(page_data(runs), runs))
    return out
