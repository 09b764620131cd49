"""``gradebox exec``: run any harness's grader command in a fresh, hardened sandbox.

The harness keeps its protocol: stdin in, stdout and stderr out byte for byte, the command's
exit code as ours. Only paths change: the current folder is mounted read-only as the working
directory, the workspace read-only at /workspace, and every place the harness names them
(see ``gradebox.harness``) is rewritten to the sandbox's paths.

This is the hot path of every sandboxed grader: it is dispatched by ``gradebox.cli.main``
before typer, rich and pydantic exist, and it imports only the standard library, the spec
builder grade uses (``graders.spec``) and the backend it runs on. Which sandbox, which
privileges, ``--locked``, the image resolver and the model targets are the command session's
(``cli.session``, every command's), built from the flags; what is exec's own is which
privileges it can relax, and that it runs no grader on ``host``. The Docker SDK loads only
when the docker backend runs, or an image must be resolved or unpacked by the engine.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from ..core import settings
from ..core.duration import parse_duration
from ..core.record import Record
from ..core.untrusted import Refused
from ..core.untrusted import read_regular as _read_regular
from ..errors import GradeboxError
from ..sandbox.defaults import DEFAULT_SECURITY
from .session import CommandSession
from .session import locked_image_id as _locked_id  # noqa: F401 - the pin, by its old name

TYPE_CHECKING = False  # not typing's: this is the hot path
if TYPE_CHECKING:
    import argparse
    from typing import Any

__all__ = ["HELP", "main"]

EXIT_USAGE = 125  # exec itself failed: bad flag, no image, no engine; nothing ran
EXIT_TIMEOUT = 124  # as timeout(1)
EXIT_NOT_FOUND = 127  # as a shell: the command is not in the image
EXIT_KILLED = 137  # 128 + SIGKILL: out of memory, or stopped for flooding stdout
STDIN_CAP = 256 << 20
INPUT_CAP = 64 << 20  # EVALUATE_GRADER_INPUT and output_path files copied in

HELP = """\
Run COMMAND in a fresh, hardened sandbox, as `gradebox grade` runs a grader: the same
image pinning, limits, hardening; no network (loopback only), a read-only root, a non-root
user. Prefix a harness's grader command with it:
  command: [gradebox, exec, --, python3, graders/check.py]

stdin is passed to COMMAND; its stdout and stderr come back byte for byte (each capped at
1 MiB; a cut is said on stderr). The current folder is mounted read-only as the working
directory (only that folder; its .env files masked). The workspace (--workspace, else
$EVALUATE_WORKSPACE or $AGENTV_WORKSPACE_PATH, else the stdin payload's workspace_path) is
mounted read-only at /workspace, and each of those is rewritten to /workspace. The files
named by $EVALUATE_GRADER_INPUT and the payload's output_path are copied in, and those names
rewritten. The environment passes LANG, LANGUAGE, LC_*, TZ, NO_COLOR, FORCE_COLOR, TERM and
what --env names; nothing else of the host's.

Exit codes: COMMAND's own; 124 timed out; 137 killed (out of memory, or stdout over its
cap); 127 COMMAND not found in the image; 125 exec itself failed (a bad flag, no image, no
engine; one line on stderr); 130 interrupted.
"""


class Options(Record):
    """What the command line asked for (see ``HELP``)."""

    __slots__ = _fields = (
        "command",
        "image",
        "workspace",
        "timeout",
        "sandbox",
        "runtime",
        "allow",
        "env",
        "target",
        "targets",
        "max_calls",
        "locked",
    )


class _Namespace:
    """``_quick``'s answer read as argparse's ``Namespace`` is."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)


class ExecError(Exception):
    """exec's own failure: one line, exit 125."""


def _parser() -> argparse.ArgumentParser:
    import argparse  # lazy: argparse (~7 ms) only for what _quick leaves to it

    p = argparse.ArgumentParser(
        prog="gradebox exec",
        usage="gradebox exec [OPTIONS] -- COMMAND [ARGS...]",
        description=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=True,
    )
    p.add_argument(
        "--image",
        help="image name (python, node, shell) or a pinned reference; "
        "default: chosen from COMMAND (python3 -> python, node/bun -> node, "
        "sh/bash -> shell, else python)",
    )
    p.add_argument("--workspace", "-W", metavar="DIR", help="the workspace, mounted read-only")
    p.add_argument("--timeout", default="60s", help="e.g. 500ms, 30s, 2m (default 60s)")
    p.add_argument(
        "--sandbox",
        help="auto (default: oci where usable, else docker), oci, docker; "
        "default $GRADEBOX_SANDBOX",
    )
    p.add_argument(
        "--runtime",
        help="the oci backend's runtime: auto (default: crun where it works, else runc), "
        "crun, runc or a path; default $GRADEBOX_RUNTIME",
    )
    p.add_argument(
        "--allow",
        action="append",
        default=[],
        metavar="PRIVILEGE",
        help="relax hardening (repeatable): network, writable-root, root",
    )
    p.add_argument(
        "--env",
        "-e",
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help="pass this variable (from the host, or with this value); repeatable",
    )
    p.add_argument(
        "--target",
        metavar="NAME",
        help="give COMMAND a model proxy to this target (defined in --targets FILE, "
        "$GRADEBOX_TARGETS or ~/.gradebox/targets.yaml; never the current folder's)",
    )
    p.add_argument(
        "--targets",
        metavar="FILE",
        help="the targets file --target is read from (gradebox's or AgentV's format)",
    )
    p.add_argument(
        "--max-calls",
        type=int,
        default=50,
        metavar="N",
        help="model calls the proxy lets through (default 50)",
    )
    p.add_argument(
        "--locked",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="refuse images not in images.lock.json (default: on when CI=true)",
    )
    return p


# The options ``_quick`` reads (every one of ``_parser``'s but --help) -> (its key, appended).
_VALUED = {
    "--image": ("image", False),
    "--workspace": ("workspace", False),
    "-W": ("workspace", False),
    "--timeout": ("timeout", False),
    "--sandbox": ("sandbox", False),
    "--runtime": ("runtime", False),
    "--allow": ("allow", True),
    "--env": ("env", True),
    "-e": ("env", True),
    "--target": ("target", False),
    "--targets": ("targets", False),
    "--max-calls": ("max_calls", False),
}


def _quick(argv: list[str]) -> dict[str, Any] | None:
    """What argparse makes of ``argv`` (``_parser``'s options and the command after them),
    for the plain spellings a harness writes: ``--name value``, ``--name=value``, ``-W dir``.
    None for anything else (--help, an abbreviation, an unknown option, a value that starts
    with "-", an integer that is none): argparse reads those, with its own messages. Importing
    and building argparse's parser costs the hot path ~4 ms; this costs nothing."""
    ns: dict[str, Any] = {
        "image": None,
        "workspace": None,
        "timeout": "60s",
        "sandbox": None,
        "runtime": None,
        "allow": [],
        "env": [],
        "target": None,
        "targets": None,
        "max_calls": 50,
        "locked": None,
    }
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-") or arg == "--":
            ns["command"] = argv[i:]
            return ns
        if arg in ("--locked", "--no-locked"):
            ns["locked"] = arg == "--locked"
            i += 1
            continue
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name not in _VALUED:
            return None
        if not eq:
            if i + 1 == len(argv):
                return None
            value = argv[i + 1]
            if value.startswith("-"):
                return None  # argparse may read it as an option: its call
            i += 1
        i += 1
        key, appended = _VALUED[name]
        if key == "max_calls":
            try:
                value = int(value)  # as argparse's type=int
            except ValueError:
                return None
        if appended:
            ns[key].append(value)
        else:
            ns[key] = value
    ns["command"] = []
    return ns


def parse(argv: list[str]) -> Options:
    quick = _quick(argv)
    if quick is not None:
        ns: Any = _Namespace(quick)
    else:
        import argparse  # lazy: argparse (~7 ms) only for what _quick leaves to it

        parser = _parser()

        def fail(message: str) -> Any:
            raise ExecError(message)

        parser.error = fail  # type: ignore[method-assign]
        # Everything from the first word that is not one of ours is the command, `--` or not
        # (a `--` later on is the command's own).
        parser.add_argument("command", nargs=argparse.REMAINDER)
        ns = parser.parse_args(argv)
    command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    if not command:
        raise ExecError("no command given; usage: gradebox exec [OPTIONS] -- COMMAND [ARGS...]")
    try:
        timeout = parse_duration(ns.timeout)
    except ValueError as exc:
        raise ExecError(f"--timeout: {exc}") from None
    named = ns.runtime if ns.runtime is not None else settings.current().runtime
    if named is not None:
        from ..sandbox.runtime import checked  # lazy: sandbox.runtime (~1.3 ms) when named

        where = "--runtime" if ns.runtime is not None else "$GRADEBOX_RUNTIME"
        try:
            ns.runtime = checked(named)
        except ValueError as exc:
            raise ExecError(f"{where}: {exc}") from None
    if ns.max_calls < 1:
        raise ExecError("--max-calls: must be at least 1")
    ns.command, ns.timeout = list(command), timeout
    return Options(**{name: getattr(ns, name) for name in Options._fields})


def main(argv: list[str] | None = None) -> int:
    """Run ``gradebox exec ARGV``; returns the exit code (see ``HELP``)."""
    argv = sys.argv[2:] if argv is None else argv

    def _term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # the same cleanup as Ctrl-C: the container goes

    signal.signal(signal.SIGTERM, _term)
    try:
        opts = parse(argv)
        session = CommandSession(
            sandbox=opts.sandbox,
            allow=opts.allow,
            locked=opts.locked,
            targets=Path(opts.targets) if opts.targets else None,
        )
        return Exec(opts, session, _first_slot(session, opts.runtime)).run()
    except KeyboardInterrupt:
        sys.stderr.write("gradebox exec: interrupted; the sandbox was removed\n")
        return 130
    except ExecError as exc:
        return _own_failure(str(exc))
    except Exception as exc:  # noqa: BLE001 - every failure of ours is one line, never a trace
        if not isinstance(exc, GradeboxError | OSError) or settings.current().debug:
            raise
        return _own_failure(str(exc))


def _first_slot(session: CommandSession, runtime: str | None) -> tuple[Any, str, Any] | None:
    """(runtime, session, slot): the oci backend's first cgroup slot, made before anything
    else is imported or read, so that its one kernel wait passes meanwhile (see
    ``sandbox/slots.py``); None where exec will not run crun from a slot."""
    if session.wanted_sandbox() not in ("auto", "oci") or {"network", "writable-root"} & (
        session.allowed
    ):
        return None
    # lazy: sandbox.runtime and sandbox.slots (~1.3 + ~6 ms) only where oci may run
    from ..sandbox.runtime import choose
    from ..sandbox.slots import first_slot

    chosen, name = choose(runtime), os.urandom(4).hex()
    slot = first_slot(chosen, name)
    return (chosen, name, slot) if slot is not None else None


def _own_failure(message: str) -> int:
    sys.stderr.write(f"gradebox exec: error: {message}\n")
    return EXIT_USAGE


class Exec:
    """One ``gradebox exec`` run: read what the harness gave, run it as a ``GraderRun`` whose
    outcome comes back as it is (the byte-for-byte protocol), report."""

    def __init__(
        self,
        opts: Options,
        session: CommandSession,
        first: tuple[Any, str, Any] | None = None,
    ) -> None:
        self.opts = opts
        self.session = session  # which sandbox, privileges, resolver: every command's rules
        self.first = first  # (runtime, session, slot) made ahead; the sandbox takes it
        self.cwd = Path.cwd().resolve()
        self.box: Any = None

    def run(self) -> int:
        try:
            return self._run()
        finally:
            if self.first is not None:  # made ahead, never taken: the backend was another
                self.first[2].destroy()
            if self.box is not None:
                self.box.close()

    def _run(self) -> int:
        # lazy: the run's modules (~30 ms) load after the first cgroup slot is made, while its
        # kernel wait passes (sandbox/slots.py)
        from ..graders.grader_run import (
            SECRET_SCAN_LIMIT,
            GraderRun,
            masked_secrets,
            refuse_wide,
        )
        from ..graders.spec import CONTAINER_GRADER_DIR, CONTAINER_INPUT_DIR, CONTAINER_WORKSPACE
        from ..sandbox.base import Mount
        from .harness import decode_string, rewrite_top_level, top_level_strings

        opts = self.opts
        security, network = self._privileges()
        # First: the oci backend makes the container's cgroup slot ahead (slots.py), and its
        # one kernel wait then passes while the rest below is read and built.
        self.box = self._sandbox()
        refuse_wide(self.cwd, "the current folder")
        env = self._env()
        stdin = _read_stdin()

        # The workspace: the flag, else the harness's variables, else the payload.
        host_env = os.environ
        spans = top_level_strings(stdin, ("workspace_path", "output_path")) if stdin else {}
        ws_text = (
            opts.workspace
            or host_env.get("EVALUATE_WORKSPACE")
            or host_env.get("AGENTV_WORKSPACE_PATH")
        )
        ws_spans = spans.get("workspace_path", [])
        if not ws_text and ws_spans:
            ws_text = decode_string(stdin, ws_spans[-1])  # the last one wins, as in JSON.parse
        workspace = self._directory(ws_text, "the workspace") if ws_text else None

        files: dict[str, bytes] = {}
        new: dict[tuple[int, int], str] = {}
        if workspace is not None:
            new.update(dict.fromkeys(ws_spans, CONTAINER_WORKSPACE))
        for span in spans.get("output_path", []):
            host = decode_string(stdin, span)
            data = _copied_in(Path(host)) if host else None
            if data is not None:
                files["output.json"] = data
                new[span] = f"{CONTAINER_INPUT_DIR}/output.json"
        if new:
            stdin = rewrite_top_level(stdin, new)
        if host_env.get("EVALUATE_GRADER_INPUT"):
            source = Path(host_env["EVALUATE_GRADER_INPUT"])
            data = _copied_in(source)
            if data is None:
                raise ExecError(
                    f"EVALUATE_GRADER_INPUT={source} is not a readable file (at most "
                    f"{INPUT_CAP >> 20} MiB)"
                )
            files["input.json"] = data
        models = self.session.models(opts)  # --target: the operator's targets, as grade's
        with GraderRun(
            self.box,
            security=security,
            models=models,
            target=opts.target,
            max_calls=opts.max_calls,
            target_field="--target",
        ) as run:
            ws_mount = run.view(workspace)
            # Where the command runs: the current folder, read-only; inside the workspace,
            # the workspace's own mount (Vally runs a grader in the workspace or its sub_path).
            mounts: list[Mount] = []
            if workspace is not None and (workspace == self.cwd or workspace in self.cwd.parents):
                workdir = str(Path(CONTAINER_WORKSPACE) / self.cwd.relative_to(workspace))
                here, there = workspace, CONTAINER_WORKSPACE
            else:
                self._enterable(self.cwd, run.user, "the current folder")
                mounts.append(Mount(self.cwd, CONTAINER_GRADER_DIR, read_only=True))
                try:
                    masks = masked_secrets(self.cwd, CONTAINER_GRADER_DIR, run.scratch)
                except Refused as exc:  # a FIFO, a socket, a device, a link to one
                    where = f"in the current folder ({self.cwd})"
                    raise ExecError(f"{exc.entry} {where} {exc.why}") from None
                if masks is None:
                    raise ExecError(
                        f"{self.cwd} holds more than {SECRET_SCAN_LIMIT} entries, each checked "
                        "for a .env before it is mounted; run from the grader's own folder"
                    )
                mounts += masks
                workdir, here, there = CONTAINER_GRADER_DIR, self.cwd, CONTAINER_GRADER_DIR
            roots = [(here, there)]
            if workspace is not None:
                roots.append((workspace, CONTAINER_WORKSPACE))
            command = _translate(opts.command, roots)
            run.prepare(
                image=self._image(command),
                command=command,
                workspace=ws_mount,
                workdir=workdir,
                mounts=mounts,
                env=env,
                grader_input="input.json" in files,
                timeout=opts.timeout,
                security=security,
                network=network,
                labels={"gradebox.exec": "1"},
                name=Path(opts.command[0]).name or "exec",
            )
            spec = run.spec
            outcome = run.execute(stdin, files)
        return self._report(outcome, spec)

    # -- pieces ------------------------------------------------------------------------------

    def _privileges(self) -> tuple[Any, str]:
        security, network = DEFAULT_SECURITY, "none"
        for name in sorted(self.session.allowed):  # known to every command (the session's)
            if name == "network":
                network = "bridge"
            elif name == "writable-root":
                security = security.replace(read_only_root=False)
            elif name == "root":
                security = security.replace(user="0:0")
            else:
                raise ExecError(
                    f"--allow {name}: exec has no setting that it relaxes (it relaxes network, "
                    "writable-root, root)"
                )
        return security, network

    def _env(self) -> dict[str, str]:
        from .harness import passed_env  # lazy: cli.harness (~8 ms) after the first slot

        env = passed_env(os.environ)
        reserved = ("EVALUATE_WORKSPACE", "EVALUATE_GRADER_INPUT")
        for item in self.opts.env:
            name, eq, value = item.partition("=")
            if not name or "\0" in item:
                raise ExecError(f"--env {item!r}: expected NAME or NAME=VALUE")
            if name.upper() in reserved:
                raise ExecError(
                    f"--env {name}: reserved name: {name.upper()} is set by gradebox for every "
                    "grader (from the harness's own value, rewritten); remove this flag"
                )
            if eq:
                env[name] = value
            elif name in os.environ:
                env[name] = os.environ[name]
        return env

    def _directory(self, text: str, what: str) -> Path:
        path = Path(text).expanduser()
        if not path.is_absolute():
            path = self.cwd / path
        path = path.resolve()
        if not path.is_dir():
            raise ExecError(f"{what} {text} is not a directory")
        return path

    def _enterable(self, folder: Path, user: str, what: str) -> None:
        if not _enters(folder, user):
            raise ExecError(
                f"{what} {folder} is closed to the sandbox user {user} (mode "
                f"{folder.stat().st_mode & 0o777:o}); make it readable (chmod o+rx), or run "
                "gradebox as its owner"
            )

    def _sandbox(self) -> Any:
        name, _why = self.session.chosen_sandbox()  # said by no line: stderr is the grader's
        if name == "host":
            raise ExecError("--sandbox host runs nothing in a sandbox; exec runs oci or docker")
        if name != "oci":
            return self.session.backend(name)
        if self.first is None:
            return self.session.backend(name, lazy=True, runtime=self.opts.runtime)
        runtime, session, slot = self.first
        box = self.session.backend(name, lazy=True, runtime=runtime, session=session, slot=slot)
        self.first = None  # the sandbox's now (taken, or removed)
        return box

    def _image(self, command: list[str]) -> str:
        """The image id: a short name's is the lock's (its root filesystem already unpacked:
        no engine at all); anything else goes through the backend's resolver."""
        # lazy: images.catalog and cli.harness (~9 + ~8 ms) after the first slot
        from ..images.catalog import DEFAULT_IMAGE, qualified
        from .harness import image_for

        name = self.opts.image or image_for(command[0], _shebang(self.cwd, command[0]))
        name = name or DEFAULT_IMAGE
        iid = self.session.locked_image(name)
        if iid is not None:
            return iid
        if self.session.locked and qualified(name) != name:  # a short name the lock lacks
            raise ExecError(
                f"image {name!r} is not in images.lock.json (--locked); run "
                f"`gradebox images build {name}` then `gradebox images lock`"
            )
        return str(self.session.images(self.box).resolve(name))

    def _report(self, outcome: Any, spec: Any) -> int:
        out, err = sys.stdout.buffer, sys.stderr.buffer
        out.write(outcome.stdout)
        out.flush()
        err.write(outcome.stderr)
        cap = int(spec.limits.output)
        notes = []
        if outcome.stderr_dropped:
            notes.append(
                f"stderr: its first {outcome.stderr_dropped} bytes were dropped "
                f"(the last {cap} are kept)"
            )
        code: int
        if outcome.start_error:
            missing = "command not found" in outcome.start_error or "no such executable" in (
                outcome.start_error
            )
            notes.append(outcome.start_error)
            code = EXIT_NOT_FOUND if missing else EXIT_USAGE
        elif outcome.timed_out:
            notes.append(f"timed out after {self.opts.timeout:g}s; the sandbox was killed")
            code = EXIT_TIMEOUT
        elif outcome.oom_killed:
            notes.append(f"killed: out of memory (limit {int(spec.limits.memory) >> 20} MiB)")
            code = EXIT_KILLED
        elif outcome.stdout_dropped:
            notes.append(
                f"stdout cut at {cap} bytes ({outcome.stdout_dropped} more dropped); "
                "the command was stopped"
            )
            code = EXIT_KILLED
        elif outcome.exit_code is None:
            notes.append("the command did not exit; the sandbox was killed")
            code = EXIT_USAGE
        else:
            code = int(outcome.exit_code)
        for note in notes:
            err.write(f"gradebox exec: {note}\n".encode())
        err.flush()
        return code


def _enters(folder: Path, user: str) -> bool:
    from ..graders.spec import enterable  # lazy: graders.spec (~1 ms) after the first slot

    return enterable(folder, user)


def _read_stdin() -> bytes:
    """All of stdin (nothing when it is a terminal, or closed); at most ``STDIN_CAP``."""
    try:
        if sys.stdin is None or sys.stdin.isatty():
            return b""
        data = sys.stdin.buffer.read(STDIN_CAP + 1)
    except (OSError, ValueError):
        return b""
    if len(data) > STDIN_CAP:
        raise ExecError(f"stdin is over {STDIN_CAP >> 20} MiB")
    return data


def _copied_in(source: Path) -> bytes | None:
    """A regular file the harness named, for the payload folder (bounded); else None."""
    data = _read_regular(source, INPUT_CAP)
    return None if data is None or len(data) > INPUT_CAP else data


def _translate(command: list[str], roots: list[tuple[Path, str]]) -> list[str]:
    """Absolute host paths under a mounted folder -> the same file's path in the sandbox
    (plaited runs a grader by its absolute path); everything else as it was."""
    out = []
    for arg in command:
        new = arg
        if arg.startswith("/") and "\0" not in arg:
            path = Path(os.path.normpath(arg))
            for host, there in roots:
                if path == host or host in path.parents:
                    rel = path.relative_to(host).as_posix()
                    new = there if rel == "." else f"{there}/{rel}"
                    break
        out.append(new)
    return out


def _shebang(cwd: Path, program: str) -> bytes | None:
    if "/" not in program:
        return None
    data = _read_regular(cwd / program, 256)
    return None if data is None else data[:256]
