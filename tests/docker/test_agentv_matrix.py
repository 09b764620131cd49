"""AgentV target matrices and batching providers, run for real: a v4 file with two targets
(a mock on the host, a cli command in the sandbox) runs every test once per target, each
result tagged, the summary (summary.json, the terminal table, the HTML report) split by
target; a ``provider_batching`` cli target answers every test with one call (JSONL keyed by
test id), a test it leaves out an error."""

from __future__ import annotations

import json
import os
import re
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

TARGETS = (
    "targets:\n"
    "  - {name: good_mock, provider: mock, response: the answer is 42}\n"
    "  - {name: runner, provider: cli, command: 'sh agent.sh {EVAL_ID} {OUTPUT_FILE}'}\n"
)
MATRIX = """\
execution:
  targets:
    - {name: mock, use_target: good_mock}
    - runner
tests:
  - id: answer
    input: what is the answer?
    assertions:
      - {type: contains, value: '42'}
  - id: echo
    input: say your test id
    assertions:
      - {type: contains, value: 'id=echo;'}
"""


def _matrix(tmp_path: Path) -> Path:
    # The cli target answers with the id it is given: the test's own, not ID@TARGET.
    write(tmp_path / "evals" / "agent.sh", 'printf "id=%s; no idea" "$1" > "$2"\n')
    write(tmp_path / ".agentv" / "targets.yaml", TARGETS)
    return write(tmp_path / "evals" / "m.eval.yaml", MATRIX)


def test_a_matrix_runs_each_test_per_target_and_splits_the_summary(tmp_path, box, engine):
    path = _matrix(tmp_path)
    out = tmp_path / "out"
    summary = run_suite(load_suite(path), box, ImageResolver(engine), RunOptions(out, workers=2))
    results = read_results(out / "results.jsonl")
    got = {k: (r.status.value, r.target_name) for k, r in results.items()}
    assert got == {
        "answer@mock": ("passed", "mock"),
        "echo@mock": ("failed", "mock"),
        "answer@runner": ("failed", "runner"),
        "echo@runner": ("passed", "runner"),  # {EVAL_ID} was "echo"
    }, {k: (r.error, r.output) for k, r in results.items()}
    assert (summary.total, summary.passed, summary.failed) == (4, 2, 2)
    written = json.loads((out / "summary.json").read_text())
    assert {k: (v["passed"], v["failed"], v["pass_rate"]) for k, v in written["targets"].items()} \
        == {"mock": (1, 1, 0.5), "runner": (1, 1, 0.5)}  # fmt: skip
    # --resume keeps every result of the unchanged matrix: ids and fingerprints are stable
    again = run_suite(
        load_suite(path), box, ImageResolver(engine), RunOptions(out, workers=2, resume=True)
    )
    assert again.reused == 4


def test_the_cli_prints_and_reports_each_target(tmp_path):
    path = _matrix(tmp_path)
    report = tmp_path / "report.html"
    p = subprocess.run(
        [sys.executable, "-m", "gradebox", "run", str(path), "--out", str(tmp_path / "o"),
         "--report", str(report)],
        capture_output=True, text=True, cwd=tmp_path / "evals",
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"},
    )  # fmt: skip
    assert p.returncode == 1, p.stdout + p.stderr  # two tests fail
    assert "per target" in p.stdout and "runner" in p.stdout, p.stdout
    html = report.read_text()
    assert '"target":"runner"' in html  # the rows' data; the page draws the per-target table


BATCH_TARGETS = (
    "targets:\n"
    "  - {name: batch, provider: cli, provider_batching: true,"
    " command: 'sh batch.sh {OUTPUT_FILE}'}\n"
)
BATCH_TESTS = "".join(
    f"  - id: {i}\n    input: x\n    assertions:\n      - {{type: contains, value: '42'}}\n"
    for i in ("right", "wrong", "left-out", "twice")
)


class _Counting:
    """The sandbox, counting what runs by name."""

    def __init__(self, inner) -> None:
        self.inner, self.names = inner, []

    def run(self, spec):
        self.names.append(spec.name)
        return self.inner.run(spec)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_batching_target_answers_every_test_in_one_call(tmp_path, box, engine):
    write(
        tmp_path / "evals" / "batch.sh",
        "cat > \"$1\" <<'EOF'\n"
        '{"id": "right", "text": "the answer is 42"}\n'
        '{"id": "wrong", "output": [{"role": "assistant", "content": "no idea"}]}\n'
        '{"id": "twice", "text": "42"}\n'
        '{"id": "twice", "text": "42 again"}\n'
        "EOF\n",
    )
    write(tmp_path / ".agentv" / "targets.yaml", BATCH_TARGETS)
    path = write(
        tmp_path / "evals" / "b.eval.yaml", "execution: {target: batch}\ntests:\n" + BATCH_TESTS
    )
    counted = _Counting(box)
    out = tmp_path / "out"
    run_suite(load_suite(path), counted, ImageResolver(engine), RunOptions(out, workers=3))
    results = read_results(out / "results.jsonl")
    got = {k: (r.status.value, r.error) for k, r in results.items()}
    assert got["right"] == ("passed", None)
    assert got["wrong"] == ("failed", None)
    assert got["left-out"][0] == "error" and "no line for this test" in got["left-out"][1]
    assert got["twice"][0] == "error" and "twice" in got["twice"][1]  # never a pass
    assert counted.names.count("target-batch") == 1
    assert not [n for n in counted.names if n.startswith("target-") and n != "target-batch"]


def test_a_batch_of_garbage_makes_every_test_an_error(tmp_path, box, engine):
    write(
        tmp_path / "evals" / "batch.sh",
        'printf \'{"id": "right", "text": "42"}\\nnot json\\n\' > "$1"\n',
    )
    write(tmp_path / ".agentv" / "targets.yaml", BATCH_TARGETS)
    path = write(
        tmp_path / "evals" / "b.eval.yaml", "execution: {target: batch}\ntests:\n" + BATCH_TESTS
    )
    out = tmp_path / "out"
    run_suite(load_suite(path), box, ImageResolver(engine), RunOptions(out, workers=2))
    results = read_results(out / "results.jsonl")
    assert {r.status.value for r in results.values()} == {"error"}
    assert all("line 2 is not JSON" in r.error for r in results.values())


# Answers every test: one JSONL file when batched ({EVAL_ID} is "batch"), else its own
# answer; and leaves a file named for the call in the folder it runs in.
BATCH_OR_ONE = (
    'touch "made-by-$1"\n'
    'if [ "$1" = batch ]; then\n'
    '  for id in one two; do printf \'{"id": "%s", "text": "42"}\\n\' "$id"; done > "$2"\n'
    'else echo 42 > "$2"; fi\n'
)


@pytest.mark.parametrize("workspace", [True, False], ids=["workspace", "no-workspace"])
def test_each_test_of_a_batching_target_has_its_own_file_changes(tmp_path, box, engine, workspace):
    """A test's diff is what was done in its own workspace, never another test's. A test with
    a workspace is asked on its own, as AgentV turns batching off for workspace evals: each
    diff shows its own call. Without one, the one call runs in an empty workspace of its
    own: no test shows the whole batch's files (the first did, the call ran in its own)."""
    write(tmp_path / "evals" / "batch.sh", BATCH_OR_ONE)
    write(tmp_path / "evals" / "ws" / "README", "template\n")
    write(
        tmp_path / ".agentv" / "targets.yaml",
        "targets:\n  - {name: batch, provider: cli, provider_batching: true,"
        " command: 'sh batch.sh {EVAL_ID} {OUTPUT_FILE}'}\n",
    )
    tests = "".join(
        f"  - id: {i}\n    input: x\n    assertions:\n      - {{type: contains, value: '42'}}\n"
        for i in ("one", "two")
    )
    head = "execution: {target: batch}\n" + ("workspace: {template: ws}\n" if workspace else "")
    path = write(tmp_path / "evals" / "b.eval.yaml", head + "tests:\n" + tests)
    out = tmp_path / "out"
    run_suite(load_suite(path), box, ImageResolver(engine), RunOptions(out, workers=2))
    results = read_results(out / "results.jsonl")
    assert {k: r.status.value for k, r in results.items()} == {"one": "passed", "two": "passed"}
    made = {
        k: sorted(set(re.findall(r"made-by-\w+", r.file_changes or ""))) for k, r in results.items()
    }
    assert made == ({"one": ["made-by-one"], "two": ["made-by-two"]} if workspace
                    else {"one": [], "two": []}), made  # fmt: skip
