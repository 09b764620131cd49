"""The package's import graph, computed from its source: floors that are only ever imported
downwards, no circles, no private name taken across a package boundary, and the engine (the
Docker SDK's one edge) reached only from below ``sandbox/``.

Every import counts: at module level, inside functions (a lazy import is still a dependency),
and under ``if TYPE_CHECKING:`` (a type hint that names an upper floor is still a design that
runs back up). Run ``python tests/unit/test_layers.py [ROOT]`` for the numbers.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "gradebox"

# From the bottom up. A module may import its own floor or any floor below, never one above.
# A module is on the floor of the longest name listed that is it or one of its packages.
FLOORS: list[tuple[str, list[str]]] = [
    (
        "base",
        [
            "_version",
            "_types",
            "_duration",
            "_bytes",
            "_log",
            "_record",
            "errors",
            "_yaml",
            "_pathnames",
            "_programs",  # which(), without shutil (its bz2 and lzma) on exec's path
            "jsonl",
            "atomic",
            "results",  # a run read back: the one reader of results.jsonl and summary.json
            "untrusted",  # the door for bytes others wrote: regular files, owners, bounds
            "fstree",
            "scratch",  # scratch names and their sweep: below images (a build's scratch)
            "gitignore",
            "json_bounds",  # the protocol's JSON readers, free of pydantic (grade's lean path)
            "wire",  # the protocol's formats by hand, each held to its model
            "private_cache",  # the user's own cache folder: what only the user can write
            "protocol",
            "sdk",
            "verify",
            "subids",
            "provenance",  # who wrote an input: every loader of configuration names it
            "settings",  # every environment default, read once (exec reads it: stdlib only)
        ],
    ),  # fmt: skip
    ("engine", ["engine"]),  # the Docker SDK's one edge (images and the docker backend use it)
    ("images", ["images"]),
    ("files", ["baseline", "workspace"]),  # host folders: walks, copies, quotas
    ("sandbox", ["sandbox"]),
    ("models", ["llm"]),  # targets, the client and its cache, the grader-facing proxy
    ("graders", ["graders"]),  # one grader: config, container, verdict, verifiers, builtins
    ("assertions", ["llm.grader", "graders.assertion"]),
    ("suite", ["formats", "suite", "host_targets", "steps", "plan", "preflight"]),
    ("lifecycle", ["pool", "lifecycle", "llm.runtime", "conversation", "repeat", "jobs"]),
    ("executor", ["executor"]),  # the seam: jobs in, results out, wherever they run
    ("drivers", ["runner", "batch", "trials", "calibrate"]),
    ("cluster", ["cluster"]),  # an executor on Ray: plugs into the seam from above
    ("output", ["report", "compare", "schemas", "doctor", "cli", "__main__", ""]),
]

ENGINE = "sandbox._engine"  # historical home of the engine: a re-export for sandbox/ only
# `gradebox images` is a front end to the engine's own image store: it hands the engine to
# images/ (build, lock, save, load); `gradebox doctor` asks the engine what it is and hands it
# to images/ (status, verify) the same way. Nothing else above sandbox/ reaches the engine.
ENGINE_FRONT_ENDS = {"cli.images", "doctor"}


def modules(src: Path = SRC) -> dict[str, tuple[Path, bool]]:
    """Dotted name under ``gradebox`` ("" for the package itself) -> (file, is a package)."""
    out = {}
    for path in sorted(src.rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        package = parts[-1] == "__init__"
        if package:
            parts = parts[:-1]
        out[".".join(parts)] = (path, package)
    return out


def imports(src: Path = SRC) -> list[tuple[str, str, list[str]]]:
    """``(importer, imported module, names taken from it)`` for every import of the package."""
    mods = modules(src)
    out = []
    for name, (path, package) in mods.items():
        here = ["gradebox", *name.split(".")] if name else ["gradebox"]
        if not package:
            here = here[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("gradebox."):
                        out.append((name, _known(alias.name[9:], mods), []))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here[: len(here) - node.level + 1] + (node.module or "").split(".")
                    dotted = ".".join(p for p in base if p)
                else:
                    dotted = node.module or ""
                if dotted != "gradebox" and not dotted.startswith("gradebox."):
                    continue
                target = dotted[9:]
                for alias in node.names:  # `from . import oci` imports the module oci
                    sub = f"{target}.{alias.name}" if target else alias.name
                    if sub in mods:
                        out.append((name, sub, []))
                    else:
                        out.append((name, _known(target, mods), [alias.name]))
    return [(a, b, n) for a, b, n in out if b is not None and a != b]


def _known(dotted: str, mods: dict[str, tuple[Path, bool]]) -> str:
    while dotted not in mods and "." in dotted:
        dotted = dotted.rsplit(".", 1)[0]
    return dotted if dotted in mods else ""


def floor_of(module: str) -> int:
    best, where = -1, -1
    for i, (_, prefixes) in enumerate(FLOORS):
        for p in prefixes:
            if (p == "" or module == p or module.startswith(p + ".")) and len(p) > best:
                best, where = len(p), i
    return where


def cycles(edges: list[tuple[str, str, list[str]]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {}
    for a, b, _ in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    group = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        group.append(w)
                        if w == v:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
    return found


def upward(edges: list[tuple[str, str, list[str]]]) -> list[str]:
    return sorted({f"{a} -> {b}" for a, b, _ in edges if floor_of(b) > floor_of(a)})


def _package(module: str, mods: dict[str, tuple[Path, bool]]) -> str:
    return module if mods.get(module, (None, False))[1] else module.rpartition(".")[0]


def private_crossings(edges: list[tuple[str, str, list[str]]], src: Path = SRC) -> list[str]:
    """A ``_name`` belongs to the package whose folder holds it: a private module to that
    package and the packages inside it; a private name of a module to that module's own
    package (its siblings), never to another package."""
    mods = modules(src)
    out = set()
    for a, b, names in edges:
        where = _package(a, mods)
        parts = b.split(".") if b else []
        for i, part in enumerate(parts):
            if part.startswith("_") and not part.startswith("__"):
                owner = ".".join(parts[:i])
                if not (where == owner or where.startswith(owner + ".") or owner == ""):
                    out.add(f"{a} -> {b}")
        for n in names:
            if n.startswith("_") and not n.startswith("__") and where != _package(b, mods):
                out.add(f"{a} -> {b}.{n}")
    return sorted(out)


def engine_users(edges: list[tuple[str, str, list[str]]]) -> list[str]:
    sandbox = floor_of("sandbox")
    bad = {a for a, b, _ in edges if b in (ENGINE, "engine") and floor_of(a) > sandbox}
    bad -= ENGINE_FRONT_ENDS
    bad |= {a for a, b, _ in edges if b == ENGINE and not a.startswith("sandbox")}
    return sorted(bad)


def biggest(src: Path = SRC, n: int = 8) -> list[tuple[str, int]]:
    sizes = [(m or "gradebox", len(p.read_text().splitlines())) for m, (p, _) in
             modules(src).items()]  # fmt: skip
    return sorted(sizes, key=lambda s: -s[1])[:n]


# --- the tests -------------------------------------------------------------------------


def test_every_module_has_a_floor():
    assert [m for m in modules() if floor_of(m) < 0] == []


def test_no_import_circles():
    assert cycles(imports()) == []


def test_no_import_runs_up_a_floor():
    assert upward(imports()) == []


def test_no_private_name_crosses_a_package_boundary():
    assert private_crossings(imports()) == []


def test_nothing_above_sandbox_touches_the_engine():
    assert engine_users(imports()) == []


def test_the_runner_is_small():
    assert dict(biggest(n=200))["runner"] <= 400


def test_the_checks_can_fail(tmp_path):
    """A circle, an upward import and a private crossing planted in a copy are each found."""
    pkg = tmp_path / "gradebox"
    for name, text in {
        "__init__.py": "",
        "errors.py": "from .protocol import X\n",  # base -> base, and a circle below
        "protocol.py": "from .errors import Y\n",
        "suite.py": "def f():\n    from .runner import run_suite\n",  # lazy, and up
        "runner.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from .cluster.node import Job\n",
        "cluster/__init__.py": "",
        "cluster/node.py": "from ..sandbox._engine import Engine\nfrom ..runner import _Run\n",
        "sandbox/__init__.py": "",
        "sandbox/_engine.py": "",
    }.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    edges = imports(pkg)
    assert sorted(cycles(edges)) == [["cluster.node", "runner"], ["errors", "protocol"]]
    assert upward(edges) == ["runner -> cluster.node", "suite -> runner"]
    assert private_crossings(edges, pkg) == [
        "cluster.node -> runner._Run", "cluster.node -> sandbox._engine"
    ]  # fmt: skip
    assert engine_users(edges) == ["cluster.node"]


if __name__ == "__main__":  # the numbers, for a note: python tests/unit/test_layers.py [ROOT]
    src = Path(sys.argv[1]) / "src" / "gradebox" if len(sys.argv) > 1 else SRC
    edges = imports(src)
    print(f"modules: {len(modules(src))}, imports: {len(edges)}")
    print(f"circles: {len(cycles(edges))}")
    for c in cycles(edges):
        print("   ", " / ".join(c))
    print(f"upward imports: {len(upward(edges))}")
    for u in upward(edges):
        print("   ", u)
    print(f"private names across packages: {len(private_crossings(edges, src))}")
    for p in private_crossings(edges, src):
        print("   ", p)
    print(f"above sandbox/ using the engine: {engine_users(edges)}")
    print("biggest:", ", ".join(f"{m} {n}" for m, n in biggest(src)))
