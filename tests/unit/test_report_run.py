"""`run --report` and `gradebox report` at a run's edges (issue 42, item 9): an interrupted
run still writes the report of what finished and says how to continue; a run of several
files is one report; a folder that holds runs, not a run, names them.

Built-in assertions over recorded answers, on the host sandbox: no container needed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import gradebox.cli.run as run_cli
from gradebox.cli.app import app
from gradebox.drivers.runner import run_suite
from tests.conftest import write


def suite(answer: str, name: str, ids: tuple[str, ...]) -> str:
    body = "".join(
        f"  - id: {i}\n    output: {answer}\n    assert: [{{type: equals, value: right}}]\n"
        for i in ids
    )
    return f"name: {name}\ntests:\n{body}"


def gradebox(*args: object) -> tuple[int, str]:
    ran = ["--sandbox", "host", "--format", "gradebox"] if args[0] == "run" else []
    result = CliRunner().invoke(app, [*map(str, args), *ran])
    return result.exit_code, result.output


def report_ids(page: Path) -> list[str]:
    """The test ids the report's page data holds (its rows, and its plan's)."""
    html = page.read_text()
    data = json.loads(re.search(r'id="gradebox-data">(.*?)</script>', html).group(1))
    (run,) = data["runs"]
    return sorted({r["id"] for r in run["rows"]} | set(run["plan"] or []))


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GRADEBOX_SANDBOX", raising=False)
    write(tmp_path / "a.yaml", suite("right", "first", ("t1", "t2", "t3", "t4")))
    write(tmp_path / "b.yaml", suite("right", "second", ("u1", "u2")))
    return tmp_path


def test_a_run_of_several_files_is_one_report(tree: Path) -> None:
    code, text = gradebox("run", "a.yaml", "b.yaml", "--out", "o", "--report", "o/report.html")
    assert code == 0, text
    assert (tree / "o/report.html").is_file()
    assert not list((tree / "o").glob("report-*.html"))  # no page per file
    ids = report_ids(tree / "o/report.html")
    assert ids == ["first: t1", "first: t2", "first: t3", "first: t4", "second: u1", "second: u2"]
    data = (tree / "o/report.html").read_text()
    assert '"total":6' in data and '"passed":6' in data  # the whole run's summary
    # `gradebox report DIR` reads the same folder as one run
    code, text = gradebox("report", "o", "-o", "again.html")
    assert code == 0, text
    assert report_ids(tree / "again.html") == ids


def test_a_folder_of_runs_names_them(tree: Path) -> None:
    for name in ("x", "y"):
        assert gradebox("run", "a.yaml", "--out", f"runs/{name}")[0] == 0
    code, text = gradebox("report", "runs", "-o", "r.html")
    assert code == 2
    flat = " ".join(text.split())
    assert "2 run folder(s): x, y" in flat and "gradebox report runs/x" in flat, text
    (tree / "empty").mkdir()
    code, text = gradebox("report", "empty", "-o", "r.html")
    assert code == 2 and "gradebox run --out" in " ".join(text.split()), text


@pytest.mark.parametrize("files", [("a.yaml",), ("a.yaml", "b.yaml")])
def test_an_interrupted_run_writes_its_report_and_names_the_next_commands(
    tree: Path, monkeypatch: pytest.MonkeyPatch, files: tuple[str, ...]
) -> None:
    def stopped_after_two(suite, box, images, options, on_result, on_start, executor):
        seen = []

        def stop(result):
            on_result(result)
            seen.append(result)
            if len(seen) == 2:
                raise KeyboardInterrupt  # Ctrl-C after two results

        return run_suite(suite, box, images, options, stop, on_start, executor)

    monkeypatch.setattr(run_cli, "run_suite", stopped_after_two)
    code, text = gradebox("run", *files, "--out", "o", "--report", "o/report.html",
                          "--workers", "1")  # fmt: skip
    assert code == 130, text
    flat = " ".join(text.split())
    assert f"gradebox run {' '.join(files)} --resume o" in flat, text
    assert "gradebox report o" in flat and "o/report.html" in flat, text
    assert "2 finished result(s)" in flat, text
    page = tree / "o/report.html"
    assert page.is_file()
    html = page.read_text()
    # what finished, and every planned test listed (those not run too)
    label = "first: " if len(files) > 1 else ""
    assert [f"{label}t{i}" for i in (1, 2, 3, 4)] == report_ids(page)[:4]
    assert '"interrupted":true' in html
    if len(files) > 1:  # the whole run's summary: the file not reached counts as not run
        top = json.loads((tree / "o/summary.json").read_text())
        assert top["interrupted"] and top["total"] == 6 and top["not_run"] == 4, top
