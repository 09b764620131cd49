"""Every command of the CLI reaches a grader through ``GraderRun`` and nothing else.

The commands are read from the typer app itself: one added later must be listed here, as
running graders (with a call that does) or as never running one. Each grader-running command
runs on the host backend, whose entry points (``run``, ``prepare``) record whether a
``GraderRun`` frame is on the stack that called them; a command that builds a container by
hand (a second copy of the run) is caught here."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gradebox.cli.app import app
from gradebox.graders import grader_run
from gradebox.sandbox.host import HostSandbox
from tests.conftest import write

GRADER = """import json, sys
d = json.load(sys.stdin)
ok = "42" in (d.get("output") or "")
print(json.dumps({"pass": ok, "score": 1.0 if ok else 0.0, "reasoning": "checked"}))
"""

# The commands that never start a grader's container (their own tests say what they do).
NEVER = {"validate", "validate-refs", "compare", "report", "view", "gc", "schemas", "doctor",
         "images"}  # fmt: skip


def _under_grader_run() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if code.co_filename == grader_run.__file__ and code.co_qualname.startswith("GraderRun."):
            return True
        frame = frame.f_back
    return False


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The host backend's entry points, each call recorded: under a GraderRun or not."""
    seen: list[bool] = []
    run, prepare = HostSandbox.run, HostSandbox.prepare

    def checked_run(self, spec):  # type: ignore[no-untyped-def]
        seen.append(_under_grader_run())
        return run(self, spec)

    def checked_prepare(self, spec, *, warm=True):  # type: ignore[no-untyped-def]
        seen.append(_under_grader_run())
        return prepare(self, spec, warm=warm)

    monkeypatch.setattr(HostSandbox, "run", checked_run)
    monkeypatch.setattr(HostSandbox, "prepare", checked_prepare)
    # exec refuses the host backend by name: it gets it as its docker backend here.
    monkeypatch.setattr("gradebox.sandbox.get_sandbox", lambda name=None: HostSandbox())
    monkeypatch.delenv("GRADEBOX_SANDBOX", raising=False)
    return seen


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    tmp_path.chmod(0o755)  # exec mounts the current folder: open to the sandbox user
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "check.py", GRADER)
    write(tmp_path / ".gradebox" / "graders" / "answer.py", GRADER)
    (tmp_path / "ws").mkdir()
    rows = [{"id": "a", "input": "q", "output": "42"}, {"id": "b", "input": "q", "output": "7"}]
    write(tmp_path / "records.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    write(tmp_path / "payload.json", json.dumps({"output": "42"}))
    write(tmp_path / "suite.yaml", "name: s\ntests:\n  - id: t\n    output: '42'\n    assert:\n"
          "      - {type: script, command: [python3, check.py]}\n")  # fmt: skip
    return tmp_path


HOST = ["--sandbox", "host"]
RUNS: dict[str, list[list[str]]] = {
    "grade": [["grade", "check.py", "-i", "payload.json", "-W", "ws", *HOST]],
    "exec": [["exec", "--sandbox", "docker", "--", "python3", "check.py"]],
    "assert": [["assert", "answer", "--agent-output", "42", *HOST]],
    "batch": [["batch", "records.jsonl", "-g", "check.py", "-o", "out.jsonl", *HOST]],
    "trials": [["trials", "records.jsonl", "-g", "check.py", "-k", "1", *HOST]],
    "calibrate": [
        ["batch", "records.jsonl", "-g", "check.py", "-o", "graded.jsonl", *HOST],
        ["calibrate", "graded.jsonl", "-n", "1", "-g", "check.py", "-o", "sheet.md", *HOST],
    ],
    "run": [["run", "suite.yaml", "--format", "gradebox", "-o", "results", *HOST]],
}


def test_every_command_is_listed():
    commands = set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    assert commands == set(RUNS) | NEVER, "list a new command in RUNS or NEVER"


@pytest.mark.parametrize("command", sorted(RUNS))
def test_each_command_reaches_its_grader_through_grader_run(command, tree, calls):
    for argv in RUNS[command]:
        stdin = json.dumps({"output": "42"}) if command == "exec" else None
        done = CliRunner().invoke(app, argv, input=stdin)
        assert done.exit_code in (0, 1), (argv, done.output, done.exception)
    assert calls, f"{command} never reached a grader"
    assert all(calls), f"{command} reached the sandbox outside GraderRun"


def test_prepare_grader_takes_a_validated_config_as_a_library_user_has_it(tmp_path):
    """The edge's model (``load_grader``) or the record it makes: both run, one way."""
    from gradebox import Payload, load_grader
    from gradebox.graders.run import prepare_grader

    (tmp_path / "g.yaml").write_text("type: script\ncommand: [python3, -c, 'print(1)']\n")
    grader = load_grader(tmp_path / "g.yaml")
    with HostSandbox() as box:
        for given in (grader, grader.to_record()):
            result = prepare_grader(given, tmp_path, box).run(Payload(output="x"))
            assert result.status == "passed", result
