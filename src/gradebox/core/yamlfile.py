"""Load YAML keeping line numbers, and turn pydantic errors into ``file:line: field: message``.

This is the one edge where configuration text becomes typed objects: everything inward gets
validated models, never dicts. Every YAML file gradebox reads (suites, grader files, AgentV
eval, case, scenario and targets files, includes) comes through ``load_yaml_file``, because any
of them may be written by someone the user does not trust (a grader pack, a shared eval).

Reading is bounded by limits of our own (PyYAML has none): the file's size, how deep it nests,
a scalar's length, an integer's digits, and how many nodes (values, lists, mappings) it stands
for once its aliases are expanded. Nodes are counted as they are composed, so a flood of small
items (a 2 MB flat list is a million nodes; each costs the heap some 400 bytes, ~200 times its
text) is refused at the line it passed the limit, before the heap holds it; a "billion laughs"
of nested anchors is refused in the same pass, naming the anchor's line. Values are those JSON
has: a tag that makes another kind (``!!binary``, ``!!set``, ``!!omap``, ``!!pairs``) is refused
at its line, and a date is its text, as are ``yes``, ``no``, ``on`` and ``off`` (as AgentV's
YAML, 1.2, reads them).
Events come from libyaml (``CParser``) when PyYAML has it; nodes are composed here, once, with
those limits and the line of each key, so no second parse is needed for line numbers.
"""

from __future__ import annotations

import gc
import os
import re
import stat
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import (
    AliasEvent,
    MappingEndEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from ..errors import ConfigError, ConfigErrors
from . import untrusted

__all__ = [
    "MAX_ALIAS_NODES",
    "MAX_ALIASES",
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_INT_DIGITS",
    "MAX_NODES",
    "MAX_SCALAR_CHARS",
    "LineMap",
    "load_yaml_file",
    "nesting_exceeds",
    "validate",
]

M = TypeVar("M", bound=BaseModel)
LineMap = dict[tuple[str, ...], int]

MAX_FILE_BYTES = 64 << 20
"""A configuration file larger than this is refused unread (a 20 MB suite of prose is well
inside; ``MAX_NODES`` bounds one of many small items)."""
MAX_NODES = 250_000
"""Nodes (values, lists, mappings) one file may stand for, aliases expanded: the shipped suites
hold a node per 10 bytes or more (the 5 KB v4 fixture: 508), so this is a suite of some 2.5 MB
of YAML, or 10,000 tests of 25 nodes; composed, it costs the heap about 100 MiB."""
MAX_DEPTH = 100
"""Collections nested deeper than this are refused (our code and pydantic walk them)."""
MAX_SCALAR_CHARS = 1 << 20
"""One scalar (a string, a number) of more characters than this is refused."""
MAX_INT_DIGITS = 4300
"""An integer of more digits is refused: Python refuses to print one (``sys.int_info``)."""
MAX_ALIASES = 100_000
"""Aliases (``*name``) one file may use."""
MAX_ALIAS_NODES = MAX_NODES
"""Nodes the aliases of one file may add once expanded (an alias of an alias counts whole):
they share the file's whole budget (``MAX_NODES``), which the nodes composed count against."""

# pydantic's stock wording, rewritten for people who write YAML rather than Python.
_REWRITES = {
    "Extra inputs are not permitted": "unknown field (check its spelling)",
    "Field required": "required field is missing",
}


class _Refused(yaml.YAMLError):
    """A limit of ours, at a line of the file."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.message, self.line = message, line


def _line(node_or_event: Any) -> int:
    return int(node_or_event.start_mark.line) + 1


# Each composed node gets ``_gb = (line, lines, size)``: its line, the lines below it (a dict
# key -> (key's line, lines below), a list of the items' ``_gb``, or None) and how many nodes it
# stands for once aliases are expanded. An aliased node shares all of it: nothing is copied.
_Entry = tuple[Any, ...]


# A key that is no string is named by str() of its value where an error names it.
_KEY_NAMES = {
    "tag:yaml.org,2002:null": lambda text: "None",
    "tag:yaml.org,2002:bool": lambda text: str(SafeConstructor.bool_values[text.lower()]),
}


class _BoundedComposer(Composer):
    """PyYAML's composer with our limits, and each key's line kept on the way."""

    def __init__(self) -> None:
        super().__init__()
        self._depth = 0
        self._aliases = 0
        self._alias_nodes = 0
        self._nodes = 0  # composed, and added by aliases: the file's size once expanded

    def _count(self, event: Any) -> None:
        """One more node composed: past ``MAX_NODES``, refused at its line (before it is
        built, so the heap never holds more than the limit's worth)."""
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise _Refused(
                f"more than {MAX_NODES:,} nodes (values, lists and mappings, aliases expanded)",
                _line(event),
            )

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()
        kind = type(event)
        if kind is AliasEvent:
            return self._alias(self.get_event())
        anchor = event.anchor
        if anchor is not None and anchor in self.anchors:
            first = _line(self.anchors[anchor])
            raise yaml.composer.ComposerError(
                None,
                None,
                f"a second anchor &{anchor} (the first is on line {first})",
                event.start_mark,
            )
        if kind is ScalarEvent:
            return self._scalar(anchor)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Refused(f"nested more than {MAX_DEPTH} levels deep", _line(event))
        node = self._sequence(anchor) if kind is SequenceStartEvent else self._mapping(anchor)
        self._depth -= 1
        return node

    def _alias(self, event: Any) -> Node:
        anchor = event.anchor
        if anchor not in self.anchors:
            raise yaml.composer.ComposerError(
                None, None, f"found undefined alias {anchor!r}", event.start_mark
            )
        node = self.anchors[anchor]
        done = getattr(node, "_gb", None)
        if done is None:  # still being composed: a structure that contains itself
            raise _Refused(f"the alias *{anchor} is inside its own anchor", _line(event))
        self._aliases += 1
        self._alias_nodes += done[2]
        self._nodes += done[2]
        if (
            self._aliases > MAX_ALIASES
            or self._alias_nodes > MAX_ALIAS_NODES
            or self._nodes > MAX_NODES
        ):
            # The alias pushed the file past its budget: named as the aliases' doing.
            raise _Refused(
                f"aliases expand past gradebox's limit ({MAX_ALIASES:,} aliases, "
                f"{MAX_NODES:,} nodes in all): refused at *{anchor}, whose anchor &{anchor} "
                "is on this line",
                _line(node),
            )
        return node  # type: ignore[no-any-return]

    def _scalar(self, anchor: str | None) -> Node:
        event = self.get_event()
        self._count(event)
        value = event.value
        if len(value) > MAX_SCALAR_CHARS:
            raise _Refused(f"a value longer than {MAX_SCALAR_CHARS:,} characters", _line(event))
        if "\0" in value:  # ("\0" in YAML) no path, argument or variable can carry one
            raise _Refused("a value holds a NUL character", _line(event))
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.resolve(ScalarNode, value, event.implicit)
        node = ScalarNode(tag, value, event.start_mark, event.end_mark, style=event.style)
        node._gb = (_line(event), None, 1)  # type: ignore[attr-defined]
        if anchor is not None:
            self.anchors[anchor] = node
        return node

    def _opened(self, kind: type[SequenceNode | MappingNode], anchor: str | None) -> Any:
        """The start event of a sequence or mapping, and its node (still empty)."""
        start = self.get_event()
        self._count(start)
        tag = start.tag
        if tag is None or tag == "!":
            tag = self.resolve(kind, None, start.implicit)
        node = kind(tag, [], start.start_mark, None, flow_style=start.flow_style)
        if anchor is not None:
            self.anchors[anchor] = node
        return start, node

    def _sequence(self, anchor: str | None) -> Node:
        start, node = self._opened(SequenceNode, anchor)
        items: list[_Entry] = []
        size = 1
        while type(self.peek_event()) is not SequenceEndEvent:
            item = self.compose_node(node, len(items))
            node.value.append(item)
            items.append(item._gb)  # type: ignore[attr-defined]
            size += item._gb[2]  # type: ignore[attr-defined]
        node.end_mark = self.get_event().end_mark
        node._gb = (_line(start), items, size)  # type: ignore[attr-defined]
        return node

    def _mapping(self, anchor: str | None) -> Node:
        start, node = self._opened(MappingNode, anchor)
        keys: dict[str, _Entry] = {}
        size = 1
        while type(self.peek_event()) is not MappingEndEvent:
            key = self.compose_node(node, None)
            value = self.compose_node(node, key)
            node.value.append((key, value))
            if isinstance(key, ScalarNode):  # a later duplicate wins, as it does in the data
                entry = (key._gb[0], value._gb[1])  # type: ignore[attr-defined]
                keys[key.value] = entry
                if key.tag in _KEY_NAMES:  # `~: 1` is found as written and as str(None)
                    keys[_KEY_NAMES[key.tag](key.value)] = entry
            size += key._gb[2] + value._gb[2]  # type: ignore[attr-defined]
        node.end_mark = self.get_event().end_mark
        node._gb = (_line(start), keys, size)  # type: ignore[attr-defined]
        return node


class _BoundedConstructor(SafeConstructor):
    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            # PyYAML's own constructors raise these for a scalar its resolver took for a date
            # or a number and that is none (``2001-13-45``, ``!!float abc``, ``!!bool maybe``).
            kind = str(node.tag).rsplit(":", 1)[-1]
            value = str(node.value)[:60] if isinstance(node, ScalarNode) else kind
            raise yaml.constructor.ConstructorError(
                None, None, f"not a valid {kind}: {value!r} ({exc})", node.start_mark
            ) from None

    def construct_yaml_int(self, node: ScalarNode) -> int:
        # Written with too many digits: refused before any work (``int()`` would refuse a
        # decimal one; sexagesimal ``1:2:3...`` grows in quadratic time).
        text = node.value.replace("_", "").lstrip("+-")
        if len(text) > 2 * MAX_INT_DIGITS or (text.isdigit() and len(text) > MAX_INT_DIGITS):
            raise _Refused(f"an integer of more than {MAX_INT_DIGITS:,} digits", _line(node))
        value = super().construct_yaml_int(node)
        # 0x... and 0b... reach more digits than they are written with: each integer we keep
        # can be printed.
        if abs(value) >= _INT_CEILING:
            raise _Refused(f"an integer of more than {MAX_INT_DIGITS:,} digits", _line(node))
        return value  # type: ignore[no-any-return]

    def construct_no_json(self, node: Node) -> Any:
        """``!!binary`` (bytes), ``!!set``, ``!!omap``, ``!!pairs``: values JSON has not, which
        every reader past this one would meet unprepared (``regex: !!binary ...`` was a
        traceback); refused at their line."""
        kind = str(node.tag).rsplit(":", 1)[-1]
        raise _Refused(
            f"the tag !!{kind} makes a value configuration cannot hold (text, "
            "numbers, lists and mappings only)",
            _line(node),
        )

    def construct_date_as_text(self, node: ScalarNode) -> str:
        # YAML 1.1 reads `2001-01-01` as a date, which no check, variable or JSON payload
        # takes; AgentV's YAML (1.2) reads it as text, as written.
        return str(node.value)


_INT_CEILING = 10**MAX_INT_DIGITS
_BoundedConstructor.add_constructor("tag:yaml.org,2002:int", _BoundedConstructor.construct_yaml_int)
for _tag in ("binary", "set", "omap", "pairs"):
    _BoundedConstructor.add_constructor(
        f"tag:yaml.org,2002:{_tag}", _BoundedConstructor.construct_no_json
    )
_BoundedConstructor.add_constructor(
    "tag:yaml.org,2002:timestamp", _BoundedConstructor.construct_date_as_text
)


class _Resolver(Resolver):
    """PyYAML's, with YAML 1.2's booleans and no base-60 numbers. YAML 1.1 also reads
    ``yes``, ``no``, ``on`` and ``off`` as booleans, and ``12:30`` as 750; AgentV's YAML (1.2)
    reads them as the text written, so a skill, a var or an expected answer named ``no`` or
    ``12:30`` is that text, and a flag written ``no`` is no boolean (a strict field names it)
    rather than a silent false."""


_BOOL, _INT, _FLOAT = (f"tag:yaml.org,2002:{t}" for t in ("bool", "int", "float"))
_Resolver.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_BOOL, _INT, _FLOAT)]
    for first, resolvers in Resolver.yaml_implicit_resolvers.items()
}
_TRUE_FALSE = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_Resolver.add_implicit_resolver(_BOOL, _TRUE_FALSE, list("tTfF"))
# PyYAML's number patterns less their base-60 branches (``[0-9]+(:[0-5]?[0-9])+``).
_NUMBER_START = list("-+0123456789")
_Resolver.add_implicit_resolver(
    _INT,
    re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
    _NUMBER_START,
)
_Resolver.add_implicit_resolver(
    _FLOAT,
    re.compile(
        r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    [*_NUMBER_START, "."],
)

if yaml.__with_libyaml__:
    from yaml.cyaml import CParser

    class _Loader(_BoundedComposer, CParser, _BoundedConstructor, _Resolver):  # type: ignore[misc]
        """libyaml's events; our composer (listed first, so CParser's own is not used)."""

        def __init__(self, text: str) -> None:
            CParser.__init__(self, text)
            _BoundedComposer.__init__(self)
            _BoundedConstructor.__init__(self)
            _Resolver.__init__(self)

else:  # PyYAML built without libyaml: the same, at Python's speed (a test runs it)
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Loader(  # type: ignore[no-redef]
        _BoundedComposer, Reader, Scanner, Parser, _BoundedConstructor, _Resolver
    ):
        def __init__(self, text: str) -> None:
            Reader.__init__(self, text)
            Scanner.__init__(self)
            Parser.__init__(self)
            _BoundedComposer.__init__(self)
            _BoundedConstructor.__init__(self)
            _Resolver.__init__(self)


class _Lines(dict[tuple[str, ...], int]):
    """Key path -> line, looked up in what the composer kept (nothing is parsed again)."""

    def __init__(self, root: _Entry | None) -> None:
        super().__init__()
        self._root = root

    def _find(self, key: tuple[Any, ...]) -> int | None:
        if self._root is None:
            return None
        entry = self._root
        for part in key:
            below = entry[1]
            if isinstance(below, dict):
                found = below.get(str(part))
            elif isinstance(below, list) and str(part).isdigit() and int(part) < len(below):
                found = below[int(part)]
            else:
                return None
            if found is None:
                return None
            entry = found
        return int(entry[0])

    def __bool__(self) -> bool:
        return True

    def get(self, key, default=None):  # type: ignore[no-untyped-def,override]
        found = self._find(key) if isinstance(key, tuple) else None
        return default if found is None else found

    def __contains__(self, key: object) -> bool:
        return isinstance(key, tuple) and self._find(key) is not None

    def __getitem__(self, key: tuple[str, ...]) -> int:
        found = self._find(key)
        if found is None:
            raise KeyError(key)
        return found


def load_yaml_file(path: Path, raw: bytes | None = None) -> tuple[Any, LineMap]:
    """Parse ``path`` (YAML or JSON) within our limits; also a map from key paths to lines.
    ``raw``: its bytes, already read (what is validated is then exactly what was read)."""
    if raw is None:
        raw = _read(path)
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(f"larger than {MAX_FILE_BYTES >> 20} MiB: refused", file=str(path))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read: {exc}", file=str(path)) from None
    loader = _Loader(text)
    # Every node and value made here lives until the end: the cyclic collector would walk the
    # growing heap again and again for nothing (it made loading 5-10 times slower). Nothing
    # composed here is cyclic (an alias inside its own anchor is refused).
    collecting = gc.isenabled()
    gc.disable()
    try:
        node = loader.get_single_node()
        data = None if node is None else loader.construct_document(node)
    except _Refused as exc:
        raise ConfigError(f"refused: {exc.message}", file=str(path), line=exc.line) from None
    except yaml.reader.ReaderError as exc:  # a character YAML refuses, at an offset
        # libyaml counts bytes (of the UTF-8 it was given: ``raw``), Python's reader characters.
        source: Any = raw if yaml.__with_libyaml__ else text
        newline = b"\n" if isinstance(source, bytes) else "\n"
        position = exc.position if isinstance(exc.position, int) else 0
        line = source.count(newline, 0, position) + 1
        raise ConfigError(
            f"invalid YAML: character #x{exc.character:04x}: {exc.reason}",
            file=str(path),
            line=line,
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(
            f"invalid YAML: {problem}", file=str(path), line=mark.line + 1 if mark else None
        ) from None
    finally:
        loader.dispose()
        if collecting:
            gc.enable()
    return data, _Lines(None if node is None else node._gb)


def _read(path: Path) -> bytes:
    """At most ``MAX_FILE_BYTES + 1`` bytes of ``path``, through the door: a regular file only
    (a FIFO there hung the loader in ``open``, ``/dev/zero`` was read to the cap)."""
    raw = untrusted.read_regular(path, MAX_FILE_BYTES)
    if raw is not None:
        return raw
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ConfigError("file not found", file=str(path)) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=str(path)) from None
    kind = untrusted.file_kind(st.st_mode)
    if kind is not None or stat.S_ISDIR(st.st_mode):
        what = kind or "a folder"
        raise ConfigError(f"not a regular file ({what}): refused unread", file=str(path))
    why = "permission denied" if not os.access(path, os.R_OK) else "it changed as it was read"
    raise ConfigError(f"cannot read: {why}", file=str(path))


def nesting_exceeds(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` (lists and dicts, as JSON makes them) nests deeper than ``limit``;
    iterative, so a value too deep for recursion is measured too."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            if depth >= limit:
                return True
            stack += [(child, depth + 1) for child in item]
    return False


def _line_for(loc: tuple[str, ...], lines: LineMap) -> int | None:
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def _clean_loc(loc: tuple[Any, ...]) -> tuple[str, ...]:
    # pydantic marks dict-key errors with a "[key]" step, and the member of a tagged union
    # with its tag (graders.entries names them "<Kind>"); users never wrote either.
    return tuple(str(p) for p in loc if p != "[key]" and not (isinstance(p, str) and p[:1] == "<"))


def validate(
    model: type[M],
    data: Any,
    *,
    file: str,
    lines: LineMap | None = None,
    prefix: tuple[str, ...] = (),
) -> M:
    """Validate ``data`` as ``model``; the first error becomes a located ``ConfigError``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise to_config_error(exc, file=file, lines=lines or {}, prefix=prefix) from None


def to_config_error(
    exc: ValidationError, *, file: str, lines: LineMap, prefix: tuple[str, ...] = ()
) -> ConfigError:
    """Every error of ``exc``, located (a ``ConfigErrors`` when there are several)."""
    errors = exc.errors(include_url=False)
    # A misspelt key also makes the real key "missing": name the misspelling, not both.
    misspelt = {tuple(e["loc"][:-1]) for e in errors if e["type"] == "extra_forbidden"}
    errors = [
        e for e in errors if not (e["type"] == "missing" and tuple(e["loc"][:-1]) in misspelt)
    ]
    errors.sort(key=lambda e: e["type"] != "extra_forbidden")
    found = []
    for error in errors:
        loc = (*prefix, *_clean_loc(tuple(error["loc"])))
        message = error["msg"]
        for stock, friendly in _REWRITES.items():
            if message.startswith(stock):
                message = friendly
        message = message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
        found.append(
            ConfigError(message, file=file, line=_line_for(loc, lines), field=".".join(loc) or None)
        )
    return found[0] if len(found) == 1 else ConfigErrors(found)
