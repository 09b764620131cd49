"""Calibration: a reproducible sample of verdicts in a Markdown sheet for a human to review,
optionally re-scored by another grader with the agreement rate of the two."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..errors import ConfigError
from ..protocol.models import Status
from .batch import read_graded
from .runner import read_results

__all__ = ["ReviewItem", "agreement", "load_review_items", "review_sheet", "sample"]


class ReviewItem(BaseModel):
    id: str
    line: int
    input: Any = None
    output: str | None = None
    hint: str | None = None
    passed: bool
    status: Status
    score: float
    reason: str = ""
    record: dict[str, Any] = {}


def load_review_items(path: Path) -> list[ReviewItem]:
    """Verdicts from a ``gradebox batch`` output or a ``gradebox run`` results.jsonl."""
    graded = read_graded(path)
    if graded:
        return [
            ReviewItem(
                id=g.id,
                line=n,
                input=g.input,
                output=g.output,
                hint=g.hint,
                passed=g.pass_,
                status=g.status,
                score=g.score,
                reason=g.reasoning,
                record=g.model_dump(
                    exclude={"result", "line", "status", "pass_", "score", "reasoning"}
                ),
            )
            for n, g in sorted(graded.items())
        ]
    items = []
    for n, r in enumerate(read_results(path).values(), 1):
        failing = [f"{g.name}: {g.evidence}" for g in r.graders if not g.passed]
        text = [m.content for m in r.input if isinstance(m.content, str)]
        prompt = text[0] if len(text) == 1 else text
        items.append(
            ReviewItem(
                id=r.id,
                line=n,
                input=prompt,
                output=r.output,
                passed=r.passed,
                status=r.status,
                score=r.score,
                reason=r.error or "; ".join(failing),
                record={"id": r.id, "input": prompt, "output": r.output or ""},
            )
        )
    if not items:
        raise ConfigError(
            "no graded records found (expected gradebox batch or run output)", file=str(path)
        )
    return items


def sample(
    items: list[ReviewItem], n: int, seed: int, include_passes: bool = False
) -> list[ReviewItem]:
    """Up to ``n`` failures (and ``n`` passes on request), the same for the same seed."""
    rng = random.Random(seed)
    failures = [i for i in items if not i.passed]
    picked = rng.sample(failures, min(n, len(failures)))
    if include_passes:
        passes = [i for i in items if i.passed]
        picked += rng.sample(passes, min(n, len(passes)))
    return sorted(picked, key=lambda i: i.line)


def _block(text: Any) -> str:
    body = text if isinstance(text, str) else json.dumps(text, indent=2, ensure_ascii=False)
    fence = "````" if "```" in (body or "") else "```"
    return f"{fence}\n{body or ''}\n{fence}"


def agreement(
    items: list[ReviewItem], second: dict[int, tuple[bool, float, str]]
) -> tuple[int, float]:
    """How many first verdicts the second grader agrees with, and the rate."""
    agree = sum(1 for i in items if second[i.line][0] == i.passed)
    return agree, (agree / len(items) if items else 0.0)


def review_sheet(
    items: list[ReviewItem],
    source: str,
    seed: int,
    second: dict[int, tuple[bool, float, str]] | None = None,
) -> str:
    """Markdown: one section per sampled record, verdicts side by side when re-scored."""
    lines = [f"# Calibration sheet: {source}", "", f"{len(items)} records, seed {seed}."]
    if second is not None:
        agree, rate = agreement(items, second)
        lines.append(f"Agreement with the second grader: {agree}/{len(items)} ({rate:.0%}).")
    lines.append("")
    for item in items:
        lines += [
            f"## {item.id} (line {item.line})",
            "",
            "**Input**",
            "",
            _block(item.input),
            "",
            "**Output**",
            "",
            _block(item.output),
        ]
        if item.hint:
            lines += ["", f"**Hint**: {item.hint}"]
        verdict = "PASS" if item.passed else item.status.value.upper()
        if second is None:
            lines += [
                "",
                f"**Verdict**: {verdict} (score {item.score:.2f})",
                f"**Reason**: {item.reason or '-'}",
            ]
        else:
            p2, s2, r2 = second[item.line]
            mark = "agree" if p2 == item.passed else "**DISAGREE**"
            lines += [
                "",
                "| | verdict | score | reason |",
                "|---|---|---|---|",
                f"| original | {verdict} | {item.score:.2f} | {_cell(item.reason)} |",
                f"| second | {'PASS' if p2 else 'FAIL'} | {s2:.2f} | {_cell(r2)} |",
                "",
                f"Graders {mark}.",
            ]
        lines += ["", "**Human verdict**: [ ] pass  [ ] fail — notes:", ""]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return (text or "-").replace("|", "\\|").replace("\n", " ")[:300]
