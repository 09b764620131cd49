"""AgentV eval files mapped onto our suite model: shapes, gates, errors. No containers."""

from __future__ import annotations

from pathlib import Path

import pytest

from gradebox.errors import ConfigError, ConfigErrors, UnsupportedFeature
from gradebox.formats.agentv import render
from gradebox.graders.assertion import AssertSet, GraderAssertion, HostAssertion, leaves
from gradebox.suite import load_suite
from gradebox.suite.detect import detect_format
from tests.conftest import write

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agentv"


def test_todays_form_maps_onto_the_suite_model():
    suite = load_suite(FIXTURES / "current" / "evals" / "release.eval.yaml")
    assert suite.name == "release-gate"
    assert [t.id for t in suite.tests] == [
        "capital", "four-of-five", "required-gate", "json-set", "edit-workspace",
    ]  # fmt: skip
    target = suite.spec.target
    assert target is not None and target.provider == "cli" and target.timeout == 60
    assert target.cwd == str((FIXTURES / "current").resolve())
    assert suite.spec.defaults.workers == 2
    capital = suite.tests[0]
    assert capital.threshold == 0.8  # AgentV's default pass threshold
    assert capital.case.input == "What is the capital of France?"
    assert capital.case.expected_output == "Paris"
    assert capital.case.criteria is None
    kinds = [type(a).__name__ for a in capital.assertions]
    assert kinds == ["HostAssertion"] * 7  # six of its own, then the suite's
    negated = capital.assertions[3]
    assert isinstance(negated, HostAssertion) and negated.negate
    gate = suite.tests[2].assertions[3]
    assert gate.name == "mentions-madrid" and gate.required == 0.8
    assert isinstance(suite.tests[3].assertions[1], AssertSet)
    script = suite.tests[4].assertions[0]
    assert isinstance(script, GraderAssertion)
    assert script.config == {"expect_edited": ["notes.md"]}
    assert suite.template_dir(suite.tests[0].workspace) == (FIXTURES / "current" / "workspace")


def test_earlier_form_targets_file_hooks_repos_and_code_grader():
    suite = load_suite(FIXTURES / "legacy" / "evals" / "calc.yaml")
    target = suite.spec.target
    assert target is not None and target.command.startswith("sh scripts/agent.sh")
    ws = suite.spec.workspace
    assert ws is not None and ws.repos[0].path == "./repo"
    assert ws.before_all == ["python3", "../scripts/hook.py", "before_all"]
    assert ws.after_each and ws.after_all
    first = suite.tests[0]
    assert [type(a).__name__ for a in first.assertions] == ["HostAssertion", "GraderAssertion"]
    grader = first.assertions[1]
    assert isinstance(grader, GraderAssertion) and grader.name == "calc-fixed"
    assert grader.grader.type == "script"


def test_jsonl_with_a_sidecar():
    suite = load_suite(FIXTURES / "jsonl" / "cases.jsonl")
    assert [t.id for t in suite.tests] == ["j1", "j2"]
    assert suite.tests[0].case.criteria == "greets"
    assert len(suite.tests[1].assertions) == 2  # its own, then the sidecar's


def test_detected_by_shape_or_forced(tmp_path):
    assert detect_format(Path("x.yaml"), {"prompts": ["{{ q }}"], "tests": []}) == "agentv"
    assert detect_format(Path("x.yaml"), {"target": "t", "tests": []}) == "agentv"
    assert detect_format(Path("x.yaml"), {"tests": [{"id": "a", "vars": {}}]}) == "agentv"
    assert detect_format(Path("x.yaml"), {"tests": [{"id": "a", "input": "x"}]}) == "gradebox"
    path = write(tmp_path / "e.yaml", "tests:\n  - id: a\n    input: hi\n")
    assert load_suite(path, format="agentv").tests[0].threshold == 0.8
    assert load_suite(path).tests[0].threshold is None


def test_render_vars_and_env(monkeypatch):
    v = {"q": "Q?", "n": {"k": 3}, "items": [1, 2]}
    assert render("Ask {{ q }} / {{ vars.q }} {{missing}}!", v) == "Ask Q? / Q? !"
    assert render("{{ vars.items }}", v) == [1, 2]  # a lone placeholder keeps its type
    assert render({"x": ["{{ n.k }}"]}, v) == {"x": [3]}


def test_env_interpolation_and_dotenv(tmp_path, monkeypatch):
    monkeypatch.setenv("GB_Q", "from env")
    write(tmp_path / ".env", "GB_FILE=from dotenv\n")
    path = write(
        tmp_path / "e.eval.yaml",
        "prompts: ['{{ q }}']\ntests:\n  - id: a\n    vars:\n"
        "      q: '{{ env.GB_Q }} and ${{ GB_FILE }} and {{ env.GB_NONE }}.'\n",
    )
    case = load_suite(path).tests[0].case
    assert case.input == "from env and from dotenv and ."


# A feature gradebox does not run is "refused" by name (an ``UnsupportedFeature``, whose name is
# the words column); what AgentV rejects too is a plain error (None). Either is one line naming
# the file, line and field.
@pytest.mark.parametrize(
    ("body", "line", "field", "words", "feature"),
    [
        (
            # v4's kinds run with v4's semantics: written wrong, they are the file's error
            "tests:\n  - id: a\n    vars: {}\n    assert:\n      - type: skill-trigger\n",
            5,
            "tests.0.assert.0.skill",
            "required field is missing",
            None,
        ),
        ("prompt: x\ntests:\n  - id: a\n    vars: {}\n", 1, "prompt", "check its spelling", None),
        ("experiment: x\ntests:\n  - {id: a}\n", 1, "experiment", "tags.experiment", None),
        (
            "tests:\n  - id: a\n    vars: {}\n    transform: x\n",
            4,
            "tests.0.transform",
            "not a test field",
            None,
        ),
        (
            "environment:\n  type: docker\n  workdir: /w\ntests:\n  - id: a\n    vars: {}\n",
            1,
            "environment",
            "names an image",
            None,
        ),
        (
            "tests:\n  - id: a\n    vars: {}\n    assert:\n      - type: composite\n",
            5,
            "tests.0.assert.0",
            "a composite needs a non-empty 'assertions' list",
            None,
        ),
        (
            "evaluate_options:\n  repeats: 2\ntests:\n  - id: a\n    vars: {}\n",
            2,
            "evaluate_options.repeats",
            "not an evaluate_options field",
            None,
        ),
        (
            "extensions:\n  - file://./hook.mjs:beforeAll\ntests:\n  - id: a\n    vars: {}\n",
            2,
            "extensions.0",
            "a lifecycle extension",
            "refused",
        ),
        (
            # a transform runs (sandboxed); one naming no module is the file's error
            "tests:\n  - id: a\n    vars: {}\n    options:\n      transform: file://t.ts\n",
            5,
            "tests.0.options.transform",
            "transform file not found: t.ts",
            None,
        ),
        (
            "workspace:\n  repos:\n    - path: ./r\n      repo: https://example.invalid/r.git\n"
            "      sparse: [src]\ntests:\n  - id: a\n    input: x\n",
            5,
            "workspace.repos.0.sparse",
            "a sparse checkout",
            "refused",
        ),
        (
            "providers:\n  - id: claude-sdk\n    label: c\ntests:\n  - id: a\n    vars: {}\n",
            2,
            "providers.0.id",
            "the claude-sdk provider",
            "refused",
        ),
        (
            "providers:\n  - id: cli\n    label: c\n    command: x {OUTPUT_FILE}\n"
            "    healthcheck: {url: 'http://127.0.0.1:9/health'}\n"
            "tests:\n  - id: a\n    vars: {}\n",
            5,
            "providers.0.healthcheck.url",
            "an HTTP healthcheck",
            "refused",
        ),
        (
            "providers:\n  - id: cli\n    label: c\n    command: x {OUTPUT_FILE}\n"
            "tests:\n  - id: a\n    mode: conversation\n    turns: [{input: hi}]\n",
            7,
            "tests.0.mode",
            "a conversation with a cli target",
            "refused",
        ),
        (
            "tests:\n  - include: ./other.eval.yaml\n    type: suite\n",
            3,
            "tests.0.type",
            "including a suite (type: suite)",
            "refused",
        ),
        (
            "tests:\n  - id: a\n    vars: {}\n    assert:\n      - type: similar\n"
            "        value: x\n",
            5,
            "tests.0.assert.0.type",
            "assertion type 'similar'",
            "refused",
        ),
        (
            "providers: [a, b]\ntests:\n  - id: a\n    vars: {}\n    mode: conversation\n"
            "    turns: [{input: hi}]\n",
            5,
            "tests.0.mode",
            "a conversation in a target matrix",
            "refused",
        ),
    ],
)
def test_one_line_errors_and_refusals(tmp_path, body, line, field, words, feature):
    path = write(tmp_path / "bad.eval.yaml", body)
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    err = info.value
    assert isinstance(err, UnsupportedFeature) == (feature is not None), str(err)
    if feature is not None:  # its name, then what to do instead
        assert err.feature == words and len(err.message) > len(words) + 20, str(err)
    assert err.file == str(path) and err.line == line and err.field == field, str(err)
    assert words in str(err) and "\n" not in str(err)


def test_every_error_is_listed(tmp_path):
    path = write(
        tmp_path / "bad.eval.yaml",
        "tests:\n  - id: a\n    vars: {}\n    assert:\n      - type: nope\n"
        "      - type: contains\n        weight: -1\n        value: x\n"
        "  - id: b\n    vars: {}\n    assert:\n      - type: regex\n        value: '('\n",
    )
    with pytest.raises(ConfigErrors) as info:
        load_suite(path)
    lines = str(info.value).splitlines()
    assert len(lines) == 3 and all(str(path) in x for x in lines)
    assert [e.field for e in info.value.errors] == [
        "tests.0.assert.0.type",
        "tests.0.assert.1.weight",
        "tests.1.assert.0",
    ]


def test_assertion_in_a_case_file_is_located_there(tmp_path):
    write(tmp_path / "cases.yaml", "- id: a\n  vars: {}\n  assert:\n    - type: nope\n")
    path = write(tmp_path / "e.eval.yaml", "tests: ./cases.yaml\n")
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    assert info.value.file == str(tmp_path / "cases.yaml") and info.value.line == 4


def test_leaves_of_nested_sets():
    suite = load_suite(FIXTURES / "current" / "evals" / "release.eval.yaml")
    flat = list(leaves(suite.tests[3].assertions))
    assert len(flat) == 5  # is-json, two children of the set, args match, the suite's


def test_message_parts_and_file_parts(tmp_path):
    write(tmp_path / "ctx.md", "context")
    path = write(
        tmp_path / "e.eval.yaml",
        "prompts:\n  - - role: system\n      content: Be brief.\n    - role: user\n"
        "      content:\n        - type: file\n          value: ./ctx.md\n"
        "        - type: text\n          value: '{{ q }}'\n"
        "tests:\n  - id: a\n    vars: {q: 'Why?'}\n",
    )
    case = load_suite(path).tests[0].case
    assert case.input_files == [str(tmp_path / "ctx.md")]
    user = case.input[1]
    assert user.content == [{"type": "file", "value": "./ctx.md"}, {"type": "text", "text": "Why?"}]


def _skill_eval(repo: Path, ref: str) -> Path:
    """An eval file laid out as AgentV's own evals/agentv-dev/skills/ are, naming ``ref``."""
    (repo / ".git").mkdir(parents=True, exist_ok=True)
    return write(
        repo / "evals" / "agentv-dev" / "skills" / "skill-invocation.eval.yaml",
        "prompts:\n  - '{{ input }}'\ntests:\n  - id: invoke-get-single-skill\n"
        "    criteria: Agent invokes `agentv skills get`.\n    vars:\n      input:\n"
        "        - role: user\n          content:\n            - type: file\n"
        f"              value: {ref}\n            - type: text\n"
        "              value: The file above is the live skill.\n",
    )


def test_a_path_from_the_top_names_a_file_of_the_repository(tmp_path, monkeypatch):
    # AgentV's resolveFileReference: /plugins/... is tried as it is, then below each root.
    repo = tmp_path / "agentv"
    skill = write(repo / "plugins" / "agentv-dev" / "skills" / "agentv-dev" / "SKILL.md", "s")
    monkeypatch.chdir(write(tmp_path / "elsewhere" / "x", "").parent)
    path = _skill_eval(repo, "/plugins/agentv-dev/skills/agentv-dev/SKILL.md")
    assert load_suite(path).tests[0].case.input_files == [str(skill)]


@pytest.mark.parametrize("present", ["absolute", "nearer"])
def test_a_path_from_the_top_is_looked_for_in_agentvs_order(tmp_path, present):
    # The path as it is first, then the eval file's folder, then its parents up to the repo.
    repo = tmp_path / "agentv"
    wanted = tmp_path / "abs" / "SKILL.md"
    if present == "absolute":
        write(wanted, "as written")
    else:
        wanted = repo / "evals" / "agentv-dev" / "skills" / str(wanted).lstrip("/")
        write(wanted, "nearer")
    write(repo / str(tmp_path / "abs" / "SKILL.md").lstrip("/"), "the repository's")
    path = _skill_eval(repo, str(tmp_path / "abs" / "SKILL.md"))
    assert load_suite(path).tests[0].case.input_files == [str(wanted)]


@pytest.mark.parametrize("ref", ["link/../SKILL.md", "/link/../SKILL.md"])
def test_link_then_dotdot_is_where_agentv_looks_not_where_the_link_leads(tmp_path, ref):
    # AgentV's path.resolve takes ``link/..`` by its text: the folder that holds the link.
    repo = tmp_path / "agentv"
    write(tmp_path / "outside" / "dir" / "x", "")
    write(tmp_path / "outside" / "SKILL.md", "not where AgentV looks")
    path = _skill_eval(repo, ref)
    (path.parent / "link").symlink_to(tmp_path / "outside" / "dir")
    with pytest.raises(ConfigError, match=f"input file '{ref}' not found"):
        load_suite(path)


def test_provider_from_config_yaml_defaults_walking_up(tmp_path, monkeypatch):
    monkeypatch.setenv("GB_AGENT", "agent.py")
    write(
        tmp_path / ".agentv" / "config.yaml",
        "providers:\n  - id: cli\n    label: mine\n    config:\n"
        "      command: 'python3 {{ env.GB_AGENT }} {OUTPUT_FILE}'\n"
        "defaults:\n  provider: mine\n",
    )
    path = write(tmp_path / "deep" / "evals" / "e.eval.yaml", "tests:\n  - id: a\n    vars: {}\n")
    target = load_suite(path).spec.target
    assert target is not None and target.command == "python3 agent.py {OUTPUT_FILE}"
    assert target.cwd is None  # commands resolve from the eval file's folder
