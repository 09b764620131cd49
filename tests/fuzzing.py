"""A seeded mutation fuzzer for what users hand ``gradebox validate`` (and ``grade``): suites,
grader files, AgentV eval files and their case files.

A mutant is one file of a seed folder rewritten by one mutation (a deleted key, a wrong type,
control characters, a long string, a huge number, deep nesting, an alias bomb, a duplicate key,
a BOM, CRLF, binary, truncation...). ``check`` runs the command on it under a time and memory
limit and says whether the outcome is one we promise: exit 0, or exit 2 with one
``gradebox: error: file: field: message`` line per error, never a traceback, a hang or a
memory blow-up. Everything is derived from the seed: the same seed makes the same mutants.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Mutant", "Outcome", "Seed", "check", "check_cli", "mutants", "seeds"]

ROOT = Path(__file__).resolve().parents[1]
TIME_LIMIT = 30.0
"""Seconds one mutant may take in-process (generous: the machine is shared)."""
MEMORY_LIMIT = 2 << 30
"""Bytes of address space one mutant may add."""


@dataclass(frozen=True)
class Seed:
    """A folder to copy, the file the command is given, and the files worth mutating."""

    name: str
    folder: Path
    entry: Path  # relative to folder
    files: tuple[Path, ...]  # relative to folder
    command: str = "validate"  # or "grader": load the entry as a grader file


@dataclass(frozen=True)
class Mutant:
    seed: Seed
    file: Path  # relative to the seed's folder
    mutation: str
    data: bytes


@dataclass(frozen=True)
class Outcome:
    mutant: Mutant
    ok: bool
    code: int | None
    why: str  # what broke our promise, or the error line


_MUTABLE = re.compile(r"\.(ya?ml|jsonl|csv)$", re.I)


def seeds(agentv_roots: list[Path] = ()) -> list[Seed]:  # type: ignore[assignment]
    """The example suites, the example grader files, and AgentV eval files (ours in
    tests/fixtures/agentv, and every eval file under ``agentv_roots``, each a checkout whose
    whole tree is the seed's folder: eval files find ``.agentv/`` files up to its root)."""
    found: list[Seed] = []
    for suite in sorted((ROOT / "examples").glob("*/suite.yaml")):
        found.append(_seed(f"examples/{suite.parent.name}", suite.parent, suite))
    for grader in sorted((ROOT / "examples").glob("*/*/grader.yaml")):
        found.append(Seed(f"grader:{grader.parent.name}", grader.parent, Path(grader.name),
                          (Path(grader.name),), command="grader"))  # fmt: skip
    fixtures = ROOT / "tests" / "fixtures" / "agentv"
    for folder in sorted(p for p in fixtures.iterdir() if p.is_dir()):
        for path in sorted(folder.rglob("*")):
            if path.parent.name == "evals" or path.parent == folder and path.suffix == ".jsonl":
                found.append(_seed(f"fixtures/{folder.name}", folder, path))
    for root in agentv_roots:
        for path in sorted(root.rglob("*")):
            if re.search(r"(^|\.)(eval|suite)\.ya?ml$", path.name, re.I) and not (
                {"node_modules", "fixtures", "test", "tests"} & set(path.parts)
            ):
                found.append(_seed(f"{root.name}", root, path))
    return found


def _seed(name: str, folder: Path, entry: Path) -> Seed:
    # The entry and the case files beside it; ``folder`` is copied whole.
    files = [entry.relative_to(folder)]
    for path in sorted(entry.parent.iterdir()):
        if path != entry and path.is_file() and _MUTABLE.search(path.name):
            files.append(path.relative_to(folder))
    return Seed(name, folder, entry.relative_to(folder), tuple(files))


# --------------------------------------------------------------------------------------------
# Mutations: each takes the text and a Random and returns new bytes.

_KEY_LINE = re.compile(rb"^(\s*-?\s*)([A-Za-z_$][\w.$-]*)(\s*:)(.*)$", re.M)


def _key_lines(data: bytes) -> list[re.Match[bytes]]:
    return list(_KEY_LINE.finditer(data))


def _pick_line(data: bytes, rnd: random.Random) -> re.Match[bytes] | None:
    lines = _key_lines(data)
    return rnd.choice(lines) if lines else None


def _set_value(data: bytes, rnd: random.Random, value: bytes) -> bytes:
    m = _pick_line(data, rnd)
    if m is None:
        return data + b"\nx: " + value + b"\n"
    return data[: m.start(4)] + b" " + value + data[m.end(4) :]


def _delete_key(data: bytes, rnd: random.Random) -> bytes:
    m = _pick_line(data, rnd)
    if m is None:
        return data[: len(data) // 2]
    # The key's line and every more-indented line after it.
    indent = len(m.group(1))
    end = m.end()
    for line in re.finditer(rb"\n([ \t]*)[^\n]*", data[end:]):
        if len(line.group(1)) <= indent and line.group(0).strip():
            break
        end += len(line.group(0))
    return data[: m.start()] + data[end:]


_WRONG = [b"[]", b"{}", b"1", b"-7", b"true", b"null", b"~", b'"text"', b"[1, {a: b}]",
          b"1.5", b"2001-12-14", b"!!binary aGVsbG8=", b"!!set {a, b}", b"!custom x",
          b"!!python/object:os.system x", b"'{{ env.HOME }}'", b"'{{ vars.x }}'",
          b"file://nothing.yaml", b"'*'", b"'../../../../etc/passwd'", b"/dev/null",
          b"''", b"' '", b"'0'", b"- a\n- b", b"2001-13-45", b"2001-02-03 04:05:99",
          b"!!float x", b"!!bool maybe", b"!!timestamp x", b"!!int 0x"]  # fmt: skip
_HUGE = [b"1" * 4301, b"-" + b"9" * 5000, b"0x" + b"f" * 3600, b"0b" + b"1" * 4000,
         b"1e99999", b"-1e99999", b".nan", b"1" * 300, b"9" * 20, b"0o" + b"7" * 5000,
         b":".join([b"59"] * 3000), b"1" + b"_0" * 3000]  # fmt: skip


def _deep(n: int, flow: bool, rnd: random.Random) -> bytes:
    if flow:
        return (b"[" * n + b"]" * n) if rnd.random() < 0.5 else (b"{a: " * n + b"1" + b"}" * n)
    return b"\n" + b"".join(b"  " * i + b"k:\n" for i in range(n)) + b"  " * n + b"v"


def _bomb(levels: int) -> bytes:
    lines = [b"lol0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, levels):
        refs = b", ".join([b"*l%d" % (i - 1)] * 9)
        lines.append(b"lol%d: &l%d [%s]" % (i, i, refs))
    return b"\n".join(lines)


def _insert(data: bytes, rnd: random.Random, what: bytes) -> bytes:
    at = rnd.randrange(len(data) + 1)
    return data[:at] + what + data[at:]


def _mutations() -> dict[str, Callable[[bytes, random.Random], bytes]]:
    def wrong_type(d: bytes, r: random.Random) -> bytes:
        return _set_value(d, r, r.choice(_WRONG))

    def huge_number(d: bytes, r: random.Random) -> bytes:
        return _set_value(d, r, r.choice(_HUGE))

    def long_string(d: bytes, r: random.Random) -> bytes:
        n = r.choice([300, 5000, 70_000, (1 << 20) + 1])
        return _set_value(d, r, b"'" + bytes([r.choice(b"abc/.*{}")]) * n + b"'")

    def long_key(d: bytes, r: random.Random) -> bytes:
        return _insert_mapping_line(d, r, b"k" * r.choice([300, 5000]) + b": 1")

    def deep(d: bytes, r: random.Random) -> bytes:
        return _set_value(d, r, _deep(r.choice([50, 99, 101, 1000, 20_000]), r.random() < 0.7, r))

    def control(d: bytes, r: random.Random) -> bytes:
        chars = [b"\x00", b"\x01", b"\x07", b"\x1b[31m", b"\x7f", b"\xc2\x85", b"\xe2\x80\xa8",
                 b"\xef\xbf\xbe", b"\t", b"\r", b"\x0c", b"\xed\xa0\x80"]  # fmt: skip
        return _insert(d, r, r.choice(chars))

    def quoted_control(d: bytes, r: random.Random) -> bytes:
        return _set_value(d, r, r.choice([b'"a\\nb"', b'"\\0"', b'"\\e[2J"', b'"\\ud800"',
                                          b'"\\x85"', b'"line\\u2028two"']))  # fmt: skip

    def alias_bomb(d: bytes, r: random.Random) -> bytes:
        levels = r.choice([4, 9, 12])
        bomb = _bomb(levels)
        if r.random() < 0.5:
            return bomb + b"\n" + d
        return _set_value(d, r, b"\n" + b"\n".join(b"  " + line for line in bomb.split(b"\n")))

    def alias_odd(d: bytes, r: random.Random) -> bytes:
        return _set_value(d, r, r.choice([b"&a [*a]", b"*nothing", b"&a 1", b"&a {b: *a}",
                                          b"&a [1]\nq: &a [2]", b"{<<: *x}"]))  # fmt: skip

    def merge(d: bytes, r: random.Random) -> bytes:
        return b"base: &base {type: contains, value: x}\n" + _set_value(d, r, b"{<<: *base}")

    def duplicate_key(d: bytes, r: random.Random) -> bytes:
        m = _pick_line(d, r)
        if m is None:
            return d + d
        line = d[m.start() : m.end()]
        return d[: m.end()] + b"\n" + line + d[m.end() :]

    def odd_key(d: bytes, r: random.Random) -> bytes:
        key = r.choice([b"~", b"1", b"null", b"true", b"1.5", b"[a, b]", b"{a: 1}", b"'a.b'",
                        b"? [x]", b"''", b'"\\0"', b"<<"])  # fmt: skip
        return _insert_mapping_line(d, r, key + b": x")

    def bom(d: bytes, r: random.Random) -> bytes:
        return b"\xef\xbb\xbf" + d if r.random() < 0.7 else _insert(d, r, b"\xef\xbb\xbf")

    def crlf(d: bytes, r: random.Random) -> bytes:
        return d.replace(b"\n", r.choice([b"\r\n", b"\r", b"\n\r"]))

    def binary(d: bytes, r: random.Random) -> bytes:
        junk = bytes(r.randrange(256) for _ in range(r.choice([1, 16, 512])))
        choice = r.random()
        if choice < 0.3:
            return junk
        if choice < 0.5:
            return d.decode("utf-8", "replace").encode("utf-16")
        if choice < 0.7:
            return _insert(d, r, b"\xe9")  # Latin-1
        return _insert(d, r, junk)

    def truncate(d: bytes, r: random.Random) -> bytes:
        return d[: r.randrange(len(d) + 1)]

    def empty(d: bytes, r: random.Random) -> bytes:
        return r.choice([b"", b"\n", b"---\n", b"---\n...\n---\n", b"null", b"[]", b"{}",
                         b"'text'", b"- 1\n- 2\n", b"#"])  # fmt: skip

    def documents(d: bytes, r: random.Random) -> bytes:
        return d + b"\n---\n" + d

    def indent(d: bytes, r: random.Random) -> bytes:
        lines = d.split(b"\n")
        i = r.randrange(len(lines))
        lines[i] = r.choice([b" ", b"\t", b"    "]) + lines[i]
        return b"\n".join(lines)

    def swap_lines(d: bytes, r: random.Random) -> bytes:
        lines = d.split(b"\n")
        i, j = r.randrange(len(lines)), r.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
        return b"\n".join(lines)

    def json_line(d: bytes, r: random.Random) -> bytes:
        # For JSONL files mostly: a line of hostile JSON.
        n = r.choice([100, 1000, 100_000])
        line = r.choice([b"[" * n + b"]" * n, b'{"a":' * n + b"1" + b"}" * n,
                         b'{"id": 1e99999}', b'{"id": ' + b"1" * 5000 + b"}", b"NaN",
                         b'{"id": "\\ud800"}', b"\xe9", b'{"vars": {"a": ' * 200 + b"1"
                         + b"}" * 400, b'"' + b"a" * 70_000 + b'"', b"[]", b"null"])  # fmt: skip
        return _insert_line(d, r, line)

    def csv_cells(d: bytes, r: random.Random) -> bytes:
        cell = r.choice([b'"a', b'"' + b"x" * 200_000 + b'"', b"vars." + b"a." * 1000 + b"z",
                         b"__expected:javascript:1", b"__config:__expected:threshold",
                         b"\xe9", b",,,,,", b"__expected", b"\x00"])  # fmt: skip
        return _insert(d, r, cell) if r.random() < 0.5 else _insert_line(d, r, cell)

    return {name: fn for name, fn in locals().items() if callable(fn) and not name.startswith("_")}


def _insert_line(d: bytes, r: random.Random, line: bytes) -> bytes:
    lines = d.split(b"\n")
    lines.insert(r.randrange(len(lines) + 1), line)
    return b"\n".join(lines)


def _insert_mapping_line(d: bytes, r: random.Random, line: bytes) -> bytes:
    m = _pick_line(d, r)
    if m is None:
        return line + b"\n" + d
    indent = re.sub(rb"-", b" ", m.group(1))
    return d[: m.start()] + indent + line + b"\n" + d[m.start() :] if not m.group(1).strip() \
        else d[: m.end()] + b"\n" + indent + line + d[m.end():]  # fmt: skip


MUTATIONS = _mutations()


def mutants(all_seeds: list[Seed], count: int, seed: int = 34) -> Iterator[Mutant]:
    """``count`` mutants, the same ones for the same ``seed``."""
    rnd = random.Random(seed)
    names = sorted(MUTATIONS)
    for _ in range(count):
        s = rnd.choice(all_seeds)
        file = s.entry if rnd.random() < 0.6 else rnd.choice(s.files)
        original = (s.folder / file).read_bytes()
        name = rnd.choice(names)
        yield Mutant(s, file, name, MUTATIONS[name](original, random.Random(rnd.random())))


# --------------------------------------------------------------------------------------------
# Running one mutant.


class _Hang(BaseException):
    """Raised by the alarm: not an Exception, so nothing in gradebox swallows it."""


@contextlib.contextmanager
def _limited(seconds: float, memory: int) -> Iterator[None]:
    def alarm(signum: int, frame: object) -> None:
        raise _Hang

    old_handler = signal.signal(signal.SIGALRM, alarm)
    old_limit = resource.getrlimit(resource.RLIMIT_AS)
    used = _address_space()
    resource.setrlimit(resource.RLIMIT_AS, (used + memory, old_limit[1]))
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        resource.setrlimit(resource.RLIMIT_AS, old_limit)


def _address_space() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * resource.getpagesize()


@contextlib.contextmanager
def placed(mutant: Mutant, workdir: Path) -> Iterator[Path]:
    """The seed's folder copied into ``workdir`` once, with the mutant written in; the file is
    put back afterwards. Yields the entry's path."""
    copy = workdir / re.sub(r"[^\w.-]", "_", str(mutant.seed.folder))
    if not copy.exists():
        shutil.copytree(mutant.seed.folder, copy, symlinks=True)
    target = copy / mutant.file
    original = target.read_bytes()
    target.write_bytes(mutant.data)
    try:
        yield copy / mutant.seed.entry
    finally:
        target.write_bytes(original)


_ERROR = re.compile(r"^gradebox: error: \S")
_NAMES_A_FILE = re.compile(r"^[^:\s]*[/.][^:]*:(\d+:)? ")
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f\u2028\u2029]")

# What AgentV's example targets read from the environment: set (to values that reach nothing)
# so that validation goes past them, as it does on a user's machine.
FAKE_ENV = {
    name: "http://127.0.0.1:9/v1" if name.endswith(("ENDPOINT", "BASE_URL")) else "fuzz"
    for name in """AZURE_DEPLOYMENT_NAME AZURE_OPENAI_API_KEY AZURE_OPENAI_API_VERSION
    AZURE_OPENAI_ENDPOINT CODEX_MODEL CONTRACT_EVAL_MODEL COPILOT_MODEL GEMINI_MODEL_NAME
    GH_MODELS_MODEL GH_MODELS_TOKEN GOOGLE_GENERATIVE_AI_API_KEY LOCAL_OPENAI_PROXY_API_KEY
    LOCAL_OPENAI_PROXY_BASE_URL LOCAL_OPENAI_PROXY_MODEL OPENAI_API_KEY OPENAI_ENDPOINT
    OPENAI_MODEL OPENROUTER_API_KEY OPENROUTER_MODEL LLM_BASE_URL LLM_MODEL LLM_API_KEY""".split()  # noqa: SIM905
}


def _run_folder(entry: Path) -> Path:
    """Where a user runs an eval from: the parent of ``evals/`` or ``suites/``."""
    for parent in entry.parents:
        if parent.name in ("evals", "suites"):
            return parent.parent
    return entry.parent


def judge(mutant: Mutant, code: int | None, stdout: str, stderr: str) -> Outcome:
    """Exit 0, or exit 2 with error lines; never a traceback."""
    if "Traceback" in stderr or "Traceback" in stdout:
        tail = stderr.strip().splitlines()[-1] if stderr.strip() else "traceback"
        return Outcome(mutant, False, code, f"traceback: {tail[:300]}")
    if code == 0:
        return Outcome(mutant, True, code, "")
    lines = stderr.splitlines()
    first = lines[0] if lines else ""
    if code != 2 or not _ERROR.match(first):
        return Outcome(mutant, False, code, f"exit {code}: {stderr.strip()[:300]!r}")
    # One line per error, each naming its file first (``ConfigErrors`` lists several).
    for line in [first.removeprefix("gradebox: error: "), *lines[1:]]:
        if not _NAMES_A_FILE.match(line) or _CONTROL.search(line):
            return Outcome(mutant, False, code, f"not a file: field: message line: {line[:300]!r}")
    return Outcome(mutant, True, code, first[:300])


def check(mutant: Mutant, workdir: Path, seconds: float = TIME_LIMIT) -> Outcome:
    """Run the mutant in this process, through the CLI's own entry (the typer app)."""
    from typer.testing import CliRunner

    from gradebox.cli.app import app

    with placed(mutant, workdir) as entry:
        if mutant.seed.command == "grader":
            return _check_grader(mutant, entry, seconds)
        runner = CliRunner()
        before = Path.cwd()
        os.chdir(_run_folder(entry))
        try:
            with _limited(seconds, MEMORY_LIMIT):
                result = runner.invoke(app, ["validate", str(entry), "--sandbox", "host"],
                                       env=FAKE_ENV)  # fmt: skip
        except _Hang:
            return Outcome(mutant, False, None, f"hang: more than {seconds:g} s")
        finally:
            os.chdir(before)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            exc = result.exception
            where = _where(exc)
            why = f"traceback: {type(exc).__name__}: {str(exc)[:200]} at {where}"
            return Outcome(mutant, False, result.exit_code, why)
        return judge(mutant, result.exit_code, result.stdout, result.stderr)


def _check_grader(mutant: Mutant, entry: Path, seconds: float) -> Outcome:
    # ``gradebox grade`` would run the grader; loading it is what a grader file can break.
    from gradebox.errors import ConfigError
    from gradebox.graders.config import load_grader

    try:
        with _limited(seconds, MEMORY_LIMIT):
            load_grader(entry)
    except _Hang:
        return Outcome(mutant, False, None, f"hang: more than {seconds:g} s")
    except ConfigError as exc:
        return judge(mutant, 2, "", f"gradebox: error: {exc}")
    except Exception as exc:  # noqa: BLE001 (any other is the crash we look for)
        return Outcome(mutant, False, 1, f"traceback: {type(exc).__name__}: {str(exc)[:200]} "
                       f"at {_where(exc)}")  # fmt: skip
    return Outcome(mutant, True, 0, "")


def _where(exc: BaseException) -> str:
    tb = exc.__traceback__
    last = None
    while tb is not None:
        if "gradebox" in tb.tb_frame.f_code.co_filename:
            last = tb
        tb = tb.tb_next
    if last is None:
        return "?"
    code = last.tb_frame.f_code
    return f"{Path(code.co_filename).name}:{last.tb_lineno} ({code.co_name})"


def check_cli(mutant: Mutant, workdir: Path, seconds: float = 120.0) -> Outcome:
    """Run the mutant through the ``gradebox`` command, in a process of bounded memory."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    with placed(mutant, workdir) as entry:
        argv = [sys.executable, "-m", "gradebox", "validate", str(entry), "--sandbox", "host"]
        env = {**os.environ, **FAKE_ENV, "PYTHONDONTWRITEBYTECODE": "1"}
        try:
            p = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                               timeout=seconds, preexec_fn=limit, env=env, cwd=_run_folder(entry),
                               stdin=subprocess.DEVNULL)  # fmt: skip
        except subprocess.TimeoutExpired:
            return Outcome(mutant, False, None, f"hang: more than {seconds:g} s")
        return judge(mutant, p.returncode, p.stdout, p.stderr)
