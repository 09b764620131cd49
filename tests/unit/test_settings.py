"""Every environment default is read in ``gradebox.core.settings`` and nowhere else.

A source walk, as ``test_layers`` walks imports: a read of ``os.environ`` (``os.getenv``) by a
GRADEBOX_* or CI name outside settings.py fails, and so does a use of the whole environment
(an alias of it, a copy of it) that is not listed below with the reason it is not a default.
"""

from __future__ import annotations

import ast
import re

import pytest

from gradebox.cli.session import CommandSession
from gradebox.core import settings
from gradebox.errors import ConfigError
from tests.unit.test_layers import modules, unit

OURS = re.compile(r"(GRADEBOX_\w+|CI)")

# Modules that take the whole environment (an alias, a copy, a name not written out) for what
# is not a default of gradebox's, and why. A read by a name written out (PATH, DOCKER_HOST) is
# checked by its name; setting a variable (GRADEBOX_RUNTIME, for what a command starts) is no
# read.
WHOLE_ENVIRONMENT = {
    "core.settings": "the one reader of the defaults",
    "sdk": "runs inside images: the harness's EVALUATE_* variables",
    "sdk.verify": "runs inside images: what the gate handed it",
    "core.scratch": "TMPDIR, TEMP, TMP: the system's temporary folder",
    "files.baseline": "the environment handed to git",
    "sandbox.host": "the environment handed to the host backend's grader",
    "sandbox._slot_server": "the environment handed to the runtime",
    "report.plain": "FORCE_COLOR and TTY_COMPATIBLE, as rich reads them",
    "llm.targets": "a target's own variables, named in its file (api keys, ${VAR})",
    "cluster.node": "the variables a suite names, checked on the node",
    "formats.agentv": "an AgentV suite's ${VAR}s, from its .env and the environment",
    "formats.agentv.providers": "a command judge's provider entry: its ${VAR}s, the same way",
    "cli.exec": "the harness's variables (EVALUATE_WORKSPACE...) and what --env names",
}


def _environ_uses(tree: ast.AST) -> list[tuple[int, str | None, bool]]:
    """(line, the literal name read or None, whether the whole environment is taken)."""
    consts = {
        t.id: n.value.value
        for n in ast.walk(tree) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
        for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value.value, str)
    }  # fmt: skip

    def name(node: ast.AST | None) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        return consts.get(node.id) if isinstance(node, ast.Name) else None

    def environ(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
            isinstance(node, ast.Name) and node.id == "environ"
        )

    parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    out = []
    for node in ast.walk(tree):
        func = node.func if isinstance(node, ast.Call) else None
        if isinstance(func, ast.Attribute) and func.attr == "getenv" and node.args:
            out.append((node.lineno, name(node.args[0]), False))
        if not environ(node):
            continue
        up = parents.get(node)
        if isinstance(up, ast.Subscript) and up.value is node:
            if isinstance(up.ctx, ast.Load):
                out.append((node.lineno, name(up.slice), False))
        elif isinstance(up, ast.Attribute) and up.attr in ("get", "pop"):
            call = parents.get(up)
            arg = call.args[0] if isinstance(call, ast.Call) and call.args else None
            out.append((node.lineno, name(arg), arg is None or name(arg) is None))
        elif not isinstance(up, ast.ImportFrom):
            out.append((node.lineno, None, True))
    return out


def test_environment_defaults_are_read_in_settings_only():
    bad = []
    for mod, (path, _) in modules().items():
        if mod == "core.settings":
            continue
        for line, read, whole in _environ_uses(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{path.relative_to(path.parents[2])}:{line}"
            if read is not None and OURS.fullmatch(read) and unit(mod) != "sdk":
                bad.append(f"{where}: reads {read}: read it through gradebox.core.settings")
            elif (whole or read is None) and mod not in WHOLE_ENVIRONMENT:
                bad.append(f"{where}: uses the whole environment: list why in WHOLE_ENVIRONMENT")
    assert bad == []


def test_every_listed_module_still_takes_the_environment():
    takers = {
        mod
        for mod, (path, _) in modules().items()
        for _, read, whole in _environ_uses(ast.parse(path.read_text(encoding="utf-8")))
        if whole or read is None
    }
    assert set(WHOLE_ENVIRONMENT) - takers - {"core.settings"} == set()


def test_the_walk_sees_every_spelling():
    code = """
import os
from os import environ
A = "GRADEBOX_X"
os.environ.get("GRADEBOX_SANDBOX")
os.environ["CI"]
os.getenv("GRADEBOX_CACHE")
environ.get(A)
os.environ["GRADEBOX_RUNTIME"] = "crun"
env = os.environ
"""
    uses = _environ_uses(ast.parse(code))
    assert sorted(uses) == [(5, "GRADEBOX_SANDBOX", False), (6, "CI", False),
                            (7, "GRADEBOX_CACHE", False), (8, "GRADEBOX_X", False),
                            (10, None, True)]  # fmt: skip


def test_settings_parse_the_environment(monkeypatch):
    monkeypatch.setenv("GRADEBOX_SANDBOX", " OCI ")
    monkeypatch.setenv("CI", "True")
    monkeypatch.setenv("GRADEBOX_WORKERS", "0")
    monkeypatch.setenv("GRADEBOX_ENGINE_CALLS", "7")
    monkeypatch.setenv("GRADEBOX_LLM_BACKOFF", "nope")
    monkeypatch.setenv("GRADEBOX_OCI_SLOTS", "off")
    monkeypatch.delenv("GRADEBOX_WORKSPACE", raising=False)
    now = settings.current()
    assert (now.sandbox, now.ci, now.workers, now.engine_calls) == ("oci", True, None, 7)
    assert (now.llm_backoff, now.oci_slots, now.workspace) == (1.0, False, "overlay")
    assert settings.current() is now  # parsed once for one environment
    monkeypatch.setenv("GRADEBOX_WORKSPACE", "copy")
    assert settings.current().workspace == "copy"  # and again when it changed


def test_a_test_overrides_the_settings(monkeypatch):
    monkeypatch.setenv("CI", "true")
    assert CommandSession().locked is True
    assert CommandSession(locked=False).locked is False
    own = settings.current()._replace(ci=False, sandbox="host")
    monkeypatch.setattr(settings, "current", lambda: own)
    assert CommandSession().locked is False
    assert CommandSession(sandbox="docker").wanted_sandbox() == "docker"
    assert CommandSession().wanted_sandbox("oci") == "host"


def test_every_reader_calls_settings_current():
    """A reader that took ``current`` itself (``from ..settings import current``) would keep
    the real one when a test replaces it."""
    taken = [
        (mod, alias.name)
        for mod, (path, _) in modules().items()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("settings")
        for alias in node.names
    ]  # fmt: skip
    assert taken == []


def test_the_session_checks_allow():
    assert CommandSession(allow=["network"]).allowed == {"network"}
    with pytest.raises(ConfigError, match="unknown privilege 'netwrk'"):
        CommandSession(allow=["netwrk"])
