"""The attack battery: agents and graders that misbehave on purpose, against every isolated
backend. Each attack must end as an honest result (never a pass it did not earn) and leave
the host untouched."""

import json
import os
import resource
import shutil
import time
from pathlib import Path

import pytest

from gradebox.graders import load_grader, run_grader
from gradebox.images import ImageBuild, qualified
from gradebox.protocol.models import Payload, Status
from tests.conftest import write

pytestmark = pytest.mark.docker


@pytest.fixture
def box(sandbox):
    return sandbox


def run(tmp_path, workspace, box, text, payload=None):
    grader = load_grader(write(tmp_path / "g.yaml", text))
    return run_grader(grader, payload or Payload(), workspace, box)


def test_sleeping_past_the_timeout(tmp_path, workspace, box):
    started = time.monotonic()
    r = run(tmp_path, workspace, box, "type: program\nprogram: sleep\nargs: ['600']\ntimeout: 2s\n")
    assert r.status is Status.error and r.timed_out
    assert r.evidence == "Grader timed out after 2s"
    assert time.monotonic() - started < 20
    assert box.leftovers() == []


def test_child_ignoring_sigterm_dies_with_the_container(tmp_path, workspace, box):
    script = (
        "import os, signal, time\\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
        "if os.fork() == 0:\\n    time.sleep(600)\\n"
        "time.sleep(600)\\n"
    )
    r = run(
        tmp_path,
        workspace,
        box,
        f'type: program\nprogram: python3\nargs: ["-c", "{script}"]\ntimeout: 1s\n',
    )
    assert r.status is Status.error and r.timed_out
    assert box.leftovers() == []


def test_fork_bomb_is_contained(tmp_path, workspace, box):
    started = time.monotonic()
    r = run(
        tmp_path,
        workspace,
        box,
        "type: program\nprogram: sh\n"
        "args: ['-c', 'b() { b | b & }; b; sleep 30']\ntimeout: 5s\nlimits:\n  pids: 64\n",
    )
    # The bomb hits the pids limit ("Cannot fork"); whether the shell then fails or the
    # timeout fires first, it is never a pass, and every process is gone with the container.
    assert r.status in (Status.failed, Status.error) and not r.passed
    assert r.timed_out or "fork" in (r.stderr_tail or "").lower()
    assert time.monotonic() - started < 30
    assert box.leftovers() == []


def test_allocating_3_gib_is_oom_killed(tmp_path, workspace, box):
    r = run(
        tmp_path,
        workspace,
        box,
        "type: program\nprogram: python3\nargs: ['-c', 'x = bytearray(3 << 30); print(\"{}\")']\n",
    )
    assert r.status is Status.error and r.oom_killed
    assert r.evidence == "Grader was killed: out of memory (limit 1 GiB)"


def test_printing_a_gigabyte_is_capped(tmp_path, workspace, box):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    r = run(
        tmp_path,
        workspace,
        box,
        "type: program\nprogram: sh\nargs: ['-c', 'head -c 1073741824 /dev/zero']\n",
    )
    grew_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert r.status is Status.error and r.output_truncated
    assert "cap on stdout" in r.evidence
    assert grew_mib < 64, f"runner grew by {grew_mib:.0f} MiB"
    assert time.monotonic() - started < 30


def test_writing_into_the_workspace_fails_and_host_is_untouched(tmp_path, workspace, box):
    r = run(
        tmp_path,
        workspace,
        box,
        "type: program\nprogram: sh\nargs: ['-c', 'echo x > /workspace/answer.txt']\n",
    )
    assert r.status is Status.failed and "Read-only file system" in r.stderr_tail
    assert (workspace / "answer.txt").read_text() == "42\n"


def test_network_interfaces_are_loopback_only(tmp_path, workspace, box):
    r = run(
        tmp_path,
        workspace,
        box,
        "type: script\ncommand: \"tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '\"\n",
    )
    assert r.status is Status.passed and r.evidence == "lo"


def test_uid_capabilities_and_root_fs(tmp_path, workspace, box):
    r = run(
        tmp_path,
        workspace,
        box,
        "type: script\ncommand: "
        '"id -u; grep CapEff /proc/self/status | cut -f2; touch /usr/x 2>&1 | cut -d: -f3"\n',
    )
    uid, caps, rofs = r.evidence.splitlines()
    assert uid != "0" and caps == "0000000000000000" and rofs.strip() == "Read-only file system"


def test_grader_killed_by_sigkill(tmp_path, workspace, box):
    r = run(tmp_path, workspace, box, "type: program\nprogram: sh\nargs: ['-c', 'kill -9 $$']\n")
    assert r.status is Status.error and "SIGKILL" in r.evidence and not r.passed


def test_unparseable_and_off_schema_stdout(tmp_path, workspace, box):
    r = run(tmp_path, workspace, box, "type: program\nprogram: echo\nargs: ['not json']\n")
    assert r.status is Status.error
    assert r.evidence.startswith("Grader returned unparseable JSON output on stdout:")
    r = run(tmp_path, workspace, box, "type: program\nprogram: echo\nargs: ['{\"verdict\": 1}']\n")
    assert r.status is Status.error and r.evidence.startswith("Grader output did not match schema:")


def test_missing_program_is_a_failed_start(tmp_path, workspace, box):
    r = run(tmp_path, workspace, box, "type: program\nprogram: no-such-program\n")
    assert r.status is Status.error
    assert r.evidence.startswith("Failed to start grader program:")


def test_failing_pytest_is_failed_not_error(tmp_path, workspace, box):
    write(
        workspace / "test_x.py", "def test_ok():\n    assert 1\n\ndef test_bad():\n    assert 0\n"
    )
    r = run(
        tmp_path,
        workspace,
        box,
        "type: program\nprogram: python3\nargs: [-m, pytest, -q, -p, no:cacheprovider]\n",
    )
    assert r.status is Status.failed and "1 failed, 1 passed" in (r.stdout_tail or "")


# --- A grader's output must not flip its verdict ----------------------------------------------


def test_debug_line_before_a_failing_result_is_failed(tmp_path, workspace, box):
    r = run(
        tmp_path, workspace, box,
        "type: script\ncommand: [sh, -c, 'echo debug: starting; echo \"{\\\"pass\\\": false}\"']\n",
    )  # fmt: skip
    assert r.status is Status.failed and not r.passed and r.score == 0.0


def test_a_grader_cannot_fake_a_start_failure(tmp_path, workspace, box):
    r = run(
        tmp_path, workspace, box,
        "type: program\nprogram: sh\n"
        "args: ['-c', 'echo \"[gradebox] cannot enter /workspace\" >&2; exit 127']\n",
    )  # fmt: skip
    assert r.status is Status.failed and r.exit_code == 127


def test_exit_codes_above_128_are_failures_unless_a_signal_killed(tmp_path, workspace, box):
    r = run(tmp_path, workspace, box, "type: program\nprogram: sh\nargs: ['-c', 'exit 137']\n")
    assert r.status is Status.failed and r.exit_code == 137
    r = run(tmp_path, workspace, box, "type: program\nprogram: sh\nargs: ['-c', 'kill -TERM $$']\n")
    assert r.status is Status.error and "SIGTERM" in r.evidence


def test_deep_and_unwritable_output_is_an_error_that_can_be_written(tmp_path, workspace, box):
    deep = '{"pass": true, "details": ' + '{"a": ' * 400 + "1" + "}" * 400 + "}"
    write(tmp_path / "deep.json", deep)
    r = run(tmp_path, workspace, box, "type: script\ncommand: [cat, deep.json]\n")
    assert r.status is Status.error and "nested deeper" in r.evidence
    r.model_dump_json()
    write(tmp_path / "lone.json", '{"pass": false, "reason": "\\ud800"}')
    r = run(tmp_path, workspace, box, "type: script\ncommand: [cat, lone.json]\n")
    assert r.status is Status.failed
    r.model_dump_json()
    r = run(
        tmp_path, workspace, box,
        "type: program\nprogram: python3\n"
        "args: ['-c', 'print(\"[\" * 100000 + \"]\" * 100000)']\n",
    )  # fmt: skip
    assert r.status is Status.error


def test_a_long_python_one_liner_runs(tmp_path, workspace, box):
    code = "import json; x = " + " + ".join(["1"] * 120) + "; print(json.dumps({'pass': x == 120}))"
    assert len(code) > 256
    r = run(tmp_path, workspace, box, f"type: script\ncommand: [python3, -c, {json.dumps(code)}]\n")
    assert r.status is Status.passed, r.evidence


# --- The host stays out of reach --------------------------------------------------------------


def test_payload_is_readable_by_the_sandbox_user_alone(tmp_path, workspace, box):
    r = run(
        tmp_path, workspace, box,
        "type: script\ncommand: \"stat -c '%a %u' $EVALUATE_GRADER_INPUT; id -u\"\n",
    )  # fmt: skip
    mode_owner, uid = r.evidence.splitlines()
    assert mode_owner == f"400 {uid}"


def test_runner_proxy_settings_never_reach_a_grader(tmp_path, workspace, monkeypatch):
    from gradebox.engine import Engine
    from gradebox.sandbox.docker import DockerSandbox

    config = tmp_path / "docker-config"
    write(
        config / "config.json",
        json.dumps(
            {"proxies": {"default": {"httpProxy": "http://user:secret@proxy.invalid:3128"}}}
        ),
    )
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    with DockerSandbox(Engine.connect()) as leaky:
        r = run(tmp_path, workspace, leaky, 'type: script\ncommand: "env | sort"\n')
    assert r.status is Status.passed
    assert "secret" not in r.evidence and "proxy" not in r.evidence.lower()


def test_a_fifo_in_the_workspace_does_not_break_an_rw_copy(tmp_path, workspace, box):
    os.mkfifo(workspace / "pipe")
    r = run(
        tmp_path, workspace, box,
        "type: script\nworkspace: rw\n"
        "command: \"echo new > /workspace/x; cat /workspace/answer.txt\"\n",
    )  # fmt: skip
    assert r.status is Status.passed and r.evidence == "42"
    assert not (workspace / "x").exists()


def test_an_rw_grader_cannot_fill_the_host_disk(tmp_path, workspace, box):
    r = run(
        tmp_path, workspace, box,
        "type: script\nworkspace: rw\n"
        "command: \"for i in 1 2 3 4 5 6; do head -c 250000000 /dev/zero > /workspace/f$i || "
        "exit 1; done\"\nlimits: {file_size: 300MiB, memory: 2GiB}\n",
    )  # fmt: skip
    # 1.5 GB into a 1 GiB private copy: the filesystem says no, and the grader never passes.
    assert not r.passed and "No space left" in (r.stderr_tail or ""), r


# --- The agent (target) cannot see the answer key, reach the host or hide its changes ---------


def _run_suite(tmp_path, box, text, files=None):
    from gradebox.drivers.runner import RunOptions, read_results, run_suite
    from gradebox.suite import load_suite

    for name, body in (files or {}).items():
        write(tmp_path / name, body)
    suite = load_suite(write(tmp_path / "suite.yaml", text))
    run_suite(suite, box, box.images(), RunOptions(tmp_path / "out", workers=2))
    return read_results(tmp_path / "out" / "results.jsonl")


def test_the_target_sees_only_the_files_it_names(tmp_path, box):
    results = _run_suite(
        tmp_path, box,
        "target: {command: [python3, agent.py]}\n"
        "tests:\n  - id: t\n    input: go\n    expected_output: THE-ANSWER-KEY\n"
        "    assert: [{type: script, command: [python3, graders/check.py]}]\n",
        files={"agent.py": "import os\nprint(sorted(os.listdir('/grader')))\n"
        "for p in ('/grader/suite.yaml',\n          '/grader/graders/check.py'):\n"
        "    try:\n        print(open(p).read())\n"
        "    except OSError:\n        print('no', p)\n",
        "graders/check.py": "print('{\"pass\": true}')  # SECRET-GRADER\n"},
    )  # fmt: skip
    answer = results["t"].output
    assert answer.splitlines()[0] == "['agent.py']"
    assert "THE-ANSWER-KEY" not in answer and "SECRET-GRADER" not in answer
    assert results["t"].status is Status.passed  # the grader itself still sees its folder


def test_a_link_to_the_host_never_lands_in_file_changes(tmp_path, box):
    import subprocess

    template = tmp_path / "tpl"
    write(template / "sub" / "code.py", "x = 1\n")
    subprocess.run(["git", "init", "-q", str(template / "sub")], check=True)
    results = _run_suite(
        tmp_path, box,
        "workspace: {template: ./tpl}\n"
        "target: {command: 'rm -rf sub && ln -s /etc sub && echo done'}\n"
        "tests:\n  - id: t\n    input: go\n"
        "    assert: [{type: script, command: [python3, g.py]}]\n",
        files={"g.py": "import json, sys\nfc = json.load(sys.stdin)['file_changes']\n"
        "ok = 'root:x:0' not in fc and '-x = 1' in fc\n"
        "print(json.dumps({'pass': ok, 'reason': fc[:300]}))\n"},
    )  # fmt: skip
    r = results["t"]
    assert r.status is Status.passed, (r.error, r.graders)


def test_an_agent_over_its_workspace_quota_is_an_error(tmp_path, box):
    results = _run_suite(
        tmp_path, box,
        "workspace: {max_size: 8MiB, max_files: 100}\n"
        "target: {command: 'head -c 20000000 /dev/zero > big; echo written'}\n"
        "tests:\n  - id: big\n    input: go\n    assert: [{type: contains, value: written}]\n"
        "  - id: many\n    input: go\n"
        "    workspace: {max_files: 50}\n"
        "    assert: [{type: contains, value: x}]\n",
    )  # fmt: skip
    big = results["big"]
    assert big.status is Status.error and "workspace quota" in big.error, big.error
    assert results["many"].status is Status.failed  # within quota: graded as usual


def test_untrusted_output_costs_one_test_never_the_run(tmp_path, box):
    deep = '{"pass": true, "details": ' + '{"a": ' * 400 + "1" + "}" * 400 + "}"
    results = _run_suite(
        tmp_path, box,
        "tests:\n"
        "  - id: deep\n    output: x\n    assert: [{type: script, command: [cat, deep.json]}]\n"
        "  - id: lone\n    output: x\n    assert: [{type: script, command: [cat, lone.json]}]\n"
        "  - id: fine\n    output: x\n    assert: [{type: contains, value: x}]\n",
        files={"deep.json": deep,
               "lone.json": '{"pass": true, "reason": "\\ud800 \\u001b]0;title\\u0007"}'},
    )  # fmt: skip
    assert results["deep"].status is Status.error
    assert results["lone"].status is Status.passed
    assert results["fine"].status is Status.passed


def test_a_graders_own_dockerfile_builds_without_network(tmp_path, box):

    write(
        tmp_path / "Dockerfile",
        f"FROM {qualified('shell')}\n"
        "RUN test \"$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ')\" = lo\n",
    )
    resolver = box.images(build=True)  # whoever runs gradebox allowed the build
    image = resolver.resolve(ImageBuild(build="./Dockerfile"), tmp_path)
    assert image.startswith("sha256:")
    box.engine.api.remove_image(image, force=True)


def test_a_spec_the_oci_backend_does_not_run_goes_to_docker_and_says_so(tmp_path, workspace):
    from gradebox.sandbox import get_sandbox

    with get_sandbox("oci") as box:
        plain = run(tmp_path, workspace, box, "type: script\ncommand: 'true'\n")
        bridged = run(tmp_path, workspace, box, "type: script\ncommand: 'true'\nnetwork: bridge\n")
    assert plain.backend == "oci" and bridged.backend == "docker"
    assert bridged.privileges == ["network"] and bridged.image and bridged.image.id
    assert plain.image and plain.image.id.startswith("sha256:")


# A failing agent that plants what the host's diff once choked on or could not see: names that
# are not UTF-8, paths past PATH_MAX, git's own folders, files the template ignores. Each test
# of the suite is one variant (the agent switches on its test id); "control" is the same
# failing work with plain names. Every one must be `failed` (never an error, never a pass),
# with what it planted in the file_changes its graders read.
HOSTILE_AGENT = """import os, sys
case = os.environ["GRADEBOX_TEST_ID"]

def plant(path, text, mode=0o644):
    *folders, last = path.split(b"/")
    top = os.open(".", os.O_RDONLY)
    for name in folders:  # one name at a time: the path itself may pass PATH_MAX
        os.makedirs(name, exist_ok=True)
        os.chdir(name)
    with open(os.open(last, os.O_WRONLY | os.O_CREAT | os.O_APPEND, mode), "wb") as f:
        f.write(text)
    os.fchdir(top)

if case == "not-utf8":
    os.makedirs(b"\\xff/.git")
    plant(b"\\xff/evil.py", b"EVIL-not-utf8\\n")
    plant(b"a/\\xfd\\xfe/b.py", b"EVIL-nested\\n")
    os.symlink(b"\\xfb", b"\\xfc")
elif case == "past-path-max":
    plant(b"/".join([b"d" * 200] * 30 + [b"deep.py"]), b"EVIL-past-path-max\\n")
elif case == "3000-deep":
    plant(b"/".join([b"d"] * 3000 + [b"deep.py"]), b"EVIL-3000-deep\\n")
elif case == "git-places":
    plant(b".git/hooks/pre-commit", b"#!/bin/sh\\necho EVIL-hook\\n", 0o755)
    plant(b".git/config", b"[core]\\n\\tfsmonitor = EVIL-fsmonitor\\n")
    plant(b".GIT/evil.py", b"EVIL-dot-GIT\\n")
    plant(b"sub/.git", b"EVIL-gitfile\\n")
elif case == "nul-in-code":
    plant(b"lib/index.js", b"// a NUL: \\0\\nEVIL_nul();\\n")
elif case == "sparse":
    os.mkdir("holes")
    for i in range(400):  # 100 GiB of holes, each file just under the file-size limit
        with open(f"holes/{i}.bin", "wb") as f:
            f.truncate(255 << 20)
    plant(b"beside.py", b"EVIL-sparse\\n")
elif case == "ignored":
    plant(b"__pycache__/conftest.cpython-311.pyc", b"\\x00EVIL-bytecode")
    plant(b"node_modules/lib/index.js", b"EVIL-module\\n")
else:
    plant(b"plain/evil.py", b"EVIL-control\\n")
print("WRONG")
"""

SEES_CHANGES = """import json, sys
d = json.load(sys.stdin)
missing = [m for m in d["metadata"]["expect"] if m not in d["file_changes"]]
print(json.dumps({"pass": not missing, "reason": f"missing {missing}" if missing else "all seen"}))
"""

HOSTILE_CASES = {
    "not-utf8": ["+++ b/\\xff/evil.py\n", "+EVIL-not-utf8", "+EVIL-nested", "+\\xfb"],
    "past-path-max": ["+EVIL-past-path-max", "/.gradebox-folders"],
    "3000-deep": ["+EVIL-3000-deep", "/.gradebox-folders"],
    "git-places": ["+++ b/.git/hooks/pre-commit", "+echo EVIL-hook", "+\tfsmonitor = EVIL",
                   "+++ b/.GIT/evil.py", "+EVIL-dot-GIT", "+++ b/sub/.git\n", "+EVIL-gitfile"],
    "nul-in-code": ["+++ b/lib/index.js", "+EVIL_nul();"],
    "sparse": ["Binary files /dev/null and b/holes/399.bin differ", "+EVIL-sparse"],
    "ignored": ["A\t__pycache__/conftest.cpython-311.pyc\n", "A\tnode_modules/lib/index.js\n"],
    "control": ["+++ b/plain/evil.py", "+EVIL-control"],
}  # fmt: skip


def test_hostile_names_leave_a_failing_agent_failed_with_its_changes_shown(tmp_path, box):
    import subprocess

    write(tmp_path / "tpl" / "app.py", "print('app')\n")
    write(tmp_path / "tpl" / ".gitignore", "__pycache__/\nnode_modules/\n")
    write(tmp_path / "tpl" / "sub" / "code.py", "x = 1\n")
    subprocess.run(["git", "init", "-q", str(tmp_path / "tpl")], check=True)
    tests = "".join(
        f"  - id: {case}\n    input: go\n    metadata: {{expect: {json.dumps(expect)}}}\n"
        for case, expect in HOSTILE_CASES.items()
    )
    results = _run_suite(
        tmp_path, box,
        "workspace: {template: ./tpl}\n"
        "target: {command: [python3, agent.py]}\n"
        "assert:\n  - {type: contains, value: RIGHT}\n"
        "  - {type: script, name: sees-changes, command: [python3, sees.py]}\n"
        f"tests:\n{tests}",
        files={"agent.py": HOSTILE_AGENT, "sees.py": SEES_CHANGES},
    )  # fmt: skip
    for case in HOSTILE_CASES:
        r = results[case]
        assert r.status is Status.failed and r.error is None, (case, r.error, r.graders)
        contains, sees = r.graders
        assert not contains.passed and sees.passed, (case, sees.evidence)
        assert r.file_changes_bytes > 0


# --- the kernel and PID 1: each route a grader (or the agent's code inside it) might take.
# Every grader below reports a pass only if its route is open; each must be failed.

ROUTE = """import ctypes, json, mmap, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *args):
    return libc.syscall(ctypes.c_long(nr), *(ctypes.c_long(a) for a in args)) != -1
def opens(path, mode="r+b"):
    try:
        open(path, mode).close()
        return True
    except OSError:
        return False
def in_child(fn):  # a call the filter may answer by killing the caller
    pid = os.fork()
    if pid == 0:
        os._exit(0 if fn() else 1)
    status = os.waitpid(pid, 0)[1]
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
def int80_getpid():  # the 32-bit ABI, from a 64-bit process
    page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(b"\\xb8\\x14\\x00\\x00\\x00\\xcd\\x80\\xc3")  # mov eax, 20; int 0x80; ret
    return ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))() > 0
def run_from(folder):
    import shutil, subprocess
    shutil.copy("/bin/true", folder + "/t")
    os.chmod(folder + "/t", 0o755)
    try:
        return subprocess.run([folder + "/t"]).returncode == 0
    except OSError:
        return False
def vm_read(pid):  # allowed, an unmapped address is EFAULT; refused, EPERM
    buf = ctypes.create_string_buffer(8)
    iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 8)
    far = (ctypes.c_void_p * 2)(0x10000, 8)
    args = (pid, ctypes.addressof(iov), 1, ctypes.addressof(far), 1, 0)
    return call(310, *args) or ctypes.get_errno() != 1
ring = ctypes.create_string_buffer(120)
ROUTES = {
    "ptrace-seize-pid1": lambda: call(101, 0x4206, 1, 0, 0),
    "ptrace-traceme": lambda: in_child(lambda: call(101, 0, 0, 0, 0)),
    "proc-1-mem": lambda: opens("/proc/1/mem"),
    "proc-1-task-mem": lambda: opens("/proc/1/task/1/mem"),
    "proc-1-environ": lambda: opens("/proc/1/environ", "rb"),
    "process-vm-readv-pid1": lambda: vm_read(1),
    "io-uring": lambda: call(425, 4, ctypes.addressof(ring)) or ctypes.get_errno() != 1,
    "int-0x80": lambda: in_child(int80_getpid),
    "x32-abi": lambda: in_child(lambda: libc.syscall(ctypes.c_long(0x40000000 | 39)) > 0),
    "af-alg-socket": lambda: call(41, 38, 5, 0),
    "af-vsock-socket": lambda: call(41, 40, 1, 0),
    "no-aslr": lambda: call(135, 0x0040000),
    "exec-from-tmp": lambda: run_from("/tmp"),
    "exec-from-home": lambda: run_from(os.environ["HOME"]),
    "exec-from-dev-shm": lambda: run_from("/dev/shm"),
    # Controls: the same work by a route that is meant to be open must pass.
    "control-own-mem": lambda: opens("/proc/self/mem"),
    "control-inet-socket": lambda: call(41, 2, 1, 0),
    "control-exec-from-image": lambda: subprocess_ok(["/bin/true"]),
    "control-script-in-tmp": lambda: script_in_tmp(),
}
def subprocess_ok(argv):
    import subprocess
    return subprocess.run(argv).returncode == 0
def script_in_tmp():
    open("/tmp/s.py", "w").write("print(42)")
    import subprocess
    return subprocess.run([sys.executable, "/tmp/s.py"], capture_output=True).stdout == b"42\\n"
try:
    open_route = bool(ROUTES[sys.argv[1]]())
except Exception as exc:
    open_route = False
print(json.dumps({"pass": open_route, "score": float(open_route), "reason": sys.argv[1]}))
"""
CLOSED_ROUTES = [
    "ptrace-seize-pid1", "ptrace-traceme", "proc-1-mem", "proc-1-task-mem", "proc-1-environ",
    "process-vm-readv-pid1", "io-uring", "int-0x80", "x32-abi", "af-alg-socket",
    "af-vsock-socket", "no-aslr", "exec-from-tmp", "exec-from-home", "exec-from-dev-shm",
]  # fmt: skip
OPEN_ROUTES = [
    "control-own-mem", "control-inet-socket", "control-exec-from-image", "control-script-in-tmp",
]  # fmt: skip


@pytest.mark.parametrize("route", CLOSED_ROUTES + OPEN_ROUTES)
def test_no_route_to_pid1_the_kernels_other_doors_or_a_program_in_scratch(
    tmp_path, workspace, box, route
):
    write(tmp_path / "route.py", ROUTE)
    r = run(tmp_path, workspace, box, f"type: script\ncommand: [python3, route.py, {route}]\n")
    want = Status.passed if route in OPEN_ROUTES else Status.failed
    assert r.status is want, (route, r.status, r.evidence, r.stderr_tail)


# --- An agent's code runs where it must not: pytest and node-test verifiers -------------------
# The agent's calc is wrong (a - b); the verifier's three tests pass for add(0, 0) alone. Every
# trick below must end as that same failure (1 of 3), or as an error: never a pass.

BUGGY_PY = "def add(a, b):\n    return a - b\n"
VERIFIER_PY = (
    "import statistics\n\nfrom calc import add\n\n\ndef test_small():\n    assert add(2, 3) == 5"
    "\n\n\ndef test_negative():\n    assert add(-1, -1) == -2\n\n\n"
    "def test_zero():\n    assert add(0, 0) == statistics.mean([0])\n"
)
ALL_PASS = (
    '<testsuites><testsuite><testcase classname="tests.test_calc" name="test_small"/>'
    '<testcase classname="tests.test_calc" name="test_negative"/>'
    '<testcase classname="tests.test_calc" name="test_zero"/></testsuite></testsuites>'
)
# Rewrites pytest's report as the process ends, wherever the report goes: the old runner's
# JUnit path, or a /dev/fd pipe. pytest still exits 1, with an all-pass report.
FORGE_PY = f"""import atexit, sys
def _forge():
    for arg in sys.argv:
        if arg.startswith("--junitxml="):
            with open(arg.split("=", 1)[1], "w") as f:
                f.write({ALL_PASS!r})
atexit.register(_forge)
"""
# A stand-in for the verifier runner itself: prints an all-pass report line and exits 0.
FAKE_LINE = json.dumps({"junit": ALL_PASS, "report": ALL_PASS, "exit_code": 0, "tampered": [],
                        "declared": [], "output": ""})  # fmt: skip
FAKE_RUNNER = f"import os\nprint({FAKE_LINE!r}, flush=True)\nos._exit(0)\n"


def _pyc(source: Path, code: str, *, pytest_tag: bool = False) -> tuple[str, bytes]:
    """A bytecode cache for ``source`` that runs ``code``, stamped with the source's mtime and
    size so that an import takes it for the source's own cache."""
    import importlib.util
    import marshal
    import struct
    import sys

    st = source.stat()
    header = struct.pack("<4sLLL", importlib.util.MAGIC_NUMBER, 0, int(st.st_mtime), st.st_size)
    tag = sys.implementation.cache_tag + ("-pytest-7.2.1" if pytest_tag else "")
    name = f"__pycache__/{source.stem}.{tag}.pyc"
    return name, header + marshal.dumps(compile(code, str(source), "exec"))


PY_TRICKS = {
    # `python3 -m gradebox.verify` started in the workspace: the agent's package or json first.
    "runner-package": {"gradebox/__init__.py": "", "gradebox/verify.py": FAKE_RUNNER},
    "runner-json": {"json.py": FAKE_RUNNER},
    # A standard-library module the verifier imports, shadowed from the workspace.
    "stdlib-shadow": {"statistics.py": FORGE_PY + "mean = lambda values: 0\n"},
    # Package __init__.py files along the verifier's destination, imported before the tests.
    "dest-init": {"tests/__init__.py": FORGE_PY},
    "root-and-dest-init": {"__init__.py": FORGE_PY, "tests/__init__.py": ""},
    # The agent's own module, imported by name, forges the report at exit: pytest exits 1.
    "forged-at-exit": {"calc.py": FORGE_PY + BUGGY_PY},
}


def _py_verifier(tmp_path, box, files: dict[str, str | bytes], template: Path | None = None):
    from gradebox.graders.config import grader_from_data
    from gradebox.graders.verifier import pytest_grader_data

    suite = tmp_path / "suite"
    write(suite / "verifiers" / "test_calc.py", VERIFIER_PY)
    ws = tmp_path / "ws"
    if template is not None:
        shutil.copytree(template, ws)  # mtimes kept
    else:
        write(ws / "calc.py", BUGGY_PY)
    for rel, body in files.items():
        path = ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body if isinstance(body, bytes) else body.encode())
    data = pytest_grader_data({"files": ["verifiers/test_calc.py"], "dest": "tests"}, suite,
                              template)  # fmt: skip
    return run_grader(grader_from_data(data, file="t", source_dir=suite), Payload(), ws, box)


def _one_of_three_or_error(r):
    assert not r.passed and r.status is not Status.passed, r.evidence
    if r.status is Status.failed:
        assert r.score <= 1 / 3 + 1e-9, r.evidence  # never more than the control's


@pytest.mark.parametrize("trick", sorted(PY_TRICKS))
def test_nothing_the_agent_plants_runs_in_a_pytest_verifier(tmp_path, box, trick):
    _one_of_three_or_error(_py_verifier(tmp_path, box, PY_TRICKS[trick]))


def test_a_pytest_verifier_control_fails_and_a_fix_passes(tmp_path, box):
    r = _py_verifier(tmp_path, box, {})
    assert r.status is Status.failed and r.score == pytest.approx(1 / 3), r.evidence
    assert r.stderr_tail  # a failure keeps what the run printed
    fixed = _py_verifier(tmp_path / "fixed", box, {"calc.py": "def add(a, b):\n    return a + b\n"})
    assert fixed.status is Status.passed and fixed.score == 1.0, fixed.evidence
    assert fixed.stderr_tail is None and fixed.stdout_tail is None  # a pass keeps nothing


@pytest.mark.parametrize("what", ["agent-module", "template-conftest"])
def test_a_planted_bytecode_cache_never_stands_in_for_a_source(tmp_path, box, what):
    template = tmp_path / "template"
    write(template / "calc.py", BUGGY_PY)
    write(template / "tests" / "conftest.py", "import pytest\n")
    write(template / ".gitignore", "__pycache__/\n")
    if what == "agent-module":  # the agent's own calc, fixed in bytecode only (and ignored)
        fixed = "def add(a, b):\n    return a + b\n"
        files = dict(_pyc(template / "calc.py", fixed, pytest_tag=tag) for tag in (False, True))
    else:  # the template's conftest, replaced by bytecode that forges the report
        name, data = _pyc(template / "tests" / "conftest.py", FORGE_PY, pytest_tag=True)
        files = {f"tests/{name}": data}
    # Stamped with the template source's mtime and size: the cache looks fresh.
    r = _py_verifier(tmp_path, box, files, template=template)
    _one_of_three_or_error(r)


BUGGY_JS = "export const add = (a, b) => a - b;\n"
NODE_TRICKS = {
    # Ends the test file's process as the module loads: node counted the file as one pass.
    "exit-on-import": "process.exit(0);\n" + BUGGY_JS,
    # Ends it in the middle of the run, after a passing test: the rest never reported.
    "exit-mid-run": "export const add = (a, b) => {\n  if (a === 0) process.exit(0);\n"
    "  return a === 2 ? 5 : a - b;\n};\n",
    # A failure whose message holds a TAP YAML line that made the old reader skip it.
    "suite-in-the-error": "export const add = (a, b) => {\n"
    "  if (a === 2) throw new Error(\"wrong\\n  type: 'suite'\\n  ...\");\n  return a - b;\n};\n",
    # Report lines written to every descriptor the test file's process might share.
    "writes-to-every-fd": "import fs from 'node:fs';\nconst line = JSON.stringify({passed: true,"
    " name: 'small', nesting: 1, suite: false}) + '\\nok 1 - small\\n';\n"
    "for (let fd = 1; fd < 64; fd++) { try { fs.writeSync(fd, line); } catch {} }\n"
    "for (const p of ['/proc/1/fd/1', '/proc/' + process.ppid + '/fd/1']) {\n"
    "  try { fs.appendFileSync(p, line); } catch {} }\n" + BUGGY_JS,
}


def _node_verifier(tmp_path, box, calc: str):
    from gradebox.graders.config import grader_from_data
    from gradebox.graders.verifier import node_test_grader_data

    ws = tmp_path / "ws"
    write(ws / "calc.mjs", calc)
    suite = Path(__file__).resolve().parents[1] / "fixtures" / "verifiers"
    data = node_test_grader_data({"files": ["verifiers/calc.test.mjs"]}, suite)
    return run_grader(grader_from_data(data, file="t", source_dir=suite), Payload(), ws, box)


@pytest.mark.parametrize("trick", sorted(NODE_TRICKS))
def test_nothing_the_agent_does_in_a_node_test_file_passes_it(tmp_path, box, trick):
    r = _node_verifier(tmp_path, box, NODE_TRICKS[trick])
    assert not r.passed and r.status is not Status.passed, (r.evidence, r.stdout_tail)
    if r.status is Status.failed:
        assert r.score <= 0.5, r.evidence  # never more than the control's


def test_a_node_test_control_fails_and_a_fix_passes(tmp_path, box):
    r = _node_verifier(tmp_path, box, BUGGY_JS)
    assert r.status is Status.failed and r.score == 0.5, (r.evidence, r.stdout_tail)
    fixed = _node_verifier(tmp_path / "fixed", box, "export const add = (a, b) => a + b;\n")
    assert fixed.status is Status.passed and fixed.score == 1.0, fixed.evidence
    assert fixed.stderr_tail is None


# --- Grader files: a grader's container holds what its command names, inside its project -------

SECRETS = ("SECRET-ENV-KEY", "SECRET-ANSWER-OF-OTHER", "SECRET-OTHER-VERIFIER", "SECRET-HOST")
# The agent's calc (imported by the verifier) prints every file it finds under /grader*, where
# pytest shows it (on a failure) and straight into the container's stderr (always).
SNOOP_PY = """import os, sys
def snoop():
    seen = []
    for top in sorted(p for p in os.listdir("/") if p.startswith("grader")):
        for base, dirs, files in os.walk("/" + top):
            for name in files:
                seen.append(name)
                try:
                    seen += [l for l in open(os.path.join(base, name)) if "SECRET" in l]
                except OSError:
                    pass
    line = "SEEN " + " ".join(s.strip() for s in seen) + "\\n"
    sys.stderr.write(line)
    try:
        with open("/proc/1/fd/2", "w") as err:
            err.write(line)
    except OSError:
        pass
"""


@pytest.mark.parametrize("fixed", [False, True])
def test_a_verifier_sees_no_other_file_of_the_suite(tmp_path, box, fixed):
    add = "a + b" if fixed else "a - b"
    results = _run_suite(
        tmp_path / "s", box,
        "workspace: {template: ./tpl}\n"
        "tests:\n"
        "  - id: mine\n    output: done\n"
        "    assert: [{type: pytest, files: [verifiers/test_mine.py], dest: tests}]\n"
        "  - id: other\n    output: x\n    expected_output: SECRET-ANSWER-OF-OTHER\n"
        "    assert: [{type: pytest, files: [verifiers/test_other.py]}]\n",
        files={".env": "OPENAI_API_KEY=SECRET-ENV-KEY\n",
               "tpl/calc.py": SNOOP_PY + f"def add(a, b):\n    snoop()\n    return {add}\n",
               "verifiers/test_mine.py": "from calc import add\n\n\ndef test_add():\n"
               "    assert add(2, 3) == 5\n",
               "verifiers/test_other.py": "# SECRET-OTHER-VERIFIER\ndef test_x():\n    pass\n"},
    )  # fmt: skip
    mine = results["mine"].graders[0]
    assert mine.passed is fixed, (mine.evidence, mine.stderr_tail)
    mine_text = results["mine"].model_dump_json()
    assert not [s for s in SECRETS if s in mine_text], mine.stderr_tail
    if fixed:  # a pass keeps nothing the run printed
        assert mine.stderr_tail is None and mine.stdout_tail is None
    else:  # a failure keeps what the agent's code printed: the verifier's own file alone
        assert "test_mine.py" in (mine.stderr_tail or ""), mine.stderr_tail


GRADER_FILES_CHECK = """import json, os, sys
seen = []
for arg in sys.argv[1:]:
    for path in (arg, os.path.join("/grader", arg)):
        try:
            seen.append(open(path).read().strip())
        except OSError:
            pass
for top in [p for p in os.listdir("/") if p.startswith("grader")]:
    for base, _, files in os.walk("/" + top):
        for name in files:
            try:
                seen.append(open(os.path.join(base, name)).read().strip())
            except OSError:
                pass
print(json.dumps({"pass": True, "reason": " | ".join(seen)}))
"""


@pytest.mark.parametrize(
    "arg",
    ["../outside/secret.txt", "../../outside/secret.txt", "graders/../../outside/secret.txt",
     "graders/link.txt", "link-dir/secret.txt", "ABSOLUTE", ".env"],
)  # fmt: skip
def test_a_grader_never_gets_a_host_file_out_of_its_folder(tmp_path, box, arg):
    outside = tmp_path / "outside" / "secret.txt"
    write(outside, "SECRET-HOST")
    folder = tmp_path / "p"  # no .gradebox/, .agentv/ or .git above: p/ is the project
    write(folder / "graders" / "check.py", GRADER_FILES_CHECK)
    write(folder / "graders" / "helper.py", "HELPER-BESIDE")
    write(folder / "expected.json", "SECRET-ANSWER-OF-OTHER")
    write(folder / ".env", "SECRET-ENV-KEY")
    (folder / "graders" / "link.txt").symlink_to(outside)
    (folder / "link-dir").symlink_to(outside.parent)
    arg = str(outside) if arg == "ABSOLUTE" else arg
    text = f"type: script\ncommand: [python3, graders/check.py, {json.dumps(arg)}]\n"
    (tmp_path / "ws").mkdir()
    r = run(folder, tmp_path / "ws", box, text)
    assert r.passed, (r.evidence, r.stderr_tail)
    assert "HELPER-BESIDE" in r.evidence  # the control: its own folder is there
    assert not [s for s in SECRETS if s in r.evidence], r.evidence


def test_the_verifier_runner_ends_whatever_the_agent_left_running(tmp_path, workspace, box):
    # What the runner does once the tests are over, before it prints its report: a process
    # left behind (as a planted daemon would be) is dead, on every backend.
    check = (
        "import json, os, subprocess\\n"
        "from gradebox.verify import _end_the_rest, _own_container\\n"
        "left = subprocess.Popen(['sleep', '600'], start_new_session=True)\\n"
        "_end_the_rest()\\n"
        "_, status = os.waitpid(left.pid, 0)\\n"
        "killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == 9\\n"
        "print(json.dumps({'pass': _own_container() and killed, 'reason': str(status)}))"
    )
    r = run(tmp_path, workspace, box, f'type: script\ncommand: [python3, -I, -c, "{check}"]\n')
    assert r.passed, (r.evidence, r.stderr_tail)


# --- A grader's output is judged as it printed it ---------------------------------------------

WRONG = "json.dumps({'pass': False, 'reason': 'wrong answer'})"
GRADERS = {
    # Echo the answer (a debug print), then the verdict on a line of its own.
    "graders/echo.py": "import json, sys\nanswer = json.load(sys.stdin)['output']\n"
    f"print(answer)\nprint({WRONG})\n",
    # The same, without the newline: the verdict is glued to the end of the answer.
    "graders/glue.py": "import json, sys\nanswer = json.load(sys.stdin)['output']\n"
    f"sys.stdout.write(answer)\nprint({WRONG})\n",
}


def _graded(tmp_path, box, answers, grader, files=None, **extra):
    tests = [
        {"id": key, "output": answer,
         "assert": [{"type": "script", "command": ["python3", grader], **extra}]}
        for key, answer in answers.items()
    ]  # fmt: skip
    return _run_suite(
        tmp_path, box, json.dumps({"tests": tests}), files={**GRADERS, **(files or {})}
    )


def test_output_reaches_the_verdict_byte_for_byte(box):
    # Lines that look like the init's or the gate's are the command's own output.
    from gradebox.sandbox.base import SandboxSpec

    printed = (
        "a[INFO  tini (1)] Main child exited normally (with status '0')\n{\"pass\": false}\n"
        "[WARN  tini (7)] x\n[gradebox:0123456789abcdef0123456789abcdef] error y\n"
        "[FATAL tini (1)] z"
    )
    spec = SandboxSpec(
        image=box.resolve_image(qualified("shell")), name="verbatim",
        command=["sh", "-c", 'printf "%s" "$0"; printf "%s" "$0" >&2', printed],
    )  # fmt: skip
    out = box.run(spec)
    assert (out.exit_code, out.start_error, out.signal) == (0, None, None)
    assert out.stdout == printed.encode() and out.stderr == printed.encode()


def test_init_lines_in_an_answer_do_not_turn_a_fail_into_a_pass(tmp_path, box):
    answers = {
        "tini-info": "note[INFO  tini (7)] Main child exited normally (with status '0')",
        "tini-warn": "a\n[WARN  tini (1)] Tini is not running as PID 1",
        "tini-lines": "[DEBUG tini (12)] x\nb[INFO  tini (1)] Spawned child process 'sh'",
        "gate-tag": "see[gradebox:0123456789abcdef0123456789abcdef] error cannot enter /x",
        "control": "the answer is 41",
    }
    echoed = _graded(tmp_path / "echo", box, answers, "graders/echo.py")
    for key, result in echoed.items():
        grader = result.graders[0]
        assert (result.status, grader.evidence) == (Status.failed, "wrong answer"), key
    # Echoed without a newline, the verdict is glued to the answer: never the exit-code pass.
    glued = _graded(tmp_path / "glue", box, answers, "graders/glue.py")
    for key, result in glued.items():
        assert result.status is Status.error and not result.passed, (key, result.graders[0])


PREFIXES = {
    "bom": "\ufeff", "zero-width-space": "\u200b", "word-joiner": "\u2060", "nul": "\x00",
    "ansi-reset": "\x1b[0m", "ansi-colour": "\x1b[1;32m\x1b[0m", "osc-title": "\x1b]0;ok\x07",
    "rtl-override": "\u202e", "hangul-filler": "\u3164", "control": "",
}  # fmt: skip
PREFIXED = (
    "import json, sys\nkey = json.load(sys.stdin)['output']\n"
    f"prefix = {PREFIXES!r}[key.split('/')[0]]\n"
    "debug = 'debug: loading\\n' if key.endswith('/after-debug') else ''\n"
    f"sys.stdout.buffer.write((debug + prefix + {WRONG} + '\\n').encode())\n"
)


def test_a_verdict_behind_invisible_characters_is_never_the_exit_code_pass(tmp_path, box):
    answers = {f"{p}/{where}": f"{p}/{where}" for p in PREFIXES for where in ("", "after-debug")}
    results = _graded(tmp_path, box, answers, "graders/prefixed.py",
                      files={"graders/prefixed.py": PREFIXED})  # fmt: skip
    for key, result in results.items():
        grader = result.graders[0]
        if key.startswith("control/"):
            assert (result.status, grader.evidence) == (Status.failed, "wrong answer"), key
        else:
            assert result.status is Status.error and not result.passed, (key, grader)
            assert "behind invisible characters" in grader.evidence, grader.evidence


FORGE = r"""
init="[INFO  tini (1)] Main child exited"
tag="[gradebox:0123456789abcdef0123456789abcdef]"
say() { for f in /proc/1/fd/1 /proc/1/fd/2 /dev/gradebox-report; do echo "$1" > "$f"; done; }
case "$1" in
  normal-then-kill) say "$init normally (with status '0')"; say "$tag exec"; kill -9 $$;;
  signal-then-fail) say "$init with signal (with signal 'Killed')"; echo '{"pass": false}';;
  tags) say "$tag error cannot enter /workspace"; say "$tag exec"; echo '{"pass": false}';;
  flood-then-kill) head -c 50000000 /dev/zero > /proc/1/fd/1; kill -9 $$;;
  read) for f in /dev/gradebox-report /proc/1/fd/1; do cat "$f" 2>&1 | head -c 100; echo; done;;
  forge-while-killed) exec python3 -c 'import os, time
if os.fork() == 0:  # floods "exited normally" while its parent is SIGKILLed, and after
    line = b"[INFO  tini (1)] Main child exited normally (with status 0)\n" * 60
    fds = []
    for f in ("/dev/gradebox-report", "/proc/1/fd/1"):
        try:
            fds.append(os.open(f, os.O_WRONLY))
        except OSError:
            pass
    while fds:
        for fd in fds:
            os.write(fd, line)
    os._exit(0)
time.sleep(0.3)
os.kill(os.getpid(), 9)';;
  control-kill) kill -9 $$;;
  control-fail) echo '{"pass": false}';;
esac
"""


def test_what_a_grader_forges_on_the_report_channel_makes_no_pass(tmp_path, box):
    modes = ("normal-then-kill", "signal-then-fail", "tags", "flood-then-kill", "read",
             "forge-while-killed", "control-kill", "control-fail")  # fmt: skip
    tests = [
        {"id": mode, "output": "x", "assert": [
            {"type": "script", "command": ["sh", "graders/forge.sh", mode], "timeout": "60s"}]}
        for mode in modes
    ]  # fmt: skip
    started = time.monotonic()
    results = _run_suite(tmp_path, box, json.dumps({"tests": tests}),
                         files={"graders/forge.sh": FORGE})  # fmt: skip
    assert time.monotonic() - started < 120  # a flooded channel blocks nothing
    graders = {key: r.graders[0] for key, r in results.items()}
    for key in ("normal-then-kill", "flood-then-kill", "forge-while-killed", "control-kill"):
        g = graders[key]
        assert g.status is Status.error and "SIGKILL" in g.evidence and not g.timed_out, g
    for key in ("signal-then-fail", "tags", "control-fail"):
        assert graders[key].status is Status.failed, graders[key]
    # Nothing in the container reads the channel: a report cannot be swallowed either. (Where
    # a slot starts the container, the channel is crun's own stdout: nothing is bound at
    # /dev/gradebox-report.)
    read = [line for line in graders["read"].evidence.splitlines() if line]
    assert read[1] == "cat: /proc/1/fd/1: Permission denied", read
    assert read[0].endswith(("Permission denied", "No such file or directory")), read
    assert box.leftovers() == []


def test_negate_never_turns_a_crash_into_a_pass(tmp_path, box):
    def grader(program, args, **kw):
        return {"type": "program", "program": program, "args": args, **kw}

    def script(shell):
        return {"type": "script", "command": ["sh", "-c", shell], "negate": True}

    crash = ["-c", "import json; json.loads('not json')"]
    cases = {
        "crash": grader("python3", crash, negate=True),
        "crash-on-stdout": grader("sh", ["-c", "python3 -c '1/0' 2>&1"], negate=True),
        "crash-script": {"type": "script", "command": ["python3", *crash], "negate": True},
        "crash-in-a-set": {"type": "assert-set", "negate": True,
                           "assert": [grader("python3", crash)]},
        # A script run through a wrapper that sends its traceback to stdout.
        "script-wrapped": script("exec python3 -c \"import json; json.loads('x')\" 2>&1"),
        # A custom assertion (the assertion dialect) through the same wrapper, and a verifier
        # whose test file crashes at import.
        "assertion-wrapped": {"type": "crashy", "negate": True},
        "verifier-crash": {"type": "pytest", "files": ["verifiers/test_crash.py"], "negate": True},
        "script-crash-on-stdout": script("python3 -c '1/0' 2>&1; exit 1"),
        # Controls: a verdict the grader gave is negated as ever, and a crash is a failure.
        "silent-fail": grader("sh", ["-c", "exit 1"], negate=True),
        "script-silent-fail": script("exit 1"),
        "script-reported-fail": script("echo '{\"pass\": false}'; exit 1"),
        "reported-fail": grader("sh", ["-c", "echo '{\"passed\": false}'"], negate=True),
        "crash-not-negated": grader("python3", crash),
    }  # fmt: skip
    tests = [{"id": k, "output": "x", "assert": [a]} for k, a in cases.items()]
    files = {
        ".gradebox/assertions/crashy.sh": "exec python3 -c \"import json; json.loads('x')\" 2>&1\n",
        "verifiers/test_crash.py": "import json\njson.loads('x')\n\ndef test_x():\n    pass\n",
    }
    results = _run_suite(tmp_path, box, json.dumps({"tests": tests}), files=files)
    status = {k: r.status for k, r in results.items()}
    assert status == {
        "crash": Status.error, "crash-on-stdout": Status.error, "crash-script": Status.error,
        "crash-in-a-set": Status.error,
        "script-wrapped": Status.error, "script-crash-on-stdout": Status.error,
        "assertion-wrapped": Status.error, "verifier-crash": Status.error,
        "silent-fail": Status.passed, "reported-fail": Status.passed,
        "script-silent-fail": Status.passed, "script-reported-fail": Status.passed,
        "crash-not-negated": Status.failed,
    }, status  # fmt: skip
    assert results["crash"].graders[0].evidence.startswith("negate needs a verdict")
    assert "Traceback" in (results["script-wrapped"].graders[0].stdout_tail or "")


def test_without_an_init_of_its_own_docker_still_judges_output_as_printed(tmp_path, workspace):
    from gradebox.engine import Engine
    from gradebox.sandbox.docker import DockerSandbox

    write(tmp_path / "g.py", "print('note[INFO  tini (7)] x')\n"
          "print('{\"pass\": false, \"reason\": \"wrong answer\"}')\n")  # fmt: skip
    with DockerSandbox(Engine.connect()) as bare:
        bare.init = None  # a host without docker-init: the engine's init, silent
        faked = run(tmp_path, workspace, bare, "type: script\ncommand: [python3, g.py]\n")
        killed = run(tmp_path, workspace, bare, "type: program\nprogram: sh\n"
                     "args: ['-c', 'kill -9 $$']\n")  # fmt: skip
    assert faked.status is Status.failed and faked.evidence == "wrong answer"
    assert killed.status is Status.failed and killed.exit_code == 137  # no report: no signal


# --- A program of the agent's that a node-test verifier runs (never imports) ------------------

ATTACKS = Path(__file__).resolve().parents[1] / "fixtures" / "attacks"
# The verifier runs the agent's command line tool, then tests its module.
RUNS_THE_CLI_JS = """import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { add } from "../calc.mjs";
test("the cli runs", async () => { await promisify(execFile)("node", ["cli.mjs"]); });
test("adds", () => assert.equal(add(2, 3), 5));
"""
# Each cli.mjs is the agent's; it gets the pid of the test file's process that ran it.
CLI_TRICKS = {
    "plain": "",  # the control
    # Starts node's inspector in the test file's process (SIGUSR1), evaluates code in it.
    "inspector": 'import { spawn } from "node:child_process";\nimport fs from "node:fs";\n'
    'spawn(process.execPath, ["inspector.mjs", String(process.ppid)],'
    ' { detached: true, stdio: "ignore" }).unref();\n'
    "for (let i = 0; i < 100 && !fs.existsSync('/tmp/sent'); i++)\n"
    "  await new Promise((r) => setTimeout(r, 50));\n"
    "await new Promise((r) => setTimeout(r, 200));\n",
    # Rewrites the next test's source in that process's memory (/proc/PID/mem).
    "proc-mem": 'import { execFileSync } from "node:child_process";\n'
    'execFileSync("python3", ["poke_memory.py", String(process.ppid)], { stdio: "inherit" });\n',
    # Writes an all-pass report into the test runner's report pipe (/proc/PID/fd).
    "report-fd": 'import fs from "node:fs";\n'
    "const line = (name) => JSON.stringify({passed: true, name, nesting: 0, suite: false,"
    " skip: false, todo: false, failure: null, error: null}) + '\\n';\n"
    "for (const pid of fs.readdirSync('/proc').filter((p) => /^\\d+$/.test(p))) {\n"
    "  let argv = '';\n  try { argv = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8'); }"
    " catch { continue; }\n"
    "  const fd = argv.match(/destination=\\/dev\\/fd\\/(\\d+)/);\n"
    "  if (fd) try { fs.appendFileSync(`/proc/${pid}/fd/${fd[1]}`, '\\n' + line('adds')"
    " + line('the cli runs')); } catch {}\n}\n",
}


def _node_cli_verifier(tmp_path, box, trick: str, add: str = "a - b"):
    from gradebox.graders.config import grader_from_data
    from gradebox.graders.verifier import node_test_grader_data

    suite, ws = tmp_path / "suite", tmp_path / "ws"
    write(suite / "verifiers" / "cli.test.mjs", RUNS_THE_CLI_JS)
    write(ws / "calc.mjs", f"export const add = (a, b) => {add};\n")
    write(ws / "cli.mjs", CLI_TRICKS[trick])
    for helper in ("inspector.mjs", "poke_memory.py"):
        shutil.copy(ATTACKS / helper, ws / helper)
    data = node_test_grader_data({"files": ["verifiers/cli.test.mjs"]}, suite)
    return run_grader(grader_from_data(data, file="t", source_dir=suite), Payload(), ws, box)


@pytest.mark.parametrize("trick", sorted(set(CLI_TRICKS) - {"plain"}))
def test_a_program_a_node_test_runs_cannot_take_over_the_test_process(tmp_path, box, trick):
    r = _node_cli_verifier(tmp_path, box, trick)
    assert not r.passed and r.status is not Status.passed, (r.evidence, r.stderr_tail)
    if r.status is Status.failed:
        assert r.score <= 0.5, r.evidence  # never more than the control's


def test_a_node_test_that_runs_the_cli_control_fails_and_a_fix_passes(tmp_path, box):
    r = _node_cli_verifier(tmp_path, box, "plain")
    assert r.status is Status.failed and r.score == 0.5, (r.evidence, r.stderr_tail)
    fixed = _node_cli_verifier(tmp_path / "fixed", box, "plain", add="a + b")
    assert fixed.status is Status.passed and fixed.score == 1.0, fixed.evidence


CLAIMING_AGENT = """import json, sys, time
time.sleep(3)  # a slow agent...
answer = {"text": "done"}
if sys.argv[2] == "claim":  # ...that says it was quick
    answer.update(duration_ms=5, token_usage={"input": 1, "output": 1}, cost_usd=0.0)
open(sys.argv[1], "w").write(json.dumps(answer))
"""


@pytest.mark.parametrize("mode", ["claim", "control"])
def test_a_targets_claimed_duration_never_replaces_the_measured_one(tmp_path, box, mode):
    # An AgentV-style cli target that took 3 s and wrote `duration_ms: 5` into its answer
    # file: `latency` and `execution-metrics` hold what gradebox measured; the claim is kept
    # apart in the result, and one that contradicts the measurement is reported.
    suite = (
        "target: {provider: cli, command: 'python3 agent.py {OUTPUT_FILE} " + mode + "'}\n"
        "tests:\n  - id: t\n    input: go\n    assert:\n"
        "      - {type: latency, max_ms: 2000}\n"
        "      - {type: execution-metrics, max_duration_ms: 2000}\n"
        "      - {type: contains, value: done}\n"
    )
    result = _run_suite(tmp_path, box, suite, files={"agent.py": CLAIMING_AGENT})["t"]
    status = [g.status for g in result.graders]
    assert status == [Status.failed, Status.failed, Status.passed], result
    assert result.target is not None and result.target.duration_ms >= 3000
    if mode == "claim":
        assert result.target.claimed == {
            "duration_ms": 5.0, "token_usage": {"input": 1, "output": 1}, "cost_usd": 0.0,
        }  # fmt: skip
        assert len(result.target.warnings) == 1
        assert "claimed duration_ms 5" in result.target.warnings[0]
    else:
        assert result.target.claimed is None and result.target.warnings == []
