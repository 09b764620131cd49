"""The package's import graph, computed from its source, held to the rule each floor's folder
states in its ``__init__`` ("May import: ..."): the top level holds only folders and
``__init__``, ``__main__``, ``errors`` and the version; every import across folders is one the
importer's rule allows; the rules run one way (no folder may import one that may import it);
no circles between modules; no private name taken across a package boundary; and the code
that runs inside the images (``sdk``) is imported by nothing else. No carve-outs: a new need
is a change of a folder's rule, said in that folder.

Every import counts: at module level, inside functions (a lazy import is still a dependency),
and under ``if TYPE_CHECKING:`` (a type hint that names an upper floor is still a design that
runs back up). Run ``python tests/unit/test_layers.py [ROOT]`` for the numbers.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "gradebox"

# What the top level may hold besides folders: everyone may import errors and the version.
TOP_FILES = {"__init__", "__main__", "errors", "_version"}
EVERYONE = {"errors", "_version"}
RULE = re.compile(r"May import: (.*?)\.?\s*$", re.S)


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


def unit(module: str) -> str:
    """The top-level folder (or top-level module) a module belongs to: "" is the package."""
    return module.split(".")[0] if module else ""


def rules(src: Path = SRC) -> dict[str, set[str] | None]:
    """Unit -> what its rule says it may import (None: no rule stated)."""
    out: dict[str, set[str] | None] = {}
    for unit_name in [""] + sorted(p.name for p in src.iterdir() if (p / "__init__.py").is_file()):
        path = src / unit_name / "__init__.py" if unit_name else src / "__init__.py"
        out[unit_name] = _rule(path)
    main = src / "__main__.py"
    if main.is_file():
        out["__main__"] = _rule(main)
    for name in EVERYONE:
        out[name] = set()
    return out


def _rule(path: Path) -> set[str] | None:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    paragraph = doc.split("\n\n")[-1]
    found = RULE.match(paragraph.strip())
    if not found:
        return None
    said = " ".join(found.group(1).split())
    if said.startswith("nothing"):
        return set()
    return {n.strip().strip("`") for n in said.split(",")}


def stray_top_level(src: Path = SRC) -> list[str]:
    return sorted(p.name for p in src.iterdir() if p.suffix == ".py" and p.stem not in TOP_FILES)


def unruled(src: Path = SRC) -> list[str]:
    return sorted(u or "gradebox" for u, r in rules(src).items() if r is None)


def unknown_in_rules(src: Path = SRC) -> list[str]:
    rs = rules(src)
    return sorted(f"{u or 'gradebox'}: {n}" for u, r in rs.items() for n in r or () if n not in rs)


def disallowed(edges: list[tuple[str, str, list[str]]], src: Path = SRC) -> list[str]:
    """Imports across units that the importer's rule does not allow."""
    rs = rules(src)
    bad = set()
    for a, b, _ in edges:
        ua, ub = unit(a), unit(b)
        if ua == ub or ub in EVERYONE:
            continue
        if ub not in (rs.get(ua) or set()):
            bad.add(f"{a} -> {b}")
    return sorted(bad)


def rule_cycles(src: Path = SRC) -> list[list[str]]:
    """Folders that may import each other, through any chain: the rules must run one way."""
    edges = [(u, n, []) for u, r in rules(src).items() for n in r or ()]
    return cycles(edges)


def imported_sdk(edges: list[tuple[str, str, list[str]]], src: Path = SRC) -> list[str]:
    said = sorted(u or "gradebox" for u, r in rules(src).items() if "sdk" in (r or ()))
    used = sorted({f"{a} -> {b}" for a, b, _ in edges if unit(b) == "sdk" and unit(a) != "sdk"})
    return said + used


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


def biggest(src: Path = SRC, n: int = 8) -> list[tuple[str, int]]:
    sizes = [(m or "gradebox", len(p.read_text().splitlines())) for m, (p, _) in
             modules(src).items()]  # fmt: skip
    return sorted(sizes, key=lambda s: -s[1])[:n]


# --- the tests -------------------------------------------------------------------------


def test_the_top_level_holds_folders():
    assert stray_top_level() == []


def test_every_folder_states_its_rule():
    assert unruled() == []
    assert unknown_in_rules() == []


def test_every_import_is_one_its_folder_allows():
    assert disallowed(imports()) == []


def test_the_rules_run_one_way():
    assert rule_cycles() == []


def test_no_import_circles():
    assert cycles(imports()) == []


def test_no_private_name_crosses_a_package_boundary():
    assert private_crossings(imports()) == []


def test_nothing_imports_the_code_that_runs_inside_images():
    assert imported_sdk(imports()) == []


def test_the_runner_is_small():
    assert dict(biggest(n=500))["drivers.runner"] <= 400


def test_the_checks_can_fail(tmp_path):
    """A stray module, a missing rule, a disallowed import, rules that run both ways, a
    circle, a private crossing and an import of the sdk, planted in a copy, are each found."""
    pkg = tmp_path / "gradebox"
    files = {
        "__init__.py": '"""May import: core."""\n',
        "errors.py": "",
        "stray.py": "",
        "core/__init__.py": '"""Low.\n\nMay import: nothing."""\n',
        "core/a.py": "from .b import X\n",  # a circle inside a folder
        "core/b.py": "from .a import Y\nfrom ..errors import E\n",
        "core/_hidden.py": "",
        "suite/__init__.py": '"""May import: core, lifecycle."""\n',
        "suite/s.py": "def f():\n    from ..lifecycle.run import go\n",  # allowed, but see below
        "lifecycle/__init__.py": '"""May import: core, suite."""\n',  # both ways
        "lifecycle/run.py": "from ..core._hidden import Z\nfrom ..sdk import grader\n",
        "cli/__init__.py": '"""No rule here."""\n',
        "cli/app.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from ..core.a import X\n",
        "sdk/__init__.py": '"""May import: nothing."""\n',
    }
    for name, text in files.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    edges = imports(pkg)
    assert stray_top_level(pkg) == ["stray.py"]
    assert unruled(pkg) == ["cli"]
    assert disallowed(edges, pkg) == ["cli.app -> core.a", "lifecycle.run -> sdk"]
    assert rule_cycles(pkg) == [["lifecycle", "suite"]]
    assert cycles(edges) == [["core.a", "core.b"]]
    assert private_crossings(edges, pkg) == ["lifecycle.run -> core._hidden"]
    assert imported_sdk(edges, pkg) == ["lifecycle.run -> sdk"]


if __name__ == "__main__":  # the numbers, for a note: python tests/unit/test_layers.py [ROOT]
    src = Path(sys.argv[1]) / "src" / "gradebox" if len(sys.argv) > 1 else SRC
    edges = imports(src)
    print(f"modules: {len(modules(src))}, imports: {len(edges)}")
    for u, r in rules(src).items():
        print(f"  {u or 'gradebox'}: {', '.join(sorted(r)) if r else '-'}")
    for name, found in [
        ("top-level files", stray_top_level(src)),
        ("folders with no rule", unruled(src)),
        ("imports a rule does not allow", disallowed(edges, src)),
        ("rules that run both ways", rule_cycles(src)),
        ("circles", cycles(edges)),
        ("private names across packages", private_crossings(edges, src)),
        ("the sdk imported", imported_sdk(edges, src)),
    ]:
        print(f"{name}: {len(found)}")
        for f in found:
            print("   ", f)
    print("biggest:", ", ".join(f"{m} {n}" for m, n in biggest(src)))
