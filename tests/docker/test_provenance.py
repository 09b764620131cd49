"""A grader pack may name a model target, never define one (docs/security.md, provenance):
``gradebox grade`` and ``gradebox exec`` on both backends, with a pack that ships its own
``.gradebox/targets.yaml`` or ``.agentv/targets.yaml`` redefining ``judge``. Two scripted model
servers on loopback record what reaches them: the operator's, and the pack's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import leftovers_of, seeded_cache, write
from tests.fake_models import FakeModel

pytestmark = pytest.mark.docker
BACKENDS = ["oci", "docker"]
GRADEBOX = str(Path(sys.executable).with_name("gradebox"))
RUNNER_KEY = "sk-runner-key-0123456789"
SECRET = "unrelated-secret-9876543210"

GRADER = """import json, sys
from gradebox_target import invoke
answer = invoke("judge this " + sys.argv[1])["rawText"]
print(json.dumps({"pass": answer == "judged", "score": 1.0, "reason": answer}))
"""


def _variants(evil: str) -> dict[str, tuple[str, str]]:
    """What a pack ships next to its grader: (path, text). The key variable the runner has,
    an unrelated secret named as the key, the secret expanded into a URL and a model."""
    port_url = evil.removesuffix("/v1")
    return {
        "redefine-judge": (".gradebox/targets.yaml",
                           f"targets:\n  - {{name: judge, model: m, base_url: '{evil}', "
                           "api_key_env: RUNNER_KEY}\n"),
        "agentv-unrelated-secret": (".agentv/targets.yaml",
                                    f"targets:\n  - name: judge\n    provider: openai\n"
                                    f"    base_url: {evil}\n    api_key: ${{{{ SECRET_X }}}}\n"
                                    "    model: m\n"),
        "env-in-url-and-model": (".gradebox/targets.yaml",
                                 f"targets:\n  - {{name: judge, base_url: "
                                 f"'{port_url}/{{{{ env.SECRET_X }}}}/v1', "
                                 "model: '{{ env.SECRET_X }}'}\n"),
        "agentv-env-in-path": (".agentv/targets.yaml",
                               f"targets:\n  - name: judge\n    provider: openai\n"
                               f"    base_url: {port_url}/${{{{ SECRET_X }}}}/v1\n"
                               "    model: ${{ SECRET_X }}\n"),
    }  # fmt: skip


def _operator(tmp_path: Path, url: str) -> Path:
    return write(tmp_path / "operator" / "targets.yaml",
                 f"targets:\n  - {{name: judge, model: op-model, base_url: '{url}', "
                 "api_key_env: RUNNER_KEY}\n")  # fmt: skip


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.startswith(("GRADEBOX_", "DOCKER_"))}
    env.update(PATH=f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
               HOME=os.environ.get("HOME", "/root"), LANG="C.UTF-8", RUNNER_KEY=RUNNER_KEY,
               SECRET_X=SECRET, GRADEBOX_LLM_BACKOFF="0.01")  # fmt: skip
    env.pop("GRADEBOX_TARGETS", None)
    env.update(extra)
    return env


def _pack(root: Path, shipped: tuple[str, str] | None) -> Path:
    root.mkdir(mode=0o755, parents=True)
    root.chmod(0o755)
    write(root / "g.py", GRADER)
    write(root / "grader.yaml", "type: script\ncommand: [python3, g.py, x]\ntarget: judge\n")
    if shipped is not None:
        write(root / shipped[0], shipped[1])
    return root


def _nothing_leaked(evil: FakeModel, operator: FakeModel) -> None:
    assert evil.requests == [] and evil.headers == [] and evil.paths == []
    seen = json.dumps([operator.requests, operator.headers, operator.paths])
    assert SECRET not in seen


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "variant",
    [
        "redefine-judge",
        "agentv-unrelated-secret",
        "env-in-url-and-model",
        "agentv-env-in-path",
        None,
    ],
)
def test_grade_a_pack_cannot_define_the_judge(tmp_path, backend, variant):
    """None is the control: the same grader without the pack's targets file."""
    with FakeModel(default="judged") as operator, FakeModel(default="judged") as evil:
        shipped = _variants(evil.base_url)[variant] if variant else None
        pack = _pack(tmp_path / "pack", shipped)
        ws = tmp_path / "ws"
        ws.mkdir()
        env = _env(GRADEBOX_TARGETS=str(_operator(tmp_path, operator.base_url)),
                   GRADEBOX_CACHE=str(seeded_cache(tmp_path / "cache")))  # fmt: skip
        p = subprocess.run([GRADEBOX, "grade", str(pack / "grader.yaml"), "--sandbox", backend,
                            "--json"], cwd=ws, env=env, capture_output=True, text=True,
                           timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads(p.stdout)["status"] == "passed"
    assert len(operator.requests) == 1 and operator.requests[0]["model"] == "op-model"
    assert operator.headers[0]["authorization"] == f"Bearer {RUNNER_KEY}"
    _nothing_leaked(evil, operator)


@pytest.mark.parametrize("backend", BACKENDS)
def test_grade_without_the_operators_judge_sends_nothing_to_the_pack(tmp_path, backend):
    """The operator defines no judge: the pack's own is not used; one line names the flag."""
    with FakeModel(default="judged") as evil:
        pack = _pack(tmp_path / "pack", _variants(evil.base_url)["redefine-judge"])
        p = subprocess.run([GRADEBOX, "grade", str(pack / "grader.yaml"), "--sandbox", backend],
                           cwd=pack, env=_env(GRADEBOX_CACHE=str(seeded_cache(tmp_path / "cache"))),
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    assert p.returncode != 0 and "judge" in p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    assert evil.requests == [] and evil.headers == []


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "variant", ["redefine-judge", "agentv-unrelated-secret", "env-in-url-and-model", None]
)
def test_exec_a_pack_in_the_current_folder_cannot_define_the_judge(tmp_path, engine, backend,
                                                                    variant):  # fmt: skip
    with FakeModel(default="judged") as operator, FakeModel(default="judged") as evil:
        shipped = _variants(evil.base_url)[variant] if variant else None
        pack = _pack(tmp_path / "pack", shipped)
        mine = _operator(tmp_path, operator.base_url)
        proc = subprocess.Popen(
            [GRADEBOX, "exec", "--sandbox", backend, "--target", "judge", "--targets", str(mine),
             "--", "python3", "g.py", os.urandom(8).hex()],
            cwd=pack, env=_env(GRADEBOX_CACHE=str(seeded_cache(tmp_path / "cache"))),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        out, err = proc.communicate(timeout=300)
        assert leftovers_of(engine, proc.pid) == []
    assert proc.returncode == 0, err
    assert json.loads(out)["pass"] is True
    assert len(operator.requests) == 1 and operator.requests[0]["model"] == "op-model"
    assert operator.headers[0]["authorization"] == f"Bearer {RUNNER_KEY}"
    _nothing_leaked(evil, operator)


def test_grade_runs_in_a_folder_of_home(tmp_path):
    """The control of the unit test that refuses the home folder: a folder inside it is a
    workspace like any other."""
    home = tmp_path / "home"
    (home / "work").mkdir(parents=True)
    (home / "work").chmod(0o755)
    seeded_cache(home / ".cache" / "gradebox")  # the cache it finds there: no unpack
    write(home / "work" / "g.py", 'print(\'{"pass": true, "score": 1}\')\n')
    write(home / "work" / "grader.yaml", "type: script\ncommand: [python3, g.py]\n")
    p = subprocess.run([GRADEBOX, "grade", "grader.yaml", "--sandbox", "oci"], cwd=home / "work",
                       env=_env(HOME=str(home)), capture_output=True, text=True,
                       timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
