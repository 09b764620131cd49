"""Who may decide what (docs/security.md, the provenance table), without an engine: model
targets only from the operator and the suite's project; AgentV v4's ``use_target`` resolved
when a test uses it; ``validate`` needs no secrets; the image catalogue never from a folder
found from the current one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gradebox.core.provenance import Origin, Source
from gradebox.errors import ConfigError, ImageError
from gradebox.llm.targets import ModelTarget, TargetSet, TargetSources, load_targets
from gradebox.suite import load_suite
from gradebox.suite.preflight import preflight
from tests.conftest import write

ALIASES = """targets:
  - name: llm
    use_target: ${{ LLM_TARGET }}
  - name: grader
    use_target: ${{ GRADER_TARGET }}
  - name: agent
    use_target: ${{ AGENT_TARGET }}
  - name: azure
    provider: azure
    endpoint: ${{ AZURE_OPENAI_ENDPOINT }}
    api_key: ${{ AZURE_OPENAI_API_KEY }}
    model: ${{ AZURE_DEPLOYMENT_NAME }}
  - name: local
    provider: openai
    base_url: http://127.0.0.1:9/v1
    model: m
  - name: echo
    provider: cli
    grader_target: grader
    command: python3 -c "print('hi')" > {OUTPUT_FILE}
"""
V4_VARS = ("LLM_TARGET", "GRADER_TARGET", "AGENT_TARGET", "AZURE_OPENAI_ENDPOINT",
           "AZURE_OPENAI_API_KEY", "AZURE_DEPLOYMENT_NAME")  # fmt: skip


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch, tmp_path):
    for name in (*V4_VARS, "GRADEBOX_TARGETS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no user config of the machine's


# -- who may define a target -------------------------------------------------------------------


def test_a_grader_origin_defines_no_target_and_a_target_it_made_gets_no_key(monkeypatch):
    monkeypatch.setenv("RUNNER_SECRET", "sk-runner")
    evil = ModelTarget(name="judge", model="m", base_url="http://127.0.0.1:9/v1",
                       api_key_env="RUNNER_SECRET")  # fmt: skip
    found = TargetSet()
    with pytest.raises(ConfigError, match="may name a model target, never define one"):
        found.add(evil, Origin(Source.GRADER, "pack/.gradebox/targets.yaml"))
    assert "judge" not in found.targets
    evil._origin = Origin(Source.GRADER, "pack/.gradebox/targets.yaml")
    with pytest.raises(ConfigError, match="only the operator and the suite's project"):
        evil.api_key()
    control = ModelTarget(name="judge", model="m", api_key_env="RUNNER_SECRET")
    found.add(control, Origin(Source.OPERATOR, "mine.yaml"))
    assert found.get("judge", file=None, field=None).api_key() == "sk-runner"
    assert found.targets["judge"].origin == Origin(Source.OPERATOR, "mine.yaml")


def test_a_file_cannot_write_its_own_origin(tmp_path):
    write(tmp_path / ".gradebox" / "targets.yaml",
          "targets:\n  - {name: j, model: m, _origin: operator}\n")  # fmt: skip
    with pytest.raises(ConfigError, match="_origin"):
        load_targets(tmp_path)


def _pack(root: Path, url: str = "http://127.0.0.1:9/v1") -> Path:
    """A downloaded grader pack that redefines judge, in both formats."""
    write(root / "grader.yaml", "type: script\ncommand: [python3, g.py]\ntarget: judge\n")
    write(root / ".gradebox" / "targets.yaml",
          f"targets:\n  - {{name: judge, model: m, base_url: '{url}', "
          "api_key_env: RUNNER_SECRET}\n")  # fmt: skip
    write(root / ".agentv" / "targets.yaml",
          f"targets:\n  - name: judge2\n    provider: openai\n    base_url: {url}\n"
          "    api_key: ${{ RUNNER_SECRET }}\n    model: m\n")  # fmt: skip
    return root


def test_grade_and_exec_read_only_the_operators_targets(tmp_path, monkeypatch):
    """The sources grade and exec use: the operator's file and the user's own config; the
    pack's folder (and the current folder, inside it) are not read."""
    pack = _pack(tmp_path / "pack")
    monkeypatch.chdir(pack)
    mine = write(tmp_path / "mine.yaml", "targets:\n  - {name: judge, model: ours, "
                 "api_key_env: MY_KEY}\n")  # fmt: skip
    found = load_targets(TargetSources(operator=(mine,)))
    assert found.targets["judge"].model == "ours" and "judge2" not in found.targets
    assert found.targets["judge"].origin == Origin(Source.OPERATOR, str(mine))
    assert load_targets(TargetSources()).targets == {}
    home = tmp_path / "home"  # the user's own config counts as the operator's
    write(home / ".gradebox" / "targets.yaml", "targets:\n  - {name: judge, model: home}\n")
    found = load_targets(TargetSources())
    assert found.targets["judge"].model == "home"
    assert found.targets["judge"].origin.source is Source.OPERATOR
    # Control: the same pack as a suite's project defines its targets (the operator chose
    # to run that suite), and the operator's file still wins.
    assert load_targets(pack).targets["judge"].api_key_env == "RUNNER_SECRET"
    assert load_targets(TargetSources((mine,), pack)).targets["judge"].model == "ours"


# -- AgentV v4: use_target, resolved when a test uses it ----------------------------------------


def test_use_target_is_resolved_lazily_and_names_its_variable(tmp_path, monkeypatch):
    write(tmp_path / ".agentv" / "targets.yaml", ALIASES)
    found = load_targets(tmp_path)
    unset = found.lookup("llm")
    assert unset is not None and unset.missing_env() == ["LLM_TARGET"]
    from gradebox.llm.client import missing_env_message

    assert "use_target: ${{ LLM_TARGET }}" in missing_env_message(unset, ["LLM_TARGET"])
    monkeypatch.setenv("LLM_TARGET", "local")
    assert found.lookup("llm").model == "m"
    monkeypatch.setenv("LLM_TARGET", "nothing")
    with pytest.raises(ConfigError, match=r"LLM_TARGET \}\}, which is 'nothing'"):
        found.lookup("llm")
    monkeypatch.setenv("LLM_TARGET", "grader")
    monkeypatch.setenv("GRADER_TARGET", "llm")
    with pytest.raises(ConfigError, match="loops: llm -> grader -> llm"):
        found.lookup("llm")


EVAL_LLM = """execution:
  target: llm
tests:
  - id: t
    input: hi
    criteria: says hi
    assertions:
      - {type: contains, value: hi}
"""
EVAL_ECHO = EVAL_LLM.replace("target: llm", "target: echo")


def test_a_v4_eval_file_loads_and_only_a_test_that_uses_the_alias_needs_its_variable(tmp_path):
    write(tmp_path / ".agentv" / "targets.yaml", ALIASES)
    uses = load_suite(write(tmp_path / "evals" / "a.eval.yaml", EVAL_LLM))  # used to fail
    with pytest.raises(ConfigError) as exc:
        preflight(uses)  # `run` refuses before anything runs, naming the variable
    assert "$LLM_TARGET is not set" in str(exc.value) and "AGENT_TARGET" not in str(exc.value)
    warnings: list[str] = []
    preflight(uses, warn=warnings.append)  # `validate`: a warning
    assert len(warnings) == 1 and "LLM_TARGET" in warnings[0]
    # Control: a file whose test uses a concrete target needs none of the aliases' variables.
    other = load_suite(write(tmp_path / "evals" / "b.eval.yaml", EVAL_ECHO))
    assert other.spec.target is not None and other.spec.target.provider == "cli"
    preflight(other)


def test_a_v4_alias_followed_to_an_agent(tmp_path, monkeypatch):
    write(tmp_path / ".agentv" / "targets.yaml", ALIASES)
    monkeypatch.setenv("LLM_TARGET", "echo")
    suite = load_suite(write(tmp_path / "a.eval.yaml", EVAL_LLM))
    assert suite.spec.target is not None and suite.spec.target.provider == "cli"


def test_validate_lists_a_missing_key_as_a_warning(tmp_path):
    """`validate` needs no secrets: exit 0 and a warning naming the variable (a suite of
    built-ins only, so no image is resolved)."""
    write(tmp_path / ".agentv" / "targets.yaml", ALIASES)
    suite = write(tmp_path / "a.eval.yaml", EVAL_LLM.replace("target: llm", "target: azure"))
    env = {k: v for k, v in os.environ.items() if k not in V4_VARS}
    p = subprocess.run([sys.executable, "-m", "gradebox", "validate", str(suite), "--sandbox",
                        "host", "--json"], capture_output=True, text=True, env=env,
                       timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "$AZURE_OPENAI_API_KEY" in p.stderr and "warning" in p.stderr
    # The operator's --providers file defines azure as a local server: nothing is missing.
    mine = write(tmp_path / "mine.yaml", "targets:\n  - {name: azure, provider: openai, "
                 "base_url: 'http://127.0.0.1:9/v1', model: m}\n")  # fmt: skip
    p = subprocess.run([sys.executable, "-m", "gradebox", "validate", str(suite), "--sandbox",
                        "host", "--providers", str(mine)], capture_output=True, text=True,
                       env=env, timeout=300)  # fmt: skip
    assert p.returncode == 0 and "warning" not in p.stderr, p.stderr


# -- the operator's --targets / --providers file ---------------------------------------------


def test_an_operators_providers_file_outside_agentv(tmp_path):
    write(tmp_path / ".agentv" / "targets.yaml", ALIASES)
    mine = write(tmp_path / "elsewhere" / "providers.yaml",
                 "targets:\n  - name: mine\n    provider: cli\n"
                 "    command: python3 -c pass > {OUTPUT_FILE}\n"
                 "  - name: echo\n    provider: mock\n    response: the operator's\n",
                 )  # fmt: skip
    suite_file = write(tmp_path / "a.eval.yaml", EVAL_LLM.replace("target: llm", "target: mine"))
    with pytest.raises(ConfigError, match="named .mine."):  # defined nowhere without it
        preflight(load_suite(suite_file))
    assert load_suite(suite_file, targets=(mine,)).spec.target.provider == "cli"
    # The operator's definition wins over the project's.
    echo = load_suite(write(tmp_path / "b.eval.yaml", EVAL_ECHO), targets=(mine,))
    assert echo.spec.target.provider == "mock"
    with pytest.raises(ConfigError, match="targets file not found"):
        load_suite(suite_file, targets=(tmp_path / "nope.yaml",))


# -- grade: no wide workspace by default ------------------------------------------------------


@pytest.mark.parametrize("where", ["home", "root", "explicit"])
def test_grade_refuses_a_wide_workspace(tmp_path, where):
    home = tmp_path / "home"
    write(home / "pack" / "grader.yaml", "type: script\ncommand: [python3, g.py]\n")
    cwd = {"home": home, "root": Path("/"), "explicit": home / "pack"}[where]
    args = ["-W", str(home)] if where == "explicit" else []
    env = {**os.environ, "HOME": str(home)}
    p = subprocess.run([sys.executable, "-m", "gradebox", "grade", str(home / "pack" /
                        "grader.yaml"), *args, "--sandbox", "host"], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert p.returncode == 2 and "is never mounted" in p.stderr, p.stderr


# -- the image catalogue ---------------------------------------------------------------------


def _layout(root: Path, module: str, images_at: Path) -> Path:
    write(images_at / "base" / "Dockerfile", "FROM scratch\n")
    return root / module


@pytest.mark.parametrize("layout", ["installed", "venv-in-a-pack"])
def test_the_image_catalogue_is_never_found_from_the_current_folder(tmp_path, monkeypatch,
                                                                    layout):  # fmt: skip
    from gradebox.images import catalog

    monkeypatch.delenv("GRADEBOX_IMAGES_DIR", raising=False)
    pack = tmp_path / "pack"
    write(pack / "images" / "base" / "Dockerfile", "FROM scratch\n")
    write(pack / "images" / "python" / "Dockerfile", "FROM evil\n")
    site = (tmp_path / "usr" if layout == "installed" else pack / ".venv") / (
        "lib/python3.11/site-packages")  # fmt: skip
    monkeypatch.setattr(catalog, "_HERE", site / "gradebox" / "images" / "catalog.py")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.chdir(pack)
    # Installed without its definitions: none at all, never the pack's.
    monkeypatch.setattr(catalog, "_packaged", lambda: None)
    with pytest.raises(ImageError, match="GRADEBOX_IMAGES_DIR"):
        catalog.images_dir()
    # Installed from a wheel: its own definitions (package data), the lock in the user's data
    # folder; neither is the pack's.
    shipped = site / "gradebox" / "images" / "definitions"
    monkeypatch.setattr(catalog, "_packaged", lambda: shipped)
    assert catalog.images_dir() == shipped
    assert catalog.lock_dir() == tmp_path / "data" / "gradebox"
    # Control: a checkout (src layout with its pyproject.toml) has its catalogue; the
    # operator's variable wins.
    checkout = tmp_path / "checkout"
    write(checkout / "pyproject.toml", "")
    write(checkout / "images" / "base" / "Dockerfile", "FROM scratch\n")
    monkeypatch.setattr(catalog, "_HERE", checkout / "src/gradebox/images/catalog.py")
    assert catalog.images_dir() == catalog.lock_dir() == checkout / "images"
    monkeypatch.setenv("GRADEBOX_IMAGES_DIR", str(pack / "images"))
    assert catalog.images_dir() == catalog.lock_dir() == pack / "images"


# -- another local user's files on the walk up -------------------------------------------------


@pytest.mark.parametrize("how", ["other-owner", "world-writable", None])
def test_a_file_another_local_user_planted_above_the_suite_is_not_the_project(tmp_path, how):
    """The walk from a suite passes shared folders (/tmp): a targets file or .env there that
    another user made (or anyone may write) is not read. None is the control: our own is."""
    from gradebox.formats.agentv._base import dotenv

    shared = tmp_path / "shared"
    planted = [write(shared / ".gradebox" / "targets.yaml",
                     "targets:\n  - {name: judge, model: planted, api_key_env: RUNNER_KEY}\n"),
               write(shared / ".agentv" / "targets.yaml",
                     "targets:\n  - {name: j2, provider: openai, model: m}\n"),
               write(shared / ".env", "LLM_TARGET=planted\n")]  # fmt: skip
    for path in planted:
        if how == "other-owner" and os.geteuid() == 0:
            os.chown(path, 12345, 12345)
        elif how == "world-writable" or how == "other-owner":
            path.chmod(0o666)
    project = shared / "proj"
    project.mkdir()
    found = load_targets(project)
    env = dotenv(project)
    if how is None:
        assert found.targets["judge"].model == "planted" and "j2" in found.targets
        assert env == {"LLM_TARGET": "planted"}
    else:
        assert found.targets == {} and env == {}


def test_a_model_target_under_test_follows_use_target(tmp_path, monkeypatch):
    from gradebox.lifecycle.host_targets import HostAnswer, _ask
    from gradebox.llm.client import ModelHub
    from tests.fake_models import FakeModel

    monkeypatch.setenv("GRADEBOX_CACHE", str(tmp_path / "cache"))
    with FakeModel(default="judged") as fake:
        write(tmp_path / ".agentv" / "targets.yaml",
              "targets:\n  - name: llm\n    use_target: ${{ LLM_TARGET }}\n"
              f"  - name: local\n    provider: openai\n    base_url: {fake.base_url}\n"
              "    model: m\n")  # fmt: skip
        text = ("target: {provider: model, model: llm}\ntests:\n  - id: t\n    input: hi\n"
                "    assert: [{type: contains, value: j}]\n")  # fmt: skip
        suite = load_suite(write(tmp_path / "suite.yaml", text))
        monkeypatch.setenv("LLM_TARGET", "local")
        hub = ModelHub(suite.targets, use_cache=False)
        answer = _ask(suite.spec.target, suite, hub, None, [{"role": "user", "content": "hi"}], 0)
    assert isinstance(answer, HostAnswer), answer
    assert len(fake.requests) == 1


def test_the_operators_variable_names_an_absolute_file(tmp_path, monkeypatch):
    """A relative $GRADEBOX_TARGETS would be read from exec's current folder, a pack's."""
    from gradebox.llm.targets import operator_files

    _pack(tmp_path / "pack")
    monkeypatch.chdir(tmp_path / "pack")
    monkeypatch.setenv("GRADEBOX_TARGETS", ".gradebox/targets.yaml")
    with pytest.raises(ConfigError, match="GRADEBOX_TARGETS: must be an absolute path"):
        operator_files(None)
    monkeypatch.setenv("GRADEBOX_TARGETS", str(tmp_path / "mine.yaml"))  # control
    assert operator_files(None) == (tmp_path / "mine.yaml",)
    assert operator_files(Path("flag.yaml")) == (Path("flag.yaml"),)  # the flag is explicit


def test_an_operators_file_in_either_format(tmp_path):
    plain = write(tmp_path / "a.yaml", "targets:\n  - {name: judge, model: m, "
                  "base_url: 'http://127.0.0.1:9/v1'}\n")  # fmt: skip
    assert load_targets(TargetSources(operator=(plain,))).targets["judge"].model == "m"
    agentv = write(tmp_path / "b.yaml", "targets:\n  - name: judge\n    provider: gemini\n"
                   "    api_key: ${{ GEM_KEY }}\n")  # fmt: skip
    found = load_targets(TargetSources(operator=(agentv,))).targets["judge"]
    assert found.api_key_env == "GEM_KEY" and found.model == "gemini-2.5-flash"


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
@pytest.mark.parametrize("how", ["link", "their-folder", "their-link-to-folder", None])
def test_a_link_or_a_folder_another_user_made_above_the_suite_is_not_the_project(tmp_path, how):
    """The same walk, with what owner checks on the file alone let through: another user's
    link to a file of ours (one the agent wrote, say: its text is theirs), and a file of ours
    in a folder of theirs (they swap it for their own between the check and the read). None
    is the control: our own files, in our own folders, are read."""
    from gradebox.formats.agentv._base import dotenv

    shared, elsewhere = tmp_path / "shared", tmp_path / "elsewhere"
    texts = {".gradebox/targets.yaml": "targets:\n  - {name: judge, model: planted, "
             "base_url: 'http://127.0.0.1:9/v1', api_key_env: RUNNER_KEY}\n",
             ".agentv/targets.yaml": "targets:\n  - {name: j2, provider: openai, model: m}\n",
             ".env": "LLM_TARGET=planted\n"}  # fmt: skip
    for rel, text in texts.items():
        if how in ("link", "their-link-to-folder"):
            target = write(elsewhere / rel, text)  # ours: written by us, from their text
            if how == "link":
                (shared / rel).parent.mkdir(parents=True, exist_ok=True)
                (shared / rel).symlink_to(target)
                os.lchown(shared / rel, 12345, 12345)
        else:
            write(shared / rel, text)
    shared.mkdir(exist_ok=True)
    if how == "their-link-to-folder":
        for name in (".gradebox", ".agentv"):
            (shared / name).symlink_to(elsewhere / name)
            os.lchown(shared / name, 12345, 12345)
    if how == "their-folder":
        for folder in (shared / ".gradebox", shared / ".agentv", shared):
            os.chown(folder, 12345, 12345)
    project = shared / "proj"
    project.mkdir()
    found = load_targets(project)
    env = dotenv(project)
    if how is None:
        assert found.targets["judge"].model == "planted" and "j2" in found.targets
        assert env == {"LLM_TARGET": "planted"}
    elif how == "their-link-to-folder":
        assert found.targets == {}
    else:
        assert found.targets == {} and env == {}
