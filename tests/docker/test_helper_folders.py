"""A grader's folders (what is hashed, copied or mounted for it: the folder of the script its
command names, its ``files:`` and ``PYTHONPATH`` helpers, ``exec``'s current folder), as a
grader pack's author or CI's checkout leaves them, through ``run``, ``grade``, ``exec`` and
``assert``, on both backends.

1. Special files: a FIFO, a link to ``/dev/ptmx`` or ``/dev/zero``, a unix socket, at the top
   of such a folder or one level down. Each command ends at once (a hang is a 60 s timeout
   here) in one line naming the file, never a traceback and never a verdict of pass or fail.
2. Secrets below the top: ``.env`` files at any depth, a repository's ``.git/config``,
   ``config.worktree``, its submodules' and worktrees' configs, a submodule's ``.git`` file:
   none is readable by the grader, so the secret is in no output, result or report.

The controls: the same graders, with ordinary helper files (nested too), pass and read them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import gradebox
from tests.conftest import leftovers_of, write
from tests.docker.test_exec import base_env

pytestmark = pytest.mark.docker

BACKENDS = ["docker", "oci"]
HANG = 60  # seconds: a command still running then is hung (the bug ran until killed)
GRADEBOX = str(Path(sys.executable).with_name("gradebox"))
SOURCE = str(Path(gradebox.__file__).resolve().parents[1])

PASS = """import json, os, sys
sys.stdin.read()
said = [open(__file__.rsplit("/", 1)[0] + "/ok.txt").read().strip()]
if os.path.isdir("/grader/helpers"):  # a helper folder, as the grader's files name it
    said.append(open("/grader/helpers/ok.txt").read().strip())
print(json.dumps({"pass": True, "score": 1.0, "reason": "HELPER-" + " ".join(said)}))
"""

# -- running a command as a user would, with a hang detector ---------------------------------


def gbx(
    engine, args: list[object], *, cwd: Path, stdin: bytes = b"", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``gradebox ARGS`` in its own process group; killed whole (SIGKILL: the hang once
    ignored SIGTERM) and failed if it is still running after ``HANG`` seconds."""
    env = {**(env or base_env()), "PYTHONPATH": SOURCE}  # the gradebox this test imported
    proc = subprocess.Popen(
        [GRADEBOX, *map(str, args)],
        cwd=cwd,
        env=env,
        start_new_session=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        out, err = proc.communicate(stdin, timeout=HANG)
    except subprocess.TimeoutExpired:
        for pid in [proc.pid, *descendants(proc.pid)]:  # some start sessions of their own
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"gradebox {' '.join(map(str, args))} hung (still running after {HANG} s)")
    assert leftovers_of(engine, proc.pid) == []
    return subprocess.CompletedProcess(proc.args, proc.returncode, out.decode(), err.decode())


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (read from /proc: no name is matched)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def refused_naming(p: subprocess.CompletedProcess, name: str) -> None:
    """Neither passed nor failed: one line of the error names ``name``; no traceback."""
    said = p.stdout + p.stderr
    assert p.returncode not in (0, 1), said
    assert "Traceback" not in said, said
    lines = [line for line in said.splitlines() if name in line]
    assert len(lines) == 1, said
    assert "FIFO" in lines[0] or "socket" in lines[0] or "device" in lines[0], lines[0]


# -- special files ---------------------------------------------------------------------------

KINDS = ["fifo", "ptmx", "zero", "socket"]


def plant(folder: Path, kind: str) -> str:
    """A special file of ``kind`` in ``folder``; its name."""
    folder.mkdir(parents=True, exist_ok=True)
    name = f"special-{kind}"
    if kind == "fifo":
        os.mkfifo(folder / name)
    elif kind == "socket":  # bound from inside the folder: tmp_path is past sun_path's 108
        subprocess.run(
            [sys.executable, "-c", f"import socket; socket.socket(socket.AF_UNIX).bind({name!r})"],
            cwd=folder,
            check=True,
        )
    else:
        os.symlink(f"/dev/{kind}", folder / name)
    return name


def pack(root: Path) -> Path:
    """root/{.git, graders/check.py, graders/ok.txt, graders/sub/, helpers/ok.txt,
    helpers/sub/, ws/}: a grader's own folder (mounted) and a helper folder (hashed into a
    run's fingerprint, and copied: it is 0700), each with a subfolder."""
    (root / ".git").mkdir(parents=True)
    write(root / "graders" / "check.py", PASS)
    write(root / "graders" / "ok.txt", "BESIDE")
    write(root / "graders" / "sub" / "nested.txt", "NESTED")
    write(root / "helpers" / "ok.txt", "IN-HELPERS")
    write(root / "helpers" / "sub" / "nested.txt", "NESTED")
    (root / "helpers").chmod(0o700)  # closed to the container's user: copied first
    (root / "ws").mkdir()
    return root


GRADER = "{type: script, command: [python3, graders/check.py], files: [helpers]}"


def run_suite_cli(engine, root: Path, backend: str) -> subprocess.CompletedProcess:
    write(root / "suite.yaml", f"tests:\n  - id: t\n    output: hi\n    assert: [{GRADER}]\n")
    return gbx(engine, ["run", "suite.yaml", "--out", root / "out", "--sandbox", backend], cwd=root)


def grade_cli(engine, root: Path, backend: str) -> subprocess.CompletedProcess:
    write(root / "g.yaml", "type: script\ncommand: [python3, graders/check.py]\nfiles: [helpers]\n")
    return gbx(engine, ["grade", "g.yaml", "-W", "ws", "--sandbox", backend], cwd=root)


# run: the grader's own folder at its top, the helper folder one level down; grade: the other
# way round; each place once per command and kind.
PLACES = {"run": ["graders", "helpers/sub"], "grade": ["graders/sub", "helpers"]}
COMMANDS = {"run": run_suite_cli, "grade": grade_cli}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("command", "place"), [(c, p) for c, places in PLACES.items() for p in places]
)
def test_a_special_file_in_a_grader_folder_is_refused_at_once(
    tmp_path, engine, backend, kind, command, place
):
    root = pack(tmp_path / "p")
    name = plant(root / place, kind)
    p = COMMANDS[command](engine, root, backend)
    refused_naming(p, f"{place}/{name}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_grader_with_ordinary_helper_files_passes(tmp_path, engine, backend, command):
    """The control: links inside the folder, nested folders, files of every mode a pack has."""
    root = pack(tmp_path / "p")
    os.symlink("ok.txt", root / "helpers" / "same.txt")
    os.symlink("../ok.txt", root / "graders" / "sub" / "up.txt")
    p = COMMANDS[command](engine, root, backend)
    assert p.returncode == 0, p.stdout + p.stderr
    if command == "grade":  # its own folder, and the helper folder copied (it is 0700)
        assert "HELPER-BESIDE IN-HELPERS" in p.stdout, p.stdout


def exec_cli(engine, here: Path, backend: str) -> subprocess.CompletedProcess:
    return gbx(
        engine, ["exec", "--sandbox", backend, "--", "python3", "check.py"], cwd=here, stdin=b"{}"
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("place", [".", "sub"])
def test_a_special_file_in_execs_current_folder_is_refused_at_once(
    tmp_path, engine, backend, kind, place
):
    here = tmp_path / "here"
    write(here / "check.py", PASS)
    write(here / "ok.txt", "BESIDE")
    name = plant(here / place, kind)
    p = exec_cli(engine, here, backend)
    assert p.returncode == 125, p.stdout + p.stderr
    refused_naming(p, os.path.normpath(f"{place}/{name}"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_exec_from_an_ordinary_folder_runs(tmp_path, engine, backend):
    here = tmp_path / "here"
    write(here / "check.py", PASS)
    write(here / "ok.txt", "BESIDE")
    write(here / "sub" / "x.txt", "x")
    os.symlink("/usr/bin/python3", here / "python")  # a venv's link out: resolved inside
    p = exec_cli(engine, here, backend)
    assert p.returncode == 0 and "HELPER-BESIDE" in p.stdout, p.stdout + p.stderr


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["fifo", "ptmx"])
def test_assert_mounts_its_grader_alone_and_ends(tmp_path, engine, backend, kind):
    """``assert`` mounts the grader's file alone (its folder holds the project's other
    graders): what lies beside it is never read, and the grader still runs."""
    root = tmp_path / "p"
    write(
        root / ".gradebox" / "graders" / "check.py",
        PASS.replace('__file__.rsplit("/", 1)[0] + "/ok.txt"', '"/dev/null"'),
    )
    plant(root / ".gradebox" / "graders", kind)
    plant(root / ".gradebox" / "graders" / "sub", kind)
    p = gbx(engine, ["assert", "check", "--agent-output", "hi", "--sandbox", backend], cwd=root)
    assert p.returncode == 0 and '"passed": true' in p.stdout, p.stdout + p.stderr


# -- secrets below the top of a folder -------------------------------------------------------

READ_ALL = """import json, os, sys
sys.stdin.read()
seen = []
for top in sorted({os.getcwd(), *("/" + d for d in os.listdir("/") if d.startswith("grader"))}):
    for base, dirs, files in os.walk(top):
        for name in files:
            try:
                with open(os.path.join(base, name), errors="replace") as f:
                    seen.append(f.read(4096).strip())
            except OSError:
                pass
print(json.dumps({"pass": True, "score": 1.0, "reason": " | ".join(seen)}))
print(" | ".join(seen), file=sys.stderr)
"""

# Where CI's checkout and a pack's author keep keys, each with a secret of its own.
SECRETS = {
    "cfg/.env": "SECRET-NESTED-ENV",
    "cfg/deep/.env.production": "SECRET-DEEP-ENV",
    ".git/config": "SECRET-GIT-CONFIG",
    ".git/config.worktree": "SECRET-CONFIG-WORKTREE",
    ".git/modules/lib/config": "SECRET-SUBMODULE-CONFIG",
    ".git/modules/vendor/deep/config": "SECRET-DEEP-SUBMODULE-CONFIG",
    ".git/modules/lib/modules/inner/config": "SECRET-NESTED-SUBMODULE-CONFIG",
    ".git/worktrees/feature/config.worktree": "SECRET-WORKTREE-CONFIG",
    "lib/.git": "gitdir: ../.git/modules/lib SECRET-SUBMODULE-GITFILE",
    "nested/.git/config": "SECRET-NESTED-REPO-CONFIG",
    "svc/.env/keys": "SECRET-ENV-FOLDER",  # a folder of keys, masked whole
}
ORDINARY = {
    "cfg/settings.toml": "ORDINARY-NESTED",
    "lib/code.py": "ORDINARY-SUBMODULE-CODE",
    ".git/HEAD": "ref: refs/heads/main",
    ".git/modules/lib/HEAD": "ORDINARY-HEAD",
}


def checkout(folder: Path, script: str = "check.py") -> Path:
    """``folder`` as CI's checkout with submodules and worktrees, or a pack with nested keys."""
    for rel, text in {**SECRETS, **ORDINARY}.items():
        write(folder / rel, text + "\n")
    write(folder / ".git" / "modules" / "lib" / "objects" / "ab" / "cdef", "ORDINARY-OBJECT")
    write(folder / script, READ_ALL)
    return folder


def leaked(*texts: str) -> list[str]:
    return [s.split()[-1] for s in SECRETS.values() if any(s.split()[-1] in t for t in texts)]


def everything_under(folder: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("backend", BACKENDS)
def test_exec_from_a_checkout_with_submodules_and_worktrees_reads_no_config(
    tmp_path, engine, backend
):
    here = checkout(tmp_path / "checkout")
    p = exec_cli(engine, here, backend)
    assert p.returncode == 0, p.stdout + p.stderr
    assert leaked(p.stdout, p.stderr) == []
    assert "ORDINARY-NESTED" in p.stdout and "ORDINARY-SUBMODULE-CODE" in p.stdout, p.stdout


@pytest.mark.parametrize("backend", BACKENDS)
def test_grade_masks_every_key_below_the_graders_folder(tmp_path, engine, backend):
    root = tmp_path / "p"
    checkout(root / "graders")
    (root / "ws").mkdir()
    write(root / "g.yaml", "type: script\ncommand: [python3, graders/check.py]\n")
    p = gbx(engine, ["grade", "g.yaml", "-W", "ws", "--json", "--sandbox", backend], cwd=root)
    assert p.returncode == 0, p.stdout + p.stderr
    assert leaked(p.stdout, p.stderr) == []
    assert "ORDINARY-NESTED" in p.stdout and "ORDINARY-SUBMODULE-CODE" in p.stdout, p.stdout


@pytest.mark.parametrize("backend", BACKENDS)
def test_grade_without_a_workspace_masks_the_current_folders_keys(tmp_path, engine, backend):
    """``grade`` run from a checkout with no ``-W`` mounts the current folder, the operator's
    own, as the workspace: a third-party grader reads none of its keys there either. Named
    with ``-W``, a workspace is the agent's answer, shown as it is (control: a task may ask
    for a .env)."""
    root = checkout(tmp_path / "checkout")
    write(root / "g.yaml", "type: script\ncommand: [python3, check.py]\n")
    for _ in ("validated, full path", "cached, lean path"):
        p = gbx(engine, ["grade", "g.yaml", "--json", "--sandbox", backend], cwd=root)
        assert p.returncode == 0, p.stdout + p.stderr
        assert leaked(p.stdout, p.stderr) == []
        assert "ORDINARY-NESTED" in p.stdout and "ORDINARY-SUBMODULE-CODE" in p.stdout, p.stdout
    agent = tmp_path / "agent"
    write(agent / ".env", "AGENT-WROTE-THIS-ENV\n")
    write(agent / "g.yaml", "type: script\ncommand: [python3, check.py]\n")
    write(agent / "check.py", READ_ALL)
    p = gbx(engine, ["grade", "g.yaml", "-W", agent, "--json", "--sandbox", backend], cwd=agent)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "AGENT-WROTE-THIS-ENV" in p.stdout


@pytest.mark.parametrize("backend", BACKENDS)
def test_run_masks_every_key_below_the_graders_folder(tmp_path, engine, backend):
    root = tmp_path / "p"
    checkout(root / "graders")
    write(
        root / "suite.yaml",
        "tests:\n  - id: t\n    output: hi\n    assert: "
        "[{type: script, command: [python3, graders/check.py]}]\n",
    )
    out = tmp_path / "out"
    p = gbx(
        engine,
        [
            "run",
            "suite.yaml",
            "--out",
            out,
            "--junit",
            tmp_path / "junit.xml",
            "--sandbox",
            backend,
        ],
        cwd=root,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    written = everything_under(out) + (tmp_path / "junit.xml").read_text()
    assert leaked(p.stdout, p.stderr, written) == []
    result = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    assert "ORDINARY-NESTED" in json.dumps(result), result


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_helper_folder_holding_a_key_below_its_top_is_refused(tmp_path, engine, backend):
    """A helper folder (copied when the container user cannot enter it, hashed into the
    run's fingerprint) holding a key at any depth is not mounted: one line names it."""
    root = pack(tmp_path / "p")
    write(root / "helpers" / "sub" / "cfg" / ".env", "SECRET-HELPER-ENV")
    p = run_suite_cli(engine, root, backend)
    assert p.returncode == 2 and "helpers/sub/cfg/.env" in p.stderr, p.stdout + p.stderr
    assert "SECRET-HELPER-ENV" not in p.stdout + p.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_helper_folder_that_is_a_submodule_runs_with_its_git_file_masked(
    tmp_path, engine, backend
):
    """A vendored submodule as a helper folder (copied: it is 0700): its ``.git`` file, a
    pointer, is masked rather than refused; its code is read."""
    root = pack(tmp_path / "p")
    write(root / "helpers" / "lib" / ".git", "gitdir: ../../.git/modules/lib SECRET-GITFILE\n")
    write(
        root / "graders" / "check.py",
        PASS.replace(
            '"/grader/helpers/ok.txt").read().strip())',
            '"/grader/helpers/ok.txt").read().strip() + open("/grader/helpers/lib/.git").read())',
        ),
    )
    p = grade_cli(engine, root, backend)
    assert p.returncode == 0 and "HELPER-BESIDE IN-HELPERS" in p.stdout, p.stdout + p.stderr
    assert "SECRET-GITFILE" not in p.stdout + p.stderr
