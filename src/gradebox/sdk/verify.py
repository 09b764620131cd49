"""The verifier runner: run hidden test files (pytest, or ``node --test``) against an agent's
workspace so that nothing the agent wrote runs unless a verifier test imports it by name, and
report what the tests did on a channel the agent's code cannot write. Standard library only;
it runs *inside* the grader's container (``python3 -I -m gradebox.verify``, in the python and
the node image), on a private writable copy of the workspace, after the agent has finished.

The runner itself is agent-free: ``-I`` keeps the workspace (its working directory) off
``sys.path`` and ignores ``PYTHON*`` variables, and it makes itself undumpable first, so no
process of the agent's can read or write its memory or open its file descriptors.

What an agent can plant to make a naive ``pytest`` pass a failing solution, and what is done
about each here:

- a ``conftest.py`` it created or changed: removed unless its bytes are those of a conftest in
  the template or the verifier folder;
- ``pytest.ini``, ``pyproject.toml``, ``tox.ini``, ``setup.cfg`` options: never read (pytest
  gets ``-c`` our own ini); ``PYTEST_ADDOPTS``, ``PYTEST_PLUGINS`` are dropped;
- modules named like the standard library or pytest's (``statistics.py``, ``json.py``,
  ``pytest.py``, ``_pytest/``), ``sitecustomize.py``, ``.pth`` files: pytest runs isolated
  (``-I``) and the workspace goes on ``sys.path`` *after* the standard library and the
  installed packages (this module, loaded as a pytest plugin, appends it), so no import of
  pytest's or of a verifier finds them; ``pytest.py`` and friends are removed all the same;
- ``__init__.py`` files along the verifier's destination: pytest imports test files and
  conftests by path (``--import-mode=importlib``), collects no package ``__init__.py`` and
  finds the destination's parent packages already registered (empty), so none runs;
- bytecode: every ``__pycache__`` and ``.pyc`` in the workspace is removed before pytest
  starts, and nothing writes one during the run (``-B``), so a planted cache never stands in
  for a source.

Every such file the agent touched is reported (``tampered``). The verifier files are copied in
last, over anything of the same name.

The report: pytest writes its JUnit XML, and node (through ``verify-reporter.mjs``, our
reporter, which runs in node's test-runner process, never in a test file's) writes one JSON
line per finished test, into a pipe that only the test runner's own process holds. When the
run is over, every other process in the container is killed, and only then the runner prints
its one JSON line (the last line of stdout): ``{"runner", "exit_code", "report",
"truncated", "declared", "files", "tampered", "output"}``. ``declared`` lists the tests the
verifier files declare, read from their source before any agent code runs, so the host can
tell a test that never reported.

What is left: the code a verifier test imports by name runs inside the test process (pytest's
process, or node's process for that test file), as the same user. It can do whatever that
process can, including change what the test framework reports. The README says so.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import types
from pathlib import Path

__all__ = ["declared_node_tests", "declared_pytest_tests", "main"]

CONFIG_FILES = ("pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
SHADOWS = ("pytest.py", "py.py", "sitecustomize.py", "usercustomize.py", "_pytest", "pluggy")
INI = """[pytest]
addopts =
python_files = *.py
"""
NODE_REPORTER = "/usr/local/lib/gradebox/verify-reporter.mjs"
MAX_REPORT = 16 << 20  # bytes of JUnit XML or JSON lines read back; more is a truncated report
OUTPUT_TAIL = 64 << 10  # bytes of the test run's own output passed on to stderr
# Environment variables the test run never sees: options and plugins the grader's env (or a
# process of the agent's that wrote a file we would read) could slip in.
DROPPED_ENV = ("PYTHONPATH", "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONSTARTUP", "NODE_OPTIONS")
# Where the pytest plugin half of this module finds what the runner half decided.
PLUGIN_ENV = "GRADEBOX_VERIFY_PATHS"
# Inits that stand as PID 1 in our containers (docker's, and the oci backend's bound tini).
INITS = ("docker-init", "gradebox-init", "tini")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _walk(root: Path):
    """Every entry under ``root``, no link followed."""
    stack = [root]
    while stack:
        here = stack.pop()
        try:
            entries = list(os.scandir(here))
        except OSError:
            continue
        for entry in entries:
            yield Path(entry.path), entry
            if entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def neutralise(workspace: Path, allowed: set[str], template: dict[str, str]) -> list[str]:
    """Remove what could change the verifier's run; return what the agent touched."""
    tampered = []
    for path, entry in list(_walk(workspace)):
        rel = path.relative_to(workspace).as_posix()
        name = entry.name
        is_file = entry.is_file(follow_symlinks=False)
        if name == "__pycache__" or name.endswith((".pyc", ".pyo")):
            if path.parent.name != "__pycache__" and name != "__pycache__":
                tampered.append(f"{rel}: bytecode without its source (removed)")
            _remove(path)  # sources are what runs; caches live under a private prefix
        elif name == "conftest.py":
            if not is_file or _sha(path) not in allowed:
                tampered.append(f"{rel}: a conftest.py the agent created or changed (removed)")
                _remove(path)
        elif name in SHADOWS or (name.endswith(".pth") and is_file):
            if template.get(rel) is None or not is_file or _sha(path) != template[rel]:
                tampered.append(f"{rel}: shadows a module the verifier loads (removed)")
                _remove(path)
        elif name in CONFIG_FILES and is_file and template.get(rel) != _sha(path):
            tampered.append(f"{rel}: pytest options the agent added or changed (ignored)")
    return tampered


# --- what the verifier files declare (read before any agent code runs) ------------------------


def declared_pytest_tests(source: str) -> list[str]:
    """The tests a pytest file declares by name: ``test*`` functions and the ``test*`` methods
    of ``Test*`` classes (``TestA.TestB::test_c``), as pytest's default rules collect them.
    Tests made at run time (assigned, imported, inherited) are not listed: a lower bound."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []  # pytest reports the file's collection error itself
    names: list[str] = []

    def visit(body: list[ast.stmt], owner: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if node.name.startswith("test"):
                    names.append(f"{owner}::{node.name}" if owner else node.name)
            elif isinstance(node, ast.ClassDef) and _collected_class(node):
                visit(node.body, f"{owner}.{node.name}" if owner else node.name)

    visit(tree.body, "")
    return names


def _collected_class(node: ast.ClassDef) -> bool:
    """A ``Test*`` class pytest collects: not one with an ``__init__`` or ``__test__ = False``."""
    if not node.name.startswith("Test"):
        return False
    for item in node.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            return False
        if isinstance(item, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__test__" for t in item.targets
        ):
            return False
    return True


_JS_CALL = re.compile(r"(?<![\w$.])(?:test|it|describe|suite)(?:\.(?:skip|todo|only))?\s*\(\s*$")
_JS_REGEX_BEFORE = set("(,=:[!&|?{};+-*%<>~^") | {""}


def declared_node_tests(source: str) -> list[str]:
    """The tests and suites a ``node:test`` file declares with a literal name: ``test("x"``,
    ``it('x'``, ``describe(`x``` (``.skip``/``.todo``/``.only`` too). Comments, other strings
    and regular expressions are skipped; a name built at run time is not listed (a lower
    bound). One linear pass."""
    names: list[str] = []
    code: list[str] = []  # the code read so far, strings and comments left out
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if source.startswith("//", i):
            end = source.find("\n", i)
            i = n if end < 0 else end
        elif source.startswith("/*", i):
            end = source.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif c in "'\"`":
            end = _string_end(source, i)
            literal = source[i + 1 : end]
            if _JS_CALL.search("".join(code[-40:])) and _plain(literal, c):
                names.append(literal[:500])
            code.append("0")  # a value stands where the string was
            i = end + 1
        elif c == "/" and _last_code(code) in _JS_REGEX_BEFORE:
            i = _regex_end(source, i) + 1
            code.append("0")
        else:
            code.append(c)
            i += 1
    return names


def _string_end(source: str, start: int) -> int:
    quote, i, n = source[start], start + 1, len(source)
    while i < n:
        c = source[i]
        if c == "\\":
            i += 2
            continue
        if c == quote or (c == "\n" and quote != "`"):
            return i
        i += 1
    return n


def _regex_end(source: str, start: int) -> int:
    i, n, in_class = start + 1, len(source), False
    while i < n:
        c = source[i]
        if c == "\\":
            i += 2
            continue
        if c == "\n":
            return i
        if c == "[":
            in_class = True
        elif c == "]":
            in_class = False
        elif c == "/" and not in_class:
            return i
        i += 1
    return n


def _last_code(code: list[str]) -> str:
    for c in reversed(code[-200:]):
        if not c.isspace():
            return c
    return ""


def _plain(literal: str, quote: str) -> bool:
    return "\\" not in literal and "\n" not in literal and (quote != "`" or "${" not in literal)


# --- running the tests --------------------------------------------------------------------------


def _undumpable() -> None:
    """PR_SET_DUMPABLE 0: a process of the agent's (same user) can no longer read or write our
    memory, trace us or open our file descriptors through /proc. Reset by any exec."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes  # lazy: ctypes (~5 ms) only for this one prctl, before any test starts

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4


def _own_container() -> bool:
    """Are we the command of a container of our own (under its init, or its init)? Only then
    is killing every other process of this user the container's processes alone."""
    if os.getpid() == 1:
        return True
    try:
        init = Path("/proc/1/comm").read_text(encoding="utf-8").strip()
    except OSError:
        return False
    return os.getppid() == 1 and init in INITS


def _end_the_rest() -> None:
    """Kill every process in the container but the init and us: whatever the agent's code left
    running can no longer write to the report pipe or to stdout after this."""
    if not _own_container():
        return
    for _ in range(2):
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL)


class _Pipe:
    """A pipe whose write end the test runner inherits (its number in ``fd``); what comes out
    is read here, up to MAX_REPORT bytes, until every writer has closed it."""

    def __init__(self) -> None:
        self._read, self.fd = os.pipe()
        os.set_inheritable(self.fd, True)
        self.data = bytearray()
        self.truncated = False
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while chunk := os.read(self._read, 1 << 16):
            room = MAX_REPORT - len(self.data)
            self.data += chunk[:room]
            self.truncated = self.truncated or len(chunk) > room

    def close_writer(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def text(self) -> str:
        self._thread.join(timeout=30)  # every writer is dead by now (see _end_the_rest)
        return self.data.decode("utf-8", errors="replace")


def _run(command: list[str], cwd: Path, env: dict[str, str], pipe: _Pipe) -> tuple[int, str]:
    """Run the test runner to its end with the report pipe; its exit code and output tail."""
    with tempfile.TemporaryFile() as out:
        try:
            proc = subprocess.Popen(
                command,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                pass_fds=(pipe.fd,),
            )
        except OSError as exc:
            pipe.close_writer()
            return 127, f"{command[0]}: {exc}"
        pipe.close_writer()
        code = proc.wait()
        _end_the_rest()
        size = out.seek(0, os.SEEK_END)
        out.seek(max(0, size - OUTPUT_TAIL))
        output = out.read().decode("utf-8", errors="replace")
    return code, output


def _place(workspace: Path, sources: list[str], dests: list[str]) -> list[Path]:
    """Copy each verifier file to its destination in the workspace, over whatever is there."""
    placed = []
    for source, dest in zip(sources, dests, strict=True):
        target = workspace / dest
        for parent in reversed(target.parents):  # a link or a file on the way: out of it
            if workspace in parent.parents and (parent.is_symlink() or not parent.is_dir()):
                _remove(parent)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink() or target.is_dir():
            _remove(target)
        shutil.copyfile(source, target)
        os.chmod(target, stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
        placed.append(target)
    return placed


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in DROPPED_ENV and k != PLUGIN_ENV}


def _run_pytest(spec: dict, workspace: Path, tests: list[Path], pipe: _Pipe) -> tuple[int, str]:
    tmp = Path(tempfile.mkdtemp(prefix="gradebox-verify-"))
    ini = tmp / "pytest.ini"
    ini.write_text(INI)
    env = _clean_env()
    env[PLUGIN_ENV] = json.dumps(
        {
            "workspace": str(workspace),
            "report_fd": pipe.fd,
            "dirs": sorted({str(t.parent) for t in tests}),
        }
    )
    # -B: nothing writes bytecode into the workspace during the run (the caches of the
    # standard library and of pytest, outside it, are still read: a private pycache prefix
    # would recompile all of them on every run, +0.7 s).
    command = [
        sys.executable,
        "-I",
        "-B",
        "-m",
        "pytest",
        "-c",
        str(ini),
        "--rootdir",
        str(workspace),
        "--import-mode=importlib",
        "-p",
        "gradebox.verify",
        "-p",
        "no:cacheprovider",
        "-q",
        f"--junitxml=/dev/fd/{pipe.fd}",
        *spec.get("args", []),
        *(t.relative_to(workspace).as_posix() for t in tests),
    ]
    return _run(command, workspace, env, pipe)


# node starts its inspector on SIGUSR1, on this port of the loopback: any process of the
# agent's (a program a test runs) could signal a test file's process and then evaluate code in
# it. With the port held here, the inspector cannot listen.
NODE_INSPECTOR = (("127.0.0.1", 9229), ("::1", 9229))


def _hold_inspector_port() -> list[socket.socket]:
    held = []
    for host, port in NODE_INSPECTOR:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue
        try:
            sock.bind((host, port))
            sock.listen(1)
            held.append(sock)
        except OSError:  # no such loopback address: nothing can listen there either
            sock.close()
    return held


def _run_node(workspace: Path, tests: list[Path], pipe: _Pipe) -> tuple[int, str]:
    held = _hold_inspector_port()
    command = [
        "node",
        "--test",
        f"--test-reporter={NODE_REPORTER}",
        f"--test-reporter-destination=/dev/fd/{pipe.fd}",
        "--test-reporter=spec",
        "--test-reporter-destination=stdout",
        *(t.relative_to(workspace).as_posix() for t in tests),
    ]
    try:
        return _run(command, workspace, _clean_env(), pipe)
    finally:
        for sock in held:
            sock.close()


def main(argv: list[str] | None = None) -> int:
    """``verify SPEC SOURCE...``: SPEC is JSON with ``runner`` (``pytest``, the default, or
    ``node``), ``dests`` (one per source: where in the workspace it goes), ``allowed`` (sha256
    of acceptable conftest files), ``template`` (sha256 of the template's config and shadow
    files, by path) and ``args`` (extra pytest args)."""
    _undumpable()
    args = argv if argv is not None else sys.argv[1:]
    spec, sources = json.loads(args[0]), args[1:]
    runner = spec.get("runner", "pytest")
    workspace = Path(os.environ.get("EVALUATE_WORKSPACE", "/workspace"))
    tampered = []
    if runner == "pytest":
        tampered = neutralise(workspace, set(spec.get("allowed", [])), spec.get("template", {}))
    placed = _place(workspace, sources, spec["dests"])
    tests = [p for p in placed if p.name != "conftest.py"]
    read = declared_pytest_tests if runner == "pytest" else declared_node_tests
    declared = [
        name
        for source, p in zip(sources, placed, strict=True)
        if p in tests
        for name in read(Path(source).read_text(encoding="utf-8", errors="replace"))
    ]
    pipe = _Pipe()
    if runner == "pytest":
        code, output = _run_pytest(spec, workspace, tests, pipe)
    else:
        code, output = _run_node(workspace, tests, pipe)
    report = pipe.text()
    sys.stderr.write(output)
    sys.stderr.flush()
    line = {
        "runner": runner,
        "exit_code": code,
        "report": report,
        "truncated": pipe.truncated,
        "declared": declared,
        "files": [str(t) for t in tests],
        "tampered": tampered,
        "output": output[-4000:],
    }
    sys.stdout.write("\n" + json.dumps(line) + "\n")  # our own line, whatever came before
    sys.stdout.flush()
    return 0


# --- the pytest plugin half (``-p gradebox.verify``, loaded by pytest before any conftest) ------


def pytest_load_initial_conftests(early_config, parser, args) -> None:  # noqa: ARG001
    """Before any conftest or test file is imported: make this process undumpable, keep the
    report pipe from any program it runs, put the workspace and the verifier folders *after*
    everything else on ``sys.path``, and register the destination's parent packages as empty
    ones, so that importing a test by path runs no ``__init__.py`` of the agent's."""
    _undumpable()
    paths = json.loads(os.environ.pop(PLUGIN_ENV, "{}") or "{}")
    if isinstance(paths.get("report_fd"), int):
        with contextlib.suppress(OSError):
            os.set_inheritable(paths["report_fd"], False)
    workspace = Path(paths.get("workspace", "/workspace"))
    for entry in [str(workspace), *paths.get("dirs", [])]:
        if entry not in sys.path:
            sys.path.append(entry)
    for folder in paths.get("dirs", []):
        _register_parents(workspace, Path(folder))


def _register_parents(workspace: Path, folder: Path) -> None:
    """``tests/unit`` -> empty packages ``tests`` and ``tests.unit`` (searching those folders),
    unless the name is already a module or is found outside the workspace first."""
    import importlib.machinery  # lazy: only when a verifier test sits in a subfolder

    parts = folder.relative_to(workspace).parts if folder != workspace else ()
    if not parts or parts[0] in sys.modules:
        return
    found = importlib.machinery.PathFinder.find_spec(parts[0], sys.path)
    where = (found.submodule_search_locations or [found.origin]) if found else []
    if where and not all(str(w).startswith(f"{workspace}/") for w in where if w):
        return  # a real package of that name (the standard library's `test`, say)
    for k in range(1, len(parts) + 1):
        name = ".".join(parts[:k])
        if name not in sys.modules:
            module = types.ModuleType(name, "a folder of the workspace (its __init__ not run)")
            module.__path__ = [str(workspace.joinpath(*parts[:k]))]
            sys.modules[name] = module


def pytest_ignore_collect(collection_path, config) -> bool | None:  # noqa: ARG001
    """No package ``__init__.py`` is collected (and so none is imported before the tests)."""
    return True if collection_path.name == "__init__.py" else None


if __name__ == "__main__":
    sys.exit(main())
