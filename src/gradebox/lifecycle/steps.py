"""Steps that are not graders: the target (the agent) and the workspace hooks.

They run in the same hardened sandbox as graders; the one difference is the workspace, which
they may change in place. A target (and a hook) sees only the files its command names, never
the suite's graders or expected answers. A step that fails, or that the sandbox stopped, is
judged by the same table as a grader and makes its test an ``error``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..core.scratch import scratch_folder
from ..core.untrusted import read_regular
from ..errors import GradeboxError
from ..graders.run import CONTAINER_WORKSPACE, container_path, source_mounts, translate_args
from ..graders.run import grader_file as _named_file
from ..graders.verdict import judge, tail_text
from ..protocol.models import (
    Message,
    OutputShapeError,
    Payload,
    Status,
    StepRecord,
    TokenUsage,
    load_untrusted_json,
)
from ..sandbox.base import Limits, Mount, RunOutcome, Sandbox, SandboxSpec, Security
from ..sandbox.hardening import run_as, run_as_ids

if TYPE_CHECKING:
    from ..suite import HealthCheck, TargetConfig, Test

__all__ = [
    "HOOK_TIMEOUT",
    "MAX_BATCH_OUTPUT",
    "MAX_CLI_OUTPUT",
    "hook_input",
    "input_text",
    "judge_step",
    "read_batch_answers",
    "PROMPT_ENV",
    "own_folder",
    "render_cli_command",
    "run_cli_command",
    "run_cli_target",
    "run_healthcheck",
    "run_in_workspace",
]

HOOK_TIMEOUT = 300.0  # before_each / after_each


@contextmanager
def own_folder(name: str) -> Iterator[Path]:
    """An empty folder ``name`` (0700, the sandbox user's) in a scratch folder of its own,
    removed with it after: where a command starts that must not start in the workspace."""
    with scratch_folder() as scratch:
        folder = scratch / name
        folder.mkdir(mode=0o700)
        if os.geteuid() == 0:
            os.chown(folder, *run_as_ids())
        yield folder


def run_in_workspace(
    command: list[str] | str,
    workspace: Path,
    sandbox: Sandbox,
    *,
    image_id: str,
    name: str,
    stdin: bytes | None = None,
    timeout: float = 300.0,
    network: str = "none",
    env: dict[str, str] | None = None,
    limits: Limits | None = None,
    labels: dict[str, str] | None = None,
    source_dir: Path | None = None,
    extra_mounts: tuple[Mount, ...] = (),
    named_files: list[str] | None = None,
    read_only: bool = False,
    on_start: Callable[[Any], None] | None = None,
    workdir: str = CONTAINER_WORKSPACE,
) -> RunOutcome:
    """Run a command that may change the workspace in place (a suite's target and hooks).

    Same hardening as a grader; the only difference is the workspace, mounted read-write.
    ``named_files`` (relative to ``source_dir``) are mounted read-only where a rewritten shell
    command expects them; nothing else of ``source_dir`` is visible. ``workdir``: where the
    command starts (the workspace unless said: a transform starts in an empty folder).
    """
    named_files = list(named_files or [])
    argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
    mounts = [Mount(workspace.resolve(), CONTAINER_WORKSPACE, read_only=read_only), *extra_mounts]
    with scratch_folder() as scratch:
        if source_dir is not None and not isinstance(command, str):
            argv, used = translate_args(argv, source_dir)
            used += named_files
            mounts += source_mounts(source_dir, used, run_as(Security()), scratch, folders=False)
        elif source_dir is not None and named_files:
            mounts += source_mounts(
                source_dir, named_files, run_as(Security()), scratch, folders=False
            )
        spec = SandboxSpec(
            image=image_id,
            command=argv,
            workdir=workdir,
            env={**(env or {}), "EVALUATE_WORKSPACE": CONTAINER_WORKSPACE},
            mounts=tuple(mounts),
            stdin=stdin,
            timeout=timeout,
            limits=limits or Limits(),
            network=network,
            labels=labels or {},
            name=name,
            on_start=on_start,
        )
        return sandbox.run(spec)


def input_text(payload: Payload) -> bytes:
    """What a target reads on stdin: the user's text, or the message list as JSON."""
    if len(payload.input) == 1 and isinstance(payload.input[0].content, str):
        return payload.input[0].content.encode()
    return json.dumps([m.model_dump(mode="json") for m in payload.input]).encode()


def judge_step(
    what: str, outcome: RunOutcome, timeout: float, limits: Limits
) -> tuple[StepRecord, str | None]:
    """A target or hook run: its record, and why it failed (None when it exited 0)."""
    record = StepRecord(
        exit_code=outcome.exit_code,
        duration_ms=outcome.duration_ms,
        timed_out=outcome.timed_out,
        stderr_tail=tail_text(outcome.stderr),
    )
    if outcome.exit_code == 0 and not outcome.timed_out and not outcome.oom_killed:
        return record, None
    # Timeouts, OOM, signals and failed starts read the same as for a grader.
    verdict = judge("program", what, outcome, timeout=timeout, limits=limits)
    if verdict.status is Status.error:
        return record, f"{what}: {verdict.evidence}"
    tail = (record.stderr_tail or "").splitlines()
    return record, f"{what} exited with code {outcome.exit_code}" + (
        f": {tail[-1]}" if tail else ""
    )


def hook_input(workspace: str, test: Test | None, run_id: str) -> bytes:
    """What a hook reads on stdin (AgentV's shape): where the workspace is, which test, and
    that test's input and metadata (``test_id`` is null for ``before_all``/``after_all``)."""
    case_input = None
    if test is not None:
        case_input = input_text(Payload(input=test.case.input)).decode()
    return json.dumps(
        {
            "workspace_path": workspace,
            "test_id": test.id if test is not None else None,
            "eval_run_id": run_id,
            "case_input": case_input,
            "case_metadata": test.metadata if test is not None else {},
        }
    ).encode()


# --------------------------------------------------------------------------------------------
# AgentV's cli provider: a command template, run through sh -c; the answer is a file.

CLI_IO = "/run/gradebox-io"
MAX_CLI_OUTPUT = 16 << 20
"""The most a cli target may write to {OUTPUT_FILE}: read on the host, so bounded."""

_TOKEN = re.compile(r"[^\s'\"<>|;&()=`$]+")
_SAFE_ID = re.compile(r"[A-Za-z0-9_.-]+")  # fullmatch: `$` would let a final newline in


def render_cli_command(
    template: str,
    *,
    test_id: str,
    prompt_text: str,
    files: list[str],
    files_format: str,
    cwd: Path | None,
    attempt: int = 0,
) -> tuple[str, list[str]]:
    """The command to run, and the files (relative to ``cwd``) it names, which are mounted.

    Every word that names a file next to ``cwd`` is first rewritten to where that file is
    mounted; then every placeholder is filled in one pass over the template, so that a value
    can never hold a placeholder of its own. The prompt (for a judge, it holds the agent's
    answer) never enters the command's text: ``{PROMPT}`` becomes a reference to
    ``$GRADEBOX_PROMPT`` (``PROMPT_ENV``, which the caller sets), quoted for where it stands,
    so no shell, not even one the template nests (``sh -c '... {PROMPT}'``), parses the
    prompt. The other values (ids, file names, our own paths) are the template author's: each
    is quoted for the quotes it stands in."""
    named: list[str] = []

    def rewrite(m: re.Match[str]) -> str:
        word = m.group(0)
        if "{" in word or word.startswith("-") or cwd is None:
            return word
        rel = _named_file(word, cwd)
        if rel is None:
            return word
        named.append(rel)
        return container_path(rel)

    text = template
    # Ids first, as before, so that `fixtures/{EVAL_ID}.txt` is a file the rewrite can name.
    if _SAFE_ID.fullmatch(test_id):
        text = text.replace("{EVAL_ID}", test_id)
    text = _TOKEN.sub(rewrite, text)
    listed = [
        files_format.replace("{path}", f).replace("{basename}", f.rsplit("/", 1)[-1]) for f in files
    ]
    values: dict[str, str | list[str]] = {
        "{EVAL_ID}": test_id,
        "{ATTEMPT}": str(int(attempt)),
        "{PROMPT_FILE}": f"{CLI_IO}/prompt.txt",
        "{OUTPUT_FILE}": f"{CLI_IO}/output",
        "{FILES}": listed,
    }
    return _fill(text, values), named


PROMPT_ENV = "GRADEBOX_PROMPT"
_PLACEHOLDER = re.compile(r"\{(?:PROMPT|PROMPT_FILE|OUTPUT_FILE|FILES|EVAL_ID|ATTEMPT)\}")


def _fill(template: str, values: dict[str, str | list[str]]) -> str:
    """Placeholders filled in one left-to-right pass, each quoted for the shell's quoting
    state where it stands (outside quotes, in '...', in "...") and for whether that text is
    itself code for another shell (the word before it is ``-c`` or ``eval``). Linear."""
    out: list[str] = []
    quote, code = "", False  # quote: "", "'" or '"'; code: the quoted text is a script
    i, n = 0, len(template)
    while i < n:
        found = _PLACEHOLDER.match(template, i) if template[i] == "{" else None
        if found:
            if quote == "" and found.group(0) == "{PROMPT}" and _script_word(out):
                raise GradeboxError(
                    "{PROMPT} given to a shell as its script (after -c or eval): the prompt "
                    "would run as code; pass it as an argument, or read {PROMPT_FILE}"
                )
            out.append(_quoted(found.group(0), values, quote, code))
            i = found.end()
            continue
        c = template[i]
        if c == "\\" and quote != "'":  # an escaped character keeps its quoting state
            out.append(template[i : i + 2])
            i += 2
            continue
        if quote == "" and c in "'\"":
            quote, code = c, _script_word(out)
        elif c == quote:
            quote, code = "", False
        out.append(c)
        i += 1
    return "".join(out)


_SCRIPT_WORD = re.compile(r"(?:^|[\s;&|(])(?:-[A-Za-z]*c|eval)\s+$")


def _script_word(out: list[str]) -> bool:
    """Whether what comes next is a script another shell parses: after ``-c`` (``sh -c``,
    ``bash -lc``) or ``eval``."""
    return bool(_SCRIPT_WORD.search("".join(out[-64:])[-64:]))


def _quoted(key: str, values: dict[str, str | list[str]], quote: str, code: bool) -> str:
    if key == "{PROMPT}":
        # A reference, never the text. Outside quotes "${V}" (one word); in "..." ${V}, or,
        # when that text is a script (sh -c "..."), \"\${V}\" for the nested shell to expand;
        # in '...' that is a script (sh -c '...') "${V}": literal here, expanded (never parsed)
        # by the shell that runs it; in other '...' the quote is closed around "${V}" ('x'
        # would hand the judge the reference itself).
        if quote == '"':
            return f'\\"\\${{{PROMPT_ENV}}}\\"' if code else f"${{{PROMPT_ENV}}}"
        if quote == "'" and not code:
            return f"'\"${{{PROMPT_ENV}}}\"'"
        return f'"${{{PROMPT_ENV}}}"'
    value = values[key]
    words = value if isinstance(value, list) else [value]
    if quote == "":
        return " ".join(shlex.quote(w) for w in words)
    joined = " ".join(words)
    if quote == "'":
        return joined.replace("'", "'\\''")
    return re.sub(r'([\\"$`])', r"\\\1", joined)


def run_cli_target(
    target: TargetConfig,
    payload: Payload,
    test: Test,
    workspace: Path,
    sandbox: Sandbox,
    *,
    image_id: str,
    env: dict[str, str],
    labels: dict[str, str],
    source_dir: Path,
    attempt: int = 0,
) -> tuple[RunOutcome, dict[str, Any] | str]:
    """Run a cli target; its answer as payload fields, or why there is none (a string)."""
    return run_cli_command(
        target,
        input_text(payload).decode(),
        workspace,
        sandbox,
        test_id=test.target_id,  # a matrix's test: the id the target knows
        input_files=test.case.input_files,
        image_id=image_id,
        env=env,
        labels=labels,
        source_dir=source_dir,
        attempt=attempt,
        name=f"target-{test.id}",
        network=target.network,
    )


def run_cli_command(
    target: TargetConfig,
    prompt_text: str,
    workspace: Path,
    sandbox: Sandbox,
    *,
    test_id: str,
    input_files: list[str],
    image_id: str,
    env: dict[str, str],
    labels: dict[str, str],
    source_dir: Path,
    name: str,
    network: str = "none",
    attempt: int = 0,
    read_only: bool = False,
    read: Callable[[Path], Any] | None = None,
    on_start: Callable[[Any], None] | None = None,
) -> tuple[RunOutcome, Any]:
    """Run a cli command target given ``prompt_text`` (``{PROMPT}``, ``{PROMPT_FILE}``): the
    agent under test, or a judge (an LLM grader whose judge is a command, the workspace
    ``read_only``); what it wrote to ``{OUTPUT_FILE}``, or why there is nothing (a string).
    ``read``: how {OUTPUT_FILE} is read (a batch's JSONL: ``read_batch_answers``);
    ``on_start``: given the started container (a judge's model proxy opens in it)."""
    with own_folder("io") as io:
        (io / "prompt.txt").write_text(prompt_text, encoding="utf-8")
        if os.geteuid() == 0:
            os.chown(io / "prompt.txt", *run_as_ids())
        mounts = [Mount(io, CLI_IO, read_only=False)]
        files = []
        for i, host in enumerate(input_files):
            inside = f"{CLI_IO}-files/{i}/{Path(host).name}"
            mounts.append(Mount(Path(host), inside, read_only=True))
            files.append(inside)
        cwd = Path(target.cwd) if target.cwd else source_dir
        assert isinstance(target.command, str)
        command, named = render_cli_command(
            target.command,
            test_id=test_id,
            prompt_text=prompt_text,
            files=files,
            files_format=target.files_format,
            cwd=cwd,
            attempt=attempt,
        )
        outcome = run_in_workspace(
            command,
            workspace,
            sandbox,
            image_id=image_id,
            name=name,
            timeout=target.timeout,
            network=network,
            env={**env, PROMPT_ENV: prompt_text},
            limits=target.limits,
            labels=labels,
            source_dir=cwd,
            extra_mounts=tuple(mounts),
            named_files=named,
            read_only=read_only,
            on_start=on_start,
        )
        if read is not None:
            return outcome, read(io / "output")
        return outcome, read_cli_answer(io / "output", target.answer_format)


def run_healthcheck(
    check: HealthCheck,
    target: TargetConfig,
    sandbox: Sandbox,
    *,
    image_id: str,
    labels: dict[str, str],
    source_dir: Path,
) -> str | None:
    """A cli target's healthcheck, run in an empty folder like the target (its files named
    from its cwd, no network unless the target has it); why it failed, or None."""
    with own_folder("healthcheck") as folder:
        cwd = Path(check.cwd or target.cwd or source_dir)
        command = check.command
        named: list[str] = []
        if isinstance(command, str):
            command, named = render_cli_command(
                command,
                test_id="healthcheck",
                prompt_text="",
                files=[],
                files_format=target.files_format,
                cwd=cwd,
            )
        outcome = run_in_workspace(
            command,
            folder,
            sandbox,
            image_id=image_id,
            name="target-healthcheck",
            timeout=target.timeout,
            network=target.network,
            env=dict(target.env),
            limits=target.limits,
            labels=labels,
            source_dir=cwd,
            named_files=named,
        )
        return judge_step("target healthcheck", outcome, target.timeout, target.limits)[1]


def read_cli_answer(path: Path, answer_format: str = "auto") -> dict[str, Any] | str:
    """Parse what a cli target wrote: JSON with ``output`` (messages) or ``text`` and its
    metrics, else the whole file as the answer (``_agent_output``: read as hostile).
    ``claude-json``: Claude Code's ``--output-format json`` (``result``, ``usage``,
    ``total_cost_usd``, ``duration_ms``)."""
    data = _agent_output(path, MAX_CLI_OUTPUT, "the cli command")
    if isinstance(data, str):
        return data
    text = data.decode("utf-8", errors="replace")
    try:
        parsed = load_untrusted_json(text)
    except OutputShapeError:
        return {"output": text}
    if answer_format == "claude-json" and isinstance(parsed, dict):
        parsed = _from_claude(parsed)
    keys = ("output", "text", "token_usage", "cost_usd", "duration_ms")
    if not isinstance(parsed, dict) or not any(k in parsed for k in keys):
        return {"output": text}
    try:
        return _cli_fields(parsed)
    except (ValidationError, ValueError, TypeError) as exc:
        return f"target: {{OUTPUT_FILE}} has fields of the wrong shape: {str(exc).splitlines()[0]}"


def _agent_output(path: Path, cap: int, writer: str) -> bytes | str:
    """What a cli target wrote to {OUTPUT_FILE}, or why there is nothing to read (a string).
    Written by the agent, so read as hostile: no link followed, a regular file only, bounded
    in size."""
    data = read_regular(path, cap, follow=False)
    if data is None:
        if os.path.lexists(path):
            return "target: {OUTPUT_FILE} is not a regular file"
        return f"target: {writer} wrote nothing to {{OUTPUT_FILE}}"
    if len(data) > cap:
        return f"target: {{OUTPUT_FILE}} is over {cap >> 20} MiB"
    return data


MAX_BATCH_OUTPUT = 64 << 20
"""The most a batching cli target may write to {OUTPUT_FILE} (every test's answer at once)."""


def read_batch_answers(path: Path, ids: list[str]) -> dict[str, dict[str, Any] | str] | str:
    """What a batching cli target (AgentV v4's ``provider_batching``) wrote: JSONL, one
    ``{"id": TEST_ID, "output" | "text", "token_usage", "cost_usd", "duration_ms"}`` per line
    (``CliJsonlRecordSchema``); each of ``ids`` gets its line's answer fields, or why it has
    none (a string: the test is an ``error``): no line for it, two lines for it, a line of
    the wrong shape. A line that is not a JSON object with a string ``id`` cannot be told
    apart from a lost answer: as in AgentV, the whole batch fails (a string for every test)."""
    data = _agent_output(path, MAX_BATCH_OUTPUT, "the batching cli command")
    if isinstance(data, str):
        return data
    records: dict[str, dict[str, Any] | str] = {}
    twice: set[str] = set()
    wanted = set(ids)
    # Split on \n alone (as AgentV does): a JSON string may hold U+2028 or U+0085 raw, where
    # str.splitlines would cut it. Bytes, one line decoded at a time: no second copy.
    for n, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        if len(raw) > MAX_CLI_OUTPUT + 1024:  # one test's answer, bounded as a lone one's
            return (
                f"target: the batch's {{OUTPUT_FILE}} line {n} is over "
                f"{MAX_CLI_OUTPUT >> 20} MiB (one test's answer)"
            )
        line = raw.decode("utf-8", errors="replace")
        try:
            obj = load_untrusted_json(line)
        except OutputShapeError as exc:
            return f"target: the batch's {{OUTPUT_FILE}} line {n} is not JSON ({exc})"
        if not isinstance(obj, dict):
            return f"target: the batch's {{OUTPUT_FILE}} line {n} is not a JSON object"
        key = obj.get("id")
        if not isinstance(key, str) or not key:
            return f"target: the batch's {{OUTPUT_FILE}} line {n} has no string id"
        if key not in wanted:  # no test of this batch: not kept (memory bounded by ids)
            continue
        if key in records:
            twice.add(key)
            continue
        if obj.get("text") is not None and not isinstance(obj["text"], str):
            obj["text"] = json.dumps(obj["text"])  # AgentV: JSON.stringify
        if obj.get("output") is None and isinstance(obj.get("output_messages"), list):
            obj["output"] = obj["output_messages"]  # AgentV's earlier spelling
        try:
            records[key] = _cli_fields(obj)
        except (ValidationError, ValueError, TypeError) as exc:
            records[key] = (
                f"target: the batch's line for this test (line {n}) has fields of the wrong "
                f"shape: {str(exc).splitlines()[0]}"
            )
    out: dict[str, dict[str, Any] | str] = {}
    for key in ids:
        if key in twice:
            out[key] = "target: the batch's {OUTPUT_FILE} answers this test twice"
        elif key not in records:
            out[key] = "target: the batch's {OUTPUT_FILE} has no line for this test's id"
        else:
            out[key] = records[key]
    return out


# How far a claimed duration may stray from the measured one before it is reported: the
# agent's clock starts later than ours (a container starts first) and stops earlier, so small
# gaps are the rule; a run that "took 5 ms" when we measured 2.5 s is not.
_CLAIM_SLACK_MS = 1000.0


def claims_of(
    answer: dict[str, Any], outcome: RunOutcome
) -> tuple[dict[str, Any] | None, list[str]]:
    """What a cli target's answer file says about its own run (``duration_ms``,
    ``token_usage``, ``cost_usd``), recorded apart from what gradebox measured, and a warning
    for a claim that contradicts the measurement. The duration checks hold is the measured
    one; token usage and cost have no measurement of ours for a cli target (its model calls
    are its own), so checks hold its claim, and the result says it was one."""
    claimed: dict[str, Any] = {}
    for key in ("duration_ms", "token_usage", "cost_usd"):
        value = answer.get(key)
        if value is not None:
            claimed[key] = value.model_dump(exclude_none=True) if key == "token_usage" else value
    warnings = []
    said = claimed.get("duration_ms")
    measured = float(outcome.duration_ms)
    if said is not None and abs(said - measured) > max(_CLAIM_SLACK_MS, measured / 2):
        warnings.append(
            f"the target claimed duration_ms {said:g}, gradebox measured "
            f"{measured:g}: checks hold the measurement"
        )
    return claimed or None, warnings


def _from_claude(data: dict[str, Any]) -> dict[str, Any]:
    """Claude Code's one JSON result as the cli answer's fields."""
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    out: dict[str, Any] = {
        "text": data.get("result") if isinstance(data.get("result"), str) else ""
    }
    tokens = {
        k: usage[n]
        for k, n in (("input", "input_tokens"), ("output", "output_tokens"))
        if isinstance(usage.get(n), int) and not isinstance(usage.get(n), bool)
    }
    if tokens:
        out["token_usage"] = tokens
    for key, name in (("cost_usd", "total_cost_usd"), ("duration_ms", "duration_ms")):
        if isinstance(data.get(name), int | float) and not isinstance(data.get(name), bool):
            out[key] = data[name]
    return out


def _cli_fields(data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    messages = data.get("output")
    if isinstance(messages, list):
        out["messages"] = [Message.model_validate(m) for m in messages]
        finals = [m for m in out["messages"] if m.role == "assistant" and m.content is not None]
        if finals:
            content = finals[-1].content
            out["output"] = content if isinstance(content, str) else json.dumps(content)
    elif isinstance(messages, str):
        out["output"] = messages
    if "output" not in out:
        text = data.get("text")
        out["output"] = text if isinstance(text, str) else ""
    if data.get("token_usage") is not None:
        out["token_usage"] = TokenUsage.model_validate(data["token_usage"])
        for side in ("input", "output"):  # a negative count would pass every token budget
            count = getattr(out["token_usage"], side)
            if count is not None and (isinstance(count, bool) or count < 0):
                raise ValueError(f"token_usage.{side} must be a count >= 0")
    for key in ("cost_usd", "duration_ms"):
        value = data.get(key)
        if value is not None:
            # A negative (or NaN) metric would pass every budget check it is held to.
            if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
                raise ValueError(f"{key} must be a number >= 0")
            out[key] = float(value)
    if isinstance(data.get("trace"), dict):
        out["trace"] = data["trace"]
    return out
