"""From what a grader process did (a ``RunOutcome``) to one ``GraderResult``. Pure logic.

One table, written from the protocol references, decides every verdict. The *dialect* is a
property of the grader configuration (``GraderConfig.dialect``), never guessed from what the
grader printed:

=========  =================  ===================  ====================  =====================
dialect    exit 0, no stdout  exit 0, result JSON  exit 0, other stdout  exit != 0
=========  =================  ===================  ====================  =====================
program    passed, 1.0        its verdict          error                 failed (1)
script     passed, 1.0        its verdict (2)      passed, text is the   failed (1); error when
                                                   check (3)             it wrote to stderr
assertion  as script          as script            as script             as script
inline     error              its verdict          error                 error
=========  =================  ===================  ====================  =====================

1. Whatever it printed: a reported score is kept only when the report itself says it failed,
   otherwise the score is 0. A grader that exits non-zero never passes. When it also gave no
   result and wrote anything, on either stream (a wrapper's ``2>&1`` sends a traceback to
   stdout, where a script's check text goes too), the failure may be a crash:
   ``GraderResult.no_verdict`` says so, and ``negate`` makes it an error, never a pass. Only a
   silent non-zero exit is a plain fail that ``negate`` may turn.
2. A result object may follow debug lines: the JSON object that ends stdout, from the start
   of a line, is the result.
3. Unless stdout *looks like* a result and is not a usable one: a line whose first visible
   character opens a JSON object (behind whitespace, control or format characters such as a
   BOM, a zero-width space or NUL, or ANSI escapes), stdout opening an array, or a verdict
   field (``"pass":``, ``"score":`` ...) anywhere, as when a verdict is glued to the end of
   an echoed answer (or NULs hide it: UTF-16). That is an error, never the exit-code pass;
   so is an exit-code pass whose stderr ends in a result object.

A result with a repeated key, or with a key that reads as a verdict field without being one
(``"Pass"``, ``"pass\u200b"``), is off-schema: an error. Stdout is judged exactly as the
grader printed it (the runtime reports on a channel of its own, see ``sandbox.gate``), and
judging it is linear in its size.

In every dialect a grader that timed out, ran out of memory, was killed by a signal (as the
sandbox reports it, ``RunOutcome.signal``), flooded its stdout or could not start
(``RunOutcome.start_error``, set by the backend) is an ``error``: it gave no verdict, and it is
never a pass. An exit code of 129-192 that the process chose itself is just an exit code.
"""

from __future__ import annotations

import re
import signal

from ..core.duration import format_duration
from ..core.json_bounds import MAX_OUTPUT_DEPTH as MAX_JSON_DEPTH
from ..core.json_bounds import OutputShapeError, load_untrusted_json
from ..core.scores import reaches
from ..core.sizes import format_bytes

TYPE_CHECKING = False  # not typing's: `gradebox grade`'s lean path judges with `verdict`
if TYPE_CHECKING:
    from typing import Any, Literal

    from ..protocol.models import GraderResult
    from ..sandbox.base import Limits, RunOutcome

    Dialect = Literal["program", "script", "assertion", "inline", "pytest", "node-test"]

__all__ = ["Dialect", "judge", "read_result", "result_of", "tail_text", "verdict"]

TAIL_CHARS = 2000


def tail_text(data: bytes) -> str | None:
    """The last TAIL_CHARS characters of a stream, for a human reading a failure."""
    text = data.decode("utf-8", errors="replace").strip()
    if not text:
        return None
    return text if len(text) <= TAIL_CHARS else "…" + text[-TAIL_CHARS:]


def _last_line(data: bytes) -> str:
    lines = data.decode("utf-8", errors="replace").strip().splitlines()
    return lines[-1].strip() if lines else ""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


# What renders as nothing in front of a line: C0/C1 controls, format characters (BOM,
# zero-width, bidi), every space and line separator, and the default-ignorable fillers (from
# Unicode 14's categories Cc, Cf, Zs, Zl, Zp; tests/unit/test_verdict.py keeps it complete).
# Line feed and carriage return are left out (a prefix never runs into the next line), and so
# is escape, which starts the ANSI sequences below.
_INVISIBLE = (
    r"\x00-\x09\x0b\x0c\x0e-\x1a\x1c-\x20\x7f-\xa0\xad\u034f\u0600-\u0605\u061c\u06dd\u070f"
    r"\u0890-\u0891\u08e2\u115f-\u1160\u1680\u17b4-\u17b5\u180b-\u180f\u2000-\u200f"
    r"\u2028-\u202f\u205f-\u2064\u2066-\u206f\u2800\u3000\u3164\ufe00-\ufe0f\ufeff\uffa0"
    r"\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3"
    r"\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
)
# ANSI escape sequences (CSI such as a colour reset, OSC such as a title) print nothing either.
_ANSI = r"\x1b\[[0-?]*+[ -/]*+[@-z|}~]?+|\x1b\][^\x07\x1b\n\r]*+(?:\x07|\x1b\\)?+"
# What stands in front of a line's first visible character. Possessive: read once per line.
_PREFIX = rf"((?:[{_INVISIBLE}]++|{_ANSI}|\x1b)*+)"
# A line whose first visible character opens a JSON object: the first line, or one after a
# line feed or a carriage return (where a terminal starts over too).
_FIRST_OBJECT = re.compile(rf"{_PREFIX}\{{")
_OBJECT_LINE = re.compile(rf"[\n\r]{_PREFIX}\{{")
_FIRST_ARRAY = re.compile(rf"{_PREFIX}\[")
# A verdict field of a result object, wherever it stands: the end of a result glued to other
# text (an answer echoed without its newline) still names one; so does one encoded in a JSON
# string (its quotes escaped).
_VERDICT_FIELD = re.compile(r'"(?:pass|passed|score|checks|assertions)\\?"[^\S\r\n]*+:')
_CHUNK = 1 << 16


def find_result(text: str, *, trailing: bool) -> tuple[Any, str | None]:
    """The result object on stdout: ``(object, None)``, ``(None, None)`` when stdout is free
    text, or ``(None, problem)`` when it holds something that *looks like* a result and is not
    a usable one: a line whose first visible character opens an object (behind whitespace,
    control or format characters, ANSI escapes), stdout opening an array, or a verdict field
    (``"pass":``) anywhere.

    ``trailing``: a JSON object that ends stdout counts even after other lines (debug prints).
    Linear in the size of stdout: one parse of the whole, at most one of its last lines, and
    scans in C that each read a character once.
    """
    stripped = text.strip()
    if not stripped:
        return None, None
    try:
        return load_untrusted_json(stripped), None
    except OutputShapeError as exc:
        problem = str(exc)
    if trailing:
        start = _trailing_object(stripped)
        if start:  # 0 is the whole text, tried above
            try:
                found = load_untrusted_json(stripped[start:])
            except OutputShapeError as exc:
                problem = str(exc)
            else:
                if isinstance(found, dict):
                    return found, None
    return None, _lookalike(stripped, problem)


def _trailing_object(text: str) -> int | None:
    """Where the one object that could end ``text`` starts (at the start of a line), if any.

    Walking back from the end, line by line, the brackets outside strings add up to how deep
    the start of each line is inside that object. The walk stops at the first line where the
    sum is back at zero: it must open the object (no other start can parse to the end, since
    JSON strings span no lines), or there is none. A line deeper than any result may nest, or
    above its outermost level, ends the walk too: each line is read once.
    """
    depth, end = 0, len(text)
    while end > 0:
        cut = max(text.rfind("\n", 0, end), text.rfind("\r", 0, end))
        line = text[cut + 1 : end]
        depth += _closes_minus_opens(line)
        if depth <= 0:
            visible = line.lstrip()
            if depth == 0 and visible[:1] == "{":
                return cut + 1 + len(line) - len(visible)
            return None
        if depth > MAX_JSON_DEPTH:
            return None
        end = cut
    return None


def _closes_minus_opens(line: str) -> int:
    """Closing brackets less opening ones, outside the JSON strings of one line.

    Escapes go first (no escaped quote ends a string), then the quotes split the line into
    what lies outside strings and inside. A long line is split in chunks, so no single call
    holds the interpreter lock for long."""
    if '"' in line:
        line = line.replace("\\\\", "").replace('\\"', "")
    total, inside = 0, False
    for at in range(0, len(line), _CHUNK):
        parts = line[at : at + _CHUNK].split('"')
        outside = "".join(parts[1 if inside else 0 :: 2])
        total += outside.count("}") + outside.count("]") - outside.count("{") - outside.count("[")
        inside ^= len(parts) % 2 == 0  # an odd number of quotes in the chunk
    return total


def _lookalike(text: str, problem: str) -> str | None:
    """Why ``text``, which holds no usable result, still may not be read as free text."""
    m = _FIRST_OBJECT.match(text) or _OBJECT_LINE.search(text)
    if m:
        if not m.group(1).strip():  # only whitespace in front: a JSON object that is broken
            return problem
        chars = dict.fromkeys(m.group(1)[:200])  # enough to name them
        hidden = [c for c in chars if not c.isprintable()] or [c for c in chars if c > " "]
        shown = ", ".join(f"U+{ord(c):04X}" for c in hidden)
        line = text.count("\n", 0, m.start(1)) + 1
        return (
            f"a JSON object on line {line} behind invisible characters ({shown[:80]}) "
            "is not read as a result"
        )
    if _FIRST_ARRAY.match(text):
        return problem
    # NULs between the characters (UTF-16 read as UTF-8) hide nothing either.
    probe = text.replace("\x00", "") if "\x00" in text else text
    field = _VERDICT_FIELD.search(probe)
    if field:
        line = probe.count("\n", 0, field.start()) + 1
        return f"line {line} names a verdict field ({field.group()}), but no result ends stdout"
    return None


def _json_problem(text: str) -> str:
    try:
        load_untrusted_json(text.strip())
    except OutputShapeError as exc:
        return str(exc)
    return "not a JSON object"


def judge(
    dialect: Dialect,
    name: str,
    outcome: RunOutcome,
    *,
    timeout: float,
    limits: Limits,
    named: bool = True,
    pass_score: float = 0.5,
) -> GraderResult:
    """``verdict`` as the protocol's ``GraderResult`` (image and duration are filled in by the
    caller): typed here as it is public (``gradebox.graders.judge``)."""
    return result_of(
        verdict(
            dialect,
            name,
            outcome,
            timeout=timeout,
            limits=limits,
            named=named,
            pass_score=pass_score,
        )
    )


def result_of(fields: dict[str, Any]) -> GraderResult:
    """``verdict``'s fields as the protocol's ``GraderResult``."""
    # lazy: pydantic (protocol.models) stays off grade's lean path (cli/grade_lean.py)
    from ..protocol.models import GraderResult

    fields = dict(fields)
    why = fields.pop("no_verdict", None)
    result = GraderResult(**fields)
    result.no_verdict = why
    return result


def verdict(
    dialect: Dialect,
    name: str,
    outcome: RunOutcome,
    *,
    timeout: float,
    limits: Limits,
    named: bool = True,
    pass_score: float = 0.5,
) -> dict[str, Any]:
    """One run by the table above, as ``GraderResult``'s fields (plain values, checks as
    dicts; ``no_verdict`` among them): the one judgement, which ``judge`` wraps in the model
    and ``gradebox grade``'s lean path writes without it.

    ``named``: ``name`` came from the configuration; when it did not, a ``name`` the grader
    reports in its JSON result is used instead. ``pass_score``: the verdict of a result that
    gives a score and no ``pass`` (AgentV's script graders: 0.8).
    """
    kind: Any = dialect
    common = dict(
        exit_code=outcome.exit_code,
        duration_ms=outcome.duration_ms,
        timed_out=outcome.timed_out,
        oom_killed=outcome.oom_killed,
        output_truncated=outcome.output_truncated,
        stdout_tail=tail_text(outcome.stdout),
        stderr_tail=tail_text(outcome.stderr),
    )

    def error(evidence: str) -> dict[str, Any]:
        return _fields(name, kind, "error", 0.0, evidence, common)

    if outcome.timed_out:
        return error(f"Grader timed out after {format_duration(timeout)}")
    if outcome.stdout_dropped:
        return error(
            f"Grader output exceeded the {format_bytes(int(limits.output))} cap on stdout "
            "and was stopped"
        )
    if outcome.start_error:
        return error(f"Failed to start grader program: {outcome.start_error}")
    if outcome.oom_killed:
        return error(f"Grader was killed: out of memory (limit {format_bytes(int(limits.memory))})")
    code = outcome.exit_code
    if code is None:
        return error("Grader ended without an exit code")
    if outcome.signal:
        return error(f"Grader was killed by {_signal_name(outcome.signal)} (exit code {code})")

    text = outcome.stdout.decode("utf-8", errors="replace")
    if dialect in ("pytest", "node-test"):
        from .verifier import judge_junit, judge_node  # lazy: pydantic, as result_of's

        judged = judge_junit if dialect == "pytest" else judge_node
        result = judged(name, text, common)
        return {**result.model_dump(), "no_verdict": result.no_verdict}
    if dialect == "inline" and code != 0:
        return error(f"Grader failed with exit code {code}: {_last_line(outcome.stderr)}".strip())
    if dialect in ("script", "assertion") and code != 0 and outcome.stderr.strip():
        return error(f"Grader failed with exit code {code}: {_last_line(outcome.stderr)}")

    parsed, problem = find_result(text, trailing=dialect in ("script", "assertion"))
    if parsed is None and problem is None and text.strip() and dialect in ("program", "inline"):
        problem = _json_problem(text)  # free text where these dialects owe JSON or nothing
    if parsed is None and problem is not None and (dialect != "program" or code == 0):
        # A program grader that exits non-zero has failed whatever it printed (pytest prints
        # its report on stdout); everyone else owes a parseable result once they print one.
        return error(f"Grader returned unparseable JSON output on stdout: {problem}")
    if parsed is not None and not isinstance(parsed, dict):
        if dialect in ("program", "inline") and code == 0:
            return error(
                "Grader output did not match schema: expected a JSON object, "
                f"got {type(parsed).__name__}"
            )
        field = _VERDICT_FIELD.search(text)
        if field and dialect in ("script", "assertion"):
            # `[{"pass": false}]`, or a result encoded as a JSON string: no result object,
            # but nobody would read it as the exit-code pass either.
            return error(
                f"Grader printed a JSON {type(parsed).__name__}, not a result object, "
                f"that names a verdict field ({field.group()})"
            )
        parsed = None  # a script's stdout of `42` or `[1, 2]` is check text

    if isinstance(parsed, dict):
        try:
            passed, score, evidence, checks, details = read_result(parsed, pass_score=pass_score)
        except OutputShapeError as exc:
            if dialect == "program" and code != 0:
                return _exit_mode(dialect, name, code, text, common)
            return error(f"Grader output did not match schema: {exc}")
        if code != 0:
            # Whatever it printed, a grader that exits non-zero has not passed; its score
            # stands only when its own report agrees that it failed.
            if passed:
                score = 0.0
                evidence = f"{evidence} (but the grader exited with code {code})".strip()
            passed = False
        if not named and isinstance(parsed.get("name"), str) and parsed["name"].strip():
            name = parsed["name"].strip()[:200]
        status = "passed" if passed else "failed"
        return _fields(name, kind, status, score, evidence, common, checks=checks, details=details)

    if dialect == "inline":
        return error("Grader printed no JSON result on stdout (the inline dialect requires one)")
    if code == 0 and _ends_in_a_result(outcome.stderr):
        # Its verdict, on the wrong stream: read by nobody, it must not become the exit-code pass.
        return error("Grader printed a result object on stderr, not on stdout")
    return _exit_mode(dialect, name, code, text, common)


_TEXT_KEYS = ("name", "reason", "reasoning", "evidence", "kind")
_VERDICT_KEYS = ("pass", "passed", "score", "checks", "assertions")


def _verdict_key_lookalike(key: str) -> str | None:
    """The verdict key that ``key`` reads as (``"Pass"``, ``"pass\u200b"``, ``" score"``)
    without being it: such a key is a verdict nobody would read, never silently ignored."""
    if len(key) > 64:
        return None
    folded = "".join(ch for ch in key if ch.isalnum()).casefold()
    return folded if folded in _VERDICT_KEYS else None


def read_result(
    data: Any, *, pass_score: float = 0.5
) -> tuple[bool, float, str, list[dict[str, Any]], dict[str, Any] | None]:
    """A grader's result object (``protocol.GraderOutput``, its schema) as ``(passed, score,
    evidence, checks, details)``, checks as ``protocol.Check``'s fields. The one reader.

    Scores are clamped to [0, 1]; a missing ``pass`` means ``score >= pass_score`` (0.5;
    AgentV's script graders: 0.8); a missing ``score`` follows ``pass`` (1 or 0); with
    neither, the share of passing checks is the score (a check with only a score passes at
    ``pass_score`` too). A Vally ``details`` list is one check per sub-result.

    Raises ``OutputShapeError`` naming the field when ``data`` is off-schema."""
    if not isinstance(data, dict):
        raise OutputShapeError(f"expected a JSON object, got {type(data).__name__}")
    for key in data:
        named = _verdict_key_lookalike(key) if key not in _VERDICT_KEYS else None
        if named:
            raise OutputShapeError(
                f"key {key!r} is not {named!r}: a result names its verdict exactly"
            )
    text = {k: _text(data, k, k) for k in _TEXT_KEYS}
    verdict_, passed = _bool(data, "pass", "pass"), _bool(data, "passed", "passed")
    score = _score(data, "score")
    details = data.get("details")
    if details is not None and not isinstance(details, dict | list):
        raise OutputShapeError("details: expected an object or a list")
    subs = [_sub(c, f"checks.{i}") for i, c in enumerate(_list(data, "checks"))]
    if isinstance(details, list):  # Vally: every sub-result is one check
        for i, item in enumerate(details):
            where = f"details.{i}"
            if not isinstance(item, dict):
                raise OutputShapeError(f"{where}: expected a sub-result object")
            name = item.get("text") or item.get("name") or f"check {i + 1}"
            check = _sub({**item, "text": str(name)}, where)
            if check[1] is None and check[2] is None and check[3] is None:
                raise OutputShapeError(f"{where}: no 'passed', 'pass' or 'score'")
            subs.append(check)
        details = None
    subs += [_sub(c, f"assertions.{i}") for i, c in enumerate(_list(data, "assertions"))]
    if (
        verdict_ is None
        and passed is None
        and score is None
        and not (data.get("checks") is not None or data.get("assertions") is not None)
    ):
        raise OutputShapeError("no 'pass', 'passed', 'score', 'checks' or 'assertions' field")
    if verdict_ is not None and passed is not None and verdict_ != passed:
        raise OutputShapeError("'pass' and 'passed' disagree")
    checks = []
    for name, c_pass, c_passed, c_score, evidence in subs:
        c_score = _clamp(c_score)
        ok = c_pass if c_pass is not None else c_passed
        if ok is None:
            ok = c_score is not None and reaches(c_score, pass_score)
        checks.append({"text": name, "passed": ok, "score": c_score, "evidence": evidence})
    if verdict_ is None:
        verdict_ = passed
    score = _clamp(score)
    if score is None and verdict_ is None:
        score = sum(c["passed"] for c in checks) / len(checks) if checks else 0.0
    if score is None:
        score = 1.0 if verdict_ else 0.0
    if verdict_ is None:
        verdict_ = reaches(score, pass_score)
    evidence = text["evidence"] or text["reason"] or text["reasoning"] or ""
    return verdict_, score, evidence, checks, details


def _text(data: dict[str, Any], key: str, where: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise OutputShapeError(f"{where}: expected a string")
    return value


def _bool(data: dict[str, Any], key: str, where: str) -> bool | None:
    value = data.get(key)
    if value is not None and not isinstance(value, bool):
        raise OutputShapeError(f"{where}: expected true or false")
    return value


def _score(data: dict[str, Any], where: str) -> float | None:
    """A finite number: ``Infinity`` (or ``1e999``) clamped to 1.0 would be a pass no grader
    meant, and NaN says nothing; both are off-schema, as is a number given as a string."""
    value = data.get("score")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise OutputShapeError(f"{where}: expected a finite number")
    try:
        value = float(value)
    except OverflowError:
        value = float("inf")
    if value != value or value in (float("inf"), float("-inf")):
        raise OutputShapeError(f"{where}: expected a finite number")
    return value


def _clamp(value: float | None) -> float | None:
    return None if value is None else min(1.0, max(0.0, value))


def _list(data: dict[str, Any], key: str) -> list[Any]:
    value = data.get(key)
    if value is not None and not isinstance(value, list):
        raise OutputShapeError(f"{key}: expected a list")
    return value or []


def _sub(check: Any, where: str) -> tuple[str, bool | None, bool | None, float | None, Any]:
    """One check (``protocol.GraderOutput``'s ``checks`` item): its text, pass, passed, score
    and evidence (else its reason)."""
    if not isinstance(check, dict):
        raise OutputShapeError(f"{where}: expected an object")
    text = _text(check, "text", f"{where}.text") if "text" in check else ""
    if text is None:
        raise OutputShapeError(f"{where}.text: expected a string")
    # Both are read before either is chosen: a reason off-schema is an error beside evidence too.
    evidence, reason = (
        _text(check, "evidence", f"{where}.evidence"),
        _text(check, "reason", f"{where}.reason"),
    )
    said = evidence or reason
    return (
        text,
        _bool(check, "pass", f"{where}.pass"),
        _bool(check, "passed", f"{where}.passed"),
        _score(check, f"{where}.score"),
        said,
    )


def _ends_in_a_result(stream: bytes) -> bool:
    """Does the last line of ``stream`` open a JSON object that names a verdict field?"""
    last = stream.rstrip()[-(64 << 10) :].rsplit(b"\n", 1)[-1].decode("utf-8", "replace")
    return bool(_FIRST_OBJECT.match(last) and _VERDICT_FIELD.search(last))


def _exit_mode(
    dialect: Dialect, name: str, code: int, text: str, common: dict[str, Any]
) -> dict[str, Any]:
    """Exit-code mode: 0 passes, anything else fails; a script's stdout is its check text."""
    passed = code == 0
    text = text.strip()
    as_text = dialect in ("script", "assertion") and bool(text)
    if as_text:
        evidence = text[:10_000]
    else:
        evidence = (
            "Grader exited successfully" if passed else f"Grader exited with exit code {code}"
        )
    checks = [{"text": evidence, "passed": passed, "score": None, "evidence": None}]
    status = "passed" if passed else "failed"
    result = _fields(
        name, dialect, status, float(passed), evidence, common, checks=checks if as_text else []
    )
    # A crash (a traceback, exit 1) ends exactly like a fail by exit code, on whichever stream
    # it was sent to: a wrapper's `2>&1` puts it on stdout, where a script's check text goes
    # too. Only a silent non-zero exit is a fail and nothing else; anything printed beside a
    # non-zero exit and no result may be a crash, which `negate` must never turn into a pass.
    said = " and ".join(n for n, s in (("stdout", text), ("stderr", common["stderr_tail"])) if s)
    if not passed and said:
        result["no_verdict"] = f"it exited with code {code} and wrote to {said}, with no result"
    return result


def _fields(
    name: str,
    kind: Any,
    status: str,
    score: float,
    evidence: str,
    common: dict[str, Any],
    **more: Any,
) -> dict[str, Any]:
    """``GraderResult``'s fields. The tails help explain a failure; on a pass they are noise
    in the result file."""
    tails = {"stdout_tail": None, "stderr_tail": None} if status == "passed" else {}
    return dict(
        name=name,
        type=kind,
        status=status,
        passed=status == "passed",
        score=score,
        evidence=evidence,
        **more,
        **{**common, **tails},
    )
