"""Every host-side read, walk or copy of files sits behind the door (``gradebox.core.untrusted``
and the modules that are the door for one kind of file), or in the ledger below, one line each,
saying whose bytes they are. A new ``open(``, ``read_bytes(``, ``copytree(`` or walk anywhere
else fails this test: put it behind the door, or, if gradebox itself wrote what it reads (its
own scratch, state or results), add it to the ledger with that reason.

Run ``python tests/unit/test_door.py`` to print the ledger as the source has it now.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "gradebox"

# The door: each module here is the one place for its kind of bytes, and holds the rules
# (regular files only, no link followed, owner checked, bounded).
DOOR = {
    "core.untrusted",  # files a suite, a grader pack, an agent or another user wrote
    "core.fstree",  # trees an agent wrote: walked, copied, removed by descriptor
    "core.private_cache",  # the user's own caches: ours alone, else a miss
    "core.atomic",  # what gradebox writes: whole or not at all
    "core.jsonl",  # results.jsonl: appended by us, read back bounded
    "core.yamlfile",  # the bounded YAML loader
}

# Calls that open, read, walk or copy files by path.
FUNCTIONS = {"open", "copytree", "copyfile", "copy2", "copy", "walk", "scandir", "listdir"}
METHODS = {
    "open", "read_bytes", "read_text", "iterdir", "glob", "rglob", "walk",
    "write_bytes", "write_text",
}  # fmt: skip
MODULES = {"os", "shutil", "io", "builtins", "Path", "pathlib"}


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    return "?"


def sites(root: Path = SRC) -> Counter[str]:
    """``module:function: call`` -> how many times, for every file call outside the door."""
    found: Counter[str] = Counter()
    for path in sorted(root.rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        if module in DOOR:
            continue
        tree = ast.parse(path.read_text(), str(path))
        stack: list[tuple[ast.AST, str]] = [(tree, "<module>")]
        while stack:
            node, where = stack.pop()
            for child in ast.iter_child_nodes(node):
                inner = where
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    inner = child.name if where == "<module>" else f"{where}.{child.name}"
                if isinstance(child, ast.Call):
                    call = _call(child.func)
                    if call:
                        found[f"{module}:{inner}: {call}"] += 1
                stack.append((child, inner))
    return found


def _call(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name) and func.id in FUNCTIONS and func.id != "copy":
        return f"{func.id}("
    if isinstance(func, ast.Attribute):
        owner = _name(func.value)
        if owner.split(".")[-1] == "untrusted":  # the door itself
            return None
        if owner in MODULES and func.attr in FUNCTIONS:
            return f"{owner}.{func.attr}("
        if func.attr in METHODS and owner not in MODULES and owner not in {"self.sel", "sel"}:
            return f".{func.attr}("
    return None


LEDGER_FILE = Path(__file__).with_name("door_ledger.txt")


def ledger() -> Counter[str]:
    out: Counter[str] = Counter()
    for line in LEDGER_FILE.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        entry = line.split("  # ", 1)[0]  # then the reason: whose bytes they are
        site, _, count = entry.rpartition(" x")
        out[site.strip()] = int(count)
    return out


def test_no_file_is_read_outside_the_door_that_is_not_in_the_ledger():
    now, known = sites(), ledger()
    new = {s: n for s, n in now.items() if n > known.get(s, 0)}
    assert new == {}, (
        "files opened, read, walked or copied outside gradebox.core.untrusted and the door "
        "modules: "
        "use the door, or add the line to tests/unit/door_ledger.txt saying whose bytes "
        f"they are: {new}"
    )


def test_the_ledger_holds_nothing_that_is_gone():
    now, known = sites(), ledger()
    gone = {s: n for s, n in known.items() if now.get(s, 0) < n}
    assert gone == {}, f"tests/unit/door_ledger.txt lists calls no longer there: {gone}"


def test_the_walker_finds_a_new_open(tmp_path):
    """The walker is the test: a module that opens a file outside the door is found."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "leaky.py").write_text(
        "import os, shutil\nfrom pathlib import Path\n"
        "def f(p):\n    open(p)\n    Path(p).read_bytes()\n    shutil.copytree(p, p)\n"
        "    os.open(p, 0)\n"
    )
    (pkg / "core").mkdir()
    (pkg / "core" / "untrusted.py").write_text("def g(p):\n    open(p)\n")
    assert sites(pkg) == Counter(
        {"leaky:f: open(": 1, "leaky:f: .read_bytes(": 1, "leaky:f: shutil.copytree(": 1,
         "leaky:f: os.open(": 1}
    )  # fmt: skip


if __name__ == "__main__":
    for site, n in sorted(sites(Path(sys.argv[1]) if len(sys.argv) > 1 else SRC).items()):
        print(f"{site} x{n}")
