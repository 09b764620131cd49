"""The grader SDK on real containers: one grader under every protocol, the helpers, a bug."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gradebox
from gradebox import sdk
from gradebox.drivers.runner import read_results
from gradebox.images import qualified
from tests.conftest import write

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]
SDK = ROOT / "examples" / "sdk"


def gradebox_cli(*args: object, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gradebox", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )


def test_the_sdk_in_the_image_is_this_one(box):
    """The python image carries the very bytes of this SDK and of the verifier runner."""
    from gradebox.sandbox.base import SandboxSpec

    show = (
        "import hashlib, gradebox.sdk as s, gradebox.verify as v; "
        "print(s.__version__, *(hashlib.sha256(open(m.__file__, 'rb').read()).hexdigest()"
        " for m in (s, v)))"
    )
    outcome = box.run(
        SandboxSpec(image=box.resolve_image(qualified("python")), command=["python3", "-c", show])
    )
    here = [
        hashlib.sha256((ROOT / "src" / "gradebox" / f).read_bytes()).hexdigest()
        for f in ("sdk/__init__.py", "sdk/verify.py")
    ]
    assert outcome.stdout.decode().split() == [gradebox.__version__, *here], outcome.stderr


def test_run_script_program_custom_assertion_and_verifier(tmp_path):
    p = gradebox_cli("run", SDK / "suite.yaml", "--out", tmp_path / "o")
    assert p.returncode == 0, p.stdout + p.stderr
    result = read_results(tmp_path / "o" / "results.jsonl")["answer"]
    graders = {g.name: g for g in result.graders}
    assert {n: g.status.value for n, g in graders.items()} == {
        "as-script": "passed",
        "as-program": "passed",
        "workspace": "passed",
        "mentions": "passed",
        "pytest": "passed",
    }
    assert [c.text for c in graders["as-program"].checks] == [
        "the answer says 42",
        "the answer is one sentence",
    ]
    assert graders["workspace"].checks[2].text == "config.json: answer.value == 42"


def test_batch_grade_and_assert(tmp_path):
    out = tmp_path / "graded.jsonl"
    p = gradebox_cli("batch", SDK / "records.jsonl", "--grader", SDK / "check_answer.py", "-o", out)
    assert p.returncode == 1, p.stdout + p.stderr  # one record fails, on purpose
    rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert (rows["right"]["status"], rows["wrong"]["status"]) == ("passed", "failed")
    assert "1/2 checks passed" in rows["wrong"]["reasoning"]
    payload = write(tmp_path / "p.json", json.dumps({"output": "It is 42."}))
    p = gradebox_cli("grade", SDK / "check_answer.py", "--input", payload, "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["score"] == 1.0, p.stderr
    p = gradebox_cli("assert", "answer-ok", "--agent-output", "It is 41. Sure.", cwd=SDK)
    assert p.returncode == 1 and json.loads(p.stdout)["score"] == 0.0, p.stdout + p.stderr


@pytest.mark.parametrize("how", ["script", "program", "batch"])
def test_an_exception_is_an_error_never_a_pass(tmp_path, how):
    broken = SDK / "broken.py"
    if how == "batch":
        src = write(tmp_path / "r.jsonl", '{"id": "a", "input": "q", "output": "x"}\n')
        p = gradebox_cli("batch", src, "--grader", broken, "-o", tmp_path / "o.jsonl")
        row = json.loads((tmp_path / "o.jsonl").read_text())
        assert row["status"] == "error" and p.returncode == 3
        return
    write(tmp_path / "broken.py", broken.read_text())
    body = (
        "command: [python3, broken.py]"
        if how == "script"
        else "program: python3\nargs: [broken.py]"
    )
    grader = write(tmp_path / "g.yaml", f"type: {how}\n{body}\n")
    p = gradebox_cli("grade", grader, "--json", "--workspace", tmp_path)
    result = json.loads(p.stdout)
    assert p.returncode == 3 and result["status"] == "error", result
    assert "ZeroDivisionError" in (result["stderr_tail"] or "")


def test_helpers_on_the_host(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALUATE_WORKSPACE", str(tmp_path))
    write(tmp_path / "a.yaml", "x:\n  y: [1, 2]\n")
    write(tmp_path / "a.json", '{"x": {"y": [1, 2]}}')
    f = sdk.file
    assert f("a.yaml").yaml_field("x.y.1", 2).passed
    assert f("a.json").json_field("x.y", [1, 2]).passed
    assert not f("a.json").json_field("x.z", 1).passed
    assert not f("nope").contains("x").passed and f("a.json").not_matches(r"\d{3}").passed


EVERY_HELPER = """from gradebox.sdk import Check, file, grader


@grader
def grade(ctx):
    return [
        file("a.txt").exists(),
        file("a.txt").contains("hello"),
        file("a.txt").not_contains("bye"),
        file("a.txt").matches(r"^hel+o"),
        file("a.txt").not_matches(r"\\\\d"),
        file("c.json").json_field("k.v", 1),
        file("c.yaml").yaml_field("k.v", 1),
        ctx.check("sees the answer", ctx.output == "42"),
        file("missing.txt").exists(),  # the one failing check
    ]
"""


@pytest.mark.parametrize("dialect", ["script", "assertion", "inline", "program"])
def test_every_helper_under_every_dialect(tmp_path, box, dialect):
    from gradebox.graders.config import ProgramGrader, ScriptGrader
    from gradebox.graders.run import run_grader
    from gradebox.protocol.models import InlinePayload, Payload

    src = tmp_path / "src"
    write(src / "g.py", EVERY_HELPER)
    ws = tmp_path / "ws"
    write(ws / "a.txt", "hello world")
    write(ws / "c.json", '{"k": {"v": 1}}')
    write(ws / "c.yaml", "k:\n  v: 1\n")
    if dialect == "program":
        grader = ProgramGrader(program="python3", args=["g.py"]).with_source(src)
    else:
        grader = ScriptGrader(command=["python3", "g.py"], dialect=dialect).with_source(src)
    payload = InlinePayload(input="q", output="42") if dialect == "inline" else Payload(output="42")
    result = run_grader(grader, payload, ws, box)
    assert result.status.value == "failed", (result.evidence, result.stderr_tail)
    assert result.score == pytest.approx(8 / 9)
    assert [c.passed for c in result.checks] == [True] * 8 + [False]
