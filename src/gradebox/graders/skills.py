"""Which agent skills a transcript shows in use, and AgentV's ``skill-used`` /
``not-skill-used`` checks over them. Pure logic.

A skill call is read from the tool calls the target reported, as AgentV derives it
(``providers/skill-calls.ts``): a ``Skill`` tool call names it; a ``Read`` of
``skills/NAME/SKILL.md`` (or ``.agents/skills/...``), a ``Bash`` command or any tool output that
mentions such a path counts too. Calls that report an error status do not count. Everything
here reads what the agent reported: each text is bounded before it is scanned, and every
pattern is anchored and linear.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass
from typing import Any

from .transcript import Trace, cut_name, listed

__all__ = ["SkillCall", "check_skills", "skill_calls"]

_MAX_TEXT = 100_000  # characters of one command or output scanned for skill paths
_PATH = re.compile(r"(?:^|/)(?:\.agents/)?skills/([A-Za-z0-9._:-]+)/SKILL\.md$")
_READ_PATH = ("file_path", "path", "filePath")  # a Read call's argument naming the file
_STRIP = re.compile(r"^[`\"'(\[{<]+|[`\"',;:)\]}>]+$")


@dataclass(frozen=True)
class SkillCall:
    name: str
    at: int  # the position of the tool call it was read from (``GraderResult.calls``)
    path: str | None = None
    source: str = "tool"

    def label(self) -> str:
        """As the evidence shows it: the agent wrote the name and path, so each is cut."""
        name = cut_name(self.name)
        return f"{name} ({self.source}, {cut_name(self.path)})" if self.path else name


def _paths(text: str) -> list[tuple[str, str]]:
    """``(name, path)`` of every ``skills/NAME/SKILL.md`` token in ``text``."""
    found: dict[str, str] = {}
    for raw in text[:_MAX_TEXT].split():
        token = _STRIP.sub("", raw).replace("\\", "/")
        m = _PATH.search(token)
        if m:
            found.setdefault(token, m.group(1))
    return [(name, path) for path, name in found.items()]


def skill_calls(trace: Trace) -> list[SkillCall]:
    """The skills the transcript shows in use, in order, without errored calls."""
    out: list[SkillCall] = []
    seen: set[tuple[str, str | None, str]] = set()

    def add(call: SkillCall) -> None:
        key = (call.name, call.path, call.source)
        if call.source == "tool" or key not in seen:
            seen.add(key)
            out.append(call)

    for at, call in enumerate(trace.tool_calls):
        if call.error:
            continue
        name = call.name.lower()
        args = call.args if isinstance(call.args, dict) else {}
        if name == "skill":
            skill = args.get("skill", args.get("name"))
            if isinstance(skill, str) and skill.strip():
                add(SkillCall(skill.strip(), at))
            continue
        if name == "read":
            path = next((args[k] for k in _READ_PATH if isinstance(args.get(k), str)), None)
            m = _PATH.search(path.strip().replace("\\", "/")) if path else None
            if m:
                add(SkillCall(m.group(1), at, path.strip(), "heuristic"))
            continue
        if name == "bash" and isinstance(args.get("command"), str):
            for skill, path in _paths(args["command"]):
                add(SkillCall(skill, at, path, "heuristic"))
        if call.output is not None:
            text = call.output if isinstance(call.output, str) else json.dumps(call.output)
            for skill, path in _paths(text):
                add(SkillCall(skill, at, path, "heuristic"))
    return out


def _matches(call: SkillCall, name: str | None, pattern: str | None) -> bool:
    if name and call.name != name:
        return False
    return not pattern or fnmatch.fnmatchcase(call.name.lower(), pattern.lower())


def check_skills(value: Any, trace: Trace, *, inverse: bool) -> tuple[bool, str, list[int]]:
    """AgentV's verdict: a name or a list (all used; with ``inverse`` none used), or
    ``{name|pattern, min, max}`` (a count; with ``inverse`` it must be zero). With it, the
    evidence (the skill calls seen, bounded) and the positions of the calls it counted."""
    calls = skill_calls(trace)
    actual = listed(calls, SkillCall.label)
    if isinstance(value, str | list):
        wanted = [value] if isinstance(value, str) else [str(v) for v in value]
        wanted = [w.strip() for w in wanted if w.strip()]
        at = sorted({c.at for c in calls if c.name in wanted})
        used = [w for w in wanted if any(_matches(c, w, None) for c in calls)]
        missing = [w for w in wanted if w not in used]
        if inverse and used:
            return False, f"forbidden skill(s) used: {', '.join(used)}; actual: {actual}", at
        if inverse:
            return True, f"forbidden skill(s) not used: {', '.join(wanted)}; actual: {actual}", at
        if missing:
            return False, f"missing skill(s): {', '.join(missing)}; actual: {actual}", at
        return True, f"required skill(s) used: {', '.join(wanted)}; actual: {actual}", at
    spec = value if isinstance(value, dict) else {}
    name, pattern = spec.get("name"), spec.get("pattern")
    label = pattern or name or "*"
    matched = [c for c in calls if _matches(c, name, pattern)]
    count, at = len(matched), sorted({c.at for c in matched})
    if inverse:
        return count == 0, f"forbidden skill {label!r} used {count} time(s); actual: {actual}", at
    low = spec.get("min", 0 if "max" in spec else 1)
    high = spec.get("max")
    ok = count >= int(low) and (high is None or count <= int(high))
    bound = f"at least {low}" if high is None else f"{low}-{high}"
    return ok, f"skill {label!r} used {count} time(s) (expected {bound}); actual: {actual}", at
