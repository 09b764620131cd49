"""What another harness hands a grader, read and rewritten for ``gradebox exec``.

A harness (AgentV, Vally, plaited, promptfoo) runs a grader as a host command and names host
paths to it: the workspace (``--workspace``, ``EVALUATE_WORKSPACE``, ``AGENTV_WORKSPACE_PATH``,
the payload's ``workspace_path``), the payload file (``EVALUATE_GRADER_INPUT``), a large
answer (the payload's ``output_path``). Inside the sandbox those paths are elsewhere; this
module finds them and rewrites each to its sandbox path, and nothing else: the rest of stdin
stays byte for byte, and the environment passes only what ``ENV_PASSED`` names (never the
host's secrets).

Pure functions, no pydantic: ``gradebox exec`` runs them on its hot path. Every parse here is
linear in its input (stdin may be megabytes written by a hostile agent's answer).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from json.decoder import scanstring
from pathlib import PurePosixPath

__all__ = [
    "ENV_PASSED",
    "IMAGE_OF",
    "image_for",
    "passed_env",
    "rewrite_top_level",
    "top_level_strings",
]

# Names the sandbox gets from the host as they are: locale and colour settings, nothing that
# can carry a secret. Anything else only when asked for by name (`--env NAME`).
ENV_PASSED = ("LANG", "LANGUAGE", "TZ", "NO_COLOR", "FORCE_COLOR", "TERM")
ENV_PASSED_PREFIXES = ("LC_",)

# The command's program -> the image that has it (the python image also has sh).
IMAGE_OF = {
    **dict.fromkeys(("python", "python3", "uv", "pytest", "pip"), "python"),
    **dict.fromkeys(("node", "nodejs", "bun", "bunx", "npx", "npm", "tsx"), "node"),
    **dict.fromkeys(("sh", "bash", "dash"), "shell"),
}
_VERSIONED = re.compile(r"^(python|node)[0-9.]*$")

# One JSON string token (linear: no nested quantifier can backtrack), else a quote that
# starts no string (unterminated: the scan stops there, never retries at each later quote),
# else one bracket.
_STRING = r'"[^"\\]*(?:\\.[^"\\]*)*"'
_SCAN = re.compile(_STRING + r'|"|[{}\[\]]')
_WS = re.compile(r"[ \t\r\n]*")
_DECODER = json.JSONDecoder()


def top_level_strings(data: bytes, keys: tuple[str, ...]) -> dict[str, list[tuple[int, int]]]:
    """Where, in a JSON object's text, the top-level ``keys`` have string values: key ->
    byte spans ``(start, end)`` of each value's token (a repeated key: every one, in order).

    Only members of the outermost object count: a key nested anywhere deeper, or text inside
    any string (an agent's answer quoting ``"workspace_path": ...``), is never one. Text that
    is not a JSON object gives nothing. Linear in ``len(data)``: members are walked here, and
    each value is skipped by the json module's C scanner (a value nested deeper than it
    recurses, by a bracket count)."""
    text = data.decode("utf-8", "surrogateescape")  # every byte maps back as it was
    wanted = set(keys)
    found: dict[str, list[tuple[int, int]]] = {}
    spans: list[tuple[str, int, int]] = []
    i = _WS.match(text, 1 if text.startswith("\ufeff") else 0).end()
    if text[i : i + 1] != "{":
        return found
    i = _WS.match(text, i + 1).end()
    try:
        while text[i : i + 1] == '"':
            key, i = scanstring(text, i + 1)
            i = _WS.match(text, i).end()
            if text[i : i + 1] != ":":
                return found
            i = _WS.match(text, i + 1).end()
            if text[i : i + 1] == '"':
                start = i
                _, i = scanstring(text, i + 1)
                if key in wanted:
                    spans.append((key, start, i))
            else:
                i = _skip_value(text, i)
            i = _WS.match(text, i).end()
            if text[i : i + 1] != ",":
                break
            i = _WS.match(text, i + 1).end()
    except (ValueError, IndexError):
        return found
    # str indices -> byte offsets, in one pass over the text before the last span.
    pos = offset = 0
    for key, start, end in spans:
        offset += len(text[pos:start].encode("utf-8", "surrogateescape"))
        size = len(text[start:end].encode("utf-8", "surrogateescape"))
        found.setdefault(key, []).append((offset, offset + size))
        pos, offset = end, offset + size
    return found


def _skip_value(text: str, i: int) -> int:
    """The end of the JSON value at ``i`` (not a string)."""
    try:
        return _DECODER.raw_decode(text, i)[1]
    except RecursionError:
        pass
    # Nested deeper than the C scanner recurses: count brackets (strings skipped whole), on
    # the text itself (no re-encoding of what precedes it: one pass per value).
    if text[i] not in "[{":
        raise ValueError("not a value")
    depth = 0
    for m in _SCAN.finditer(text, i):
        token = m.group()
        if token == '"':
            raise ValueError("unterminated string")
        if token[0] in "[{":
            depth += 1
        elif token[0] in "]}":
            depth -= 1
            if depth == 0:
                return m.end()
    raise ValueError("unterminated value")


def decode_string(data: bytes, span: tuple[int, int]) -> str | None:
    """The value of the JSON string token at ``span``; None when it is not a valid one."""
    try:
        value = json.loads(data[span[0] : span[1]])
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def rewrite_top_level(data: bytes, new: Mapping[tuple[int, int], str]) -> bytes:
    """``data`` with the string token at each span replaced by ``new[span]`` (JSON-encoded);
    every other byte as it was."""
    out: list[bytes] = []
    pos = 0
    for start, end in sorted(new):
        out += [data[pos:start], json.dumps(new[(start, end)]).encode()]
        pos = end
    out.append(data[pos:])
    return b"".join(out)


def passed_env(host: Mapping[str, str]) -> dict[str, str]:
    """The part of the host's environment a sandboxed command gets without asking."""
    return {k: v for k, v in host.items() if k in ENV_PASSED or k.startswith(ENV_PASSED_PREFIXES)}


def image_for(program: str, shebang: bytes | None = None) -> str | None:
    """The image a command needs, from its program's name (``python3`` -> python, ``bun`` ->
    node, ``bash`` -> shell), else from a script's ``#!`` line; None: no clue."""
    name = PurePosixPath(program).name
    if name in IMAGE_OF:
        return IMAGE_OF[name]
    m = _VERSIONED.match(name)
    if m:
        return IMAGE_OF[m.group(1)]
    if shebang and shebang.startswith(b"#!"):
        words = shebang[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
        if words and PurePosixPath(words[0]).name == "env":
            words = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        for word in words[:1]:
            return image_for(word)
    return None
