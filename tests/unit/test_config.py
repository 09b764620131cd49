from pathlib import Path

import pytest

from gradebox.errors import ConfigError
from gradebox.graders.config import ProgramGrader, ScriptGrader, load_grader, normalise_sub_path
from tests.conftest import write


def test_program_grader_defaults(tmp_path: Path):
    g = load_grader(write(tmp_path / "check.yaml", "type: program\nprogram: python3\n"))
    assert isinstance(g, ProgramGrader)
    assert g.name == "check" and g.timeout == 60 and g.shell is False
    assert g.network == "none" and g.workspace == "ro"
    assert int(g.limits.memory) == 1 << 30 and int(g.limits.output) == 1 << 20
    assert g.source_dir == tmp_path.resolve()


def test_reference_nested_config_form(tmp_path: Path):
    text = "type: program\nconfig:\n  program: python\n  args: [a.py]\n  timeout: 2m\n"
    g = load_grader(write(tmp_path / "g.yaml", text))
    assert g.program == "python" and g.args == ["a.py"] and g.timeout == 120


def test_json_is_accepted_as_yaml(tmp_path: Path):
    g = load_grader(write(tmp_path / "g.json", '{"type": "script", "command": "true"}'))
    assert isinstance(g, ScriptGrader) and g.command == "true"


@pytest.mark.parametrize(
    "key", ["EVALUATE_WORKSPACE", "Evaluate_Grader_Input", "evaluate_workspace"]
)
def test_reserved_env_names_any_case(tmp_path: Path, key: str):
    text = f"type: program\nprogram: x\nenv:\n  OK: '1'\n  {key}: /tmp\n"
    with pytest.raises(ConfigError) as err:
        load_grader(write(tmp_path / "grader.yaml", text))
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'grader.yaml'}:5: env.{key}: reserved name")
    assert "\n" not in message


@pytest.mark.parametrize(
    ("text", "field", "line"),
    [
        ("type: program\nprogram: x\ntimeout: 60\n", "timeout", 3),
        ("type: program\nprogram: x\ntimout: 6s\n", "timout", 3),
        ("type: program\n", "program", None),
        ("type: lua\n", "type", 1),
        ("type: script\ncommand: []\n", "command", 2),
        ("type: program\nprogram: x\nlimits:\n  memory: lots\n", "limits.memory", 4),
        ("type: program\nprogram: x\nnetwork: host\n", "network", 3),
        ("type: program\nprogram: x\nworkspace: write\n", "workspace", 3),
    ],
)
def test_errors_name_file_line_and_field(tmp_path: Path, text, field, line):
    with pytest.raises(ConfigError) as err:
        load_grader(write(tmp_path / "g.yaml", text))
    assert err.value.field == field
    assert err.value.file.endswith("g.yaml")
    if line:
        assert err.value.line == line


def test_broken_yaml_is_one_line(tmp_path: Path):
    with pytest.raises(ConfigError) as err:
        load_grader(write(tmp_path / "g.yaml", "type: program\nprogram: [x\n"))
    assert "invalid YAML" in str(err.value) and str(err.value).count("\n") == 0


def test_missing_file(tmp_path: Path):
    with pytest.raises(ConfigError, match="file not found"):
        load_grader(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    ("given", "expected"),
    [("src/app", "src/app"), ("src\\app", "src/app"), ("./src/../src", "src"), (".", "")],
)
def test_sub_path_normalised(given, expected):
    assert normalise_sub_path(given) == expected


@pytest.mark.parametrize("bad", ["/etc", "..", "../x", "src/../../x", "C:\\x", "..\\x"])
def test_sub_path_escapes_refused(tmp_path: Path, bad: str):
    with pytest.raises(ValueError):
        normalise_sub_path(bad)
    with pytest.raises(ConfigError) as err:
        load_grader(write(tmp_path / "g.yaml", f"type: program\nprogram: x\nsub_path: '{bad}'\n"))
    assert err.value.field == "sub_path"
