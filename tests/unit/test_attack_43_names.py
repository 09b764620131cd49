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
