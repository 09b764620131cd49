"""Sweep an AgentV checkout: does every eval file load here as it is written?

    .venv/bin/python bench/agentv_sweep.py PATH [--quiet] [--swap NAME]

PATH is an AgentV checkout (its ``examples/`` is swept), any folder of eval files, or a
``.tar.gz`` of a checkout (unpacked to a temporary folder first). Eval files are found by
AgentV's own rule: ``suite.yaml``, ``eval.yaml`` and ``*.eval.yaml``, in any letter case,
``.yml`` too. Each is loaded and planned (``gradebox validate`` without the engine: images are
taken as they are named) from the example's folder, the parent of its ``evals/`` or
``suites/`` folder, as a user of that example would run it. One line per file:

    LOADS    <file>
    REFUSED  <file>  <feature>: <what to do instead>
    BROKEN   <file>  <why>

then a summary. With ``--swap NAME``, a file refused only for its target (an agent that cannot
run here: an SDK, a session-log reader) is loaded again as a user would run it, with
``--target NAME`` and ``--grader-target NAME``, and counted apart: ``LOADS ... (swapped:
...)``.

The same rule reads AgentV 5.x checkouts and v4's (v4.42.4's ``EVAL.yaml`` files included).

REFUSED is a refusal gradebox means (an ``UnsupportedFeature``, or a privilege
the file asks for that ``--allow`` must grant: one line naming the feature and the fix);
anything else that stops a file, a traceback included, is BROKEN. A file that loads may still
need what this machine lacks (``preflight``: model keys and endpoints, a coding agent's program
on an image): that is listed after it, as ``gradebox run`` would name it, and summed up.
Exit status 1 when a file is BROKEN.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import tarfile
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gradebox.core.yamlfile import load_yaml_file
from gradebox.errors import ConfigError, ConfigErrors, NotAllowed, UnsupportedFeature
from gradebox.formats.agentv import chosen_target
from gradebox.suite import Suite, load_suite
from gradebox.suite.plan import plan_suite
from gradebox.suite.preflight import preflight

_EVAL_NAME = re.compile(r"^(suite|eval)\.ya?ml$|\.eval\.ya?ml$", re.I)
_SKIP = {"node_modules", ".git"}


@dataclass
class Outcome:
    file: str
    kind: str  # LOADS, REFUSED, BROKEN
    why: str = ""
    feature: str = ""
    needs: tuple[str, ...] = ()
    swapped: str = ""


class _AnyImage:
    """Plans without an engine: every image is taken as named."""

    def resolve(self, ref: object, source_dir: Path | None = None) -> str:
        return f"sha256:{abs(hash(str(ref))):064x}"[:71]


def eval_files(root: Path) -> list[Path]:
    """AgentV's discovery rule, over ``root``."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP)
        found += [Path(folder) / f for f in sorted(files) if _EVAL_NAME.search(f)]
    return sorted(found)


def example_folder(path: Path) -> Path:
    """Where a user runs the example from: the parent of ``evals/`` or ``suites/``."""
    for parent in path.parents:
        if parent.name in ("evals", "suites"):
            return parent.parent
    return path.parent


@contextlib.contextmanager
def _cwd(folder: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def sweep_one(path: Path, root: Path) -> Outcome:
    rel = str(path.relative_to(root))
    try:
        with _cwd(example_folder(path)):
            suite = load_suite(path)
            plan_suite(suite, _AnyImage())  # type: ignore[arg-type]
        if any(t.semantics != "agentv" for t in suite.tests):
            return Outcome(rel, "BROKEN", "read as a gradebox suite, not as an AgentV eval file")
        return Outcome(rel, "LOADS", needs=_needs(suite))
    except ConfigError as exc:
        errors = exc.errors if isinstance(exc, ConfigErrors) else [exc]
        first = next((e for e in errors if not isinstance(e, UnsupportedFeature | NotAllowed)),
                     None)  # fmt: skip
        if first is None:
            refused = errors[0]
            feature = getattr(refused, "feature", "a privilege not allowed (--allow)")
            return Outcome(rel, "REFUSED", refused.message, feature)
        return Outcome(rel, "BROKEN", str(first).replace(str(root) + "/", ""))
    except Exception as exc:  # a traceback is always a bug of ours
        return Outcome(rel, "BROKEN", f"{type(exc).__name__}: {exc}")


# Refusals that are about the agent (or judge) only: another target would run the file.
_TARGET_ONLY = re.compile(
    r"provider as the judge$|^the \S+ provider$|^several targets|^a batching provider"
)


def swapped(path: Path, root: Path, outcome: Outcome, name: str) -> Outcome:
    """``outcome`` again with the target swapped (see the module docstring), when that is
    all that stopped it."""
    if outcome.kind != "REFUSED" or not _TARGET_ONLY.search(outcome.feature):
        return outcome
    target = name
    if outcome.feature.startswith("several targets"):
        data = load_yaml_file(path)[0]
        first = ((data.get("execution") or {}).get("targets") or [name])[0]
        target = first.get("name", name) if isinstance(first, dict) else str(first)
    with chosen_target(target, grader=name):
        again = sweep_one(path, root)
    if again.kind == "LOADS":
        again.swapped = f"--target {target} --grader-target {name}"
        return again
    return outcome


def _needs(suite: Suite) -> tuple[str, ...]:
    """What ``run`` would ask of this machine first: unset variables, programs, models."""
    try:
        preflight(suite)
    except ConfigError as exc:
        errors = exc.errors if isinstance(exc, ConfigErrors) else [exc]
        found: list[str] = []
        for e in errors:
            program = re.search(r"runs `([^`]+)`", e.message)
            names = re.findall(r"\$[A-Z_][A-Z0-9_]*", e.message)
            if program:
                found.append(f"`{program.group(1)}` on an image")
            elif names:
                found += names
            else:
                found.append("a model named nowhere")
        return tuple(dict.fromkeys(found))
    return ()


def sweep(root: Path, swap: str | None = None) -> list[Outcome]:
    if (root / "examples").is_dir() and (root / "packages").is_dir():
        root = root / "examples"
    base = root.parent if root.name == "examples" else root
    outcomes = []
    for path in eval_files(root):
        outcome = sweep_one(path, base)
        outcomes.append(swapped(path, base, outcome, swap) if swap else outcome)
    return outcomes


@contextlib.contextmanager
def checkout(path: Path) -> Iterator[Path]:
    """A folder as it is; a tarball unpacked into a temporary folder."""
    if path.is_dir():
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="agentv-sweep-") as tmp:
        with tarfile.open(path) as tar:
            tar.extractall(tmp, filter="data")
        tops = [p for p in Path(tmp).iterdir() if p.is_dir()]
        yield tops[0] if len(tops) == 1 else Path(tmp)


def report(outcomes: list[Outcome], verbose: bool = True) -> str:
    lines = []
    for o in outcomes:
        if verbose or o.kind != "LOADS":
            needs = f"  (needs {', '.join(o.needs)})" if o.needs else ""
            swap = f"  (swapped: {o.swapped})" if o.swapped else ""
            lines.append(f"{o.kind:8} {o.file}" + (f"  {o.why}" if o.why else "") + swap + needs)
    counts = Counter(o.kind for o in outcomes)
    features = Counter(o.feature for o in outcomes if o.kind == "REFUSED")
    swaps = sum(bool(o.swapped) for o in outcomes)
    lines.append(
        f"{len(outcomes)} eval files: {counts['LOADS']} load ({counts['LOADS'] - swaps} as "
        f"written, {swaps} with the target swapped), {counts['REFUSED']} refused, "
        f"{counts['BROKEN']} broken"
    )
    for feature, n in features.most_common():
        lines.append(f"  refused {n:3}  {feature}")
    loads = [o for o in outcomes if o.kind == "LOADS"]
    keys = sum(any(n.startswith("$") for n in o.needs) for o in loads)
    programs = sum(any("on an image" in n for n in o.needs) for o in loads)
    nowhere = sum("a model named nowhere" in o.needs for o in loads)
    lines.append(
        f"  of the {len(loads)} that load: {len(loads) - sum(bool(o.needs) for o in loads)} "
        f"run here as they are; {keys} need model variables set, {programs} a coding agent's "
        f"program on an image, {nowhere} a model their providers do not define"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="an AgentV checkout, a folder or a .tar.gz")
    parser.add_argument("--quiet", action="store_true", help="leave out the LOADS lines")
    parser.add_argument(
        "--swap", metavar="NAME", help="load files refused for their target again with this one"
    )
    args = parser.parse_args(argv)
    with checkout(args.path.resolve()) as root:
        outcomes = sweep(root, args.swap)
    print(report(outcomes, verbose=not args.quiet))
    return 1 if any(o.kind == "BROKEN" for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
