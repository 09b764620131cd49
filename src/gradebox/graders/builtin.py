"""Built-in deterministic assertions, evaluated on the host: no container, no process.

``contains``, ``icontains``, ``contains-any``, ``contains-all``, ``icontains-any``,
``icontains-all``, ``equals``, ``starts-with``, ``ends-with``, ``regex`` (``flags: i``),
``is-json``, ``contains-json``; each may be negated with a ``not-`` prefix or ``negate: true``
(the modifiers every assertion takes live in ``graders.assertion``).

A check that holds for every answer (or, negated, for none) is refused before anything runs:
an empty value of a ``contains``/``starts-with``/``ends-with``/``equals`` family member (or
an empty item of a list), and a regex that matches the empty string wherever it is searched
(an empty pattern, ``.*``, ``a*``, ``x?``, ``^``; ``^$``, which needs an empty answer, is a
real check). tests/unit/test_vacuous.py walks every built-in type.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import regex

from ..protocol.models import GraderResult, Status, json_objects_in, parses_as_json

__all__ = ["BUILTINS", "LIST_VALUED", "BuiltinAssertion", "is_builtin", "quoted", "refuse_vacuous"]

LIST_VALUED = {"contains-any", "contains-all", "icontains-any", "icontains-all"}
_NO_VALUE = {"is-json", "contains-json"}
_HOLDS_FOR_ANY = {"contains", "icontains", "starts-with", "ends-with"} | LIST_VALUED


def _empty(value: Any, strip: bool = False) -> bool:
    """An empty string (``strip``: or only whitespace, which starts-with and ends-with drop),
    an empty list, or a list holding one."""
    if isinstance(value, list):
        return not value or any(_empty(v) for v in value)
    return isinstance(value, str) and not (value.strip() if strip else value)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def quoted(text: str) -> str:
    """``text`` quoted for a grader's name, as its suite wrote it: repr's quotes and escapes
    (a newline, a quote, a control character stay visible), but a backslash stays one:
    ``regex 'answer is \\d+'``, not ``regex 'answer is \\\\d+'``."""
    return repr(text).replace("\\\\", "\\")


REGEX_TIMEOUT = 1.0
"""Seconds a user's regex may take on one answer: an agent's answer must not be able to hang
the run through catastrophic backtracking."""


class _TooSlow(Exception):
    pass


def _search(pattern: str, output: str, flags: int = 0) -> bool:
    try:
        return regex.search(pattern, output, flags=flags, timeout=REGEX_TIMEOUT) is not None
    except TimeoutError:
        raise _TooSlow(f"the regex took over {REGEX_TIMEOUT:g}s on the answer") from None


# Answers a vacuous pattern is searched in: nothing, one character of each kind, lines.
# A pattern found in every one of them matches the empty string without needing anything
# around it (`.*`, `a*`, `(?:)`, `^`, `$`, `\b?`), so it is found in any answer at all;
# one that needs a character (`.`, `\S`) or an empty answer (`^$`, `\A\Z`) fails one.
_PROBES = ("", "x", "0", " ", "\n", "-", "\u00e9", "a\nb", "{}", "\x00")


def _matches_anything(compiled: Any) -> bool:
    try:
        return all(compiled.search(p, timeout=REGEX_TIMEOUT) is not None for p in _PROBES)
    except TimeoutError:
        return False  # on strings this short: the pattern is no vacuous one


def _find_json(output: str) -> bool:
    found = json_objects_in(output, arrays=True, first=True, unique_keys=False)  # linear
    if found is None:
        raise _TooSlow("the answer holds too many broken JSON starts to search")
    return bool(found)


BUILTINS = {
    "contains": lambda out, v: _text(v) in out,
    "icontains": lambda out, v: _text(v).lower() in out.lower(),
    "contains-any": lambda out, v: any(_text(x) in out for x in v),
    "contains-all": lambda out, v: all(_text(x) in out for x in v),
    "icontains-any": lambda out, v: any(_text(x).lower() in out.lower() for x in v),
    "icontains-all": lambda out, v: all(_text(x).lower() in out.lower() for x in v),
    # Surrounding whitespace never counts: a target's stdout ends with a newline.
    "equals": lambda out, v: out.strip() == _text(v).strip(),
    "starts-with": lambda out, v: out.strip().startswith(_text(v).strip()),
    "ends-with": lambda out, v: out.strip().endswith(_text(v).strip()),
    "regex": lambda out, v: _search(_text(v), out),
    "is-json": lambda out, v: parses_as_json(out),
    "contains-json": lambda out, v: _find_json(out),
}


_FLAGS = {"i": regex.IGNORECASE, "m": regex.MULTILINE, "s": regex.DOTALL, "x": regex.VERBOSE}


def is_builtin(kind: str) -> bool:
    return kind.removeprefix("not-") in BUILTINS


def refuse_vacuous(kind: str, value: Any, flags: Any) -> None:
    """Refuse (``ValueError``) a built-in check no answer can fail or one that cannot run: run
    by every built-in kind's model (``graders.entries``) before it checks the fields' types."""
    base = kind.removeprefix("not-")
    if base not in _NO_VALUE and base not in LIST_VALUED and value is None:
        raise ValueError(f"{kind} needs a 'value'")
    if base in _HOLDS_FOR_ANY and _empty(value, base.endswith("-with")):
        # Held by every answer (or, negated, by none): a var that rendered to nothing, a
        # CSV cell left empty; a check that cannot fail is no check.
        raise ValueError(f"{kind} with an empty value holds for every answer")
    if base == "equals" and _empty(value, strip=True):
        # Negated (a CSV `not-equals:` cell left empty) it holds for every answer that says
        # anything; as written it is almost always a var that rendered to nothing.
        raise ValueError(
            f"{kind} with an empty value: negated it holds for every answer (to "
            "require an empty answer, use regex '^\\s*$')"
        )
    if base == "regex" and isinstance(flags, str | None):
        unknown = set(flags or "") - set(_FLAGS)
        if unknown:
            raise ValueError(f"unknown regex flags {''.join(sorted(unknown))!r} (i, m, s, x)")
        try:
            compiled = regex.compile(_text(value), _flag_bits(flags))
        except regex.error as exc:
            raise ValueError(f"invalid regex: {exc}") from None
        if _matches_anything(compiled):
            raise ValueError(
                f"{kind} {_text(value)[:60]!r} holds for every answer (it matches "
                "the empty string anywhere: an empty pattern, `.*`, `a*`, `x?`, `^`); "
                "anchor it (`^$`) or make it need a character"
            )


def _flag_bits(flags: str | None) -> int:
    bits = 0
    for flag in flags or "":
        bits |= _FLAGS[flag]
    return bits


@dataclass(frozen=True)
class BuiltinAssertion:
    """``{type: contains, value: "42"}``; ``not-contains`` negates. A record compiled from a
    validated entry (``graders.entries``): it checks nothing itself.

    Example::

        BuiltinAssertion(type="regex", value="^ok", flags="i").evaluate("OK, done")
    """

    type: str
    value: Any = None
    flags: str | None = None

    def display_name(self) -> str:
        if self.value is None:
            return self.type
        shown = _text(self.value)[:40]
        return f"{self.type} {quoted(shown) if isinstance(self.value, str) else shown}"

    def evaluate(self, output: str | None) -> GraderResult:
        negate = self.type.startswith("not-")
        base = self.type.removeprefix("not-")
        try:
            if base == "regex":
                hit = _search(_text(self.value), output or "", _flag_bits(self.flags))
            else:
                hit = bool(BUILTINS[base](output or "", self.value))
        except _TooSlow as exc:
            status, passed, evidence = Status.error, False, str(exc)
        else:
            passed = hit != negate
            status = Status.passed if passed else Status.failed
            answer = (output or "").strip()
            shown = repr(answer if len(answer) <= 80 else answer[:79] + "…")
            evidence = ("holds" if passed else "not satisfied") + f" by the answer {shown}"
        return GraderResult(
            name=self.display_name(),
            type="builtin",
            status=status,
            passed=passed,
            score=1.0 if passed else 0.0,
            evidence=evidence,
        )
