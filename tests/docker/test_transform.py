"""AgentV 5.x's ``transform`` run as AgentV runs it (``applyTransform``), in the sandbox: the
module's default export turns the target's answer (here a file it wrote, a content block
``{type: file, path}``) into the text every grader of the test sees; one that throws gives
an ``error``; one that reaches for the network finds none."""

from __future__ import annotations

import json
from pathlib import Path

from gradebox.drivers.runner import RunOptions, read_results, run_suite
from gradebox.images import ImageResolver
from gradebox.suite import load_suite
from tests.conftest import seeded_cache, write
from tests.fake_models import FakeModel

ANSWER = {
    "output": [
        {
            "role": "assistant",
            "content": [{"type": "file", "media_type": "text/csv", "path": "generated/r.csv"}],
        }
    ]
}
TARGET = (
    "mkdir -p generated\nprintf 'revenue,42' > generated/r.csv\n"
    f"printf '%s' '{json.dumps(ANSWER)}' > \"$1\"\n"
)
TO_TEXT = """import { readFileSync } from "node:fs";
type Block = { type?: string; path?: string };
export default function (output: Block[]): string {
  const file = output.find((b) => b.type === "file");
  if (!file?.path) throw new Error("expected a file output");
  return `TRANSFORMED: ${readFileSync(file.path, "utf8")}`;
}
export const boom = (): string => { throw new Error("cannot parse the sheet"); };
"""
NETWORK = """export default async function () {
  try {
    await fetch("http://1.1.1.1/", { signal: AbortSignal.timeout(5000) });
    return "net:reached";
  } catch {
    return "net:none";
  }
}
"""


def _suite(tmp_path: Path, url: str, tests: str) -> Path:
    write(tmp_path / "evals" / "target.sh", TARGET)
    write(tmp_path / "scripts" / "to-text.ts", TO_TEXT)
    write(tmp_path / "scripts" / "net.mjs", NETWORK)
    write(
        tmp_path / ".agentv" / "providers.yaml",
        f"- id: openai\n  label: judge\n  base_url: '{url}'\n"
        "  api_key: '{{ env.GB_JUDGE_KEY }}'\n  model: x\n"
        "- id: cli\n  label: agent\n  grader_target: judge\n"
        "  config: {command: 'sh target.sh {OUTPUT_FILE}'}\n",
    )
    return write(
        tmp_path / "evals" / "suite.eval.yaml",
        "prompts: ['{{ input }}']\nproviders: [agent]\n"
        "default_test:\n  options: {transform: file://../scripts/to-text.ts}\n"
        f"tests:\n{tests}",
    )


def test_a_transform_turns_a_file_answer_into_the_text_graders_see(
    tmp_path, box, engine, monkeypatch
):
    monkeypatch.setenv("GB_JUDGE_KEY", "sk-judge")
    monkeypatch.setenv("GRADEBOX_CACHE", str(seeded_cache(tmp_path / "cache")))

    def answer(body: dict) -> str:
        seen = "TRANSFORMED: revenue,42" in json.dumps(body)
        return json.dumps({"score": 1 if seen else 0, "checks": [], "reasoning": "judged"})

    tests = (
        "  - id: sheet\n    vars: {input: report}\n    assert:\n"
        "      - {type: contains, value: 'TRANSFORMED: revenue,42'}\n"
        "      - The answer holds the revenue row\n"
        "  - id: throws\n    vars: {input: report}\n    assert:\n"
        "      - {type: contains, value: revenue}\n"
        "      - {type: contains, value: revenue, transform: 'file://../scripts/to-text.ts:boom'}\n"
        "  - id: offline\n    vars: {input: report}\n"
        "    options: {transform: file://../scripts/net.mjs}\n"
        "    assert: [{type: equals, value: 'net:none'}]\n"
        "  - id: inline\n    vars: {input: report}\n"
        "    options: {transform: \"output[0].path + ' via inline code'\"}\n"
        "    assert: [{type: equals, value: 'generated/r.csv via inline code'}]\n"
        "  - id: nothing\n    vars: {input: report}\n"
        "    options: {transform: 'undefined'}\n"
        "    assert: [{type: contains, value: x}]\n"
    )
    with FakeModel(default=answer) as fake:
        path = _suite(tmp_path, fake.base_url, tests)
        suite = load_suite(path)
        run_suite(suite, box, ImageResolver(engine), RunOptions(tmp_path / "out", workers=2))
        results = read_results(tmp_path / "out" / "results.jsonl")
    why = {k: [(g.status.value, g.evidence) for g in r.graders] for k, r in results.items()}
    sheet, throws, offline = results["sheet"], results["throws"], results["offline"]
    assert sheet.status.value == "passed", why
    assert [g.status.value for g in sheet.graders] == ["passed", "passed"], why
    assert any("TRANSFORMED: revenue,42" in p for p in fake.prompts)
    # The test-level transform ran (its grader passed); the assertion's own threw: an error.
    assert [g.status.value for g in throws.graders] == ["passed", "error"], why
    assert throws.status.value == "error" and "cannot parse the sheet" in throws.graders[1].evidence
    assert offline.status.value == "passed", (offline.error, why.get("offline"))
    assert results["inline"].status.value == "passed", why
    nothing = results["nothing"].graders[0]
    assert nothing.status.value == "error" and "returned no value" in nothing.evidence, why
