"""`gradebox grade`'s lean path end to end, on the real runtime: the second run of a grader
file runs without pydantic and says what the first said; what the cache cannot answer for
(the script, the payload, a tampered entry) is read fresh; a killed lean runner leaves
nothing behind."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import leftovers_of, seeded_cache, write

pytestmark = pytest.mark.docker

HEAVY = ("pydantic", "typer", "rich", "yaml", "docker", "click")


def grade(*args, cache, env=None, stdin=None):
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "gradebox", "grade", *map(str, args),
         "--sandbox", "oci"],
        capture_output=True, text=True, input=stdin,
        env={**os.environ, "GRADEBOX_CACHE": str(seeded_cache(cache)), **(env or {})},
    )  # fmt: skip


def imported(p):
    """The top-level packages the run imported (from -X importtime on stderr)."""
    names = {line.split("|")[-1].strip().split(".")[0] for line in p.stderr.splitlines()
             if line.startswith("import time:")}  # fmt: skip
    return names & set(HEAVY)


def said(p):
    return "\n".join(line for line in p.stderr.splitlines() if not line.startswith("import time"))


def without_durations(text):
    doc = json.loads(text)
    doc["duration_ms"] = 0
    return doc


@pytest.fixture
def pack(tmp_path):
    folder = tmp_path / "pack"
    (folder / "graders").mkdir(parents=True)
    write(folder / "graders" / "check.py", "import json, sys\nd = json.load(sys.stdin)\n"
          "print(json.dumps({'pass': '42' in (d.get('output') or ''), 'score': 0.75,"
          " 'reason': 'looked for 42'}))\n")  # fmt: skip
    write(folder / "g.yaml", "type: script\ncommand: [python3, graders/check.py]\n")
    write(tmp_path / "yes.json", json.dumps({"output": "it is 42"}))
    write(tmp_path / "no.json", json.dumps({"output": "it is 41", "input": "what is it?"}))
    return folder


@pytest.mark.parametrize("flags", [["--json"], []], ids=["json", "human"])
@pytest.mark.parametrize("payload,code", [("yes.json", 0), ("no.json", 1)])
def test_the_second_run_is_lean_and_says_what_the_first_said(
    tmp_path, pack, workspace, flags, payload, code
):
    cache = tmp_path / "cache"
    args = [pack / "g.yaml", "-i", tmp_path / payload, "-W", workspace, *flags]
    first = grade(*args, cache=cache)
    assert first.returncode == code, first.stderr
    assert {"pydantic", "typer"} <= imported(first)  # validated on its first run
    second = grade(*args, cache=cache)
    assert second.returncode == code, second.stderr
    assert imported(second) == set(), said(second)
    assert said(second) == said(first)
    if flags:
        assert without_durations(second.stdout) == without_durations(first.stdout)
        assert second.stdout.splitlines()[1:9] == first.stdout.splitlines()[1:9]
    else:
        strip = [line.split("  ")[:2] for line in first.stdout.splitlines()]
        assert [line.split("  ")[:2] for line in second.stdout.splitlines()] == strip


def test_an_erroring_grader_is_exit_3_on_the_lean_path_too(tmp_path, workspace):
    g = write(tmp_path / "g.yaml", "type: script\ncommand: [sh, -c, 'echo boom >&2; exit 7']\n")
    cache = tmp_path / "cache"
    first = grade(g, "-W", workspace, "--json", cache=cache)
    second = grade(g, "-W", workspace, "--json", cache=cache)
    assert first.returncode == second.returncode == 3, second.stderr
    assert imported(second) == set()
    assert without_durations(second.stdout) == without_durations(first.stdout)


def test_the_script_is_read_fresh_on_every_run(tmp_path, pack, workspace):
    cache = tmp_path / "cache"
    args = [pack / "g.yaml", "-i", tmp_path / "yes.json", "-W", workspace, "--json"]
    assert grade(*args, cache=cache).returncode == 0
    write(pack / "graders" / "check.py", 'print(\'{"pass": false, "score": 0}\')\n')
    p = grade(*args, cache=cache)
    assert p.returncode == 1 and imported(p) == set(), p.stderr  # the cache said nothing
    (pack / "graders" / "check.py").unlink()
    p = grade(*args, cache=cache)
    assert p.returncode == 2, p.stderr  # the full path's refusal, nothing run
    assert "names a script that does not exist" in said(p)
    assert said(p).count("\n") == 0


def test_a_tampered_entry_is_validated_again(tmp_path, pack, workspace):
    cache = tmp_path / "cache"
    args = [pack / "g.yaml", "-i", tmp_path / "no.json", "-W", workspace, "--json"]
    assert grade(*args, cache=cache).returncode == 1
    (entry,) = (cache / "graders").iterdir()
    doc = json.loads(entry.read_text())
    doc["grader"]["command"] = ["true"]  # would pass anything
    entry.write_text(json.dumps(doc))
    p = grade(*args, cache=cache)
    assert p.returncode == 1, p.stdout
    assert "pydantic" in imported(p)  # a miss: validated again, and stored again
    assert json.loads(entry.read_text())["grader"]["command"] == ["python3", "graders/check.py"]


def test_a_payload_the_hand_reading_leaves_to_the_model_reads_the_same_stdin(
    tmp_path, pack, workspace
):
    cache = tmp_path / "cache"
    args = [pack / "g.yaml", "-i", "-", "-W", workspace, "--json"]
    plain = json.dumps({"output": "42"})
    assert grade(*args, cache=cache, stdin=plain).returncode == 0
    odd = json.dumps({"output": "42", "token_usage": {"input": 3}})  # a nested model
    p = grade(*args, cache=cache, stdin=odd)
    assert p.returncode == 0, p.stderr
    assert "pydantic" in imported(p)
    bad = grade(*args, cache=cache, stdin='{"output": "\\ud800"}')
    assert bad.returncode == 2 and "<stdin>: a string holds a lone surrogate" in said(bad)


def test_a_locked_unpacked_image_needs_no_engine(tmp_path, pack, workspace):
    """As exec: on oci, an image the lock pins and whose root is unpacked runs without it."""
    cache = tmp_path / "cache"
    args = [pack / "g.yaml", "-i", tmp_path / "yes.json", "-W", workspace]
    assert grade(*args, cache=cache).returncode == 0
    p = grade(*args, cache=cache, env={"DOCKER_HOST": f"unix://{tmp_path}/no.sock"})
    assert p.returncode == 0, p.stderr


def test_a_sigkilled_lean_runner_leaves_nothing(tmp_path, workspace, engine):
    """The watchdog is forked for the lean path too: the container goes with the runner."""
    cache = tmp_path / "cache"
    g = write(tmp_path / "g.yaml", "type: program\nprogram: sleep\nargs: ['600']\ntimeout: 2s\n")
    assert grade(g, "-W", workspace, cache=cache).returncode == 3  # stored
    proc = subprocess.Popen(
        [sys.executable, "-m", "gradebox", "grade", str(g), "-W", str(workspace),
         "--sandbox", "oci"],
        env={**os.environ, "GRADEBOX_CACHE": str(seeded_cache(cache))},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not leftovers_of(engine, proc.pid, running=True):
        assert time.monotonic() < deadline, "the runner never started its container"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()

    def left() -> list[object]:
        return [*leftovers_of(engine, proc.pid), *Path("/tmp").glob(f"gradebox-{proc.pid}-*")]

    deadline = time.monotonic() + 10  # the watchdog sweeps at once, and again after 1 s, 3 s
    while left() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left() == []
