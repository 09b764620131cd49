"""An AgentV LLM grader whose judge is a command, on real containers: the judge (a small script
provider) gets the prompt in {PROMPT_FILE}, answers in {OUTPUT_FILE} as v4's grader-check
does, and its reply is read as a model's; it runs with no network and a read-only workspace."""

from __future__ import annotations

import json
import os

import pytest

from gradebox.drivers.runner import RunOptions, read_results, run_suite
from gradebox.images import ImageResolver
from gradebox.suite import load_suite
from tests.conftest import write

pytestmark = pytest.mark.docker

JUDGE = r"""import json, os, socket, sys
prompt = open(sys.argv[1], encoding="utf-8").read()
item = "The answer is 42"
if "MODE-garbage" in prompt:
    reply = "LGTM, ship it"
elif "MODE-net" in prompt:
    seen = {"ifaces": sorted(os.listdir("/sys/class/net"))}
    for host in ("1.1.1.1", "8.8.8.8"):
        s = socket.socket()
        s.settimeout(3)
        try:
            s.connect((host, 53))
            seen[host] = "reached"
        except OSError as exc:
            seen[host] = exc.errno
    try:
        socket.getaddrinfo("example.com", 443)
        seen["dns"] = "resolved"
    except OSError:
        seen["dns"] = "none"
    try:
        open("/workspace/judge-was-here", "w").close()
        seen["workspace"] = "written"
    except OSError:
        seen["workspace"] = "read-only"
    ok = (seen["ifaces"] == ["lo"] and "reached" not in seen.values()
          and seen["dns"] == "none" and seen["workspace"] == "read-only")
    reply = json.dumps({"score": 1 if ok else 0, "checks": [
        {"text": item, "passed": ok, "evidence": json.dumps(seen)}], "reasoning": "net"})
else:
    ok = "answer-42" in prompt and "Answer with one JSON object" in prompt
    reply = json.dumps({"score": 1 if ok else 0, "checks": [
        {"text": item, "passed": ok, "evidence": "looked"}], "reasoning": "read the prompt"})
with open(sys.argv[2], "w", encoding="utf-8") as out:
    json.dump({"text": reply}, out)
"""

PROVIDERS = """\
- id: cli
  label: agent
  command: sh agent.sh {PROMPT} {OUTPUT_FILE}
- id: cli
  label: judge
  command: python3 check.py {PROMPT_FILE} {OUTPUT_FILE}
"""


def _test(tid: str, answer: str) -> str:
    return (
        f"  - id: {tid}\n    vars: {{input: {answer}}}\n    assert:\n"
        "      - {type: llm-rubric, value: The answer is 42, target: judge}\n"
    )


def test_a_command_judge_passes_fails_errors_and_has_no_network(tmp_path, box, engine):
    write(tmp_path / "agent.sh", 'printf \'%s\' "$1" > "$2"\n')
    write(tmp_path / "check.py", JUDGE)
    write(tmp_path / ".agentv" / "providers.yaml", PROVIDERS)
    body = "providers: [agent]\nprompts: ['{{ input }}']\ntests:\n" + "".join(
        _test(t, a)
        for t, a in (
            ("pass", "answer-42"),
            ("fail", "answer-41"),
            ("garbage", "MODE-garbage"),
            ("net", "MODE-net"),
        )
    )
    path = write(tmp_path / "e.eval.yaml", body)
    run_suite(load_suite(path), box, ImageResolver(engine), RunOptions(tmp_path / "out"))
    results = read_results(tmp_path / "out" / "results.jsonl")
    status = {k: r.status.value for k, r in results.items()}
    detail = {k: (r.error, [g.evidence for g in r.graders]) for k, r in results.items()}
    assert status == {"pass": "passed", "fail": "failed", "garbage": "error", "net": "passed"}, (
        detail
    )
    garbage = results["garbage"].graders[0]
    assert garbage.evidence.startswith("unparseable judge answer")
    assert garbage.raw_response == "LGTM, ship it"
    seen = json.loads(results["net"].graders[0].checks[0].evidence)
    assert seen["ifaces"] == ["lo"] and seen["workspace"] == "read-only", seen
    assert not (tmp_path / "judge-was-here").exists()


def test_a_judge_that_crashes_or_writes_nothing_is_an_error(tmp_path, box, engine):
    write(tmp_path / "agent.sh", 'printf \'%s\' "$1" > "$2"\n')
    write(tmp_path / "crash.sh", "echo 'no model configured' >&2\nexit 4\n")
    write(tmp_path / "quiet.sh", "echo '{\"score\": 1}'\n")  # stdout, not {OUTPUT_FILE}
    write(
        tmp_path / ".agentv" / "providers.yaml",
        "- {id: cli, label: agent, command: 'sh agent.sh {PROMPT} {OUTPUT_FILE}'}\n"
        "- {id: cli, label: crash, command: 'sh crash.sh {OUTPUT_FILE}'}\n"
        "- {id: cli, label: quiet, command: 'sh quiet.sh'}\n",
    )
    body = "providers: [agent]\nprompts: ['{{ input }}']\ntests:\n" + "".join(
        f"  - id: {j}\n    vars: {{input: answer-42}}\n    assert:\n"
        f"      - {{type: llm-rubric, value: The answer is 42, target: {j}}}\n"
        for j in ("crash", "quiet")
    )
    path = write(tmp_path / "e.eval.yaml", body)
    run_suite(load_suite(path), box, ImageResolver(engine), RunOptions(tmp_path / "out"))
    results = read_results(tmp_path / "out" / "results.jsonl")
    crash, quiet = results["crash"].graders[0], results["quiet"].graders[0]
    assert crash.status.value == "error" and "exited with code 4" in crash.evidence
    assert "no model configured" in crash.evidence
    assert quiet.status.value == "error" and "wrote nothing" in quiet.evidence


# v4's preprocessors example, in Python: the agent answers with a file, a preprocessor reads
# AgentV's {path} from stdin, and the judge (v4's grader-check) passes only when the
# transformed text reached its prompt. AgentV's README: "the eval passes".
FILE_AGENT = """import json, os, sys
os.makedirs("generated", exist_ok=True)
open("generated/report.xlsx", "wb").write(bytes([0, 159, 146, 150]))
json.dump({"output": [{"role": "assistant", "content": [{"type": "file",
    "media_type": "xlsx", "path": "generated/report.xlsx"}]}]}, open(sys.argv[1], "w"))
"""
TO_CSV = """import json, sys
payload = json.load(sys.stdin)
assert payload["path"].endswith("generated/report.xlsx"), payload
print("spreadsheet: revenue,total")
print("Q1,42")
"""
GRADER_CHECK = """import json, sys
prompt = open(sys.argv[1]).read()
passed = "spreadsheet: revenue,total" in prompt and "Q1,42" in prompt
json.dump({"text": json.dumps({"score": 1 if passed else 0, "assertions": [{"text":
    "preprocessed file content reached the llm grader", "passed": passed}]})},
    open(sys.argv[2], "w"))
"""


def test_v4s_preprocessors_example_with_its_grader_check_judge(tmp_path, box, engine):
    write(tmp_path / "file_output.py", FILE_AGENT)
    write(tmp_path / "to_csv.py", TO_CSV)
    write(tmp_path / "grader_check.py", GRADER_CHECK)
    write(
        tmp_path / ".agentv" / "targets.yaml",
        "targets:\n  - name: file_output\n    provider: file-output\n"
        "    command: python3 file_output.py {OUTPUT_FILE}\n    grader_target: grader_check\n"
        "  - name: grader_check\n    provider: grader-check\n"
        "    command: python3 grader_check.py {PROMPT_FILE} {OUTPUT_FILE}\n",
    )
    path = write(
        tmp_path / "dataset.eval.yaml",
        "execution: {target: file_output}\npreprocessors:\n"
        "  - {type: xlsx, command: [python3, to_csv.py]}\ntests:\n  - id: spreadsheet-output\n"
        "    input: Generate the spreadsheet report\n    criteria: has the revenue rows\n"
        "    assertions:\n      - Output contains the transformed spreadsheet text\n",
    )
    run_suite(load_suite(path), box, ImageResolver(engine), RunOptions(tmp_path / "out"))
    (result,) = read_results(tmp_path / "out" / "results.jsonl").values()
    assert result.status.value == "passed", (result.error, result.graders)


# A judge command that asks a model: its one way out is the model proxy, to the run's default
# judge model (the operator's), found by AgentV's variables; nothing else of the network.
PROXY_JUDGE = r"""import json, os, socket, sys, urllib.request
prompt = open(sys.argv[1], encoding="utf-8").read()
url, token = os.environ["AGENTV_TARGET_PROXY_URL"], os.environ["AGENTV_TARGET_PROXY_TOKEN"]
req = urllib.request.Request(url + "/invoke", data=json.dumps({"question": prompt}).encode(),
    headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
answer = json.load(urllib.request.urlopen(req, timeout=30))
s = socket.socket()
s.settimeout(3)
try:
    s.connect(("1.1.1.1", 53))
    outside = "reached"
except OSError:
    outside = "none"
reply = answer["rawText"] if outside == "none" else "{}"
with open(sys.argv[2], "w", encoding="utf-8") as out:
    json.dump({"text": reply}, out)
"""


def test_a_command_judge_calls_a_model_only_through_its_proxy(tmp_path, box, engine):
    from tests.fake_models import FakeModel

    def verdict(body: dict) -> str:
        ok = "answer-42" in body["messages"][-1]["content"]
        return json.dumps(
            {"score": 1 if ok else 0, "checks": [{"text": "42", "passed": ok}], "reasoning": "m"}
        )

    write(tmp_path / "agent.sh", 'printf \'%s\' "$1" > "$2"\n')
    write(tmp_path / "ask.py", PROXY_JUDGE)
    write(
        tmp_path / ".agentv" / "providers.yaml",
        "- {id: cli, label: agent, command: 'sh agent.sh {PROMPT} {OUTPUT_FILE}'}\n"
        "- {id: cli, label: judge, command: 'python3 ask.py {PROMPT_FILE} {OUTPUT_FILE}'}\n",
    )
    body = "providers: [agent]\nprompts: ['{{ input }}']\ntests:\n" + "".join(
        _test(t, a) for t, a in (("pass", "answer-42"), ("fail", "answer-41"))
    )
    path = write(tmp_path / "e.eval.yaml", body)
    with FakeModel(default=verdict) as model:
        operator = write(
            tmp_path / "operator" / "targets.yaml",
            "default_grader: m\ntargets:\n"
            f'  - {{name: m, provider: openai, model: t, base_url: "{model.base_url}", '
            "api_key_env: JUDGE_KEY}\n",
        )
        os.environ["JUDGE_KEY"] = "k"
        try:
            suite = load_suite(path, targets=(operator,))
            run_suite(suite, box, ImageResolver(engine), RunOptions(tmp_path / "out"))
        finally:
            del os.environ["JUDGE_KEY"]
        asked = len(model.requests)
    results = read_results(tmp_path / "out" / "results.jsonl")
    status = {k: r.status.value for k, r in results.items()}
    assert status == {"pass": "passed", "fail": "failed"}, {
        k: (r.error, [g.evidence for g in r.graders]) for k, r in results.items()
    }
    assert asked == 2  # each judge's one call reached the model through its proxy
