"""One command session: ``gradebox exec`` and ``grade``'s lean path take which sandbox, which
privileges, ``--locked``, the image resolver and the lock's pin from ``cli.session`` (the code
every typer command uses), not from copies of its rules. Each test stands in for one of the
session's functions and sees exec or the lean path follow it: one that re-implements the
choice would not."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gradebox.cli import exec as exec_cli
from gradebox.cli import grade_lean
from gradebox.cli import session as session_module
from gradebox.cli.session import CommandSession
from gradebox.errors import ConfigError
from tests.conftest import loaded_by


@pytest.fixture(autouse=True)
def _plain_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    for name in ("GRADEBOX_SANDBOX", "GRADEBOX_RUNTIME", "CI"):
        monkeypatch.delenv(name, raising=False)
    tmp_path.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    term = signal.getsignal(signal.SIGTERM)  # exec's main sets its own
    yield
    signal.signal(signal.SIGTERM, term)


class _Resolver:
    def __init__(self) -> None:
        self.asked: list[tuple[object, ...]] = []

    def resolve(self, *name: object) -> str:
        self.asked.append(name)
        return "sha256:" + "e" * 64


# -- exec ------------------------------------------------------------------------------------


def test_exec_runs_on_the_sandbox_the_session_chooses(monkeypatch, capsys):
    asked = []

    def chosen(self, suite_default=None):  # type: ignore[no-untyped-def]
        asked.append(self.wanted_sandbox())
        return "host", None  # exec refuses host by its own rule: seen on stderr

    monkeypatch.setattr(CommandSession, "chosen_sandbox", chosen)
    assert exec_cli.main(["--sandbox", "docker", "--", "true"]) == exec_cli.EXIT_USAGE
    assert asked == ["docker"]
    assert "--sandbox host runs nothing" in capsys.readouterr().err


def test_exec_opens_the_backend_the_session_opens(monkeypatch):
    opened = []

    def backend(self, name, *, lazy=False, **oci):  # type: ignore[no-untyped-def]
        opened.append((name, lazy, oci))
        raise ConfigError("the session's backend")

    monkeypatch.setattr(CommandSession, "backend", backend)
    assert exec_cli.main(["--sandbox", "docker", "--", "true"]) == exec_cli.EXIT_USAGE
    assert opened == [("docker", False, {})]


def test_exec_checks_allow_through_the_session(monkeypatch, capsys):
    seen = []

    def checked(allow):  # type: ignore[no-untyped-def]
        seen.append(list(allow))
        raise ConfigError("refused by the session's rule", field="--allow")

    monkeypatch.setattr(session_module, "checked_allow", checked)
    assert exec_cli.main(["--allow", "network", "--", "true"]) == exec_cli.EXIT_USAGE
    assert seen == [["network"]]
    err = capsys.readouterr().err
    assert err.startswith("gradebox exec: error: ") and "session's rule" in err


def test_an_unknown_privilege_is_the_sessions_error_in_exec(capsys):
    assert exec_cli.main(["--allow", "netwrk", "--", "true"]) == exec_cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "unknown privilege 'netwrk'" in err and err.count("\n") == 1


def _exec(argv: list[str]) -> exec_cli.Exec:
    opts = exec_cli.parse(argv)
    session = CommandSession(sandbox=opts.sandbox, allow=opts.allow, locked=opts.locked)
    run = exec_cli.Exec(opts, session)
    run.box = object()  # never asked: the session's resolver is
    return run


def test_exec_resolves_images_through_the_session(monkeypatch):
    resolver = _Resolver()
    given = []

    def images(self, box, allow=()):  # type: ignore[no-untyped-def]
        given.append((box, self.locked))
        return resolver

    monkeypatch.setattr(CommandSession, "images", images)
    monkeypatch.setattr(CommandSession, "locked_image", lambda self, name: None)
    run = _exec(["--image", "ghcr.io/x/y@sha256:" + "a" * 64, "--", "true"])
    assert run._image(["true"]) == "sha256:" + "e" * 64
    assert given == [(run.box, False)] and resolver.asked == [("ghcr.io/x/y@sha256:" + "a" * 64,)]


def test_exec_takes_the_lock_pin_and_locked_from_the_session(monkeypatch):
    monkeypatch.setattr(CommandSession, "locked_image", lambda self, name: f"sha256:{name}")
    assert _exec(["--", "sh", "-c", "true"])._image(["sh"]) == "sha256:shell"
    monkeypatch.setattr(CommandSession, "locked_image", lambda self, name: None)
    monkeypatch.setenv("CI", "true")  # the session's default for --locked
    with pytest.raises(exec_cli.ExecError, match="not in images.lock.json"):
        _exec(["--", "sh", "-c", "true"])._image(["sh"])


def test_exec_makes_its_first_slot_only_where_the_session_wants_oci(monkeypatch):
    monkeypatch.setattr(CommandSession, "wanted_sandbox", lambda self, d=None: "docker")
    session = CommandSession(sandbox="oci")
    assert exec_cli._first_slot(session, None) is None  # the session's word, not the flag's


# -- grade's lean path -----------------------------------------------------------------------


def _call(argv: list[str]) -> grade_lean._Call:
    opts = grade_lean.parse(argv)
    assert opts is not None
    call = grade_lean._Call(opts)
    call.session = CommandSession(
        opts.as_json, sandbox=opts.sandbox, allow=opts.allow, locked=opts.locked
    )
    return call


def test_the_lean_path_runs_only_on_the_sessions_oci(monkeypatch):
    monkeypatch.setattr(CommandSession, "chosen_sandbox", lambda self, d=None: ("docker", None))
    with pytest.raises(grade_lean.Fallback):
        _call(["g.yaml", "--sandbox", "oci"])._backend()
    monkeypatch.setattr(CommandSession, "wanted_sandbox", lambda self, d=None: "docker")
    with pytest.raises(grade_lean.Fallback):
        _call(["g.yaml", "--sandbox", "oci"])._backend()


def test_the_lean_path_opens_and_says_the_sessions_sandbox(monkeypatch, capsys):
    box = object()
    opened = []

    def backend(self, name, *, lazy=False, **oci):  # type: ignore[no-untyped-def]
        opened.append((name, lazy))
        return box

    monkeypatch.setattr(CommandSession, "chosen_sandbox", lambda self, d=None: ("oci", "why"))
    monkeypatch.setattr(CommandSession, "backend", backend)
    monkeypatch.setenv("COLUMNS", "200")
    opener = _call(["g.yaml"])._backend()
    assert opener() is box and opened == [("oci", True)]
    assert capsys.readouterr().err == "sandbox: oci (why)\n"


def test_the_lean_path_checks_allow_through_the_session(monkeypatch):
    def checked(allow):  # type: ignore[no-untyped-def]
        raise ConfigError("refused by the session's rule", field="--allow")

    monkeypatch.setattr(session_module, "checked_allow", checked)
    opts = grade_lean.parse(["g.yaml", "--allow", "network"])
    with pytest.raises(grade_lean.Fallback):  # the full path says it, in its words
        grade_lean._Call(opts).run()


def test_the_lean_path_takes_the_pin_and_resolver_from_the_session(monkeypatch):
    class Grader:
        image = "node"
        source_dir = Path("/pack")

    monkeypatch.setattr(CommandSession, "locked_image", lambda self, name: f"sha256:{name}")
    assert _call(["g.yaml"])._image(Grader()) == "sha256:node"


# -- the session itself ----------------------------------------------------------------------


def test_the_session_loads_nothing_exec_refuses():
    heavy = ("pydantic", "typer", "rich", "docker", "yaml", "logging", "typing", "argparse",
             "dataclasses", "inspect", "gradebox.cli._common", "gradebox.sandbox.oci")  # fmt: skip
    assert loaded_by(["gradebox.cli.session"], heavy) == []


def test_its_output_layer_is_built_on_first_use():
    code = (
        "import sys\nfrom gradebox.cli.session import CommandSession\n"
        "s = CommandSession(True, sandbox='oci', allow=['network'])\n"
        "assert 'rich' not in sys.modules\n"
        "assert s.out is s.out and s.out.as_json\n"
        "assert 'rich' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_choices_are_the_settings_then_the_flags(monkeypatch):
    monkeypatch.setenv("GRADEBOX_SANDBOX", " Docker ")
    assert CommandSession().wanted_sandbox() == "docker"
    assert CommandSession(sandbox="oci").chosen_sandbox() == ("oci", None)
    monkeypatch.delenv("GRADEBOX_SANDBOX")
    assert CommandSession().wanted_sandbox("host") == "host"
    assert CommandSession().locked is False and CommandSession(locked=True).locked is True
    monkeypatch.setenv("CI", "true")
    assert CommandSession().locked is True and CommandSession(locked=False).locked is False
    with pytest.raises(ConfigError, match="unknown privilege 'netwrk'"):
        CommandSession(allow=["netwrk"])


def test_the_resolver_is_given_the_privileges_and_locked():
    class Box:
        def images(self, **kw):  # type: ignore[no-untyped-def]
            return kw

    got = CommandSession(allow=["network"], locked=True).images(Box(), ["build"])
    assert got == {"locked": True, "build_network": True, "build": True}


def test_exec_and_the_lean_path_keep_no_copy_of_the_rules():
    """What the session decides is read nowhere else in them (a second copy drifts)."""
    for module in (exec_cli, grade_lean):
        text = Path(module.__file__).read_text()
        for copy in ("settings.current().sandbox", "settings.current().ci", "auto_reason",
                     "choose_backend", "get_sandbox", ".images(locked=", "PRIVILEGES",
                     "lock_bytes"):  # fmt: skip
            assert copy not in text, (module.__name__, copy)
