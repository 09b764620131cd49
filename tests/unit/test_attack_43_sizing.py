"""Attacks on a test's request to Ray (``cluster.sizing``): its containers' declared limits
become ``num_cpus`` and ``memory``. A limit no engine and no Ray can hold (infinite, 1e300
cores, more bytes than an int64) is refused where limits are read, in one line naming the
file and field; before, it reached Ray's ``.options()`` (OverflowError: a traceback) on a
cluster whose node sizes are not known, and the engine's int64 fields on one machine."""

from __future__ import annotations

import pytest

from gradebox.errors import ConfigError
from gradebox.suite import load_suite


def _suite(tmp_path, limits: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "s.yaml"
    path.write_text(
        "tests:\n  - id: t\n    output: x\n"
        f"    assert: [{{type: script, command: 'true', limits: {{{limits}}}}}]\n"
    )
    return path


@pytest.mark.parametrize(
    "limits, field",
    [
        ("cpus: .inf", "limits.cpus"),
        ("cpus: 1e300", "limits.cpus"),
        ("cpus: .nan", "limits.cpus"),
        ("cpus: 0", "limits.cpus"),
        ("cpus: -1", "limits.cpus"),
        ("memory: 99999999999999999999999", "limits.memory"),
        ("memory: 16EiB", "limits.memory"),
    ],
)
def test_a_limit_no_engine_or_ray_can_hold_is_one_line_naming_the_field(tmp_path, limits, field):
    path = _suite(tmp_path, limits)
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    text = str(info.value)
    assert "\n" not in text and str(path) in text and field in text, text


def test_the_largest_limits_still_accepted_become_rays_options_without_overflow(tmp_path):
    import ray

    from gradebox.cluster.sizing import test_need

    # 2**63 - 1: the largest int64 (16 EiB, above, is refused)
    suite = load_suite(_suite(tmp_path, "cpus: 65536, memory: 9223372036854775807"))
    need = test_need(suite, suite.tests[0])

    @ray.remote
    def f() -> None:  # never run: only its options are checked
        pass

    f.options(**need.ray_options())  # no OverflowError


HOST_TARGETS = ["{provider: mock, response: hi}", "{provider: model, model: m}"]


@pytest.mark.parametrize("target", HOST_TARGETS)
def test_a_target_on_the_host_asks_nothing_of_a_node(tmp_path, target):
    """A mock, replay or model target answers in the node's worker process, in no
    container: its (default) limits are no request. Before, a suite of builtin
    assertions asked 1 CPU and 1 GiB per test, and a node smaller than that refused the run
    as 'too large' though it would run no container at all."""
    from gradebox.cluster.sizing import Need, test_need, too_large

    path = tmp_path / "s.yaml"
    path.write_text(
        f"target: {target}\n"
        "tests:\n  - id: t\n    output: x\n    assert: [{type: contains, value: x}]\n"
    )
    suite = load_suite(path)
    need = test_need(suite, suite.tests[0])
    assert need == Need(0.0, 0)
    assert too_large({"test t": need}, [{"gradebox": 1, "CPU": 0.5, "memory": 256 << 20}]) == []


def test_a_trials_target_run_asks_for_the_limits_it_runs_with():
    """``trials --target`` sends two kinds of job through one run: each record's target run
    (``run_target_once``: the default limits) and its grading (the grader's limits). A
    grader with small limits made every target run ask for them too: a node took more
    1-CPU, 1-GiB target containers than it holds."""
    from gradebox.cluster.sizing import Need
    from gradebox.lifecycle.jobs import GradeJob, Record, TrialJob
    from gradebox.sandbox.defaults import DEFAULT_LIMITS
    from tests.unit.test_cluster import _executor

    run = _executor(["a" * 56])
    run.need = Need(0.25, 256 << 20)  # the grader's
    options: dict = {}
    run.cluster.item = type("T", (), {"options": lambda self, **kw: options.update(kw)})()
    record = Record(id="p", input="q", output="")
    run._task(TrialJob(0, record, "echo hi", "sha256:" + "1" * 64))
    assert options["num_cpus"] == DEFAULT_LIMITS.cpus
    assert options["memory"] == int(DEFAULT_LIMITS.memory)
    run._task(GradeJob(1, record))
    assert options["num_cpus"] == 0.25 and options["memory"] == 256 << 20


@pytest.mark.parametrize("hook", ["before_each", "after_each", "before_all"])
def test_a_workspace_hook_is_a_container_the_test_asks_for(tmp_path, hook):
    """A workspace hook runs in a container of the default limits (``run_hook``), alone,
    before the target or after the graders: a phase of its own. A test of builtin
    assertions with a hook asked for no CPU and no memory at all."""
    from gradebox.cluster.sizing import Need, test_need
    from gradebox.sandbox.defaults import DEFAULT_LIMITS

    path = tmp_path / "s.yaml"
    path.write_text(
        f"workspace: {{template: ws, {hook}: [sh, -c, 'true']}}\n"
        "tests:\n  - id: t\n    output: x\n    assert: [{type: contains, value: x}]\n"
    )
    (tmp_path / "ws").mkdir()
    suite = load_suite(path)
    assert test_need(suite, suite.tests[0]) == Need(DEFAULT_LIMITS.cpus, int(DEFAULT_LIMITS.memory))
