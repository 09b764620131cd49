"""``.gitignore`` rules, matched on the host the way git matches them, over names as bytes.

The baseline reads the template's ignore files once and decides, for every path an agent
later writes, whether the template ignores it. Git cannot make that decision for us (it
cannot reach names past ``PATH_MAX`` and it skips ``.git`` folders), so the rules are
compiled here: git's wildmatch (``*`` and ``?`` stop at ``/``, ``**`` only between slashes,
bracket sets over bytes with POSIX classes, backslash escapes), one file's last matching line
wins, a deeper file wins over a shallower one. A rule that is malformed matches nothing, as
in git. Matching costs a regular expression per file of rules, whatever the number of lines.

What this must not do: read a rule from anything the agent wrote (the callers pass the
baseline's files only), or match a name as text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["IgnoreFile", "parse_ignore_file"]

_CLASSES: dict[bytes, frozenset[int]] = {
    name.encode(): frozenset(c for c in range(128) if test(chr(c)))
    for name, test in {
        "alnum": str.isalnum,
        "alpha": str.isalpha,
        "blank": lambda c: c in " \t",
        "cntrl": lambda c: ord(c) < 32 or ord(c) == 127,
        "digit": str.isdigit,
        "graph": lambda c: 32 < ord(c) < 127,
        "lower": str.islower,
        "print": lambda c: 32 <= ord(c) < 127,
        "punct": lambda c: 32 < ord(c) < 127 and not c.isalnum(),
        "space": lambda c: c in " \t\n\r\f\v",
        "upper": str.isupper,
        "xdigit": lambda c: c in "0123456789abcdefABCDEF",
    }.items()
}
_SLASH = ord("/")


class _Malformed(ValueError):
    pass


def _bracket(pattern: bytes, i: int) -> tuple[bytes, int]:
    """The regex for the set opening at ``pattern[i] == '['``, and the index after it."""
    i += 1
    negated = i < len(pattern) and pattern[i] in b"!^"
    i += negated
    chosen: set[int] = set()
    prev: int | None = None
    first = True
    while True:
        if i >= len(pattern):
            raise _Malformed
        c = pattern[i]
        if c == ord("]") and not first:
            i += 1
            break
        first = False
        if c == ord("\\"):
            i += 1
            if i >= len(pattern):
                raise _Malformed
            c = pattern[i]
            chosen.add(c)
            prev = c
        elif c == ord("-") and prev is not None and pattern[i + 1 : i + 2] not in (b"", b"]"):
            i += 1
            hi = pattern[i]
            if hi == ord("\\"):
                i += 1
                if i >= len(pattern):
                    raise _Malformed
                hi = pattern[i]
            chosen.update(range(prev, hi + 1))
            prev = None
        elif c == ord("[") and pattern[i + 1 : i + 2] == b":":
            end = pattern.find(b"]", i + 2)
            if end < 0:
                raise _Malformed
            if end - 1 < i + 2 or pattern[end - 1] != ord(":"):  # no ":]": an ordinary "["
                chosen.add(c)
                prev = c
            else:
                name = pattern[i + 2 : end - 1]
                if name not in _CLASSES:
                    raise _Malformed
                chosen |= _CLASSES[name]
                i = end
                prev = None
        else:
            chosen.add(c)
            prev = c
        i += 1
    if negated:
        chosen = set(range(256)) - chosen
    chosen.discard(_SLASH)  # a set never matches "/" in a path
    if not chosen:
        return b"(?!)", i
    return b"[" + b"".join(re.escape(bytes([c])) for c in sorted(chosen)) + b"]", i


def _wildmatch(pattern: bytes) -> bytes:
    """Git's wildmatch with WM_PATHNAME, as a regular expression over bytes."""
    out: list[bytes] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == ord("*"):
            j = i
            while j < n and pattern[j] == ord("*"):
                j += 1
            double = j - i >= 2
            before_ok = i == 0 or pattern[i - 1] == _SLASH
            after_ok = j == n or pattern[j] == _SLASH
            if double and before_ok and after_ok:
                if j == n:
                    out.append(b".*")  # "foo/**": everything inside
                    i = j
                else:
                    out.append(b"(?:.*/)?")  # "**/": any number of folders, none too
                    i = j + 1
                continue
            out.append(b"[^/]*")
            i = j
        elif c == ord("?"):
            out.append(b"[^/]")
            i += 1
        elif c == ord("["):
            part, i = _bracket(pattern, i)
            out.append(part)
        elif c == ord("\\"):
            if i + 1 >= n:
                raise _Malformed  # a trailing backslash matches nothing in git
            out.append(re.escape(pattern[i + 1 : i + 2]))
            i += 2
        else:
            out.append(re.escape(bytes([c])))
            i += 1
    return b"".join(out)


@dataclass(frozen=True)
class _Rule:
    regex: re.Pattern[bytes]
    negated: bool
    dir_only: bool
    basename: bool  # no slash in it: matched against the name, at any depth


def _trim(line: bytes) -> bytes:
    """Trailing spaces go unless a backslash escapes them (git's trim_trailing_spaces)."""
    end = len(line)
    while end and line[end - 1] == ord(" "):
        if end >= 2 and line[end - 2] == ord("\\"):
            break
        end -= 1
    return line[:end]


def _parse_line(raw: bytes) -> _Rule | None:
    line = _trim(raw[:-1] if raw.endswith(b"\r") else raw)
    if not line or line.startswith(b"#"):
        return None
    negated = line.startswith(b"!")
    if negated:
        line = line[1:]
    dir_only = line.endswith(b"/")
    if dir_only:
        line = line[:-1]
    if not line:
        return None
    basename = b"/" not in line
    if line.startswith(b"/"):
        line = line[1:]
    # As git does for a path, the literal part before the first wildcard is compared on its
    # own and the rest matched from there: a "**" right after that part counts as leading.
    cut = 0 if basename else next((i for i, c in enumerate(line) if c in b"*?[\\"), len(line))
    try:
        regex = re.compile(re.escape(line[:cut]) + _wildmatch(line[cut:]) + rb"\Z", re.DOTALL)
    except (_Malformed, re.error):
        return None
    return _Rule(regex, negated, dir_only, basename)


class IgnoreFile:
    """The rules of one ``.gitignore`` file, for paths relative to its folder."""

    def __init__(self, text: bytes) -> None:
        if text.startswith(b"\xef\xbb\xbf"):
            text = text[3:]
        rules = [r for r in map(_parse_line, text.split(b"\n")) if r is not None]
        self.rules = rules[::-1]  # the last matching line wins
        # One alternation per kind answers "does any line match?" at the cost of one search:
        # most paths match none, and are done with after it.
        self._any_name = _union([r for r in rules if r.basename])
        self._any_path = _union([r for r in rules if not r.basename])

    def __bool__(self) -> bool:
        return bool(self.rules)

    def decide(self, name: bytes, rel: bytes, is_dir: bool) -> bool | None:
        """True (ignored), False (re-included by a ``!`` line) or None (no line matches).
        ``rel``: the path below this file's folder; ``name``: its last part."""
        if not (
            (self._any_name is not None and self._any_name.match(name))
            or (self._any_path is not None and self._any_path.match(rel))
        ):
            return None
        for rule in self.rules:
            if rule.dir_only and not is_dir:
                continue
            if rule.regex.match(name if rule.basename else rel):
                return not rule.negated
        return None


def _union(rules: list[_Rule]) -> re.Pattern[bytes] | None:
    if not rules:
        return None
    return re.compile(b"|".join(b"(?:" + r.regex.pattern + b")" for r in rules), re.DOTALL)


def parse_ignore_file(text: bytes) -> IgnoreFile | None:
    """The rules of a ``.gitignore`` file's text, or None when it has none."""
    rules = IgnoreFile(text)
    return rules if rules else None
