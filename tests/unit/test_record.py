"""The plain value classes of the sandbox layer (``_record.Record``): what their users relied
on when they were dataclasses, and the lazy logger's dropped debug lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gradebox.sandbox.base import Mount, RunOutcome, SandboxSpec
from gradebox.sandbox.defaults import DEFAULT_LIMITS, DEFAULT_SECURITY


def test_a_spec_is_built_compared_and_replaced_as_before():
    calls = []
    a = SandboxSpec(image="sha256:1", command=["true"], on_start=calls.append)
    b = SandboxSpec("sha256:1", ["true"])
    assert a == b  # on_start is not compared
    assert a.env == {} and a.env is not b.env  # a fresh dict each
    assert a.limits is DEFAULT_LIMITS and a.security is DEFAULT_SECURITY and a.timeout == 60.0
    c = a.replace(stdin=b"{}")
    assert (c.stdin, c.on_start, a.stdin) == (b"{}", calls.append, None)
    assert c != a and "stdin=b'{}'" in repr(c) and "on_start" not in repr(c)
    with pytest.raises(AttributeError):
        a.stdin = b"x"  # frozen
    with pytest.raises(TypeError):
        SandboxSpec(image="x")  # command is required
    with pytest.raises(TypeError):
        SandboxSpec(image="x", command=[], bogus=1)


def test_mounts_are_hashable_values_and_outcomes_are_mutable():
    m = Mount(Path("/a"), "/b")
    assert m == Mount(source=Path("/a"), target="/b", read_only=True)
    assert len({m, Mount(Path("/a"), "/b")}) == 1
    assert m != Mount(Path("/a"), "/b", read_only=False)
    out = RunOutcome(0)
    out.stdout_dropped = 3
    assert out.output_truncated and out == RunOutcome(0, stdout_dropped=3)
    with pytest.raises(AttributeError):
        out.bogus = 1  # slots: a typo is an error, not a new field
    with pytest.raises(TypeError):
        hash(out)


def test_the_default_limits_are_a_frozen_record():
    assert DEFAULT_LIMITS.replace(pids=8).pids == 8 and DEFAULT_LIMITS.pids == 256
    with pytest.raises(AttributeError):
        DEFAULT_LIMITS.pids = 8  # type: ignore[misc]


def test_the_lazy_logger_drops_debug_without_logging_and_keeps_warnings():
    code = (
        "import sys\nfrom gradebox.core.log import LazyLogger\nlog = LazyLogger('gradebox.t')\n"
        "log.debug('d %s', 1)\nlog.info('i')\nprint('logging' in sys.modules)\n"
        "log.warning('w %s', 2)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout == "False\n"
    assert p.stderr == "w 2\n"  # logging's last resort, as before
    configured = (
        "import logging\nlogging.basicConfig(level=logging.DEBUG, format='%(message)s')\n" + code
    )
    p = subprocess.run([sys.executable, "-c", configured], capture_output=True, text=True)
    assert p.stderr == "d 1\ni\nw 2\n"


def test_a_scratch_folder_is_made_where_tempfile_and_the_sweep_look(tmp_path):
    """new_scratch no longer imports tempfile: its folder must still be the one
    tempfile.gettempdir() names (collect_scratch sweeps there), private, and named ours."""
    code = (
        "import os, stat, sys\nfrom gradebox.core.scratch import new_scratch\n"
        "p = new_scratch()\nloaded = 'tempfile' in sys.modules\nimport tempfile\n"
        "print(p.parent == __import__('pathlib').Path(tempfile.gettempdir()), loaded,"
        " oct(stat.S_IMODE(p.stat().st_mode)), p.name.startswith(f'gradebox-{os.getpid()}-'))\n"
        "from gradebox.core.scratch import collect_scratch\n"
        "print(collect_scratch(owner=os.getpid()) == [p], p.exists())\n"
    )
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path)}
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert p.stdout.split("\n")[:2] == ["True False 0o700 True", "True False"], p.stdout + p.stderr
    env["TMPDIR"] = str(tmp_path / "missing")  # tempfile passes it over: so must we
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert p.stdout.split("\n")[1] == "True False", p.stdout + p.stderr


def test_records_pickle_and_copy_frozen_or_not():
    """Ray ships specs and outcomes between processes; frozen records refuse __setattr__."""
    import copy
    import pickle

    calls: list[object] = []
    spec = SandboxSpec("sha256:1", ["c"], mounts=(Mount(Path("/a"), "/b"),), on_start=calls.append)
    for value in (Mount(Path("/a"), "/b"), RunOutcome(0, stdout=b"x"), spec, DEFAULT_LIMITS):
        for again in (pickle.loads(pickle.dumps(value)), copy.copy(value), copy.deepcopy(value)):
            assert again == value and type(again) is type(value)
