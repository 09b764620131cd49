"""Running graders for real: the contract of the reference protocols, in containers."""

import json
import os
from pathlib import Path

import pytest

from gradebox.errors import ConfigError, ImageError
from gradebox.graders import load_grader, run_grader
from gradebox.protocol.models import Payload, Status
from tests.conftest import write

pytestmark = pytest.mark.docker

DUMP_ENV = "import json, os; print(json.dumps({'env': dict(os.environ), 'cwd': os.getcwd()}))"


def grader(tmp_path: Path, text: str, name: str = "grader.yaml"):
    return load_grader(write(tmp_path / "graders" / name, text))


def dump(result):
    details = json.loads(result.stdout_tail or "{}") if result.stdout_tail else None
    return details


def test_program_grader_sees_payload_and_workspace(tmp_path, workspace, box):
    write(
        tmp_path / "graders" / "check.py",
        """
import json, os, pathlib
payload = json.loads(pathlib.Path(os.environ["EVALUATE_GRADER_INPUT"]).read_text())
ws = pathlib.Path(os.environ["EVALUATE_WORKSPACE"])
ok = payload["output"] == (ws / "answer.txt").read_text().strip()
print(json.dumps({"name": "eq", "passed": ok, "score": 0.85 if ok else 0.1,
                  "evidence": f"cwd={os.getcwd()} ws={ws} user={payload['input'][0]['content']}",
                  "details": {"workspace_path": payload["workspace_path"]}}))
""",
    )
    g = grader(tmp_path, "type: program\nprogram: python3\nargs: [check.py]\n")
    result = run_grader(g, Payload(input="q?", output="42"), workspace, box)
    assert result.status is Status.passed, result
    assert result.score == 0.85
    assert result.evidence == "cwd=/workspace ws=/workspace user=q?"
    assert result.details == {"workspace_path": "/workspace"}
    assert result.image.ref == "python" and result.image.id.startswith("sha256:")
    assert result.duration_ms > 0


def test_sub_path_moves_cwd_but_not_the_root(tmp_path, workspace, box):
    g = grader(
        tmp_path, f"type: program\nprogram: python3\nargs: ['-c', \"{DUMP_ENV}\"]\nsub_path: src\n"
    )
    result = run_grader(g, Payload(), workspace, box)
    # JSON of no known shape -> error, but stdout tail carries what we printed.
    seen = json.loads(result.stdout_tail)
    assert seen["cwd"] == "/workspace/src"
    assert seen["env"]["EVALUATE_WORKSPACE"] == "/workspace"
    assert seen["env"]["EVALUATE_GRADER_INPUT"] == "/run/gradebox/input.json"


def test_sub_path_backslashes(tmp_path, workspace, box):
    g = grader(
        tmp_path,
        "type: program\nprogram: sh\nargs: ['-c', 'pwd >&2; exit 1']\nsub_path: 'src\\\\.'\n",
    )
    assert run_grader(g, Payload(), workspace, box).stderr_tail == "/workspace/src"


def test_symlink_sub_path_escape_refused_before_any_container(tmp_path, workspace, box):
    os.symlink("/etc", workspace / "escape")
    g = grader(tmp_path, "type: program\nprogram: 'true'\nsub_path: escape\n")
    with pytest.raises(ConfigError, match="outside the workspace") as err:
        run_grader(g, Payload(), workspace, box)
    assert err.value.field == "sub_path"
    assert box.leftovers() == []


def test_env_is_merged(tmp_path, workspace, box):
    g = grader(
        tmp_path,
        "type: program\nprogram: sh\nargs: ['-c', 'echo $API_X >&2; exit 1']\n"
        "env:\n  API_X: hello\n",
    )
    assert run_grader(g, Payload(), workspace, box).stderr_tail == "hello"


def test_script_grader_gets_stdin_and_workspace_path(tmp_path, workspace, box):
    write(
        tmp_path / "graders" / "v.py",
        """
import json, os, sys
d = json.load(sys.stdin)
same = json.load(open(os.environ["EVALUATE_GRADER_INPUT"])) == d
print(json.dumps({"pass": same and d["workspace_path"] == os.environ["AGENTV_WORKSPACE_PATH"],
                  "reason": d["workspace_path"], "checks": [{"text": d["output"], "pass": True}]}))
""",
    )
    g = grader(tmp_path, "type: script\ncommand: [python3, v.py]\n")
    result = run_grader(g, Payload(output="The answer is 42."), workspace, box)
    assert result.status is Status.passed and result.evidence == "/workspace"
    assert result.checks[0].text == "The answer is 42."


def test_script_string_command_runs_through_sh(tmp_path, workspace, box):
    g = grader(tmp_path, "type: script\ncommand: 'test $(cat answer.txt) = 42 && echo yes'\n")
    result = run_grader(g, Payload(), workspace, box)
    assert result.status is Status.passed and result.checks[0].text == "yes"


def test_program_shell_mode(tmp_path, workspace, box):
    g = grader(
        tmp_path,
        "type: program\nprogram: test\nargs: ['-f', 'answer.txt', '&&', "
        "'exit', '0']\nshell: true\n",
    )
    assert run_grader(g, Payload(), workspace, box).status is Status.passed


def test_large_answer_goes_to_output_path(tmp_path, workspace, box):
    write(
        tmp_path / "graders" / "big.py",
        """
import json, os
d = json.load(open(os.environ["EVALUATE_GRADER_INPUT"]))
big = json.load(open(d["output_path"]))
ok = d["output"] is None and len(big) == 60000
print(json.dumps({"passed": ok, "evidence": d["output_path"]}))
""",
    )
    g = grader(tmp_path, "type: program\nprogram: python3\nargs: [big.py]\n")
    result = run_grader(g, Payload(output="x" * 60000), workspace, box)
    assert result.status is Status.passed, result
    assert result.evidence.startswith("/run/gradebox/")


def test_grader_files_are_read_only(tmp_path, workspace, box):
    write(tmp_path / "graders" / "w.sh", 'echo x >> "$0" 2>/dev/null && exit 0 || exit 1\n')
    g = grader(tmp_path, "type: program\nprogram: sh\nargs: [w.sh]\n")
    assert run_grader(g, Payload(), workspace, box).status is Status.failed
    assert (tmp_path / "graders" / "w.sh").read_text().count("\n") == 1


def test_workspace_is_read_only_by_default(tmp_path, workspace, box):
    g = grader(
        tmp_path,
        "type: program\nprogram: sh\nargs: ['-c', "
        "'echo hacked > answer.txt; touch new.txt; rm -f src/app.py; exit 0']\n",
    )
    run_grader(g, Payload(), workspace, box)
    assert (workspace / "answer.txt").read_text() == "42\n"
    assert sorted(p.name for p in workspace.iterdir()) == ["answer.txt", "src"]
    assert (workspace / "src" / "app.py").exists()


def test_rw_workspace_is_a_private_copy(tmp_path, workspace, box):
    g = grader(
        tmp_path,
        "type: program\nprogram: sh\nargs: ['-c', "
        "'echo 7 > answer.txt && touch new.txt && cat answer.txt >&2 && exit 1']\n"
        "workspace: rw\n",
    )
    result = run_grader(g, Payload(), workspace, box)
    assert result.stderr_tail == "7"
    assert (workspace / "answer.txt").read_text() == "42\n"
    assert not (workspace / "new.txt").exists()


def test_missing_image_is_an_image_error_with_the_fix(tmp_path, workspace, box):
    g = grader(tmp_path, "type: program\nprogram: 'true'\nimage: nosuchimage\n")
    with pytest.raises(ImageError, match="gradebox images build nosuchimage"):
        run_grader(g, Payload(), workspace, box)


def test_named_image(tmp_path, workspace, box, shell_image):
    g = grader(tmp_path, "type: program\nprogram: 'true'\nimage: shell\n")
    result = run_grader(g, Payload(), workspace, box)
    assert result.status is Status.passed and result.image.id == shell_image


def test_scratch_files_do_not_outlive_the_run(tmp_path, workspace, box):
    import tempfile

    before = set(Path(tempfile.gettempdir()).glob(f"gradebox-{os.getpid()}-*"))
    g = grader(tmp_path, "type: program\nprogram: 'true'\nworkspace: rw\n")
    run_grader(g, Payload(output="x" * 60000), workspace, box)
    after = set(Path(tempfile.gettempdir()).glob(f"gradebox-{os.getpid()}-*"))
    assert after == before
