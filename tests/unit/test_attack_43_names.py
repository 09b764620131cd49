"""Attacks with test ids (any string a suite or an AgentV JSONL case gives): a Ray task is
named after its test, and the driver's log lines name it; neither may carry control or
bidirectional characters to a terminal (`ray list tasks`, the run's stderr), nor a name of
any length to Ray's state store."""

from __future__ import annotations

import logging

from gradebox.lifecycle.jobs import TestJob
from tests.unit.test_cluster import _executor

HOSTILE = "t\x1b]0;pwned\x07\x1b[2J\u202eevil\nnext" + "x" * 100_000


def test_a_task_name_is_a_short_printable_form_of_its_test_id():
    run = _executor(["a" * 56])
    options: dict = {}
    run.cluster.item = type("T", (), {"options": lambda self, **kw: options.update(kw)})()
    run._task(TestJob(HOSTILE))
    name = options["name"]
    assert name.isprintable() and len(name) <= 200
    assert name.startswith("t\ufffd]0;pwned\ufffd\ufffd[2J\ufffdevil\ufffdnext")
    run._task(TestJob("plain-id.1"))
    assert options["name"] == "plain-id.1"  # an ordinary id is its own name


def test_the_drivers_log_lines_reach_stderr_without_control_or_bidi_characters(caplog):
    from gradebox.cli.app import LogFormat

    record = logging.LogRecord(
        "gradebox.cluster", logging.WARNING, __file__, 1, "%s: failed on node %s (%s)",
        (TestJob(HOSTILE[:40]), "n1", "engine \x1b[31mgone"), None,
    )  # fmt: skip
    line = LogFormat("gradebox: %(message)s").format(record)
    assert "\x1b" not in line and "\u202e" not in line
    assert line.startswith("gradebox: t\ufffd]0;pwned\ufffd\ufffd[2J⟦U+202E⟧evil")


def test_an_error_naming_a_hostile_test_id_is_one_inert_line_on_stderr(capsys):
    """A test larger than every node is refused naming it (``sizing.too_large``); an
    archive's member is named by the error that refuses it: their text reaches stderr
    through the one door (``app.handled``), made inert there."""
    import typer

    from gradebox.cli.app import handled
    from gradebox.cluster.sizing import Need, too_large
    from gradebox.errors import ClusterError

    line = too_large({f"test {HOSTILE[:40]}": Need(64, 1)}, [{"gradebox": 1, "CPU": 1}])[0]

    @handled
    def command() -> None:
        raise ClusterError(f"{line}; nothing ran")

    try:
        command()
    except typer.Exit as exc:
        assert exc.exit_code == 4
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\u202e" not in err and "\x07" not in err
    assert err.startswith("gradebox: error: test t\ufffd]0;pwned") and "⟦U+202E⟧evil" in err
