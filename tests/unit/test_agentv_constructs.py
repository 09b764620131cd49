"""AgentV constructs its own examples use, each from a small eval file of our own: what it maps
onto, and the errors that name the file and field. No containers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gradebox.errors import ConfigError, ConfigErrors, UnsupportedFeature
from gradebox.graders.assertion import GraderAssertion, HostAssertion, LlmGraderAssertion
from gradebox.suite import load_suite
from gradebox.suite.preflight import preflight
from tests.conftest import write

AZURE = (
    "- id: azure\n  label: judge\n  endpoint: '{{ env.GB_AZ_URL }}'\n"
    "  api_key: '{{ env.GB_AZ_KEY }}'\n  model: dep\n"
)


@pytest.fixture(autouse=True)
def _no_outside_env(monkeypatch):
    for name in ("GB_AZ_URL", "GB_AZ_KEY", "GB_OPENAI_KEY"):
        monkeypatch.delenv(name, raising=False)


def _eval(tmp_path: Path, body: str, name: str = "evals/e.eval.yaml") -> Path:
    return write(tmp_path / name, body)


def _with(tmp_path: Path, providers: str, body: str) -> Path:
    """An eval file, with the .agentv/providers.yaml above it."""
    write(tmp_path / ".agentv" / "providers.yaml", providers)
    return _eval(tmp_path, body)


def test_descriptive_fields_are_kept_as_metadata_and_governance_is_inherited(tmp_path):
    path = _eval(
        tmp_path,
        "name: gov\nauthor: me\nlicense: MIT\nversion: '2'\nrequires: {agentv: '>=1'}\n"
        "tags: [red-team]\ngovernance:\n  owasp: [LLM01]\n  owner: sec\n"
        "metadata: {team: x}\nderived_metrics: [{name: m, value: x}]\n"
        "tests:\n  - id: a\n    vars: {input: hi}\n    metadata: {tags: [extra]}\n"
        "    assert: [{type: contains, value: hi}]\n",
    )
    suite = load_suite(path)
    meta = suite.spec.metadata
    assert meta["author"] == "me" and meta["license"] == "MIT" and meta["governance"]["owner"]
    test = suite.tests[0]
    assert test.metadata["governance"] == {"owasp": ["LLM01"], "owner": "sec"}
    assert test.metadata["tags"] == ["red-team", "extra"] and test.metadata["team"] == "x"


def test_defaults_name_the_provider_and_the_judge(tmp_path):
    path = _with(
        tmp_path,
        AZURE + "- id: mock\n  label: canned\n",
        "defaults: {provider: canned, grader: judge}\n"
        "tests:\n  - id: a\n    vars: {input: hi}\n    assert: [Be polite]\n",
    )
    suite = load_suite(path)
    assert suite.spec.target is not None and suite.spec.target.provider == "mock"
    (rubric,) = suite.tests[0].assertions
    assert isinstance(rubric, LlmGraderAssertion) and rubric.llm.target.name == "judge"
    write(tmp_path / "evals" / "d.yaml", "provider: canned\ngrader: judge\n")
    path = _eval(tmp_path, "defaults: file://d.yaml\ntests:\n  - id: a\n    vars: {input: x}\n")
    assert load_suite(path).spec.target.provider == "mock"


def test_llm_rubric_settings_pass_through_and_no_prompt_means_the_default(tmp_path):
    path = _with(
        tmp_path,
        AZURE,
        "defaults: {grader: judge}\ntests:\n  - id: a\n    vars: {input: hi}\n"
        "    criteria: Greets the user\n    assert:\n"
        "      - {type: llm-rubric, max_steps: 3, temperature: 0}\n",
    )
    (rubric,) = load_suite(path).tests[0].assertions
    assert isinstance(rubric, LlmGraderAssertion)
    assert rubric.llm.prompt is None and rubric.llm.rubrics == []  # the default prompt
    assert rubric.llm.target.params == {"temperature": 0}


def test_score_ranges_rubric_items_in_both_forms(tmp_path):
    path = _with(
        tmp_path,
        AZURE,
        "defaults: {grader: judge}\ntests:\n  - id: a\n    vars: {input: hi}\n    assert:\n"
        "      - type: llm-rubric\n        value:\n          - id: accuracy\n"
        "            weight: 2\n"
        "            score_ranges: {'0': Wrong., '8': Right.}\n"
        "          - id: brevity\n            score_ranges:\n"
        "              - {score_range: [0, 5], outcome: Long.}\n"
        "              - {score_range: [6, 10], outcome: Short.}\n",
    )
    (rubric,) = load_suite(path).tests[0].assertions
    first, second = rubric.llm.rubrics
    assert first.weight == 2 and first.text.startswith("accuracy: the answer reaches a score")
    assert "  0: Wrong." in first.text and "  8: Right." in first.text
    assert "  6: Short." in second.text


# A realistic 5.x eval file: a suite-level judge and a test's, inside an assert-set too.
_JUDGED = """\
description: Support replies
defaults: {grader: judge}
assert:
  - type: llm-rubric
    metric: tone
    value: Polite and on topic
    model: gpt-4o
    max_steps: 4
    temperature: 0
    id: tone-check
    description: the house tone
tests:
  - id: refund
    vars: {input: Can I get a refund?}
    assert:
      - type: contains
        value: refund
      - type: assert-set
        assert:
          - type: llm-rubric
            provider: judge
            value:
              - outcome: States the refund window
                weight: 2
"""


def test_an_llm_graders_keys_agentv_takes_load_and_any_other_is_named(tmp_path):
    suite = load_suite(_with(tmp_path, AZURE, _JUDGED))
    _contains, group, tone = suite.tests[0].assertions
    assert tone.name == "tone" and tone.llm.target.params == {"temperature": 0}
    assert group.children[0].llm.rubrics[0].weight == 2
    # A misspelt key (AgentV would hand it to the judge as config nobody reads) is named,
    # as any unknown field of the file is: the judge would run without the prompt meant.
    typo = _JUDGED.replace("provider: judge\n", "provider: judge\n            promt: j.md\n")
    with pytest.raises(ConfigError) as info:
        load_suite(_with(tmp_path, AZURE, typo))
    assert info.value.field == "tests.0.assert.1.assert.0.promt"
    assert info.value.line == 22 and "unknown field" in info.value.message
    suite_level = _JUDGED.replace("    model: gpt-4o\n", "    rubric_style: strict\n")
    with pytest.raises(ConfigError) as info:
        load_suite(_with(tmp_path, AZURE, suite_level))
    assert info.value.field == "assert.0.rubric_style" and info.value.line == 7


def test_an_llm_graders_own_score_ranges_are_refused_naming_where_they_go(tmp_path):
    # AgentV reads them as the bands of the one item its text value makes; here an item's.
    banded = _JUDGED.replace("model: gpt-4o", "score_ranges: {'0': Rude., '8': Polite.}")
    with pytest.raises(UnsupportedFeature) as info:
        load_suite(_with(tmp_path, AZURE, banded))
    assert info.value.field == "assert.0.score_ranges" and info.value.line == 7
    assert "value: [{outcome: ..., score_ranges: ...}]" in info.value.message


def test_default_test_from_a_file_in_a_parent_folder(tmp_path):
    write(
        tmp_path / "shared" / "defaults.yaml",
        "vars: {who: world}\nthreshold: 0.5\nassert: [{type: contains, value: hello}]\n",
    )
    path = _eval(
        tmp_path,
        "prompts: ['say hello to {{ who }}']\ndefault_test: file://shared/defaults.yaml\n"
        "tests:\n  - id: a\n", "ex/evals/e.eval.yaml",
    )  # fmt: skip
    suite = load_suite(path)  # found walking up, as AgentV's search roots do
    test = suite.tests[0]
    assert test.case.input == "say hello to world" and test.threshold == 0.5
    assert [type(a).__name__ for a in test.assertions] == ["HostAssertion"]


def test_case_files_includes_csv_and_case_folders(tmp_path):
    ev = tmp_path / "evals"
    write(ev / "cases" / "a.yaml", "- id: y1\n  vars: {input: one}\n")
    write(ev / "cases" / "b.jsonl", '{"id": "j1", "vars": {"input": "two"}}\n')
    write(
        ev / "cases" / "c.csv",
        "id,vars.input,__expected,__expected2,__metric,__threshold,__metadata:source,locale\n"
        'c1,"three, quoted",icontains:THREE,not-contains(0.9):four,m,0.7,csv,en\n'
        ",no id,equals:x,,,,,\n",
    )
    write(ev / "folder" / "f1" / "case.yaml", "vars: {input: four}\n")
    write(
        ev / "other.eval.yaml",
        "tests:\n  - {id: keep, vars: {input: k}, metadata: {tags: [smoke]}}\n"
        "  - {id: drop, vars: {input: d}}\n",
    )
    path = _eval(
        tmp_path,
        "prompts: ['{{ input }}']\ntests:\n  - file://cases/*.yaml\n  - file://cases/b.jsonl\n"
        "  - file://cases/c.csv\n  - ./folder/\n"
        "  - include: ./other.eval.yaml\n    type: tests\n    select: {tags: smoke}\n"
        "    run: {threshold: 0.3, repeat: 3}\n",
    )
    suite = load_suite(path)
    ids = [t.id for t in suite.tests]
    assert ids == ["y1", "j1", "c1", "row-2", "f1", "keep"]
    c1 = suite.tests[2]
    assert c1.case.input == "three, quoted" and c1.threshold == 0.7
    assert c1.metadata["source"] == "csv" and c1.metadata["vars"]["locale"] == "en"
    icontains, negated = c1.assertions
    assert icontains.name == "m-1" and negated.negate and negated.required is None
    keep = suite.tests[5]
    assert keep.threshold == 0.3 and keep.case.repeat == 3


def test_scenarios_cross_config_rows_with_tests(tmp_path):
    write(
        tmp_path / "evals" / "scenarios" / "s.yaml",
        "- config:\n    - {id: es, vars: {lang: Spanish, hi: hola}}\n"
        "    - {id: fr, vars: {lang: French, hi: bonjour}}\n"
        "  tests:\n    - vars: {phrase: hello}\n      assert: [{type: equals, value: '{{ hi }}'}]\n"
        "    - vars: {phrase: bye}\n",
    )
    path = _eval(
        tmp_path,
        "prompts: ['Translate {{ phrase }} to {{ lang }}']\nscenarios: [file://scenarios/*.yaml]\n",
    )
    suite = load_suite(path)
    assert [t.id for t in suite.tests] == [
        "es__scenario_test_1", "es__scenario_test_2", "fr__scenario_test_1", "fr__scenario_test_2",
    ]  # fmt: skip
    first = suite.tests[2]
    assert first.case.input == "Translate hello to French"
    assert first.assertions[0].check.value == "bonjour"


def test_a_prompt_matrix_and_string_list_vars_make_one_test_each(tmp_path):
    path = _eval(
        tmp_path,
        "prompts: ['Q: {{ q }}', 'Question: {{ q }}']\n"
        "tests:\n  - id: a\n    vars: {q: [one, two]}\n",
    )
    tests = load_suite(path).tests
    assert len(tests) == 4 and len({t.id for t in tests}) == 4
    assert {t.case.input for t in tests} == {"Q: one", "Q: two", "Question: one", "Question: two"}
    assert all(t.id.startswith("a__vars_") and "__prompt_" in t.id for t in tests)


def test_repeat_threshold_and_required_gate_at_the_threshold(tmp_path):
    path = _eval(
        tmp_path,
        "threshold: 0.9\nevaluate_options: {repeat: 2, budget_usd: 1}\n"
        "tests:\n  - id: a\n    vars: {input: x}\n    assert:\n"
        "      - {type: contains, value: x, required: true}\n"
        "  - id: b\n    vars: {input: x}\n    run: {repeat: 1, threshold: 0.5}\n    assert:\n"
        "      - {type: contains, value: x, required: true}\n"
        "      - {type: contains, value: y, required: true, min_score: 0.6}\n",
    )
    a, b = load_suite(path).tests
    assert (a.case.repeat, a.threshold, a.assertions[0].required) == (2, 0.9, 0.9)
    assert (b.case.repeat, b.threshold, b.assertions[0].required) == (1, 0.5, 0.5)
    assert b.assertions[1].required == 0.6 and a.semantics == "agentv"


def test_files_are_found_where_agentv_looks_for_them(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    write(root / "shared" / "ctx.md", "context")
    write(root / "ex" / "graders" / "check.py", "print('{\"pass\": true}')\n")
    path = write(
        root / "ex" / "evals" / "e.eval.yaml",
        "prompts:\n  - - role: user\n      content:\n        - {type: file, value: shared/ctx.md}\n"
        "tests:\n  - id: a\n    input_files: [shared/ctx.md]\n    assert:\n"
        "      - {type: script, command: [python3, graders/check.py]}\n",
    )
    monkeypatch.chdir(root / "ex")  # AgentV's last search root is where it runs from
    test = load_suite(path).tests[0]
    assert test.case.input_files == [str(root / "shared" / "ctx.md")] * 2
    (script,) = test.assertions
    assert isinstance(script, GraderAssertion)
    assert script.grader.command == ["python3", "../graders/check.py"]  # mounted from there
    assert script.grader.pass_score == 0.8  # AgentV's scoreToVerdict


def test_a_code_graders_cwd_prompt_and_transform_are_found_where_agentv_looks(tmp_path):
    # resolveFileReference over the search roots for each (grader-parser.ts, transform-parser.ts),
    # as for prompts and input files: the repository's folders, and a path from its top.
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    write(repo / "graders" / "check.py", "print(1)\n")
    write(repo / "prompts" / "judge.md", "Judge {{ output }}\n")
    shape = write(repo / "scripts" / "shape.ts", "export default (o) => o\n")
    path = _eval(
        repo,
        "tests:\n  - id: a\n    vars: {input: x}\n    assert:\n"
        "      - {type: script, command: [python3, check.py], cwd: graders}\n"
        "      - {type: llm-grader, prompt: file://prompts/judge.md}\n"
        "      - {type: contains, value: x, transform: file:///scripts/shape.ts}\n",
    )
    script, judge, contains = load_suite(path).tests[0].assertions
    assert isinstance(script, GraderAssertion) and isinstance(judge, LlmGraderAssertion)
    assert script.grader.source_dir == repo / "graders"
    assert judge.llm.prompt == "Judge {{ output }}\n"
    assert contains.transform == f"file://{shape}"


# Where a file AgentV would read is found above the eval's project, in a folder another local
# user may write (no .git stops the walk: an unpacked tarball in /tmp climbs to /tmp and /).
_DOORS = {
    "prompt": "prompts: [file://plugins/p.md]\ntests:\n  - id: a\n    vars: {input: x}\n",
    "input file": "tests:\n  - id: a\n    input: x\n    input_files: [plugins/p.md]\n",
    "message file": "tests:\n  - id: a\n    input:\n      - role: user\n        content:\n"
    "          - {type: file, value: /plugins/p.md}\n",
    "suite input file": "input_files: [plugins/p.md]\ntests:\n  - id: a\n    input: x\n",
    "default_test": "default_test: file://plugins/p.md\ntests:\n  - id: a\n    input: x\n",
    "transform": "tests:\n  - id: a\n    input: x\n    options: {transform: file://plugins/p.ts}\n",
    "script": "tests:\n  - id: a\n    input: x\n    assert:\n"
    "      - {type: script, command: [python3, plugins/p.py]}\n",
    "grader prompt": "tests:\n  - id: a\n    input: x\n    assert:\n"
    "      - {type: llm-grader, prompt: file://plugins/p.md}\n",
    "cwd": "tests:\n  - id: a\n    input: x\n    assert:\n"
    "      - {type: script, command: [python3, c.py], cwd: plugins}\n",
}


def _planted(tmp_path: Path, how: str | None) -> Path:
    """``tmp_path/plugins`` with the files every door names, made as ``how`` says (None: ours,
    the control); returns the folder."""
    plugins, elsewhere = tmp_path / "plugins", tmp_path / "elsewhere"
    plugins.mkdir()
    for name in ("p.md", "p.ts", "p.py"):
        text = "{}\n" if name == "p.md" else "export default (o) => o\n"
        if how == "their-link":  # theirs, to a file of ours (its text: whoever wrote it)
            (plugins / name).symlink_to(write(elsewhere / name, text))
            os.lchown(plugins / name, 12345, 12345)
        else:
            write(plugins / name, text)
        if how == "their-file":
            os.chown(plugins / name, 12345, 12345)
        if how == "writable":
            (plugins / name).chmod(0o666)
    if how == "their-folder":
        os.chown(plugins, 12345, 12345)
    return plugins


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
@pytest.mark.parametrize("door", sorted(_DOORS))
def test_a_file_found_in_a_folder_of_another_user_is_refused_naming_it(tmp_path, door):
    plugins = _planted(tmp_path, "their-folder")
    (plugins / "c.py").mkdir() if door == "cwd" else None
    path = _eval(tmp_path, _DOORS[door], name="proj/evals/e.eval.yaml")
    with pytest.raises(ConfigError) as caught:
        load_suite(path)
    message = str(caught.value)
    assert str(plugins) in message and "another local user" in message, message
    assert "owned by uid 12345" in message and "\n" not in message, message


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
@pytest.mark.parametrize("how", ["their-file", "their-link", "writable", None])
def test_what_another_user_could_have_written_is_refused_ours_is_read(tmp_path, how):
    plugins = _planted(tmp_path, how)
    path = _eval(tmp_path, _DOORS["input file"], name="proj/evals/e.eval.yaml")
    if how is None:  # the control: our own file, above our own project, is read
        assert load_suite(path).tests[0].case.input_files == [str(plugins / "p.md")]
        return
    with pytest.raises(ConfigError, match="another local user could have written it"):
        load_suite(path)


def test_roots_checkout_is_read_by_a_user_who_is_not_root(tmp_path, monkeypatch):
    # The docker-group user runs root's checkout: root's files and folders are read (the cwd
    # found is a folder of root's), modelled by our uid as another's.
    _planted(tmp_path, None)
    (tmp_path / ".git").mkdir()  # the checkout: a grader's files lie inside it
    path = _eval(tmp_path, _DOORS["cwd"], name="proj/evals/e.eval.yaml")
    monkeypatch.setattr(os, "geteuid", lambda: 12345)
    monkeypatch.setattr(os, "getegid", lambda: 12345)
    (script,) = load_suite(path).tests[0].assertions
    assert isinstance(script, GraderAssertion) and script.grader.source_dir == tmp_path / "plugins"


def test_setup_runs_before_the_workdir_is_checked(tmp_path):
    write(tmp_path / "scripts" / "make.sh", "mkdir -p src\n")
    path = _eval(
        tmp_path,
        "environment:\n  type: host\n  workdir: ./not-yet\n  setup:\n"
        "    command: [bash, ../../scripts/make.sh]\n    cwd: .\n"
        "tests:\n  - id: a\n    vars: {input: x}\n",
    )
    suite = load_suite(path)
    ws = suite.spec.workspace
    assert ws is not None and ws.template is None  # starts empty, as AgentV makes it
    assert ws.before_all == ["bash", "../scripts/make.sh"]  # named from the eval file's folder


def test_docker_environment_sets_every_steps_image_and_limits(tmp_path):
    path = _with(
        tmp_path,
        "- {id: cli, label: c, command: x}\n",
        "providers: [c]\nenvironment:\n  type: docker\n  image: mine:1\n  workdir: /w\n"
        "  resources: {memory: 2g, cpus: 1}\ntests:\n  - id: a\n    vars: {input: x}\n"
        "    assert: [{type: script, command: [python3, -c, 'print(1)']}]\n",
    )
    suite = load_suite(path)
    assert suite.spec.defaults.image == "mine:1" and suite.spec.target.image == "mine:1"
    grader = suite.tests[0].assertions[0].grader
    assert grader.image == "mine:1" and int(grader.limits.memory) == 2 << 30
    write(path, path.read_text().replace("memory: 2g", "memory: 1k"))
    with pytest.raises(ConfigError) as info:  # below every grader's floor, at its own line
        load_suite(path)
    assert (info.value.field, info.value.line) == ("environment.resources.memory", 6)


def test_an_absolute_replay_file_is_taken_as_it_is(tmp_path):
    # AgentV's resolveReplaySourcePath: an absolute path is never looked for below the roots,
    # as a file reference's /plugins/... is (resolveFileReference).
    write(tmp_path / ".agentv" / "config.yaml", "providers: file://providers.yaml\n")
    write(
        tmp_path / ".agentv" / "providers.yaml",
        "- {id: replay, label: rec, fixtures: /rec.jsonl, source_target: live}\n",
    )
    write(tmp_path / ".agentv" / "rec.jsonl", "")
    write(tmp_path / "rec.jsonl", "")
    body = "providers: [rec]\ntests:\n  - id: a\n    vars: {input: x}\n"
    with pytest.raises(ConfigError, match="replay fixtures file '/rec.jsonl' not found"):
        load_suite(_eval(tmp_path, body))


def test_providers_become_targets(tmp_path, monkeypatch):
    write(
        tmp_path / ".agentv" / "config.yaml",
        "providers: file://providers.yaml\ndefaults: {provider: canned}\n",
    )
    write(
        tmp_path / ".agentv" / "providers.yaml",
        AZURE + "- {id: mock, label: canned, response: 'hi there'}\n"
        "- {id: mock, label: bare}\n"
        "- {id: replay, label: rec, fixtures: rec.jsonl, source_target: live}\n"
        "- id: cli\n  label: tool\n  command: bun run ./agent.ts {PROMPT} {OUTPUT_FILE}\n"
        "  healthcheck: {command: bun --version}\n"
        "- {id: claude-cli, label: claude, model: opus}\n"
        "- {id: copilot-cli, label: mine, command: [./fake-copilot], image: agents:1}\n",
    )
    write(tmp_path / ".agentv" / "rec.jsonl", "")
    body = "providers: [{}]\ntests:\n  - id: a\n    vars: {{input: x}}\n"
    targets = {}
    for label in ("judge", "canned", "bare", "rec", "tool", "claude", "mine", "nowhere"):
        targets[label] = load_suite(_eval(tmp_path, body.format(label))).spec.target
    assert targets["judge"].provider == "model" and targets["judge"].model == "judge"
    assert targets["canned"].response == "hi there" and "Mock provider" in targets["bare"].response
    assert targets["rec"].replay.fixtures == str(tmp_path / ".agentv" / "rec.jsonl")
    tool = targets["tool"]
    assert tool.image == "node" and tool.healthcheck.command == "bun --version"
    claude = targets["claude"]
    assert claude.program == "claude" and claude.answer_format == "claude-json"
    assert "--model opus" in claude.command and "{OUTPUT_FILE}" in claude.command
    assert targets["mine"].command.startswith("./fake-copilot -s") and targets["mine"].image
    # A label found nowhere loads (AgentV checks it when it runs); the run checks it first.
    assert targets["nowhere"].provider == "model" and targets["nowhere"].model == "nowhere"
    suite = load_suite(_eval(tmp_path, body.format("nowhere")))
    with pytest.raises(ConfigError, match="no provider or model target named 'nowhere'"):
        preflight(suite)
    # The default provider of config.yaml, when the file names none.
    assert load_suite(
        _eval(tmp_path, "tests:\n  - {id: a, vars: {input: x}}\n")
    ).spec.target.response


def test_preflight_names_every_missing_variable_in_one_line_each(tmp_path, monkeypatch):
    write(tmp_path / ".agentv" / "providers.yaml", AZURE + "- {id: claude-cli, label: claude}\n")
    path = _eval(tmp_path, "providers: [judge]\ntests:\n  - id: a\n    vars: {input: x}\n")
    suite = load_suite(path)
    with pytest.raises(ConfigError) as info:
        preflight(suite)
    assert str(info.value).count("\n") == 0
    assert "$GB_AZ_URL, $GB_AZ_KEY are not set (azure), for the target" in str(info.value)
    monkeypatch.setenv("GB_AZ_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("GB_AZ_KEY", "k")
    preflight(load_suite(path))  # all there: nothing to say
    coding = load_suite(_eval(tmp_path, "providers: [claude]\ntests:\n  - {id: a, vars: {}}\n"))
    with pytest.raises(ConfigError, match="runs `claude`, which gradebox's 'python' image"):
        preflight(coding)


def test_a_judge_that_is_a_command_runs_as_one(tmp_path):
    write(
        tmp_path / ".agentv" / "providers.yaml",
        "- id: cli\n  label: agent\n  command: x {OUTPUT_FILE}\n  grader_target: checker\n"
        "- id: cli\n  label: checker\n  command: y {OUTPUT_FILE}\n",
    )
    path = _eval(tmp_path, "providers: [agent]\ntests:\n  - {id: a, vars: {}, assert: [Nice]}\n")
    (rubric,) = load_suite(path).tests[0].assertions
    judge = rubric.llm.command_judge
    assert (judge.label, judge.kind, judge.target.command) == ("checker", "cli", "y {OUTPUT_FILE}")


def test_a_judge_that_runs_in_agentvs_process_is_refused_by_name(tmp_path):
    write(
        tmp_path / ".agentv" / "providers.yaml",
        "- id: cli\n  label: agent\n  command: x {OUTPUT_FILE}\n  grader_target: checker\n"
        "- id: claude-sdk\n  label: checker\n",
    )
    path = _eval(tmp_path, "providers: [agent]\ntests:\n  - {id: a, vars: {}, assert: [Nice]}\n")
    with pytest.raises(UnsupportedFeature) as info:
        load_suite(path)
    assert info.value.feature == "the claude-sdk provider as the judge" and info.value.line == 3


def test_a_judge_named_nowhere_loads_and_is_named_before_the_run(tmp_path):
    path = _with(
        tmp_path,
        AZURE + "- {id: mock, label: m}\n",
        "providers: [m]\ntests:\n  - id: a\n    vars: {}\n    assert:\n"
        "      - {type: llm-rubric, value: ok, target: ghost}\n",
    )
    suite = load_suite(path)
    (rubric,) = suite.tests[0].assertions
    assert rubric.llm.target is None and "ghost" in rubric.llm.unresolved
    with pytest.raises(ConfigError, match="no provider or model target named 'ghost'"):
        preflight(suite)
    warned: list[str] = []  # validate: a label defined nowhere is a warning, like a key
    preflight(suite, warn=warned.append)
    assert len(warned) == 1 and "'ghost'" in warned[0]


def test_conversation_turns_and_their_assertions(tmp_path):
    path = _with(
        tmp_path,
        "- {id: mock, label: m}\n",
        "providers: [m]\nprompts: ['{{ input }}']\ntests:\n  - id: c\n    mode: conversation\n"
        "    aggregation: min\n    on_turn_failure: stop\n    window_size: 2\n"
        "    vars: {input: [{role: system, content: Be brief.}]}\n"
        "    assert: [{type: contains, value: a}]\n    turns:\n"
        "      - input: one\n        assert: [{type: contains, value: b}, {type: is-json}]\n"
        "      - {input: two, expected_output: done}\n",
    )
    test = load_suite(path).tests[0]
    convo = test.case.conversation
    assert (convo.aggregation, convo.on_turn_failure, convo.window_size) == ("min", "stop", 2)
    assert [len(t) for t in test.turn_assertions] == [2, 0] and len(test.assertions) == 1
    assert convo.turns[1].expected_output == "done"


def test_agent_rules_extension_is_accepted_and_built_in_extras_name_the_assertion(tmp_path):
    path = _eval(
        tmp_path,
        "extensions: [agentv:agent-rules]\ntests:\n  - id: a\n    vars: {input: x}\n"
        "    assert: [{type: contains, value: x, id: HAS_X, threshold: 0.5}]\n",
    )
    (check,) = load_suite(path).tests[0].assertions
    assert isinstance(check, HostAssertion) and check.name == "HAS_X"


def test_field_accuracy_and_skill_used_compile_to_host_checks(tmp_path):
    path = _eval(
        tmp_path,
        "tests:\n  - id: a\n    vars: {input: x}\n    assert:\n"
        "      - type: field-accuracy\n        fields: [{path: a.b, match: exact}]\n"
        "      - {type: skill-used, value: [pdf]}\n      - {type: not-skill-used, value: xlsx}\n"
        "      - {type: skill-used, value: pdf, negate: true}\n",
    )
    checks = load_suite(path).tests[0].assertions
    assert [c.check.type for c in checks] == [
        "field-accuracy", "skill-used", "not-skill-used", "not-skill-used",
    ]  # fmt: skip
    assert checks[3].negate  # AgentV inverts it, then negates it again


def test_every_error_of_the_new_constructs_names_its_file_and_field(tmp_path):
    write(tmp_path / "evals" / "cases.csv", "id,__expected\nx,javascript:output.length > 2\n")
    path = _eval(tmp_path, "tests: [file://cases.csv]\n")
    with pytest.raises(UnsupportedFeature) as info:
        load_suite(path)
    assert info.value.file == str(tmp_path / "evals" / "cases.csv") and info.value.line == 2
    path = _eval(tmp_path, "tests: [file://missing/*.yaml]\n")
    with pytest.raises(ConfigError, match="test file 'file://missing/\\*.yaml' not found"):
        load_suite(path)
    path = _eval(tmp_path, "scenarios:\n  - config: [{id: a}]\n    tests: [{vars: {}}]\n    x: 1\n")
    with pytest.raises(ConfigError) as err:
        load_suite(path)
    assert err.value.field == "scenarios.0.x" and not isinstance(err.value, ConfigErrors)
    assert os.path.basename(err.value.file) == "e.eval.yaml"


@pytest.mark.parametrize(
    ("answer", "fmt"),
    [
        ('{"text": "ok", "cost_usd": -1}', "auto"),
        ('{"text": "ok", "duration_ms": NaN}', "auto"),
        ('{"text": "ok", "token_usage": {"input": -5, "output": 1}}', "auto"),
        ('{"result": "ok", "total_cost_usd": -0.5}', "claude-json"),
        ('{"result": "ok", "usage": {"input_tokens": -9}}', "claude-json"),
    ],
)
def test_a_negative_metric_an_agent_reports_is_no_answer(tmp_path, answer, fmt):
    from gradebox.lifecycle.steps import read_cli_answer

    # Budget checks hold these to a maximum: a negative one would pass every budget.
    out = write(tmp_path / "output", answer)
    got = read_cli_answer(out, fmt)
    assert isinstance(got, str) and "wrong shape" in got, got
    control = write(tmp_path / "ok", answer.replace("-", "").replace("NaN", "1"))
    assert isinstance(read_cli_answer(control, fmt), dict)


def test_a_script_graders_provider_is_its_model_proxy(tmp_path):
    path = _with(
        tmp_path,
        AZURE,
        "defaults: {grader: judge}\ntests:\n  - id: a\n    vars: {input: x}\n    assert:\n"
        "      - {type: script, command: [python3, -c, 'pass'], provider: {max_calls: 3}}\n"
        "      - {type: script, command: [python3, -c, 'pass'], provider: true, k: v}\n",
    )
    capped, default = load_suite(path).tests[0].assertions
    assert capped.grader.target.max_calls == 3 and default.grader.target.max_calls == 50
    assert default.config == {"k": "v"} and capped.grader.pass_score == 0.8
