"""``gradebox grade``'s lean path: a grader file validated before, run without pydantic.

Dispatched by ``gradebox.cli.main`` before typer exists, as ``exec`` is. ``main`` returns the
exit code, or None to hand the call to the full command (``cli.grade``), which then does all
of it as if this had not run: nothing is printed and nothing is started before this path
knows it can finish the call. It imports the standard library, the grader's run
(``graders.grader_run``, ``graders.run``, ``graders.checks``, ``graders.verdict``), the plain
wire formats (``wire``) and the oci backend; never pydantic, typer, rich, PyYAML or the
Docker SDK (unless an image must come from the engine), which
``tests/unit/test_grade_lean.py`` checks.

It runs a call only when all of it is one it can answer exactly as the full command would:

- the grader file is YAML or JSON and its validated form is in the private cache
  (``graders.compiled``: the first run of a file, or of a changed one, is the full path's,
  which stores it); graders with ``target:`` or ``image: {build: ...}`` are never cached;
- the options are spelled plainly: ``-i/--input``, ``-W/--workspace``, ``--sandbox``,
  ``--allow``, ``--locked/--no-locked``, ``--json``, each ``--name value`` or ``--name=value``
  (``--help``, ``--targets``, root options such as ``--runtime`` and anything else: full path);
- the backend is ``oci`` (named, or ``auto``'s choice);
- the payload is one ``wire.payload_dump`` vouches for (else the full path, given the same
  bytes of stdin);
- any error before the grader starts (a missing script, a privilege not allowed, a workspace
  that is not a folder) is left to the full path, which says it in its own words.

Which sandbox, which privileges, ``--locked``, the image resolver, the lock's pin and the
line saying ``auto``'s choice are the command session's (``cli.session``), as for the full
command: this path only refuses what it cannot answer.

Its output is the full path's: the ``--json`` document byte for byte (``wire.result_json``,
else the model writes it), the human lines by the same writer (``report.plain``, which
loads rich only for a terminal), and the same exit codes.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
from pathlib import Path

from ..core import settings
from ..core.json_bounds import load_json
from ..core.untrusted import read_file, read_within
from ..errors import ConfigError, GradeboxError
from ..graders import compiled
from ..graders.checks import check_grader
from ..graders.grader_run import LARGE_OUTPUT_CHARS, refuse_wide, resolve_sub_path
from ..graders.run import prepare_grader
from ..graders.spec import CONTAINER_INPUT_DIR, CONTAINER_WORKSPACE
from ..images.catalog import DEFAULT_IMAGE
from .session import CommandSession

TYPE_CHECKING = False  # not typing's: this is the hot path
if TYPE_CHECKING:
    from typing import Any

__all__ = ["checked_workspace", "main", "read_payload"]

DIALECT = "script"  # grade reads a grader file as a script grader (batch.load_grader_ref)


class Options:
    __slots__ = ("file", "input", "workspace", "sandbox", "allow", "locked", "as_json")

    def __init__(self) -> None:
        self.file: str | None = None
        self.input: str | None = None
        self.workspace: str | None = None
        self.sandbox: str | None = None
        self.allow: list[str] = []
        self.locked: bool | None = None
        self.as_json = False


_VALUED = {"--input": "input", "-i": "input", "--workspace": "workspace", "-W": "workspace",
           "--sandbox": "sandbox", "--allow": "allow"}  # fmt: skip


def parse(argv: list[str]) -> Options | None:
    """What typer makes of ``argv`` (after ``grade``) for the plain spellings; None for
    anything else (typer then reads it, with its own messages)."""
    opts = Options()
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg in ("--json", "--locked", "--no-locked"):
            if arg == "--json":
                opts.as_json = True
            elif arg == "--locked":
                # The full path checks the engine's image against the lock and refuses a
                # tampered one; the lean path would run the lock's own id unasked.
                return None
            else:
                opts.locked = False
            continue
        if not arg.startswith("-"):
            if opts.file is not None:
                return None  # a second argument: typer's error
            opts.file = arg
            continue
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name not in _VALUED:
            return None
        if not eq:
            if i == len(argv):
                return None
            value = argv[i]
            i += 1
        if not value or (value.startswith("-") and value != "-"):
            return None
        key = _VALUED[name]
        if key == "allow":
            opts.allow.append(value)
        else:
            setattr(opts, key, value)
    return opts if opts.file is not None else None


class Fallback(Exception):
    """The full command must answer this call (see the module's docstring)."""


def main(argv: list[str]) -> int | None:
    """Run ``gradebox grade ARGV`` if this path can; its exit code, or None for the full path."""
    opts = parse(argv)
    if opts is None:
        return None
    call = _Call(opts)
    try:
        return call.run()
    except Fallback:
        if call.stdin is not None:  # `-i -`, read here: the full path reads the same bytes
            sys.stdin = io.TextIOWrapper(io.BytesIO(call.stdin), encoding="utf-8")
        return None


class _Call:
    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.stdin: bytes | None = None
        self.session: CommandSession

    def run(self) -> int:
        opts = self.opts
        try:
            self.session = CommandSession(
                opts.as_json, sandbox=opts.sandbox, allow=opts.allow, locked=opts.locked
            )
        except ConfigError:
            raise Fallback from None  # an unknown privilege: the full path names it
        path = Path(opts.file or "")
        if path.suffix.lower() not in compiled.SUFFIXES:
            raise Fallback
        raw = _read_regular(path)
        if raw is None:
            raise Fallback
        grader = compiled.load(path, raw, DIALECT)
        if grader is None:
            raise Fallback  # first run of this file (or of this version of it): validated there
        box_opener = self._backend()
        try:
            body, big = self._payload()
            workspace = checked_workspace(Path(opts.workspace) if opts.workspace else None)
            check_grader(grader, self.session.allowed, file=str(path), workspaces=(workspace,))
            resolve_sub_path(workspace, grader.sub_path, file=str(path))
        except ConfigError:
            raise Fallback from None  # said by the full path, in its words
        image = self._image(grader)
        # From here on, this call is this path's: what fails is said as the full path says it.
        signal.signal(signal.SIGTERM, _term)
        try:
            box = box_opener()
            try:
                if image is None:
                    images = self.session.images(box)
                    image = str(images.resolve(grader.image or "python", grader.source_dir))
                ready = prepare_grader(
                    grader,
                    workspace,
                    box,
                    image_id=image,
                    file=str(path),
                    warm=False,
                    mask_workspace=not opts.workspace,
                )
                fields = ready.run_wire(body, big)
            finally:
                box.close()
        except KeyboardInterrupt:
            return _fail("interrupted; every container of this run was removed", 130)
        except (GradeboxError, OSError) as exc:
            from .failures import failure  # lazy: cli.failures (~0.4 ms) on a failure only

            said = failure(exc)
            if said is None:
                raise
            return _fail(*said)
        self._print(fields)
        return {"error": 3, "failed": 1}.get(fields["status"], 0)

    # -- pieces ------------------------------------------------------------------------------

    def _backend(self) -> Any:
        """A function opening the oci backend (the session's), with the full path's line
        about ``auto``."""
        session = self.session
        if session.wanted_sandbox() not in ("auto", "oci"):
            raise Fallback
        named = settings.current().runtime
        if named is not None:
            from ..sandbox.runtime import checked  # lazy: sandbox.runtime (~2 ms) when named

            try:
                os.environ["GRADEBOX_RUNTIME"] = checked(named)  # as the app's root does
            except ValueError:
                raise Fallback from None
        chosen = session.chosen_sandbox()
        if chosen[0] != "oci":
            raise Fallback

        def opener() -> Any:
            # The engine is reached only if the image must be resolved or unpacked by it.
            return session.open_sandbox(lazy=True, chosen=chosen)

        return opener

    def _payload(self) -> tuple[bytes, str | None]:
        # lazy: protocol.wire (~2-6 ms) is this path's own: the full command imports this module
        # for checked_workspace and read_payload, and never needs it
        from ..protocol.wire import Unsure, payload_dump

        data: dict[str, Any] = {}
        if self.opts.input:
            if self.opts.input == "-":
                self.stdin = sys.stdin.buffer.read()
            data = read_payload(self.opts.input, self.stdin)
        try:
            wire = payload_dump(data)
        except Unsure:
            raise Fallback from None
        # As GraderRun.run: the workspace where the grader sees it, a long answer apart.
        wire["workspace_path"] = CONTAINER_WORKSPACE
        big = None
        if wire["output"] is not None and len(wire["output"]) > LARGE_OUTPUT_CHARS:
            big = json.dumps(wire["output"])
            wire["output"] = None
            wire["output_path"] = f"{CONTAINER_INPUT_DIR}/output.json"
        return json.dumps(wire, ensure_ascii=False).encode(), big

    def _image(self, grader: Any) -> str | None:
        """The lock's id for a short name, as exec takes it; None: the resolver's to find."""
        return self.session.locked_image(grader.image or DEFAULT_IMAGE)

    def _print(self, fields: dict[str, Any]) -> None:
        from ..protocol.wire import Unsure, result_json  # lazy: as in _payload

        if self.session.as_json:
            try:
                text = result_json(fields)
            except Unsure:
                text = _model(fields).model_dump_json(indent=2)
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
            return
        from ..report.plain import print_result  # lazy: report.plain (~2 ms) without --json

        print_result(fields)


def _model(fields: dict[str, Any]) -> Any:
    # lazy: verdict (~7 ms, and pydantic when called) only for a result wire cannot vouch for
    from ..graders.verdict import result_of

    return result_of(fields)


def _term(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # the same clean-up as Ctrl-C: the container goes


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"gradebox: error: {message}\n")
    return code


def checked_workspace(workspace: Path | None) -> Path:
    """``-W``, else the current folder; a ``ConfigError`` for one that is no folder or is too
    wide to mount (the root, the home folder or above it), as for exec."""
    workspace = workspace or Path(".")
    if not workspace.is_dir():
        raise ConfigError(f"workspace {workspace} is not a directory", field="--workspace")
    refuse_wide(workspace, "the workspace")  # before anything starts (GraderRun's rule)
    return workspace


def read_payload(source: str, stdin: bytes | None = None) -> dict[str, Any]:
    """The payload's JSON object from a file, or ``-`` for stdin (``stdin``: already read).
    Errors name the file and the field."""
    name = "<stdin>" if source == "-" else source
    try:
        if source == "-":
            raw = sys.stdin.buffer.read(PAYLOAD_CAP + 1) if stdin is None else stdin
            if len(raw) > PAYLOAD_CAP:
                raise OSError(27, f"over {PAYLOAD_CAP >> 20} MiB")
        else:
            raw = read_file(source, PAYLOAD_CAP)  # a FIFO or /dev/zero named: one line
    except OSError as exc:
        raise ConfigError(f"cannot read payload: {exc.strerror or exc}", file=name) from None
    # Bytes, decoded and bounded in one place: binary, UTF-16, deep nesting and lone
    # surrogates are one line naming the file, not a traceback at a later step.
    data = load_json(raw, file=name)
    if not isinstance(data, dict):
        raise ConfigError("the payload must be a JSON object", file=name)
    return data


def _read_regular(path: Path) -> bytes | None:
    """The grader file's bytes if it is a regular file of at most the YAML loader's cap."""
    return read_within(path, GRADER_FILE_CAP)


PAYLOAD_CAP = 256 << 20  # as exec's stdin: an answer, its messages and their files
GRADER_FILE_CAP = 64 << 20  # _yaml.MAX_FILE_BYTES: past it, the full path says it is refused
