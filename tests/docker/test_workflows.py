"""batch, trials, calibrate and assert on real containers."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write

pytestmark = pytest.mark.docker
INLINE = Path(__file__).resolve().parents[2] / "examples" / "inline"

CRASHY = """import json, sys
d = json.load(sys.stdin)
if d["output"] == "crash":
    raise SystemExit("grader blew up")
print(json.dumps({"pass": d["hint"] in d["output"], "score": 1.0 if d["hint"] in d["output"]
                  else 0.0, "reasoning": "checked"}))
"""


def gradebox(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "gradebox", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")},
    )


def records(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_batch_keeps_a_crashing_record_and_goes_on(tmp_path):
    grader = write(tmp_path / "crashy.py", CRASHY)
    src = records(
        tmp_path / "r.jsonl",
        [
            {"id": "a", "input": "q", "output": "yes 42", "hint": "42", "metadata": {"k": 1}},
            {"id": "b", "input": "q", "output": "crash", "hint": "42"},
            {"id": "c", "input": ["q1", "q2"], "output": "no", "hint": "42"},
        ],
    )
    out = tmp_path / "out.jsonl"
    p = gradebox("batch", src, "--grader", grader, "-o", out, "--json")
    assert p.returncode == 3, p.stderr  # one record errored
    assert json.loads(p.stdout) == {
        "out": str(out),
        "total": 3,
        "passed": 1,
        "failed": 1,
        "error": 1,
    }
    rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["a"]["pass"] is True and rows["a"]["metadata"] == {"k": 1}
    assert rows["b"]["status"] == "error" and rows["b"]["output"] == "crash"
    assert "grader blew up" in rows["b"]["reasoning"]
    assert rows["c"]["pass"] is False and rows["c"]["input"] == ["q1", "q2"]
    assert rows["a"]["result"]["image"]["id"].startswith("sha256:")


def test_batch_resumes_from_its_output(tmp_path):
    grader = INLINE / "hint-grader.py"
    src = records(
        tmp_path / "r.jsonl",
        [{"id": str(i), "input": "q", "output": f"answer {i}", "hint": "answer"} for i in range(4)],
    )
    out = tmp_path / "out.jsonl"
    assert gradebox("batch", src, "-g", grader, "-o", out).returncode == 0
    kept = out.read_text().splitlines()
    out.write_text("\n".join(kept[:2]) + "\n" + kept[2][:25])  # as if killed mid-write
    p = gradebox("batch", src, "-g", grader, "-o", out, "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["total"] == 4
    lines = [
        json.loads(x) for x in out.read_text().splitlines() if x.startswith("{") and x.endswith("}")
    ]
    assert sorted(x["line"] for x in lines) == [1, 2, 3, 4]
    first = json.loads(kept[0])
    # Finished records were not graded again.
    assert {x["line"]: x for x in lines}[first["line"]] == first


def test_trials_json(tmp_path):
    p = gradebox(
        "trials", INLINE / "trials.jsonl", "-g", INLINE / "hint-grader.py", "-k", "3", "--json"
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    p1 = {x["id"]: x for x in doc["prompts"]}["p1"]
    assert (p1["n"], p1["c"]) == (3, 2)
    assert p1["pass_at_k"] == {"1": pytest.approx(2 / 3), "2": 1.0, "3": 1.0}
    assert p1["pass_hat_k"] == {"1": pytest.approx(2 / 3), "2": pytest.approx(1 / 3), "3": 0.0}
    assert doc["overall"]["pass_rate"] == pytest.approx(2 / 3)


def test_trials_with_a_target(tmp_path):
    src = records(
        tmp_path / "p.jsonl",
        [
            {"id": "echo", "input": "hello", "hint": "hello"},
            {"id": "never", "input": "bye", "hint": "zzz"},
        ],
    )
    p = gradebox(
        "trials", src, "-g", INLINE / "hint-grader.py", "-k", "2", "--target", "cat", "--json"
    )
    assert p.returncode == 0, p.stderr
    prompts = {x["id"]: x for x in json.loads(p.stdout)["prompts"]}
    assert (prompts["echo"]["n"], prompts["echo"]["c"]) == (2, 2)
    assert (prompts["never"]["n"], prompts["never"]["c"]) == (2, 0)


@pytest.mark.parametrize("target", ["cat; exit 3", "cat; kill -9 $$", "cat; sleep 30"])
def test_a_trial_whose_target_did_not_finish_is_never_graded(tmp_path, target):
    """The answer it printed would pass (it holds the hint), but the target failed, was killed
    or timed out: the trial is an error, as plaited counts it, never a pass."""
    src = records(tmp_path / "p.jsonl", [{"id": "echo", "input": "hello", "hint": "hello"}])
    p = gradebox(
        "trials", src, "-g", INLINE / "hint-grader.py", "-k", "1", "--target", target,
        "--target-timeout", "3s", "--json",
    )  # fmt: skip
    assert p.returncode in (0, 1, 3), p.stderr
    prompt = json.loads(p.stdout)["prompts"][0]
    assert (prompt["n"], prompt["c"]) == (1, 0)


def test_calibrate_reproducible_and_rescored(tmp_path):
    src = records(
        tmp_path / "r.jsonl",
        [
            {"id": f"r{i}", "input": "q", "output": "right" if i % 2 else "wrong", "hint": "right"}
            for i in range(12)
        ],
    )
    out = tmp_path / "graded.jsonl"
    gradebox("batch", src, "-g", INLINE / "hint-grader.py", "-o", out)
    a = gradebox("calibrate", out, "--sample", "3", "--seed", "5")
    b = gradebox("calibrate", out, "--sample", "3", "--seed", "5")
    assert a.returncode == 0 and a.stdout == b.stdout and a.stdout.count("## r") == 3
    other = write(tmp_path / "lenient.sh", 'cat >/dev/null; echo \'{"pass": true, "score": 1}\'\n')
    c = gradebox(
        "calibrate",
        out,
        "--sample",
        "3",
        "--seed",
        "5",
        "--grader",
        other,
        "--include-passes",
        "-o",
        tmp_path / "sheet.md",
        "--json",
    )
    assert c.returncode == 0, c.stderr
    doc = json.loads(c.stdout)
    assert doc["agreement"] == pytest.approx(0.5)  # lenient agrees on the 3 passes only
    assert "Agreement with the second grader: 3/6 (50%)" in (tmp_path / "sheet.md").read_text()


def test_assert_finds_a_grader_by_name_from_a_nested_directory(tmp_path):
    write(
        tmp_path / ".gradebox" / "graders" / "long-enough.py",
        """import json, sys
d = json.load(sys.stdin)
words = len(d["output"].split())
print(json.dumps({"score": min(1.0, words / 4), "reason": f"{words} words",
                  "input_seen": [m["content"] for m in d["input"]]}))
""",
    )
    write(tmp_path / ".agentv" / "graders" / "legacy.sh", "cat >/dev/null; echo ok\n")
    nested = tmp_path / "a" / "b" / "c"
    nested.mkdir(parents=True)
    p = gradebox(
        "assert",
        "long-enough",
        "--agent-output",
        "one two three four",
        "--agent-input",
        "Say four words",
        cwd=nested,
    )
    assert p.returncode == 0, p.stderr
    result = json.loads(p.stdout)
    assert result["score"] == 1.0 and result["evidence"] == "4 words"
    assert gradebox("assert", "long-enough", "--agent-output", "one", cwd=nested).returncode == 1
    answer = write(nested / "answer.json", json.dumps({"output": "a b c", "input": "x"}))
    p = gradebox("assert", "long-enough", "--file", answer, cwd=nested)
    assert p.returncode == 0 and json.loads(p.stdout)["score"] == 0.75
    assert gradebox("assert", "legacy", "--agent-output", "x", cwd=nested).returncode == 0
    missing = gradebox("assert", "nope", cwd=nested)
    assert missing.returncode == 2 and "long-enough" in missing.stderr


def test_batch_resumes_by_content_not_by_line(tmp_path):
    grader = write(tmp_path / "g.py", (INLINE / "hint-grader.py").read_text())
    rows = [
        {"id": str(i), "input": "q", "output": f"answer {i}", "hint": "answer"} for i in range(3)
    ]
    src = records(tmp_path / "r.jsonl", rows)
    out = tmp_path / "out.jsonl"
    assert gradebox("batch", src, "-g", grader, "-o", out).returncode == 0
    # A record inserted at the top shifts every line: the old verdicts still match by content.
    src = records(
        tmp_path / "r.jsonl", [{"id": "new", "input": "q", "output": "no", "hint": "x"}, *rows]
    )
    p = gradebox("batch", src, "-g", grader, "-o", out, "--json")
    assert "reused 3 verdicts" in p.stderr and json.loads(p.stdout)["total"] == 4
    # A changed grader makes every verdict stale.
    write(grader, grader.read_text() + "\n# changed\n")
    p = gradebox("batch", src, "-g", grader, "-o", out, "--json")
    assert "reused" not in p.stderr
    assert len(out.read_text().splitlines()) == 4  # one line per record, nothing stale


def _wait_lines(path, n, timeout=60):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= n:
            return
        time.sleep(0.1)
    raise AssertionError(f"{path} never reached {n} lines")


def _no_leftovers(engine, pid):
    import tempfile

    mine = [c for c in engine.containers({"gradebox.owner": None})
            if c["Labels"]["gradebox.owner"].endswith(f":{pid}")]  # fmt: skip
    scratch = list(Path(tempfile.gettempdir()).glob(f"gradebox-{pid}-*"))
    return mine == [] and scratch == []


@pytest.mark.parametrize("command", ["batch", "trials-target"])
def test_sigterm_stops_batch_and_trials_at_once(tmp_path, engine, command):
    import signal
    import time

    slow = write(
        tmp_path / "slow.py",
        "import json, time\ntime.sleep(2)\nprint(json.dumps({'pass': True, 'score': 1}))\n",
    )
    rows = [{"id": str(i), "input": "q", "output": "a", "hint": "a"} for i in range(40)]
    src = records(tmp_path / "r.jsonl", rows)
    out = tmp_path / "out.jsonl"
    if command == "batch":
        args = ["batch", src, "-g", slow, "-o", out, "--workers", "2"]
    else:
        args = [
            "trials",
            src,
            "-g",
            slow,
            "-k",
            "3",
            "--target",
            "sleep 2; echo a",
            "--workers",
            "2",
        ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gradebox", *map(str, args)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    if command == "batch":
        _wait_lines(out, 2)
    else:
        time.sleep(6)  # some trials' targets are running
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert time.monotonic() - started < 20  # the queue (120 trials, 40 records) was not run out
    assert _no_leftovers(engine, proc.pid)
