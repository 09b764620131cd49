"""The host backend: plain subprocesses, NO isolation. For benchmarks and comparisons only.

It runs a ``SandboxSpec`` as a process group on this machine, translating container paths
(mount targets) back to the host paths they stand for. Timeouts and output caps hold; nothing
else does, and the conformance suite says so (see ``tests/docker/test_conformance.py``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Any

from .base import ImageSource, RunOutcome, Sandbox, SandboxSpec, register_sandbox

__all__ = ["HostSandbox"]


class _HostImages:
    """There are no images on the host: every reference is the host itself."""

    def resolve(self, ref: object, source_dir: object = None) -> str:
        return "host"


@register_sandbox("host")
class HostSandbox(Sandbox):
    """Runs graders as bare host subprocesses: unsafe for untrusted code, by design."""

    isolated = False

    def resolve_image(self, ref: str) -> str:
        return "host"

    def images(self, **options: Any) -> ImageSource:
        return _HostImages()

    def run(self, spec: SandboxSpec) -> RunOutcome:
        def host_path(value: str) -> str:
            for m in sorted(spec.mounts, key=lambda m: -len(m.target)):
                if value == m.target or value.startswith(m.target + "/"):
                    return str(m.source) + value[len(m.target) :]
            return value

        argv = [host_path(a) for a in spec.command]
        env = {**os.environ, **{k: host_path(v) for k, v in spec.env.items()}}
        cwd = host_path(spec.workdir)
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd if os.path.isdir(cwd) else None,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            return RunOutcome(exit_code=None, start_error=exc.strerror or str(exc))
        timed_out = False
        try:
            out, err = proc.communicate(spec.stdin or b"", timeout=spec.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        cap = int(spec.limits.output)
        code = proc.returncode
        return RunOutcome(
            exit_code=None if timed_out else (128 - code if code < 0 else code),
            signal=-code if code < 0 and not timed_out else None,
            stdout=out[:cap],
            stderr=err[-cap:],
            stdout_dropped=max(0, len(out) - cap),
            stderr_dropped=max(0, len(err) - cap),
            timed_out=timed_out,
            duration_ms=int((time.monotonic() - started) * 1000),
        )
