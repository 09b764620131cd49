import re
import types
from pathlib import Path

import gradebox
from gradebox import errors
from tests.conftest import loaded_by


def test_public_api_is_curated():
    exported = set(gradebox.__all__)
    assert len(gradebox.__all__) == len(exported)
    # Every exported name resolves (lazily), and nothing public is left out of __all__.
    for name in exported:
        assert getattr(gradebox, name) is not None
    public = {
        name
        for name, value in vars(gradebox).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name not in ("annotations", "TYPE_CHECKING", "Any")
    }
    assert public == exported - {"__version__"}
    assert set(dir(gradebox)) == exported


def test_error_hierarchy():
    for cls in (
        errors.ConfigError,
        errors.ImageError,
        errors.EngineError,
        errors.EngineUnavailable,
    ):
        assert issubclass(cls, errors.GradeboxError)
    assert issubclass(errors.EngineUnavailable, errors.EngineError)
    e = errors.ConfigError("bad", file="g.yaml", line=3, field="env.X")
    assert str(e) == "g.yaml:3: env.X: bad"


def test_nothing_above_the_engine_edge_imports_docker():
    src = Path(gradebox.__file__).parent
    pattern = re.compile(r"^\s*(import docker|from docker[ .])", re.M)
    offenders = [
        str(p.relative_to(src))
        for p in src.rglob("*.py")
        if str(p.relative_to(src)) not in ("engine/__init__.py", "sandbox/_engine.py")
        and pattern.search(p.read_text())
    ]
    assert offenders == []


def test_the_docker_sdk_loads_only_when_an_engine_connects():
    # engine.py is the SDK's one edge, and importing it (a grader file names an Engine type,
    # the resolver catches NotFound) must not cost requests and urllib3 (~100 ms).
    modules = ["gradebox.engine", "gradebox.graders.config", "gradebox.suite", "gradebox.images",
               "gradebox.images.resolve", "gradebox.images.build", "gradebox.cli.app"]  # fmt: skip
    assert loaded_by(modules, ("docker", "requests", "urllib3")) == []
