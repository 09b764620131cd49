"""`gradebox exec` against the real backends (oci: runc; docker: the engine), as a harness
runs it: the installed command, stdin in, stdout/stderr/exit code out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import leftovers_of, shared_corpus

pytestmark = pytest.mark.docker

GRADEBOX = str(Path(sys.executable).with_name("gradebox"))
BACKENDS = ["oci", "docker"]


def base_env(**extra: str) -> dict[str, str]:
    """What a harness's environment might hold: a path, a home, secrets of its own."""
    env = {k: v for k, v in os.environ.items() if k.startswith(("GRADEBOX_", "DOCKER_"))}
    env.update(PATH=f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
               HOME=os.environ.get("HOME", "/root"), OPENAI_API_KEY="sk-host-secret",
               LANG="C.UTF-8")  # fmt: skip
    env.update(extra)
    return env


def gbx(
    engine, backend: str, args: list[str], *, cwd: Path, stdin: bytes = b"",
    env: dict[str, str] | None = None, timeout: float = 120,
) -> subprocess.CompletedProcess:  # fmt: skip
    """Run `gradebox exec --sandbox BACKEND ARGS` and check that it left nothing behind."""
    proc = subprocess.Popen(
        [GRADEBOX, "exec", "--sandbox", backend, *args], cwd=cwd, env=env or base_env(),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = proc.communicate(stdin, timeout=timeout)
    assert leftovers_of(engine, proc.pid) == []
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.fixture
def grader_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "grader"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    return folder


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    folder.chmod(0o755)
    (folder / "answer.txt").write_text("42\n")
    return folder


ECHO = """import json, os, sys
data = sys.stdin.buffer.read()
sys.stdout.buffer.write(data)
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_payloads_workspace_path_is_rewritten_and_nothing_else(engine, backend, grader_dir, ws):
    (grader_dir / "echo.py").write_text(ECHO)
    payload = (
        '{\n  "output": "see \\"workspace_path\\": \\"' + str(ws) + '\\"",\n'
        '  "metadata": {"workspace_path": "' + str(ws) + '"},\n'
        '  "workspace_path": "' + str(ws) + '"\n}'
    ).encode()
    p = gbx(engine, backend, ["--", "python3", "echo.py"], cwd=grader_dir, stdin=payload)
    assert p.returncode == 0, p.stderr
    head, _, tail = payload.rpartition(f'"{ws}"'.encode())
    assert p.stdout == head + b'"/workspace"' + tail


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_workspace_and_payload_file_are_where_the_variables_say(
    engine, backend, grader_dir, ws, tmp_path
):
    payload_file = tmp_path / "grader-input.json"
    payload_file.write_text('{"trajectory": {"output": "42"}}')
    payload_file.chmod(0o600)
    (grader_dir / ".env").write_text("OPENAI_API_KEY=sk-in-dotenv\n")
    (grader_dir / "check.py").write_text(
        "import json, os\n"
        "ws = os.environ['EVALUATE_WORKSPACE']\n"
        "print(json.dumps({'ws': ws, 'agentv': os.environ.get('AGENTV_WORKSPACE_PATH'),\n"
        "  'answer': open(os.path.join(ws, 'answer.txt')).read(),\n"
        "  'input': json.load(open(os.environ['EVALUATE_GRADER_INPUT'])),\n"
        "  'cwd': os.getcwd(), 'dotenv': open('.env').read(),\n"
        "  'env': sorted(k for k in os.environ if k not in ('PATH', 'HOME', 'PWD'))}))\n"
    )
    env = base_env(EVALUATE_WORKSPACE=str(ws), EVALUATE_GRADER_INPUT=str(payload_file),
                   ASKED="yes", NOT_ASKED="no")  # fmt: skip
    p = gbx(engine, backend, ["--env", "ASKED", "--env", "SET=1", "--", "python3", "check.py"],
            cwd=grader_dir, env=env)  # fmt: skip
    assert p.returncode == 0, p.stderr
    seen = json.loads(p.stdout)
    assert seen["ws"] == seen["agentv"] == "/workspace"
    assert seen["answer"] == "42\n"
    assert seen["input"] == {"trajectory": {"output": "42"}}
    assert seen["cwd"] == "/grader"
    assert seen["dotenv"] == ""  # masked: never the host's keys
    assert "OPENAI_API_KEY" not in seen["env"] and "NOT_ASKED" not in seen["env"]
    assert {"ASKED", "SET", "LANG", "EVALUATE_GRADER_INPUT"} <= set(seen["env"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_grader_run_in_the_workspace_runs_in_its_sandbox_copy(engine, backend, ws):
    """Vally runs a program grader in the workspace (or its sub_path)."""
    sub = ws / "src"
    sub.mkdir()
    sub.chmod(0o755)
    p = gbx(engine, backend, ["--", "sh", "-c", 'pwd; echo "$EVALUATE_WORKSPACE"; ls ..'],
            cwd=sub, env=base_env(EVALUATE_WORKSPACE=str(ws)))  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert p.stdout.decode().split() == ["/workspace/src", "/workspace", "answer.txt", "src"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_exit_codes(engine, backend, grader_dir):
    own = gbx(engine, backend, ["--", "sh", "-c", "echo out; echo err >&2; exit 3"],
              cwd=grader_dir)  # fmt: skip
    assert (own.returncode, own.stdout, own.stderr) == (3, b"out\n", b"err\n")

    t = time.monotonic()
    slow = gbx(engine, backend, ["--timeout", "1s", "--", "sleep", "30"], cwd=grader_dir)
    assert slow.returncode == 124 and time.monotonic() - t < 20
    assert slow.stderr.decode().count("\n") == 1 and "timed out" in slow.stderr.decode()

    oom = gbx(engine, backend, ["--", "python3", "-c", "x = b'x' * (3 << 30)"], cwd=grader_dir)
    assert oom.returncode == 137, oom.stderr
    assert "out of memory" in oom.stderr.decode()

    missing = gbx(engine, backend, ["--", "no-such-grader-program"], cwd=grader_dir)
    assert missing.returncode == 127 and b"not found" in missing.stderr

    noimage = gbx(engine, backend, ["--image", "no-such-image", "--", "true"], cwd=grader_dir)
    assert noimage.returncode == 125 and noimage.stderr.decode().count("\n") == 1, noimage.stderr

    killed = gbx(engine, backend, ["--", "sh", "-c", "kill -9 $$"], cwd=grader_dir)
    assert killed.returncode == 137


def test_no_engine_is_one_line_and_125(engine, grader_dir):
    env = base_env(DOCKER_HOST="unix:///nonexistent/docker.sock")
    p = gbx(engine, "docker", ["--", "true"], cwd=grader_dir, env=env)
    assert p.returncode == 125 and p.stderr.decode().count("\n") == 1, p.stderr
    assert b"Traceback" not in p.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_containment(engine, backend, grader_dir, ws, tmp_path):
    secret = tmp_path / "host-secret.txt"
    secret.write_text("do not read")
    secret.chmod(0o644)
    script = (
        f"test -e {secret} && echo SECRET-VISIBLE; "
        f"test -e {grader_dir} && echo HOST-PATH-VISIBLE; "
        "ls /sys/class/net; id -u; "
        "touch /workspace/new 2>/dev/null && echo WS-WRITABLE; "
        "touch here 2>/dev/null && echo CWD-WRITABLE; "
        "touch /usr/x 2>/dev/null && echo ROOT-WRITABLE; "
        "cat /workspace/answer.txt"
    )
    p = gbx(engine, backend, ["--workspace", str(ws), "--", "sh", "-c", script], cwd=grader_dir)
    lines = p.stdout.decode().split()
    assert lines == ["lo", "65534", "42"], (lines, p.stderr)
    assert not (ws / "new").exists() and not (grader_dir / "here").exists()


@pytest.mark.parametrize("backend", BACKENDS)
def test_output_over_the_cap_is_cut_and_said(engine, backend, grader_dir):
    p = gbx(engine, backend, ["--", "python3", "-c", "import sys\nwhile True: print('x' * 999)"],
            cwd=grader_dir)  # fmt: skip
    assert p.returncode == 137
    assert len(p.stdout) == 1 << 20 and set(p.stdout) <= set(b"x\n")
    assert b"stdout cut at 1048576 bytes" in p.stderr


def test_home_and_root_are_never_mounted(engine):
    for folder in (Path("/"), Path.home()):
        p = gbx(engine, "oci", ["--", "true"], cwd=folder)
        assert p.returncode == 125 and b"never mounted" in p.stderr


# -- other harnesses' own graders: the same stdout as bare ------------------------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("corpus")
    for name in ("agentv", "agent-eval-harness"):
        with tarfile.open(shared_corpus(name)) as tar:
            tar.extractall(where, filter="data")
    for path in [where, *where.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)
    return where


def agentv_payload(answer: str, workspace: Path, output_file: Path | None) -> bytes:
    """As AgentV's script grader writes it (snake_case, indented); a large answer goes to a
    file named by output_path, the answer itself then null."""
    data = {
        "criteria": "The answer is 42",
        "expected_output": [{"role": "assistant", "content": "42"}],
        "output": None if output_file else answer,
        "messages": [{"role": "assistant", "content": answer}],
        "output_path": str(output_file) if output_file else None,
        "input_files": [],
        "input": [{"role": "user", "content": "What is 15 + 27?"}],
        "metadata": None, "trace": None, "trace_summary": None, "token_usage": None,
        "cost_usd": None, "duration_ms": 1200, "start_time": None, "end_time": None,
        "file_changes": None, "workspace_path": str(workspace), "config": None,
    }  # fmt: skip
    if output_file:
        output_file.write_text(json.dumps(answer))
        output_file.chmod(0o600)
    return json.dumps(data, indent=2).encode()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("answer", "as_file"), [("42", False), ("41", False), ("42", True)])
def test_agentvs_python_helper_grader_prints_what_it_prints_bare(
    engine, backend, corpus, answer, as_file, ws, tmp_path
):
    folder = next(corpus.glob("agentv*/examples/features/sdk-python"))
    payload = agentv_payload(answer, ws, tmp_path / "output.json" if as_file else None)
    argv = ["python3", "scripts/check_expected_output.py"]
    bare = subprocess.run(argv, cwd=folder, input=payload, capture_output=True,
                          env=base_env(PYTHONPATH="src"))  # fmt: skip
    assert bare.returncode == 0, bare.stdout + bare.stderr
    boxed = gbx(engine, backend, ["--env", "PYTHONPATH=src", "--", *argv], cwd=folder,
                stdin=payload)  # fmt: skip
    assert (boxed.returncode, boxed.stdout) == (0, bare.stdout), boxed.stderr
    assert json.loads(boxed.stdout)["pass"] is (answer == "42")


def plaited_grader(corpus: Path) -> str:
    """plaited's own executable grader example, from its README."""
    readme = next(corpus.glob("agent-eval-harness*/README.md")).read_text()
    start = readme.index("```python\n#!/usr/bin/env python3") + len("```python\n")
    return readme[start : readme.index("```", start)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_plaited_grader_spawned_by_its_absolute_path_prints_what_it_prints_bare(
    engine, backend, corpus, grader_dir
):
    """plaited spawns `[execPath]` with the record on stdin; the one-line change is the
    grader's shebang: `#!/usr/bin/env -S gradebox exec -- python3`."""
    source = plaited_grader(corpus)
    bare_file = grader_dir / "grader.py"
    bare_file.write_text(source)
    boxed_file = grader_dir / "grader-boxed.py"
    shebang = "#!/usr/bin/env -S gradebox exec -- python3"
    boxed_file.write_text(source.replace("#!/usr/bin/env python3", shebang, 1))
    for f in (bare_file, boxed_file):
        f.chmod(0o755)
    env = base_env(GRADEBOX_SANDBOX=backend)
    for record in ({"input": "Who?", "output": "The CEO is Dario Amodei.", "hint": "dario"},
                   {"input": "Who?", "output": "No idea", "hint": "dario"}):  # fmt: skip
        data = json.dumps(record).encode()
        bare = subprocess.run([str(bare_file)], input=data, capture_output=True, env=env,
                              cwd=grader_dir)  # fmt: skip
        proc = subprocess.Popen([str(boxed_file)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, cwd=grader_dir)  # fmt: skip
        out, err = proc.communicate(data, timeout=120)
        assert bare.returncode == 0 and bare.stdout, bare.stderr
        assert (proc.returncode, out) == (0, bare.stdout), err


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_example_prints_each_line_twice(backend):
    script = Path(__file__).resolve().parents[2] / "examples" / "exec" / "run.sh"
    p = subprocess.run([str(script)], capture_output=True, text=True,
                       env=base_env(GRADEBOX_SANDBOX=backend), timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 6 and all(json.loads(line)["pass"] for line in lines), p.stdout
    assert lines[0::2] == lines[1::2]


PROXY_GRADER = """import json, os, sys
from gradebox_target import info, invoke, ProxyError
answers = [invoke(f"{sys.argv[1]}-{i}")["rawText"] for i in range(2)]
try:
    invoke(sys.argv[1])
    third = "allowed"
except ProxyError as exc:
    third = exc.status
keys = [k for k, v in os.environ.items() if "sk-judge" in v]
print(json.dumps({"answers": answers, "third": third, "keys": keys, "max": info()["maxCalls"]}))
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_target_gives_the_grader_its_own_proxy(engine, backend, grader_dir):
    from tests.fake_models import FakeModel

    (grader_dir / "g.py").write_text(PROXY_GRADER)
    with FakeModel(default="judged") as fake:
        # The operator's targets file (the current folder's is never read: a grader pack's).
        mine = grader_dir.parent / "targets.yaml"
        mine.write_text(
            f"targets:\n  - name: judge\n    provider: openai\n    model: m\n"
            f"    base_url: {fake.base_url}\n    api_key_env: JUDGE_KEY\n"
        )
        env = base_env(JUDGE_KEY="sk-judge-key", GRADEBOX_TARGETS=str(mine))
        nonce = os.urandom(8).hex()  # the host's answer cache must not answer for the model
        p = gbx(engine, backend, ["--target", "judge", "--max-calls", "2", "--", "python3",
                                  "g.py", nonce], cwd=grader_dir, env=env)  # fmt: skip
    assert p.returncode == 0, p.stderr
    seen = json.loads(p.stdout)
    assert seen == {"answers": ["judged", "judged"], "third": 429, "keys": [], "max": 2}
    assert len(fake.requests) == 2
    assert all(h["authorization"] == "Bearer sk-judge-key" for h in fake.headers)


def test_sigterm_removes_the_container(engine, grader_dir):
    """A harness's own timeout sends SIGTERM: the command is killed, nothing is left."""
    proc = subprocess.Popen(
        [GRADEBOX, "exec", "--sandbox", "oci", "--", "sleep", "60"], cwd=grader_dir,
        env=base_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not leftovers_of(engine, proc.pid, running=True) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leftovers_of(engine, proc.pid, running=True), "the container never started"
    proc.send_signal(15)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and b"interrupted" in err
    assert leftovers_of(engine, proc.pid) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_sigkill_leaves_nothing_running(engine, backend, grader_dir):
    """A harness's hard timeout (SIGKILL) gives exec no chance to clean up: its watchdog
    removes the container, which would otherwise run on past the timeout exec enforces, and
    its scratch folder, at once, not at the next `gradebox gc`."""
    # `python -m gradebox`: test_nonroot runs this test again as a docker-group user, whose
    # venv has no `gradebox` script.
    proc = subprocess.Popen(
        [sys.executable, "-m", "gradebox", "exec", "--sandbox", backend, "--timeout", "600s",
         "--", "sleep", "600"],
        cwd=grader_dir, env=base_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not leftovers_of(engine, proc.pid, running=True) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leftovers_of(engine, proc.pid, running=True), "the container never started"
    scratch = list(Path(tempfile.gettempdir()).glob(f"gradebox-{proc.pid}-*"))
    assert scratch, "exec made no scratch folder (the test would prove nothing)"
    proc.kill()
    proc.communicate(timeout=30)  # the watchdog holds none of our pipes: EOF comes at once
    deadline = time.monotonic() + 60
    while (leftovers_of(engine, proc.pid) or any(p.exists() for p in scratch)) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.2)
    assert leftovers_of(engine, proc.pid) == []
    assert not any(p.exists() for p in scratch)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_workspace_closed_to_the_sandbox_user_is_given_as_a_private_copy(
    engine, backend, grader_dir, ws
):
    """AgentV's workspace is a mkdtemp (0700): as root, uid 65534 could not enter it."""
    ws.chmod(0o700)
    p = gbx(engine, backend, ["--", "sh", "-c", "cat /workspace/answer.txt; touch /workspace/x"],
            cwd=grader_dir, env=base_env(AGENTV_WORKSPACE_PATH=str(ws)))  # fmt: skip
    assert p.returncode != 0 and p.stdout == b"42\n", p.stderr
    assert b"Read-only file system" in p.stderr and not (ws / "x").exists()


def test_the_sdk_is_importable_and_node_commands_get_the_node_image(engine, grader_dir):
    sdk = gbx(engine, "oci", ["--", "python3", "-c", "import gradebox.sdk, gradebox_target"],
              cwd=grader_dir)  # fmt: skip
    assert sdk.returncode == 0, sdk.stderr
    node = gbx(engine, "oci", ["--", "node", "-e", "process.stdout.write('js')"], cwd=grader_dir)
    assert (node.returncode, node.stdout) == (0, b"js"), node.stderr


@pytest.mark.parametrize("runtime", ["crun", "runc"])
def test_exec_runs_on_either_oci_runtime_as_hardened(engine, grader_dir, runtime):
    # The same hardened container on both runtimes (the conformance suite checks every limit
    # on each: the ``oci`` and ``oci-runc`` backends): not root, no capabilities, loopback
    # only, a read-only root, in a cgroup of gradebox's.
    probe = (
        "import os\n"
        "caps = [l for l in open('/proc/self/status') if l.startswith('CapEff')][0].split()[1]\n"
        "try:\n    open('/etc/x', 'w'); ro = False\nexcept OSError:\n    ro = True\n"
        "memory = [l for l in open('/proc/self/cgroup') if ':memory:' in l][0]\n"
        "print(os.getuid() != 0, int(caps, 16), ro, '/gradebox' in memory,"
        " sorted(os.listdir('/sys/class/net')))\n"
    )
    (grader_dir / "probe.py").write_text(probe)
    p = gbx(engine, "oci", ["--runtime", runtime, "--", "python3", "probe.py"], cwd=grader_dir)
    assert p.returncode == 0, p.stderr
    assert p.stdout.decode().strip() == "True 0 True True ['lo']"


def test_auto_says_which_runtime_it_chose(engine, tmp_path, ws):
    # `make` installs crun: auto picks it, and says so in its one line.
    (tmp_path / "g.yaml").write_text("type: script\ncommand: [python3, -c, 'print(1)']\n")
    (tmp_path / "in.json").write_text('{"output": "x"}')
    done = subprocess.run(
        [GRADEBOX, "grade", "g.yaml", "--input", "in.json", "--workspace", str(ws)],
        capture_output=True, text=True, env=base_env(), cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert "sandbox: oci (crun" in done.stderr, done.stderr
    # cgroup v1 (this host): crun starts each container from a cgroup slot (sandbox/slots.py).
    assert "cgroup slots made ahead" in done.stderr, done.stderr
    done = subprocess.run(
        [GRADEBOX, "--runtime", "runc", "grade", "g.yaml", "--input", "in.json",
         "--workspace", str(ws)],
        capture_output=True, text=True, env=base_env(), cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert "sandbox: oci (runc: asked for" in done.stderr, done.stderr
    assert "slots" not in done.stderr, done.stderr  # runc has no disabled cgroup manager


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_dotenv_below_the_current_folder_is_masked_too(engine, backend, grader_dir):
    """The current folder is mounted whole: a service's ``app/.env`` is as much a key as the
    top one, and so is CI's token in ``.git/config``. The control: a file of another name
    there is read as it is."""
    for rel in ("app/.env", "app/deep/.env.local", "app/notes.txt"):
        path = grader_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        path.parent.chmod(0o755)
        path.write_text(f"OPENAI_API_KEY=sk-nested-{path.name}\n")
        path.chmod(0o644)
    (grader_dir / ".git").mkdir(mode=0o755)
    (grader_dir / ".git" / "config").write_text("[http]\n\textraheader = basic sk-git-token\n")
    (grader_dir / ".git" / "config").chmod(0o644)
    script = "cat app/.env app/deep/.env.local .git/config; echo; cat app/notes.txt"
    p = gbx(engine, backend, ["--", "sh", "-c", script], cwd=grader_dir)
    assert p.returncode == 0, p.stderr
    assert b"sk-nested-.env" not in p.stdout and b"sk-nested-notes.txt" in p.stdout, p.stdout
    assert b"sk-git-token" not in p.stdout, p.stdout


def test_a_current_folder_too_big_to_check_for_keys_is_refused(engine, grader_dir):
    from gradebox.graders.grader_run import SECRET_SCAN_LIMIT

    many = grader_dir / "many"
    many.mkdir()
    for i in range(SECRET_SCAN_LIMIT + 1):
        (many / str(i)).touch()
    p = gbx(engine, "oci", ["--", "true"], cwd=grader_dir)
    assert p.returncode == 125 and b"holds more than" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
