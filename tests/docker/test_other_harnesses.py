"""Other harnesses' files run unchanged, on real containers: AgentV eval files (both forms,
JSONL), a Vally program grader, plaited inline graders (script and module forms), uv and bun."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gradebox.drivers.runner import RunOptions, read_results, run_suite
from gradebox.images import ImageResolver
from gradebox.suite import load_suite
from tests.conftest import write

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parents[2]
AGENTV = ROOT / "tests" / "fixtures" / "agentv"


def gradebox(*args: object, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gradebox", *map(str, args)], capture_output=True, text=True,
        cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )  # fmt: skip


def test_agentv_todays_form_gives_the_verdicts_its_users_expect(tmp_path, box, engine):
    suite = load_suite(AGENTV / "current" / "evals" / "release.eval.yaml")
    summary = run_suite(suite, box, ImageResolver(engine), RunOptions(tmp_path / "out", workers=2))
    results = read_results(tmp_path / "out" / "results.jsonl")
    status = {k: (r.status.value, round(r.score, 3)) for k, r in results.items()}
    assert status == {
        "capital": ("passed", 1.0),
        "four-of-five": ("passed", 0.8),  # 4 of 5 reaches AgentV's 0.8 threshold
        "required-gate": ("failed", 0.0),  # 0.8, but a required gate failed: AgentV's 0
        "json-set": ("passed", 0.875),  # the set scores 0.5 and passes its 0.5 threshold
        "edit-workspace": ("passed", 1.0),
    }, {k: [(g.name, g.status.value, g.evidence) for g in r.graders] for k, r in results.items()}
    assert summary.passed == 4 and summary.failed == 1
    gate = results["required-gate"]
    assert gate.gates_failed == ["mentions-madrid scored 0.00 < required 0.8"]
    capital = results["capital"]
    assert capital.output == "Paris is the capital of France." and capital.threshold == 0.8
    negated = next(g for g in capital.graders if g.negated)
    assert negated.passed and negated.evidence.startswith("negated:")
    json_set = next(g for g in results["json-set"].graders if g.type == "assert-set")
    assert json_set.name == "fields" and json_set.score == 0.5
    assert [c.passed for c in json_set.children] == [True, False]
    edit = {g.name: g for g in results["edit-workspace"].graders}
    # A `../` grader path ran, its extra keys arrived as config, criteria was "".
    assert edit["edited"].passed and "['notes.md'] of ['notes.md']" in edit["edited"].evidence
    # The Vally grader read trajectory.metrics and its details became checks.
    vally = edit["vally"]
    assert vally.passed, (vally.evidence, vally.stderr_tail)
    assert [c.text for c in vally.checks] == [
        "agent-used-tools", "summary-has-total", "stimulus-seen",
    ]  # fmt: skip
    assert vally.checks[0].evidence == "2 tool call(s)"


def test_agentv_earlier_form_hooks_repos_and_targets_file(tmp_path, box, engine):
    suite = load_suite(AGENTV / "legacy" / "evals" / "calc.yaml")
    run_suite(suite, box, ImageResolver(engine), RunOptions(tmp_path / "out", workers=2))
    results = read_results(tmp_path / "out" / "results.jsonl")
    fixed, nothing = results["fix-add"], results["nothing"]
    assert fixed.status.value == "passed", [(g.name, g.evidence) for g in fixed.graders]
    assert nothing.status.value == "failed" and nothing.score == 0.5
    calc = next(g for g in fixed.graders if g.name == "calc-fixed")
    # before_all ran once on the prepared template, before_each in this test's workspace,
    # both before the agent; the repository came from a local folder.
    assert "add(2, 3) = 5" in calc.evidence
    assert "hooks: ['before_all', 'None', 'before_each', 'fix-add']" in calc.evidence


def test_agentv_jsonl_with_a_sidecar_through_the_cli(tmp_path):
    p = gradebox("run", AGENTV / "jsonl" / "cases.jsonl", "--out", tmp_path / "o", "--json")
    assert p.returncode == 0, p.stdout + p.stderr
    summary = json.loads(p.stdout)["summary"]
    assert summary["passed"] == 2


def test_agentv_suite_threshold_is_every_tests_threshold(tmp_path):
    shutil.copytree(AGENTV / "jsonl", tmp_path / "j")
    write(
        tmp_path / "j" / "cases.yaml",
        "threshold: 0.99\nproviders:\n  - id: cli\n    label: echo\n    config:\n"
        "      command: \"printf '%s' {PROMPT} > {OUTPUT_FILE}\"\n"
        "assert:\n  - type: icontains\n    value: say\n    weight: 9\n"
        "  - type: contains\n    value: goodbye\n",
    )
    p = gradebox("run", tmp_path / "j" / "cases.jsonl", "--out", tmp_path / "o", "--json")
    summary = json.loads(p.stdout)["summary"]
    # AgentV's top-level threshold is each test's pass mark: 1.0 reaches 0.99, 0.9 does not.
    assert (summary["passed"], summary["failed"]) == (1, 1)
    assert p.returncode == 1, p.stdout + p.stderr


def test_validate_lists_every_error(tmp_path):
    path = write(
        tmp_path / "bad.eval.yaml",
        "tests:\n  - id: a\n    vars: {}\n    assert:\n      - type: nope\n"
        "      - {type: contains, weight: -1, value: x}\n",
    )
    p = gradebox("validate", path)
    assert p.returncode == 2
    lines = [x for x in p.stderr.splitlines() if str(path) in x]
    assert len(lines) == 2 and "tests.0.assert.0.type" in lines[0]
    assert "tests.0.assert.1.weight" in lines[1], p.stderr


def test_validate_names_what_this_machine_lacks_for_the_run(tmp_path):
    # AgentV checks a judge when it grades; validate says so before anything runs.
    path = write(tmp_path / "e.eval.yaml", "tests:\n  - {id: a, vars: {}, assert: [Be helpful]}\n")
    p = gradebox("validate", path)
    assert p.returncode == 2 and "tests.0.assert.0: " in p.stderr
    assert "needs a model target" in p.stderr, p.stderr


# --------------------------------------------------------------------------------------------
# Inline graders (plaited): no false pass, and the module form.

SILENT = "import sys\nsys.stdin.read()\n"  # exit 0, prints nothing
MODULE_JS = """export const grade = async ({ output, hint }) => {
  console.log("debug: grading");  // must not end up in the result
  const pass = output.toLowerCase().includes((hint || "").toLowerCase());
  return { pass, score: pass ? 1 : 0, reasoning: pass ? "contains hint" : "missing hint" };
};
"""
MODULE_TS = """type Input = { output: string; hint?: string };
export const grade = async ({ output, hint }: Input) => {
  const pass: boolean = output.includes(hint ?? "");
  return { pass, score: pass ? 1.0 : 0.0, reasoning: `typed: ${pass}` };
};
"""
RECORDS = [
    {"id": "yes", "input": "Find the CEO", "output": "It is Dario Amodei.", "hint": "Dario"},
    {"id": "no", "input": "Find the CEO", "output": "No idea.", "hint": "Dario"},
]


def _batch(tmp_path: Path, grader: Path) -> dict[str, dict]:
    src = tmp_path / "r.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    out = tmp_path / f"{grader.name}.out.jsonl"
    p = gradebox("batch", src, "--grader", grader, "-o", out, "--json")
    assert p.returncode in (0, 1, 3), p.stderr
    return {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}


def test_inline_no_json_is_an_error_never_a_pass(tmp_path):
    script = write(tmp_path / "silent.py", SILENT)
    as_yaml = write(tmp_path / "silent.yaml", "type: script\ncommand: [python3, silent.py]\n")
    for grader in (script, as_yaml):
        rows = _batch(tmp_path, grader)
        assert {k: r["status"] for k, r in rows.items()} == {"yes": "error", "no": "error"}
        assert "no JSON result" in rows["yes"]["reasoning"]


@pytest.mark.parametrize(("name", "body"), [("grader.mjs", MODULE_JS), ("grader.ts", MODULE_TS)])
def test_inline_module_exporting_grade_is_called(tmp_path, name, body):
    rows = _batch(tmp_path, write(tmp_path / name, body))
    assert {k: r["status"] for k, r in rows.items()} == {"yes": "passed", "no": "failed"}, rows
    assert rows["yes"]["reasoning"] in ("contains hint", "typed: true")


def test_a_module_without_grade_is_an_error(tmp_path):
    rows = _batch(tmp_path, write(tmp_path / "g.mjs", "export const nope = 1;\n"))
    assert rows["yes"]["status"] == "error"


# --------------------------------------------------------------------------------------------
# Runtimes real graders call.

UV_GRADER = """# /// script
# requires-python = ">=3.9"
# dependencies = []
# ///
import json, sys
d = json.load(sys.stdin)
print(json.dumps({"pass": d["output"] == "42", "score": 1.0, "reason": "uv ran me"}))
"""


def test_uv_run_works_offline_in_the_python_image(tmp_path):
    write(tmp_path / "check.py", UV_GRADER)
    grader = write(tmp_path / "g.yaml", "type: script\ncommand: [uv, run, --script, check.py]\n")
    payload = write(tmp_path / "p.json", json.dumps({"output": "42"}))
    p = gradebox("grade", grader, "--input", payload, "--json", "--workspace", tmp_path)
    result = json.loads(p.stdout)
    assert p.returncode == 0 and result["evidence"] == "uv ran me", p.stdout + p.stderr


def test_typescript_script_grader_runs_with_bun(tmp_path):
    grader = write(
        tmp_path / "check.ts",
        "const d: { output: string } = JSON.parse(await Bun.stdin.text());\n"
        "console.log(JSON.stringify({ pass: d.output === '42', score: 1, reason: 'bun' }));\n",
    )
    payload = write(tmp_path / "p.json", json.dumps({"output": "42"}))
    p = gradebox("grade", grader, "--input", payload, "--json", "--workspace", tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads(p.stdout)["evidence"] == "bun"
