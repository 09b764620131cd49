"""LLM graders in suites, and the model proxy of script graders, on real containers. The models
are scripted servers on the host's loopback (tests/fake_models.py)."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pytest

from gradebox.drivers.runner import RunOptions, read_results, run_suite
from gradebox.graders.config import ScriptGrader
from gradebox.graders.run import run_grader
from gradebox.images import ImageResolver
from gradebox.llm import ModelHub, ModelTarget, TargetSet
from gradebox.protocol.models import Payload
from gradebox.suite import load_suite
from tests.conftest import seeded_cache, write
from tests.fake_models import FakeModel

pytestmark = pytest.mark.docker
KEY = "sk-test-secret-0123456789"


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("GRADEBOX_LLM_BACKOFF", "0.01")
    # Beside the test's folder, not in it: tests use that folder as the grader's workspace.
    cache = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("GRADEBOX_CACHE", str(seeded_cache(cache)))
    monkeypatch.setenv("JUDGE_KEY", KEY)


GRADER = """import json, os, socket, sys
from pathlib import Path
from gradebox_target import ProxyError, info, invoke, invoke_batch
key = sys.argv[2]
seen = {"env": any(key in v for v in os.environ.values())}
found = []
for root in ("/workspace", "/grader", "/run", "/tmp", "/etc"):
    for base, _, files in os.walk(root):
        for name in files:
            try:
                if key.encode() in Path(base, name).read_bytes():
                    found.append(os.path.join(base, name))
            except OSError:
                pass
seen["files"] = found
seen["info"] = info()["maxCalls"]
seen["answer"] = invoke("first?", system_prompt="be strict")["rawText"]
seen["batch"] = [r["status"] for r in invoke_batch([{"question": "2"}, {"question": "3"}])]
host = socket.socket()
try:
    host.connect(("127.0.0.1", int(sys.argv[1])))
    seen["host"] = "reached"
except OSError as exc:
    seen["host"] = exc.errno
os.environ["GRADEBOX_TARGET_PROXY_TOKEN"] = "forged"
os.environ["AGENTV_TARGET_PROXY_TOKEN"] = "forged"
try:
    info()
except ProxyError as exc:
    seen["forged"] = exc.status
ok = (not seen["env"] and not found and seen["answer"] == "judged" and seen["batch"] == [200, 429]
      and seen["forged"] == 401 and seen["host"] != "reached")
print(json.dumps({"pass": ok, "score": 1.0 if ok else 0.0, "reason": json.dumps(seen)}))
"""


def test_a_script_grader_reaches_its_proxy_and_nothing_else(tmp_path, sandbox):
    """On every isolated backend: the budget, the token, the key never inside, the host's
    own loopback unreachable (a server we started there), calls recorded."""
    write(tmp_path / "g.py", GRADER)
    host = socket.socket()
    host.bind(("127.0.0.1", 0))
    host.listen()
    with FakeModel(default="judged") as fake:
        target = ModelTarget(
            name="judge", model="m", base_url=fake.base_url, api_key_env="JUDGE_KEY"
        )
        hub = ModelHub(TargetSet({"judge": target}, "judge"), use_cache=False)
        grader = ScriptGrader(
            command=["python3", "g.py", str(host.getsockname()[1]), KEY],
            target={"max_calls": 2},
        ).with_source(tmp_path)
        result = run_grader(grader, Payload(output="x"), tmp_path, sandbox, models=hub)
    host.close()
    seen = json.loads(result.evidence)
    assert result.passed, (seen, result.stderr_tail)
    assert seen["info"] == 2 and isinstance(seen["host"], int)
    assert result.usage is not None and result.usage.calls == 2
    assert result.usage.input_tokens == 200 and len(fake.requests) == 2
    assert fake.requests[0]["messages"][0] == {"role": "system", "content": "be strict"}
    assert all(h["authorization"] == f"Bearer {KEY}" for h in fake.headers)  # the host's call


def test_two_graders_proxies_are_apart(tmp_path, box):
    """Each proxy lives on its own container's loopback: the same address, two budgets."""
    write(
        tmp_path / "g.py",
        "import json\nfrom gradebox_target import info, invoke\n"
        "invoke('q')\nprint(json.dumps({'pass': True, 'score': 1,"
        " 'reason': str(info()['callCount'])}))\n",
    )
    with FakeModel(default="a") as fake:
        target = ModelTarget(name="judge", model="m", base_url=fake.base_url)
        hub = ModelHub(TargetSet({"judge": target}, "judge"), use_cache=False)
        grader = ScriptGrader(command=["python3", "g.py"], target={"max_calls": 3}).with_source(
            tmp_path
        )
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(2) as pool:
            runs = [
                pool.submit(run_grader, grader, Payload(), tmp_path, box, models=hub)
                for _ in range(2)
            ]
            results = [r.result() for r in runs]
    assert [r.evidence for r in results] == ["1", "1"], [r.stderr_tail for r in results]


FLOOD = """import json, socket
from gradebox_target import invoke
flood = []
for _ in range(1200):  # silent: no request line, no token
    c = socket.socket()
    c.setblocking(False)
    c.connect_ex(("127.0.0.1", 47100))
    flood.append(c)
import time
time.sleep(3)  # the host samples its threads meanwhile
for c in flood:
    c.close()
answer = invoke("after the flood")["rawText"]
print(json.dumps({"pass": answer == "judged", "score": 1, "reason": answer}))
"""


def _sampling_threads(stop):
    """The most threads this (the host's) process ran until ``stop`` is set."""
    import threading

    peak = [threading.active_count()]

    def sample() -> None:
        while not stop.wait(0.02):
            peak[0] = max(peak[0], threading.active_count())

    threading.Thread(target=sample, daemon=True).start()
    return peak


def test_a_grader_flooding_its_proxy_costs_the_host_a_few_threads(tmp_path, sandbox):
    """1,200 silent connections from inside the container: the host keeps a bounded number
    of threads for them, and the grader's own call after the flood is still answered."""
    import threading

    from gradebox.llm.proxy import MAX_CONNECTIONS

    write(tmp_path / "flood.py", FLOOD)
    with FakeModel(default="judged") as fake:
        target = ModelTarget(name="judge", model="m", base_url=fake.base_url)
        hub = ModelHub(TargetSet({"judge": target}, "judge"), use_cache=False)
        grader = ScriptGrader(
            command=["python3", "flood.py"], target={"max_calls": 2}, timeout="120s",
            limits={"open_files": 4096},
        ).with_source(tmp_path)  # fmt: skip
        before = threading.active_count()
        stop = threading.Event()
        peak = _sampling_threads(stop)
        result = run_grader(grader, Payload(output="x"), tmp_path, sandbox, models=hub)
        stop.set()
    assert result.passed, (result.evidence, result.stderr_tail)
    # The proxy's accept loop, its handlers, and the sandbox's own few per run.
    assert peak[0] - before <= MAX_CONNECTIONS + 6, f"{peak[0] - before} threads"
    assert result.usage is not None and result.usage.calls == 1


# What AgentV's SDK client (packages/sdk/src/provider-client.ts) sends: fetch, a bearer token.
AGENTV_CLIENT = """const url = process.env.AGENTV_PROVIDER_PROXY_URL;
const token = process.env.AGENTV_PROVIDER_PROXY_TOKEN;
const headers = {"Content-Type": "application/json", Authorization: `Bearer ${token}`};
const call = async (method, path, body) => {
  const r = await fetch(url + path, {method, headers, body: body && JSON.stringify(body)});
  return [r.status, await r.json()];
};
const seen = {};
const [, info] = await call("GET", "/info");
seen.info = [info.providerLabel, info.availableProviderLabels, info.maxCalls];
seen.one = (await call("POST", "/invoke", {question: "q1", systemPrompt: "s",
                                          evalCaseId: "c", attempt: 1}))[1].rawText;
seen.own = (await call("POST", "/invoke", {question: "q2", provider: info.providerLabel}))[0];
seen.other = (await call("POST", "/invoke", {question: "q3", provider: "secret-judge"}))[0];
const [, batch] = await call("POST", "/invokeBatch",
                             {requests: [{question: "a"}, {question: "b"}]});
seen.batch = batch.responses.map(r => r.rawText ?? r.status);
seen.all = await Promise.all([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12].map(
  async i => (await call("GET", "/info"))[0]));
console.log(JSON.stringify({pass: true, score: 1, reason: JSON.stringify(seen)}));
"""


def test_agentvs_sdk_calls_work_through_the_proxy(tmp_path, sandbox):
    """AgentV's SDK client (fetch in node): /info, /invoke, /invokeBatch, its own target by
    name, another refused, and twelve requests at once answered (more than the proxy
    serves at a time: the rest wait their turn)."""
    write(tmp_path / "client.mjs", AGENTV_CLIENT)
    with FakeModel(default="judged") as fake, FakeModel(default="other") as other:
        target = ModelTarget(name="judge", model="m", base_url=fake.base_url)
        secret = ModelTarget(name="secret-judge", model="x", base_url=other.base_url)
        hub = ModelHub(
            TargetSet({"judge": target, "secret-judge": secret}, "judge"), use_cache=False
        )
        grader = ScriptGrader(
            command=["node", "client.mjs"], image="node", target={"max_calls": 3}
        ).with_source(tmp_path)
        result = run_grader(grader, Payload(output="x"), tmp_path, sandbox, models=hub)
    assert result.passed, (result.evidence, result.stderr_tail)
    seen = json.loads(result.evidence)
    assert seen["info"] == ["judge", ["judge"], 3]
    assert seen["one"] == "judged" and seen["own"] == 200 and seen["other"] == 400
    assert seen["batch"] == ["judged", 429] and seen["all"] == [200] * 12
    assert other.requests == [] and result.usage.calls == 3


BATCH_THEN_EXIT = """import json, os, threading, time
from gradebox_target import invoke_batch
threading.Thread(target=invoke_batch, args=([{"question": str(i)} for i in range(5)],),
                 daemon=True).start()
time.sleep(2)  # the first call is with the model by now; the grader ends without waiting
print(json.dumps({"pass": True, "score": 1, "reason": "left early"}), flush=True)
os._exit(0)
"""


def _answer_later(started, release, delay: float) -> None:
    """The model answers ``delay`` s after the call reached it: the grader has ended by then,
    and its proxy is closing."""
    import threading
    import time

    def later() -> None:
        if started.wait(120):
            time.sleep(delay)
        release.set()

    threading.Thread(target=later, daemon=True).start()


def test_calls_queued_when_the_grader_ends_are_never_sent_and_the_sent_one_counts(
    tmp_path, sandbox
):
    import threading
    import time

    started, release = threading.Event(), threading.Event()

    def slow(body: dict) -> str:
        started.set()
        release.wait(120)
        return "late"

    write(tmp_path / "g.py", BATCH_THEN_EXIT)
    with FakeModel(default=slow) as fake:
        target = ModelTarget(name="judge", model="m", base_url=fake.base_url)
        hub = ModelHub(TargetSet({"judge": target}, "judge"), use_cache=False)
        grader = ScriptGrader(command=["python3", "g.py"], target={"max_calls": 10}).with_source(
            tmp_path
        )
        _answer_later(started, release, 4)
        result = run_grader(grader, Payload(output="x"), tmp_path, sandbox, models=hub)
        release.set()
        for _ in range(40):  # anything still queued would be sent within moments
            if len(fake.requests) > 1:
                break
            time.sleep(0.05)
    assert result.passed and result.usage is not None
    assert result.usage.calls == 1 and result.usage.input_tokens == 100, result.usage
    assert len(fake.requests) == 1


SUITE = """name: llm
defaults:
  grader: judge
workspace:
  template: ./tpl
target:
  command: [sh, -c, "echo 'The answer is 4.'; echo new > made.txt"]
tests:
  - id: rubric-pass
    input: What is 2+2?
    expected_output: "4"
    criteria: gives the number
    metadata: {topic: arithmetic}
    assert:
      - States that the answer is 4
      - Shows no working
  - id: rubric-fail
    input: What is 2+2?
    assert:
      - Answers in French
  - id: custom-prompt
    input: What is 2+2?
    assert:
      - name: strict
        type: llm-grader
        prompt: ./prompts/strict.md
        target: claude
        rubrics:
          - {outcome: is correct, weight: 3}
          - {outcome: is polite, required: true}
  - id: unparseable
    input: What is 2+2?
    assert:
      - Is correct
"""
TARGETS = """default_grader: judge
targets:
  - {{name: judge, provider: openai, model: gpt-test, base_url: "{openai}",
     api_key_env: JUDGE_KEY, price: {{input: 1.0, output: 2.0}}}}
  - {{name: claude, provider: anthropic, model: claude-test, base_url: "{anthropic}",
     api_key_env: JUDGE_KEY}}
"""
STRICT = (
    "criteria={{criteria}} input={{input}} expected={{expected_output}} "
    "output={{output}} meta={{metadata_json}} rubrics={{rubrics_json}} "
    "diff={{file_changes}} tools={{tool_calls}}"
)


def _judge(body: dict) -> str:
    prompt = body["messages"][-1]["content"]
    if "Answers in French" in prompt:
        return json.dumps(
            {
                "score": 0.0,
                "checks": [{"text": "Answers in French", "passed": False, "evidence": "English"}],
                "reasoning": "not French",
            }
        )
    if "Is correct" in prompt:
        return "I cannot decide, sorry."
    return json.dumps(
        {
            "score": 1.0,
            "checks": [{"text": "a", "passed": True}, {"text": "b", "passed": True}],
            "reasoning": "fine",
        }
    )


def _strict(body: dict) -> str:
    return json.dumps(
        {"checks": [{"text": "is correct", "passed": True}, {"text": "is polite", "passed": False}]}
    )


def test_llm_graders_in_a_suite_verdicts_usage_and_the_cache(tmp_path, box, engine):
    write(tmp_path / "tpl" / "a.txt", "a\n")
    write(tmp_path / "prompts" / "strict.md", STRICT)
    with FakeModel(default=_judge) as oai, FakeModel("anthropic", default=_strict) as claude:
        write(
            tmp_path / ".gradebox" / "targets.yaml",
            TARGETS.format(openai=oai.base_url, anthropic=claude.base_url),
        )
        suite = load_suite(write(tmp_path / "suite.yaml", SUITE))
        run_suite(suite, box, ImageResolver(engine), RunOptions(tmp_path / "one", workers=2))
        results = read_results(tmp_path / "one" / "results.jsonl")
        first_calls = len(oai.requests) + len(claude.requests)
        # Resumed with its error retried, and again elsewhere: every answer comes from the
        # cache; with use_cache off, not.
        resumed = run_suite(
            load_suite(tmp_path / "suite.yaml"),
            box,
            ImageResolver(engine),
            RunOptions(tmp_path / "one", workers=2, resume=True, retry_errors=True),
        )
        summary = run_suite(
            load_suite(tmp_path / "suite.yaml"),
            box,
            ImageResolver(engine),
            RunOptions(tmp_path / "two", workers=2),
        )
        cached_calls = len(oai.requests) + len(claude.requests) - first_calls
        run_suite(
            load_suite(tmp_path / "suite.yaml"),
            box,
            ImageResolver(engine),
            RunOptions(tmp_path / "three", workers=2, use_cache=False),
        )
        fresh = len(oai.requests) + len(claude.requests) - first_calls - cached_calls
    status = {k: r.status.value for k, r in results.items()}
    assert status == {
        "rubric-pass": "passed",
        "rubric-fail": "failed",
        "custom-prompt": "failed",
        "unparseable": "error",
    }
    passing = results["rubric-pass"].graders[0]
    assert passing.type == "llm" and passing.name == "rubric" and passing.passed
    assert passing.usage is not None and passing.usage.calls == 1
    assert results["rubric-pass"].usage.cost_usd == pytest.approx(140 / 1e6)
    # The default prompt carried the test: both rubric items, criteria, reference, answer.
    prompt = next(p for p in oai.prompts if "Shows no working" in p)
    for piece in (
        "States that the answer is 4",
        "gives the number",
        "What is 2+2?",
        "The answer is 4.",
        "+++ b/made.txt",
    ):
        assert piece in prompt, piece
    strict = results["custom-prompt"].graders[0]
    assert strict.score == 0.75 and "required rubric item failed: is polite" in strict.evidence
    # What the agent wrote (answer, tool calls, diff) stands in blocks with the call's tag.
    sent = re.sub(r"<agent-data-[0-9a-f]+>\n|\n</agent-data-[0-9a-f]+>", "", claude.prompts[0])
    assert sent != claude.prompts[0]
    assert "criteria= input=What is 2+2? expected= output=The answer is 4." in sent
    assert 'meta={"topic"' not in sent and '"outcome": "is polite"' in sent
    assert "diff=diff --git" in sent and "tools=(none reported)" in sent
    broken = results["unparseable"].graders[0]
    assert broken.status.value == "error" and broken.raw_response == "I cannot decide, sorry."
    assert first_calls == 4 and cached_calls == 0 and fresh == 4
    assert resumed.reused == 3 and resumed.usage is not None
    assert (resumed.usage.calls, resumed.usage.cached_calls) == (1, 1)
    assert summary.usage is not None and summary.usage.cached_calls == 4


def _example_judge(body: dict) -> str:
    prompt = body["messages"][-1]["content"]
    if "relevant" in (body["messages"][0].get("content") or ""):
        return '{"relevant": true}'
    if "Files the agent changed" in prompt:
        ok = "+++ b/NOTES.md" in prompt
        return json.dumps(
            {
                "checks": [{"text": "matches", "passed": True}, {"text": "notes", "passed": ok}],
                "reasoning": "ok",
            }
        )
    return json.dumps(
        {"score": 1.0, "checks": [{"text": "a", "passed": True}, {"text": "b", "passed": True}]}
    )


def test_the_llm_example_runs_as_its_readme_says(tmp_path, monkeypatch):
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    with FakeModel(default=_example_judge) as fake:
        monkeypatch.setenv("LLM_BASE_URL", fake.base_url)
        monkeypatch.setenv("LLM_MODEL", "test-model")
        monkeypatch.setenv("LLM_API_KEY", KEY)
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "gradebox",
                "run",
                root / "examples/llm/suite.yaml",
                "--out",
                tmp_path / "o",
                "--json",
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(root / "src")},
        )
    assert p.returncode == 0, p.stdout + p.stderr
    summary = json.loads(p.stdout)["summary"]
    assert summary["passed"] == 1 and summary["usage"]["calls"] == 3
    assert len(fake.requests) == 3


PRE_SUITE = """name: files
defaults:
  grader: judge
preprocessors:
  - {type: csvx, command: [python3, to_text.py]}
target:
  provider: cli
  command: python3 make.py {OUTPUT_FILE}
tests:
  - id: report
    input: Make the report
    assert:
      - name: from-file
        type: llm-grader
        prompt: "Report: {{output}}"
      - name: from-command
        type: llm-grader
        prompt:
          command: [python3, prompt.py]
          config: {focus: totals}
"""
MAKE = r"""import json, os, sys
ws = os.environ["EVALUATE_WORKSPACE"]
open(os.path.join(ws, "report.csvx"), "wb").write(b"\x00total;42")
open(os.path.join(ws, "plain.md"), "w").write("plain words")
open(os.path.join(ws, "blob.bin"), "wb").write(b"\xff\x00\xfe")
json.dump({"output": [{"role": "assistant", "content": [
    {"type": "file", "path": "report.csvx"}, {"type": "file", "path": "plain.md"},
    {"type": "file", "path": "blob.bin"}]}]}, open(sys.argv[1], "w"))
"""
TO_TEXT = r"""import sys
print(open(sys.argv[1], "rb").read().replace(b"\x00", b"").decode())
"""
PROMPT = """import json, sys
p = json.load(sys.stdin)
print(f"focus={p['config']['focus']} input={p['input'][0]['content']} ws={p['workspace_path']}")
"""


def test_preprocessors_and_a_prompt_command(tmp_path, box, engine):
    for name, body in (("make.py", MAKE), ("to_text.py", TO_TEXT), ("prompt.py", PROMPT)):
        write(tmp_path / name, body)
    with FakeModel(default='{"score": 1, "reasoning": "ok"}') as fake:
        write(
            tmp_path / ".gradebox" / "targets.yaml",
            f"targets:\n  - {{name: judge, model: m, base_url: '{fake.base_url}'}}\n",
        )
        suite = load_suite(write(tmp_path / "suite.yaml", PRE_SUITE))
        run_suite(suite, box, ImageResolver(engine), RunOptions(tmp_path / "o", workers=1))
    result = read_results(tmp_path / "o" / "results.jsonl")["report"]
    assert result.status.value == "passed", (result.error, [g.evidence for g in result.graders])
    prompts = sorted(fake.prompts)
    tag = re.search(r"<agent-data-[0-9a-f]+>", prompts[0]).group()  # type: ignore[union-attr]
    assert prompts[0] == (
        f"Report: {tag}\ntotal;42\n\nplain words\n[gradebox: blob.bin could not be read"
        f" as text and no preprocessor matched it]\n{tag.replace('<', '</')}"
    )
    assert prompts[1] == "focus=totals input=Make the report ws=/workspace\n"
