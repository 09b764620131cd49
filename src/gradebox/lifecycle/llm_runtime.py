"""What an LLM grader of one test needs from the run it belongs to: the model hub, and
containers for its prompt commands, preprocessors and command judges (read-only workspace, no
network, the suite's files named). Built per test by ``gradebox.lifecycle.testrun``; the
graders see only this."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, GradeboxError
from ..graders.assertion import TEST_TRANSFORM, infer_image
from ..graders.llm import CommandJudge, candidate_from_files
from ..graders.run import CONTAINER_WORKSPACE
from ..llm.proxy import TargetProxy
from ..protocol.models import GraderResult, Message, Payload
from ..sandbox.base import Limits, Mount
from ..suite import TargetConfig
from .steps import HOOK_TIMEOUT, judge_step, own_folder, run_cli_command, run_in_workspace

if TYPE_CHECKING:
    from ..llm.client import ModelHub
    from ..sandbox.base import Sandbox

__all__ = ["LlmRuntime"]

TRANSFORM_TIMEOUT = 120.0
TRANSFORM_MAX = 1 << 20  # the text a transform may hand the graders
TRANSFORM_HOME = "/transform-home"  # where bun starts: empty (no bunfig.toml, no .env)
# AgentV's applyTransform, as a program: import the module, call its export (the default)
# with the answer and a context, print what it returns; the module's own prints go to
# stderr so stdout holds the result alone. Inline code is AgentV's `new Function` body.
_TRANSFORM_RUNNER = """\
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
process.chdir(process.env.EVALUATE_WORKSPACE || "/workspace");
const write = process.stdout.write.bind(process.stdout);
process.stdout.write = process.stderr.write.bind(process.stderr);
console.log = console.info = console.debug = (...args) => console.error(...args);
const { output, context, code, export: name } = JSON.parse(readFileSync("/dev/stdin", "utf8"));
let fn;
const fail = (why, error) => {
  console.error(`${why}: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(1);
};
if (code === null) {
  const ref = process.argv[process.argv.length - 1];
  const mod = await import(pathToFileURL(ref).href).catch((e) => fail("it cannot be loaded", e));
  fn = name ? mod[name] : (mod.default ?? mod);
  if (typeof fn !== "function") {
    console.error(name ? `the transform exports no function "${name}"`
      : "the transform exports no function (export default function (output) {...})");
    process.exit(2);
  }
} else {
  try {
    fn = new Function("output", "context", code.includes("\\n") ? code : `return ${code}`);
  } catch (error) {
    fail("its code does not parse", error);
  }
}
let value;
try {
  value = await fn(output, context);
} catch (error) {
  fail("it threw", error);
}
if (value === undefined || value === null) {
  console.error("the transform returned no value");
  process.exit(3);
}
write(JSON.stringify({ text: typeof value === "string" ? value : JSON.stringify(value, null, 2) }));
"""


class LlmRuntime:
    """What an LLM grader of one test needs from the run: the hub, and containers for prompt
    commands and preprocessors (read-only workspace, no network, the suite's files named)."""

    def __init__(
        self,
        hub: ModelHub | None,
        box: Sandbox,
        image_for: Callable[[object, Path | None], str],
        root: Path,
        labels: dict[str, str],
        workspace: Path,
    ) -> None:
        self.hub = hub  # type: ignore[assignment]
        self.box, self.image_for, self.root = box, image_for, root
        self.labels, self.workspace = labels, workspace
        self.test_transform: str | None = None  # AgentV: the test's options.transform
        self._seen: dict[tuple[str, ...], Payload | str] = {}

    def payload_for(self, assertion: object, payload: Payload) -> Payload | GraderResult:
        """What ``assertion`` grades: the answer through the test's transform, then its own
        (AgentV's prepareCandidateForGrading, transformEvaluationContextForGrader), each run
        once per test. A transform that fails gives the grader an ``error``, never a pass."""
        own = getattr(assertion, "transform", None)
        chain = tuple(t for t in (self.test_transform, own) if t)
        if not chain:
            return payload
        seen = self._through(chain, payload)
        if isinstance(seen, Payload):
            return seen
        shown = getattr(assertion, "display_name", None)
        name = shown() if callable(shown) else "grader"
        return GraderResult.errored(str(name), "assertion", seen)

    def _through(self, chain: tuple[str, ...], payload: Payload) -> Payload | str:
        if chain not in self._seen:
            before = self._through(chain[:-1], payload) if len(chain) > 1 else payload
            if isinstance(before, str):
                self._seen[chain] = before
            else:
                try:
                    text = self._transform(chain[-1], before)
                except GradeboxError as exc:
                    self._seen[chain] = f"transform {_shown(chain[-1])} failed: {exc}"
                else:
                    answer = [Message(role="assistant", content=text)]
                    self._seen[chain] = before.model_copy(
                        update={"output": text, "messages": answer}
                    )
        return self._seen[chain]

    def _transform(self, spec: str, payload: Payload) -> str:
        """Run one transform in the sandbox on the node image (bun runs .ts and .mjs): the
        workspace read-only, no network, the module and our runner the only files given."""
        last = next((m for m in reversed(payload.messages) if m.role == "assistant"), None)
        output = last.content if last is not None and last.content is not None else None
        if output is None:
            output = payload.output or ""
        metadata = dict(payload.metadata or {}) if hasattr(payload, "metadata") else {}
        metadata.pop(TEST_TRANSFORM, None)
        context = {"vars": metadata.get("vars") or {}, "metadata": metadata}
        request: dict[str, Any] = {"output": output, "context": context, "code": spec}
        argv = ["bun", "-e", _TRANSFORM_RUNNER]
        source = None
        if spec.startswith("file://"):
            ref = spec.removeprefix("file://")
            colon = ref.rfind(":")
            path, export = (ref[:colon], ref[colon + 1 :]) if colon > 1 else (ref, "")
            request = {**request, "code": None, "export": export}
            # The module alone, mounted where the grader machinery mounts a named file.
            source, argv = Path(path).parent, [*argv, Path(path).name]
        # bun starts in an empty folder of its own, never the agent's workspace: it reads
        # bunfig.toml (its preload) and .env from where it starts, even for `bun -e`, and
        # would run the agent's code as the transform. The runner then moves into the
        # workspace (read-only), where a file block's relative path is found.
        with own_folder("transform") as home:
            outcome = run_in_workspace(
                argv,
                self.workspace,
                self.box,
                image_id=self.image_for("node", self.root),
                name="transform",
                stdin=json.dumps(request, default=str).encode(),
                timeout=TRANSFORM_TIMEOUT,
                labels=self.labels,
                source_dir=source,
                read_only=True,
                extra_mounts=(Mount(home, TRANSFORM_HOME, read_only=True),),
                workdir=TRANSFORM_HOME,
            )
        failure = judge_step("the transform", outcome, TRANSFORM_TIMEOUT, Limits())[1]
        if failure:
            raise GradeboxError(failure)
        if len(outcome.stdout) > TRANSFORM_MAX + 64:
            raise GradeboxError(f"its text is over {TRANSFORM_MAX >> 20} MiB")
        try:
            text = json.loads(outcome.stdout)["text"]
        except (ValueError, KeyError, TypeError):
            raise GradeboxError("it printed no result") from None
        if not isinstance(text, str):
            raise GradeboxError("it printed no result")
        return text

    def _text_of(self, command: list[str], stdin: bytes, name: str) -> str:
        image = self.image_for(infer_image(command), self.root)
        outcome = run_in_workspace(
            command,
            self.workspace,
            self.box,
            image_id=image,
            name=name,
            stdin=stdin,
            timeout=HOOK_TIMEOUT,
            labels=self.labels,
            source_dir=self.root,
            read_only=True,
        )
        failure = judge_step(name, outcome, HOOK_TIMEOUT, Limits())[1]
        if failure:
            raise GradeboxError(failure)
        return outcome.stdout.decode("utf-8", errors="replace")

    def prompt_from_command(self, command: list[str], config: dict, payload: Payload) -> str:
        body = payload.model_copy(update={"config": config, "workspace_path": CONTAINER_WORKSPACE})
        return self._text_of(command, body.to_wire(), "prompt-template")

    def candidate_text(self, payload: Payload, preprocessors: list[dict]) -> str:
        def preprocess(command: Any, rel: str) -> str:
            argv = command.split() if isinstance(command, str) else list(command)
            path = f"{CONTAINER_WORKSPACE}/{rel}"
            # The path as the last argument (ours), and on stdin as AgentV's
            # runContentPreprocessor writes it ({path, original_path}).
            stdin = json.dumps({"path": path, "original_path": rel}).encode()
            try:
                return self._text_of([*argv, path], stdin, "preprocessor")
            except GradeboxError as exc:
                return f"[gradebox: the preprocessor of {rel} failed: {exc}]"

        return candidate_from_files(payload, self.workspace, preprocess, preprocessors)

    def ask_command_judge(self, judge: CommandJudge, prompt: str, name: str) -> str:
        """Run a judge that is a command as a cli target runs (``steps.run_cli_command``),
        with the prompt as its ``{PROMPT}`` / ``{PROMPT_FILE}``, in an empty read-only folder
        of its own; its reply is the answer it wrote to ``{OUTPUT_FILE}``, text to parse as
        untrusted. A failed run is an error.

        Its only network is the model proxy (whatever the provider says: it is a grader), to
        the run's default judge model when there is one: AgentV's SDK clients find it by
        their own variables (``AGENTV_TARGET_PROXY_URL``/``_TOKEN``). With no such model, no
        network at all.

        Never in the agent's workspace: the judge's program would read, as it starts, what
        the agent planted there (``bunfig.toml``'s preload for ``bun run``, ``CLAUDE.md`` and
        ``.claude/settings.json`` hooks, ``AGENTS.md``) and run the agent's code as the
        judge. What the judge reads of the answer is in its prompt (the answer, the diff)."""
        target = judge.target
        assert isinstance(target, TargetConfig)
        image = self.image_for(target.image, self.root)
        proxy = self._judge_proxy()
        env = {**target.env, **(proxy.env() if proxy is not None else {})}
        try:
            with own_folder("judge") as folder:
                outcome, answer = run_cli_command(
                    target,
                    prompt,
                    folder,
                    self.box,
                    test_id=self.labels.get("gradebox.test", "judge"),
                    input_files=[],
                    image_id=image,
                    env=env,
                    labels=self.labels,
                    source_dir=self.root,
                    name="llm-judge",
                    network="none",
                    read_only=True,
                    on_start=proxy.start_in if proxy is not None else None,
                )
        finally:
            if proxy is not None:
                proxy.close()  # waits for calls in flight, lets none outlive the judge
        failure = judge_step(f"the {judge.kind} judge", outcome, target.timeout, target.limits)[1]
        if failure:
            raise GradeboxError(failure)
        if isinstance(answer, str):
            raise GradeboxError(answer.replace("target:", f"the {judge.kind} judge:", 1))
        return answer.get("output") or ""

    def _judge_proxy(self) -> TargetProxy | None:
        """A model proxy to the run's default judge model, or None when the run has none."""
        if self.hub is None:
            return None
        try:
            model = self.hub.targets.get(None, file=None, field=None)
        except ConfigError:
            return None
        return TargetProxy(self.hub, model, max_calls=JUDGE_CALLS)


JUDGE_CALLS = 50
"""Model calls a command judge may make through its proxy (a script grader's default)."""


def _shown(spec: str) -> str:
    if spec.startswith("file://"):
        return repr(Path(spec.removeprefix("file://").rsplit(":", 1)[0]).name)
    line = " ".join(spec.split())
    return repr(line if len(line) <= 60 else f"{line[:59]}...")
