"""AgentV v4.42.4's eval files: its trace checks and composites with v4's semantics (each case
worked out from the v4 TypeScript function its comment names), its other constructs mapped, and
messages that tell a v4 file from a 5.x one. No containers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gradebox.errors import ConfigError, UnsupportedFeature
from gradebox.formats.agentv import chosen_target, release_of
from gradebox.graders.assertion import (
    AssertSet,
    GraderAssertion,
    HostAssertion,
    LlmGraderAssertion,
    aggregate,
    aggregated,
    fold,
    leaves,
)
from gradebox.graders.trajectory import SkillTrigger, ToolTrajectory, deep_equal
from gradebox.protocol.models import Message, Payload
from gradebox.suite import load_suite
from tests.conftest import write

ROOT = Path(__file__).resolve().parents[2]
V4 = ROOT / "tests" / "fixtures" / "agentv" / "v4"


def _answer(test_id: str) -> Payload:
    """What the fixture's scripted agent answers for ``test_id``, as the target's payload."""
    out = Path(__import__("tempfile").mkdtemp()) / "answer.json"
    subprocess.run([sys.executable, str(V4 / "agent.py"), test_id, str(out)], check=True)
    messages = [Message.model_validate(m) for m in json.loads(out.read_text())["output"]]
    return Payload(output=messages[-1].content, messages=messages)


# The fixture's host-side verdicts (the code-grader aggregator runs in a container: see
# tests/docker/test_agentv_run.py::test_v4_constructs_give_v4s_verdicts).
HOST_VERDICTS = {
    "any-order-good": ("passed", 1.0),
    "any-order-bad": ("failed", 0.5),
    "in-order-good": ("passed", 1.0),
    "in-order-bad": ("failed", 0.0),
    "args-partial-good": ("failed", 0.0),
    "exact-good": ("passed", 1.0),
    "exact-bad": ("failed", 0.25),
    "skill-good": ("passed", 1.0),
    "skill-bad": ("failed", 0.0),
    "weighted-good": ("passed", 1.0),
    "weighted-bad": ("failed", 0.375),
    "threshold-good": ("passed", 1.0),
    "threshold-bad": ("failed", 0.333),
}


def test_the_fixture_gives_v4s_verdicts_on_the_host():
    suite = load_suite(V4 / "evals" / "v4.eval.yaml")
    got = {}
    for test in suite.tests:
        assertions = test.every_assertion()
        if any(True for _ in aggregated(assertions)):
            continue
        payload = _answer(test.id)
        done = {id(a): a.evaluate(payload) for a in leaves(assertions)
                if isinstance(a, HostAssertion)}  # fmt: skip
        results = [fold(a, done) for a in assertions]
        status, score, _ = aggregate(results, test.threshold, agentv=True)
        got[test.id] = (status.value, round(score, 3))
    assert got == HOST_VERDICTS


def _calls(*calls: dict) -> Payload:
    return Payload(output="done", messages=[Message(role="assistant", content="",
                                                    tool_calls=list(calls))])  # fmt: skip


def _score(check, payload: Payload) -> tuple[str, float]:
    result = check.evaluate(payload)
    return result.status.value, round(result.score, 3)


def test_deep_equal_is_javascripts():
    # graders/scoring.ts deepEqual: typeof differs for true and 1; 1 and 1.0 are one number
    assert not deep_equal(True, 1) and not deep_equal(1, True)
    assert deep_equal(1, 1.0) and deep_equal({"a": [1, {"b": None}]}, {"a": [1.0, {"b": None}]})
    assert not deep_equal({"a": 1}, {"a": 1, "b": 2}) and not deep_equal([1], [1, 2])
    assert not deep_equal("1", 1) and not deep_equal(None, {})


def test_a_latency_bound_without_a_duration_is_left_out():
    # tool-trajectory.ts checkLatency: no durationMs is a skip, not counted in the total
    check = ToolTrajectory(mode="in_order", expected=[{"tool": "a", "max_duration_ms": 10}])
    assert _score(check, _calls({"tool": "a"})) == ("passed", 1.0)
    assert _score(check, _calls({"tool": "a", "durationMs": 20})) == ("failed", 0.5)
    assert _score(check, _calls({"tool": "a", "durationMs": 10})) == ("passed", 1.0)
    # not found: its bound still counts (2 aspects, none met)
    assert _score(check, _calls({"tool": "b"})) == ("failed", 0.0)


def test_args_match_modes():
    # tool-trajectory.ts argsMatch: exact by default; superset, subset, a field list, ignore
    call = {"tool": "s", "input": {"q": "x", "n": {"k": 1}}}
    want = {"q": "x"}

    def one(**item) -> tuple[str, float]:
        return _score(ToolTrajectory(mode="exact", expected=[{"tool": "s", **item}]), _calls(call))

    assert one(args=want) == ("failed", 0.0)
    assert one(args=want, args_match="superset") == ("passed", 1.0)
    assert one(args={"q": "x", "n": {"k": 1}, "z": 2}, args_match="subset") == ("passed", 1.0)
    assert one(args={"q": "y", "n": {"k": 1}}, args_match=["n.k"]) == ("passed", 1.0)
    assert one(args={"q": "y"}, args_match="ignore") == ("passed", 1.0)
    assert one(args="any") == ("passed", 1.0)
    # the grader's own args_match applies to every item without one
    items = [{"tool": "s", "args": want}]
    check = ToolTrajectory(mode="exact", args_match="superset", expected=items)
    assert _score(check, _calls(call)) == ("passed", 1.0)


def test_superset_consumes_calls_and_subset_allows_only_the_listed():
    # evaluateSuperset: each expected item needs a call of its own
    superset = ToolTrajectory(mode="superset", expected=[{"tool": "a"}, {"tool": "a"}])
    assert _score(superset, _calls({"tool": "a"})) == ("failed", 0.5)
    assert _score(superset, _calls({"tool": "a"}, {"tool": "b"}, {"tool": "a"})) == ("passed", 1.0)
    # evaluateSubset: the share of calls the expected items allow (items are reusable)
    subset = ToolTrajectory(mode="subset", expected=[{"tool": "a"}])
    assert _score(subset, _calls({"tool": "a"}, {"tool": "a"})) == ("passed", 1.0)
    assert _score(subset, _calls({"tool": "a"}, {"tool": "b"})) == ("failed", 0.5)


def test_no_trace_is_a_fail_and_an_empty_expectation_refused():
    check = ToolTrajectory(mode="any_order", minimums={"a": 1})
    assert _score(check, Payload(output="")) == ("failed", 0.0)
    # v4 scores an empty expectation 1.0, a check every run holds: refused (test_vacuous.py)
    with pytest.raises(ValueError, match="holds for every run"):
        ToolTrajectory(mode="any_order", minimums={})


def test_skill_trigger_evidence():
    # skill-trigger.ts: a Skill tool naming it, a Read under skills/<name>/, else a tool output
    check = SkillTrigger(skill="pdf")
    assert _score(check, _calls({"tool": "skill", "input": {"skill": "my-pdf"}})) == (
        "passed", 1.0)  # fmt: skip
    assert _score(check, _calls({"tool": "Read", "input": {"path": "x/skills/pdf/a.md"}})) == (
        "passed", 1.0)  # fmt: skip
    assert _score(check, _calls({"tool": "Bash", "output": {"f": "skills/pdf/SKILL.md"}})) == (
        "passed", 1.0)  # fmt: skip
    assert _score(check, _calls({"tool": "Read", "input": {"path": "skills/pdfx/a.md"}})) == (
        "failed", 0.0)  # fmt: skip
    never = SkillTrigger(skill="pdf", should_trigger=False)
    assert _score(never, _calls({"tool": "Bash"})) == ("passed", 1.0)
    assert _score(never, _calls({"tool": "Skill", "input": {"skill": "pdf"}})) == ("failed", 0.0)


def _eval(tmp_path: Path, body: str, name: str = "evals/e.eval.yaml") -> Path:
    return write(tmp_path / name, body)


def _error(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    return info.value


V4_TEST = "tests:\n  - id: a\n    input: hi\n    criteria: says hi\n"


def test_release_is_told_by_shape_and_a_v4_user_is_never_told_of_a_removal(tmp_path):
    assert release_of({"tests": [{"id": "a", "input": "x", "assertions": []}]}) == "v4"
    assert release_of({"prompts": ["x"], "tests": [{"vars": {}}]}) == "5.x"
    assert release_of({"tests": [{"id": "a", "vars": {}, "assert": []}]}) == "5.x"
    v4 = _error(_eval(tmp_path, "workers: 2\nexecution: {target: m}\n" + V4_TEST))
    assert "removed" not in v4.message and "v4" in v4.message and v4.field == "workers"
    v5 = _error(_eval(tmp_path, "workers: 2\nprompts: [x]\ntests:\n  - {id: a, vars: {}}\n",
                      "evals/f.eval.yaml"))  # fmt: skip
    assert "AgentV removed top-level 'workers'" in v5.message
    either = _error(_eval(tmp_path, "workers: 2\ntests:\n  - {id: a}\n", "evals/g.eval.yaml"))
    assert "v4 never had it, and 5.x removed it" in either.message


@pytest.mark.parametrize(
    ("assertion", "loc"),
    [
        ("{type: tool-trajectory, mode: any_order}", "minimums"),
        ("{type: tool-trajectory, mode: in_order}", "expected"),
        ("{type: tool-trajectory, mode: sideways, expected: []}", "mode"),
        ("{type: skill-trigger}", "skill"),
        ("{type: composite, aggregator: {type: threshold, threshold: 1},"
         " assertions: [{name: n, type: contains, value: x, negate: true}]}", "negate"),
        ("{type: composite, aggregator: {type: threshold, threshold: 1},"
         " assertions: [{type: contains, value: x}]}", "needs a name"),
        ("{type: composite, assertions: [{name: n, type: contains, value: x}]}", "aggregator"),
        ("{type: composite, aggregator: {type: threshold, threshold: 2},"
         " assertions: [{name: n, type: contains, value: x}]}", "threshold"),
    ],
)  # fmt: skip
def test_a_v4_check_written_wrong_is_an_error_naming_it_never_a_removal(tmp_path, assertion, loc):
    # v4 skips such a grader with a warning; a check silently gone passes what it should fail
    path = _eval(tmp_path, V4_TEST + f"    assertions:\n      - {assertion}\n")
    error = _error(path)
    assert loc in (error.field or "") + error.message and "removed" not in error.message
    assert error.line == 6


def test_skill_trigger_reads_no_as_agentv_does_never_as_false(tmp_path):
    # AgentV reads YAML 1.2: `no` is the text "no". A skill of that name is one; and v4 takes
    # only a boolean false as should_trigger (the text "no" it drops, expecting the skill):
    # neither v4's reading nor the writer's is a safe guess, so that is an error naming it.
    def check(assertion: str) -> HostAssertion:
        path = _eval(tmp_path, V4_TEST + f"    assertions:\n      - {assertion}\n")
        (only,) = load_suite(path).tests[0].assertions
        return only

    named_no = check("{type: skill-trigger, skill: no}").check
    assert named_no.skill == "no" and named_no.should_trigger is True
    assert _score(named_no, _calls({"tool": "Skill", "input": {"skill": "no"}})) == ("passed", 1.0)
    never = check("{type: skill-trigger, skill: pdf, should_trigger: false}").check
    assert never.should_trigger is False
    for written in ("no", '"no"', "off", '"false"', "0"):
        path = _eval(
            tmp_path,
            V4_TEST + f"    assertions:\n      - {{type: skill-trigger, skill: pdf, "
            f"should_trigger: {written}}}\n",
        )
        error = _error(path)
        assert error.field == "tests.0.assertions.0.should_trigger", written
        assert error.line == 6 and "boolean" in error.message, written


def test_composite_kinds_compile(tmp_path):
    write(tmp_path / "graders" / "gate.py", "print('{}')\n")
    path = _eval(
        tmp_path,
        V4_TEST + "    assertions:\n      - name: c\n        type: composite\n"
        "        aggregator: {type: code-grader, path: python3 ../graders/gate.py}\n"
        "        assertions:\n          - {name: x, type: contains, value: hi}\n"
        "      - name: w\n        type: composite\n"
        "        aggregator: {type: weighted_average, weights: {x: 3}}\n"
        "        assertions:\n          - {name: x, type: contains, value: hi, weight: 9}\n"
        "          - {name: y, type: contains, value: yo, weight: 5}\n",
    )
    code, weighted = load_suite(path).tests[0].assertions
    assert isinstance(code, AssertSet) and isinstance(code.program, GraderAssertion)
    # the aggregator is a leaf (planned, its image resolved) that runs after the others
    assert list(leaves([code]))[-1] is code.program and list(aggregated([code])) == [code]
    assert isinstance(weighted, AssertSet) and weighted.threshold == 0.8
    # the aggregator's weight by name, else 1: a member's own weight is not used (v4)
    assert [c.weight for c in weighted.children] == [3.0, 1.0]


def test_an_llm_aggregator_fills_in_the_results(tmp_path, monkeypatch):
    write(tmp_path / ".agentv" / "targets.yaml",
          "targets:\n  - {name: judge, provider: openai, model: m}\n")  # fmt: skip
    path = _eval(
        tmp_path,
        V4_TEST + "    assertions:\n      - name: c\n        type: composite\n"
        "        aggregator: {type: llm-grader, target: judge}\n"
        "        assertions:\n          - {name: x, type: contains, value: hi}\n",
    )
    (group,) = load_suite(path).tests[0].assertions
    assert isinstance(group, AssertSet) and isinstance(group.program, LlmGraderAssertion)
    assert "{{EVALUATOR_RESULTS_JSON}}" in (group.program.llm.prompt or "")


def test_top_level_input_comes_before_each_tests_own(tmp_path):
    write(tmp_path / "evals" / "system.md", "Be terse.")
    path = _eval(
        tmp_path,
        "input:\n  - role: system\n    content:\n      - {type: file, value: ./system.md}\n"
        "tests:\n  - id: a\n    input: hi\n    criteria: c\n"
        "  - id: b\n    input: hi\n    criteria: c\n    execution: {skip_defaults: true}\n",
    )
    a, b = load_suite(path).tests
    assert [m.role for m in a.case.input] == ["system", "user"]
    assert a.case.input_files and a.case.input_files[0].endswith("system.md")
    assert b.case.input == "hi"  # as written


@pytest.mark.parametrize("written", ["no", "off", "yes", "'false'", "0"])
def test_skip_defaults_that_is_no_boolean_is_named_not_taken_for_true(tmp_path, written):
    """v4 skips the suite's assert and input only for ``skip_defaults: true`` (``=== true``);
    YAML 1.2 reads ``no`` as the text "no", which Python's truth took for true: the suite's
    checks were dropped from a test whose file said not to drop them."""
    body = (
        "assert: [{type: contains, value: needle}]\ntests:\n  - id: a\n    input: hi\n"
        "    execution: {skip_defaults: %s}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_suite(_eval(tmp_path, body % written))
    assert info.value.field == "tests.0.execution.skip_defaults" and info.value.line == 5
    assert "\n" not in str(info.value)
    kept = load_suite(_eval(tmp_path, body % "false")).tests[0]
    assert [a.check.value for a in kept.assertions] == ["needle"]  # control: the suite's check
    assert load_suite(_eval(tmp_path, body % "true")).tests[0].assertions == []


def test_preprocessors_turn_assertions_and_rubrics(tmp_path):
    path = _eval(
        tmp_path,
        "preprocessors:\n  - {type: xlsx, command: [python3, ../conv.py]}\n"
        "execution: {target: m}\ntests:\n  - id: a\n    input: hi\n    rubrics: [Says hi]\n"
        "  - id: b\n    mode: conversation\n    input: hi\n    turns:\n"
        "      - input: hello\n        assertions: [Greets back]\n",
    )
    suite = load_suite(path)
    assert suite.spec.preprocessors == [{"type": "xlsx", "command": ["python3", "../conv.py"]}]
    (rubric,) = suite.tests[0].assertions
    assert isinstance(rubric, LlmGraderAssertion)
    assert [r.text for r in rubric.llm.rubrics] == ["Says hi"]
    assert rubric.llm.preprocessors == suite.spec.preprocessors
    assert suite.tests[1].case.conversation.turns[0].assert_ == ["Greets back"]


def test_workspace_docker_maps_onto_our_images_or_is_refused(tmp_path):
    docker = "workspace:\n  docker: {{image: {}, memory: {}, timeout: 300}}\n"
    ok = _eval(tmp_path, docker.format("python:3.11-slim", "256m") + V4_TEST)
    defaults = load_suite(ok).spec.defaults
    assert defaults.image == "python" and defaults.timeout == 300.0
    assert defaults.limits == {"memory": 256 << 20}  # a cap below ours is kept
    big = _eval(tmp_path, docker.format("node:20", "64g") + V4_TEST, "evals/big.eval.yaml")
    assert load_suite(big).spec.defaults.limits is None  # one above ours changes nothing
    other = _eval(tmp_path, docker.format("swebench/x:1", "2g") + V4_TEST, "evals/o.eval.yaml")
    with pytest.raises(UnsupportedFeature) as info:
        load_suite(other)
    assert "swebench/x:1" in info.value.feature and info.value.field == "workspace.docker.image"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("memory", "-1g", "'-1g' is not a size"), ("memory", "1k", "greater than or equal to"),
     ("cpus", "-1", "greater than 0")],
)  # fmt: skip
def test_a_docker_limit_no_grader_may_have_names_its_own_line_and_field(
    tmp_path, field, value, message
):
    """Checked when a grader was made from it, it named that grader's ``limits.memory``, a
    field and line the file never wrote; it is the file's ``workspace.docker`` field."""
    path = _eval(tmp_path, f"workspace:\n  docker:\n    image: python:3.12\n    {field}: {value}\n"
                 + V4_TEST)  # fmt: skip
    error = _error(path)
    assert (error.field, error.line) == (f"workspace.docker.{field}", 4)
    assert message in error.message and error.file == str(path)


def test_a_workspace_file_and_its_mode(tmp_path):
    write(tmp_path / "tpl" / "a.txt", "x")
    write(tmp_path / "ws.yaml", "template: ./tpl\nmode: pooled\n")
    path = _eval(tmp_path, "workspace: ../ws.yaml\n" + V4_TEST)
    assert load_suite(path).spec.workspace.template.endswith("tpl")
    static = _eval(
        tmp_path, "workspace: {mode: static, path: ../tpl}\n" + V4_TEST, "evals/s.eval.yaml"
    )
    assert load_suite(static).spec.workspace.template.endswith("tpl")


MATRIX = (
    "execution:\n  targets:\n    - one\n    - {name: two, use_target: m2}\n" + V4_TEST
)  # fmt: skip


def test_a_target_matrix_runs_each_test_per_target_or_the_one_picked(tmp_path):
    path = _eval(tmp_path, MATRIX)
    tests = load_suite(path).tests  # every test once per target (tests/unit/test_matrix.py)
    assert [(t.target_name, t.target.model) for t in tests] == [("one", "one"), ("two", "m2")]
    with chosen_target("two"):
        assert load_suite(path).spec.target.model == "m2"  # its use_target
    with chosen_target("one"):
        assert load_suite(path).spec.target.model == "one"
    with chosen_target("three"), pytest.raises(ConfigError) as bad:
        load_suite(path)
    assert "not one of execution.targets" in bad.value.message


def test_grader_target_overrides_every_judge(tmp_path):
    write(tmp_path / ".agentv" / "targets.yaml",
          "targets:\n  - {name: a, provider: openai, model: ma}\n"
          "  - {name: b, provider: openai, model: mb}\n")  # fmt: skip
    path = _eval(tmp_path, V4_TEST + "    assertions:\n      - {type: llm-grader, target: a,"
                 " prompt: judge it}\n")  # fmt: skip
    (judge,) = load_suite(path).tests[0].assertions
    assert judge.llm.target.name == "a"
    with chosen_target(None, grader="b"):
        (judge,) = load_suite(path).tests[0].assertions
    assert judge.llm.target.name == "b"


def test_a_discovered_provider_is_a_cli_command_and_a_log_reader_refused(tmp_path):
    write(tmp_path / ".agentv" / "providers" / "echoer.ts", "// a script\n")
    write(tmp_path / ".agentv" / "targets.yaml",
          "targets:\n  - {name: e, provider: echoer}\n"
          "  - {name: f, provider: file-output, command: 'python3 f.py {OUTPUT_FILE}'}\n"
          "  - {name: log, provider: copilot-log, discover: latest}\n")  # fmt: skip
    for name, command in (("e", "bun run ../.agentv/providers/echoer.ts {PROMPT}"),
                          ("f", "python3 f.py {OUTPUT_FILE}")):  # fmt: skip
        body = f"execution: {{target: {name}}}\n" + V4_TEST
        path = _eval(tmp_path, body, f"evals/{name}.eval.yaml")
        target = load_suite(path).spec.target
        assert (target.provider, target.command) == ("cli", command)
    write(tmp_path / "evals" / ".agentv" / "targets.yaml", "targets:\n  - {name: b, provider: cli,"
          " provider_batching: true, command: 'run {OUTPUT_FILE}'}\n")  # fmt: skip
    path = _eval(tmp_path, "execution: {target: b}\n" + V4_TEST, "evals/b.eval.yaml")
    assert load_suite(path).spec.target._batch  # one call answers every test (test_batching)
    path = _eval(tmp_path, "execution: {target: log}\n" + V4_TEST, "evals/log.eval.yaml")
    with pytest.raises(UnsupportedFeature) as info:
        load_suite(path)
    assert info.value.feature == "the copilot-log provider"


def test_an_llm_grader_inside_a_composite_loads_the_model_targets(tmp_path):
    # else the run has no model hub, and the grader fails when it is called
    write(tmp_path / ".agentv" / "targets.yaml",
          "targets:\n  - {name: judge, provider: openai, model: m}\n")  # fmt: skip
    cases = (
        (
            "{name: j, type: llm-grader, target: judge, prompt: p}",
            "{type: threshold, threshold: 1}",
        ),  # noqa: E501
        ("{name: c, type: contains, value: x}", "{type: llm-grader}"),
    )
    for i, (member, aggregator) in enumerate(cases):
        body = (V4_TEST + "    assertions:\n      - name: c\n        type: composite\n"
                f"        aggregator: {aggregator}\n        assertions: [{member}]\n")  # fmt: skip
        assert load_suite(_eval(tmp_path, body, f"evals/c{i}.eval.yaml")).targets is not None


def test_v4_trials_repeat_every_test(tmp_path):
    # config-loader.ts extractTrialsConfig; trials.ts: pass_at_k scores the best trial
    path = _eval(tmp_path, "execution:\n  trials: {count: 3, strategy: mean}\n" + V4_TEST)
    case = load_suite(path).tests[0].case
    assert (case.repeat, case.repeat_strategy) == (3, "mean")
    path = _eval(tmp_path, "execution:\n  trials: {count: 2}\n" + V4_TEST, "evals/k.eval.yaml")
    case = load_suite(path).tests[0].case
    assert (case.repeat, case.repeat_strategy) == (2, "pass_any")
    bad = _eval(tmp_path, "execution:\n  trials: {count: 0}\n" + V4_TEST, "evals/b.eval.yaml")
    assert _error(bad).field == "execution.trials.count"


def test_v4_test_evaluators_and_execution_workers(tmp_path):
    path = _eval(
        tmp_path,
        "execution: {target: m, workers: 3}\n"
        + V4_TEST.replace(
            "    criteria: says hi\n", "    evaluators: [{type: contains, value: hi}]\n"
        ),
    )
    suite = load_suite(path)
    assert suite.spec.defaults.workers == 3
    (check,) = suite.tests[0].assertions
    assert isinstance(check, HostAssertion)
