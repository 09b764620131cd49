"""Red-team: ``gradebox run FOLDER`` must not run a file the user did not mean. A folder
holding its own suite.yaml stood for it only when no eval file lay anywhere below it, so a
fixture holding one (a repo the agent works in: an AgentV project, with cli targets of its
own) was run in the suite's place, its commands on the host, with no word of suite.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest

from gradebox.errors import ConfigError
from gradebox.suite.paths import expand_suite_paths


def test_a_folder_with_its_own_suite_and_eval_files_below_asks_which(tmp_path: Path) -> None:
    (tmp_path / "proj" / "fixtures" / "repo").mkdir(parents=True)
    (tmp_path / "proj" / "suite.yaml").write_text("name: mine\ntests: []\n")
    (tmp_path / "proj" / "fixtures" / "repo" / "eval.yaml").write_text("tests: []\n")
    with pytest.raises(ConfigError) as caught:
        expand_suite_paths(["proj"], tmp_path)
    said = caught.value.message
    assert "suite.yaml" in said and "fixtures/repo/eval.yaml" in said, said
    assert "'proj/suite.yaml'" in said  # the file to name instead
    # Named, each runs as asked.
    assert expand_suite_paths(["proj/suite.yaml"], tmp_path) == [Path("proj/suite.yaml")]
    assert expand_suite_paths(["proj/fixtures"], tmp_path) == [Path("proj/fixtures/repo/eval.yaml")]
