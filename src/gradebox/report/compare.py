"""Two runs compared: which tests flipped, how pass rate and mean score moved (with seeded
bootstrap confidence intervals), whether the flips are more than chance (an exact McNemar
test), and how each grader moved. Pure logic: it reads result files and runs nothing.

Example::

    report = compare_runs(load_run("runs/main"), load_run("runs/pr-42"), seed=0)
    print(report.p_value, report.significantly_worse(0.05))
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Collection, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..protocol.models import TestResult
from ..protocol.results import read_results, results_file

__all__ = [
    "CompareReport",
    "Outcome",
    "compare_runs",
    "load_run",
    "markdown",
    "mcnemar_exact",
    "outcomes",
    "unrelated",
]


@dataclass
class Outcome:
    passed: bool
    score: float
    graders: dict[str, bool] = field(default_factory=dict)


def outcomes(results: Iterable[TestResult]) -> dict[str, Outcome]:
    """A suite run's outcomes by test id (a later result for the same id wins)."""
    return {
        r.id: Outcome(r.passed, r.score, {g.name: g.passed for g in r.graders}) for r in results
    }


def load_run(path: Path) -> dict[str, Outcome]:
    """A run's outcomes by test id: a ``results.jsonl`` (or the run folder holding one) or a
    ``batch`` output, read through the models every other output reads them with. A later
    line for the same id wins."""
    file = results_file(path)
    if not file.is_file():
        raise ConfigError("cannot read: no such file", file=str(file))
    try:
        out = outcomes(read_results(file).values())
    except ConfigError as suite_error:
        from ..drivers.batch import read_graded  # a batch output: one inline grader per record

        try:
            graded = read_graded(file).values()
        except ConfigError:
            raise suite_error from None
        out = {
            g.id: Outcome(g.pass_, g.score, {g.result.name: g.pass_} if g.result.name else {})
            for g in graded
        }
    if not out:
        raise ConfigError("no results in this file", file=str(file))
    return out


# Runs that share fewer than this part of their tests (of the ids either ran) are not one
# suite run twice: a comparison of the few they share says little about either, and the
# figures beside it read as if it said much. (A `--filter`ed rerun of a tenth of a suite is
# warned about too, rightly: its figures are of that tenth.)
SHARED_AT_LEAST = 0.5


def unrelated(
    name_a: str,
    ids_a: Collection[str],
    suite_a: str | None,
    name_b: str,
    ids_b: Collection[str],
    suite_b: str | None,
) -> str | None:
    """Why runs A and B may not be worth comparing, as one sentence naming them, or None:
    they share fewer than half of their test ids, or their summaries name different suites
    (names, not paths: the same suite sits at other paths on other machines and branches).
    A run whose suite is unknown (no summary yet, a bare results file) is judged by its ids.
    The page (``report.html``) and ``gradebox compare`` both ask here."""
    a, b = set(ids_a), set(ids_b)
    shared, union = len(a & b), len(a | b)
    reasons = []
    if suite_a and suite_b and suite_a != suite_b:
        reasons.append(f"ran different suites ({suite_a!r} and {suite_b!r})")
    if union and shared < SHARED_AT_LEAST * union:
        reasons.append(
            f"share {'only ' + str(shared) if shared else 'none'} of their {union} tests"
        )
    if not reasons:
        return None
    covers = (
        f"the comparison covers only the {shared} test{'s' if shared != 1 else ''} both ran"
        if shared
        else "there is nothing to compare"
    )
    return f"{name_a} and {name_b} look unrelated: they {' and '.join(reasons)}; {covers}."


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for ``b`` flips one way and ``c`` the other: the
    binomial test of min(b, c) out of b + c at p = 1/2."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


@dataclass
class GraderDelta:
    name: str
    tests: int
    pass_rate_a: float
    pass_rate_b: float

    @property
    def delta(self) -> float:
        return self.pass_rate_b - self.pass_rate_a


@dataclass
class CompareReport:
    tests: int
    only_in_a: list[str]
    only_in_b: list[str]
    pass_rate_a: float
    pass_rate_b: float
    mean_score_a: float
    mean_score_b: float
    pass_rate_ci: tuple[float, float]
    mean_score_ci: tuple[float, float]
    regressions: list[str]  # passed in A, not in B
    fixes: list[str]  # not in A, passed in B
    p_value: float
    confidence: float
    resamples: int
    seed: int
    graders: list[GraderDelta]

    @property
    def pass_rate_delta(self) -> float:
        return self.pass_rate_b - self.pass_rate_a

    @property
    def mean_score_delta(self) -> float:
        return self.mean_score_b - self.mean_score_a

    def significantly_worse(self, alpha: float) -> bool:
        """More pass->fail than fail->pass flips, beyond chance at ``alpha``."""
        return len(self.regressions) > len(self.fixes) and self.p_value < alpha

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["pass_rate_delta"] = self.pass_rate_delta
        data["mean_score_delta"] = self.mean_score_delta
        data["graders"] = [{**asdict(g), "delta": g.delta} for g in self.graders]
        return data


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))
    return ordered[index]


def compare_runs(
    a: dict[str, Outcome],
    b: dict[str, Outcome],
    *,
    seed: int = 0,
    resamples: int = 2000,
    confidence: float = 0.95,
) -> CompareReport:
    """Compare the tests both runs have (paired by id)."""
    common = sorted(set(a) & set(b))
    if not common:
        raise ConfigError("the two runs have no test id in common")
    pa = [a[k].passed for k in common]
    pb = [b[k].passed for k in common]
    sa = [a[k].score for k in common]
    sb = [b[k].score for k in common]
    n = len(common)
    regressions = [k for k in common if a[k].passed and not b[k].passed]
    fixes = [k for k in common if not a[k].passed and b[k].passed]
    rng = random.Random(seed)
    d_pass, d_score = [], []
    for _ in range(resamples):
        idx = [rng.randrange(n) for _ in range(n)]
        d_pass.append(sum(pb[i] - pa[i] for i in idx) / n)
        d_score.append(sum(sb[i] - sa[i] for i in idx) / n)
    low, high = (1 - confidence) / 2, 1 - (1 - confidence) / 2
    graders = []
    names = sorted(
        {g for k in common for g in a[k].graders} & {g for k in common for g in b[k].graders}
    )
    for name in names:
        both = [k for k in common if name in a[k].graders and name in b[k].graders]
        graders.append(
            GraderDelta(
                name,
                len(both),
                sum(a[k].graders[name] for k in both) / len(both),
                sum(b[k].graders[name] for k in both) / len(both),
            )
        )
    return CompareReport(
        tests=n,
        only_in_a=sorted(set(a) - set(b)),
        only_in_b=sorted(set(b) - set(a)),
        pass_rate_a=sum(pa) / n,
        pass_rate_b=sum(pb) / n,
        mean_score_a=sum(sa) / n,
        mean_score_b=sum(sb) / n,
        pass_rate_ci=(_percentile(d_pass, low), _percentile(d_pass, high)),
        mean_score_ci=(_percentile(d_score, low), _percentile(d_score, high)),
        regressions=regressions,
        fixes=fixes,
        p_value=mcnemar_exact(len(regressions), len(fixes)),
        confidence=confidence,
        resamples=resamples,
        seed=seed,
        graders=graders,
    )


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} pp" if x else "±0 pp"


# Markdown's own characters in text a run wrote (a suite name, a grader name): escaped, so a
# pull-request comment draws no image, link, bold, HTML or table cell of theirs (`_`, whose
# emphasis is cosmetic, stays as it is: paths and ids are full of it).
_MD_SPECIAL = re.compile(r"([\\`*\[\]<>|&!])")


def _md(text: str) -> str:
    """Untrusted text, shown as written in Markdown (on one line)."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(text.splitlines()))


def _code(text: str) -> str:
    """Untrusted text as a code span: fenced by more backticks than it holds in a row (a
    single backtick ended the span, and what followed was Markdown)."""
    text = " ".join(text.splitlines())
    fence = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def markdown(
    report: CompareReport,
    name_a: str = "A",
    name_b: str = "B",
    alpha: float = 0.05,
    warning: str | None = None,
) -> str:
    """A report for a pull-request comment (``warning``: ``unrelated``'s, quoted on top)."""
    r = report
    level = int(r.confidence * 100)
    verdict = (
        f"**B is significantly worse** (McNemar p = {r.p_value:.4f} < {alpha})"
        if r.significantly_worse(alpha)
        else f"No significant regression (McNemar p = {r.p_value:.4f})"
    )
    lines = [
        f"### gradebox compare: {_code(name_a)} → {_code(name_b)}",
        "",
        *([f"> **Warning:** {_md(warning)}", ""] if warning else []),
        verdict,
        "",
        "| | A | B | Δ | " + f"{level}% CI |",
        "|---|---|---|---|---|",
        f"| pass rate | {r.pass_rate_a:.1%} | {r.pass_rate_b:.1%} | {_pct(r.pass_rate_delta)} "
        f"| [{r.pass_rate_ci[0] * 100:+.1f}, {r.pass_rate_ci[1] * 100:+.1f}] pp |",
        f"| mean score | {r.mean_score_a:.3f} | {r.mean_score_b:.3f} | "
        f"{r.mean_score_delta:+.3f} | [{r.mean_score_ci[0]:+.3f}, {r.mean_score_ci[1]:+.3f}] |",
        "",
        f"{r.tests} tests compared; {len(r.regressions)} pass→fail, {len(r.fixes)} fail→pass.",
    ]
    if r.regressions:
        lines += ["", "**pass → fail:** " + ", ".join(map(_code, r.regressions[:50]))]
    if r.fixes:
        lines += ["", "**fail → pass:** " + ", ".join(map(_code, r.fixes[:50]))]
    if r.graders:
        lines += ["", "| grader | tests | A | B | Δ |", "|---|---|---|---|---|"]
        lines += [
            f"| {_md(g.name)} | {g.tests} | {g.pass_rate_a:.1%} | {g.pass_rate_b:.1%} | "
            f"{_pct(g.delta)} |"
            for g in r.graders
        ]
    if r.only_in_a or r.only_in_b:
        lines += ["", f"Only in A: {len(r.only_in_a)}; only in B: {len(r.only_in_b)}."]
    lines += ["", f"<sub>bootstrap: {r.resamples} resamples, seed {r.seed}</sub>", ""]
    return "\n".join(lines)
