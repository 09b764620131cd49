"""Limits and privileges are declared once (``sandbox.defaults.HARDENING``): the doc's table,
the edge's validation and schema, the privileges asked and both backends' settings follow it."""

from pathlib import Path
from typing import get_args

import pytest
from pydantic import BaseModel, ValidationError

from gradebox.sandbox.base import SandboxSpec
from gradebox.sandbox.defaults import (
    CGROUPS,
    HARDENING,
    PRIVILEGES,
    Limits,
    Security,
    hardening_table,
)
from gradebox.sandbox.hardening import host_config, privileges_of
from gradebox.sandbox.oci_config import runtime_config
from gradebox.sandbox.slots import LIMITED
from gradebox.suite import Privilege

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def test_the_docs_table_is_the_declaration():
    assert hardening_table() in DOC.read_text(), "run `make schemas` and commit docs/security.md"


class _Config(BaseModel):
    limits: Limits = Limits()
    security: Security = Security()


def test_the_edge_validates_into_the_records_with_the_declared_floors():
    config = _Config.model_validate(
        {"limits": {"memory": "512MiB", "pids": 8}, "security": {"capabilities": ["CHOWN"]}}
    )
    assert type(config.limits) is Limits and type(config.security) is Security
    assert config.limits == Limits(memory=512 << 20, pids=8)
    assert config.security == Security(capabilities=("CHOWN",))
    assert _Config(limits=Limits(cpus=2.0)).limits.cpus == 2.0  # a record passes as it is
    for bad in ({"pids": 7}, {"cpus": 0}, {"open_files": 15}, {"memory_mb": 1}):
        with pytest.raises(ValidationError):
            _Config.model_validate({"limits": bad})
    dumped = config.model_dump(mode="json")
    assert dumped["limits"]["memory"] == "512 MiB" and dumped["security"]["capabilities"] == [
        "CHOWN"
    ]
    assert _Config.model_validate(dumped) == config


def test_the_schema_takes_defaults_bounds_and_help_from_the_declaration():
    schema = _Config.model_json_schema()["$defs"]
    for row in (r for r in HARDENING if r.group):
        field = schema[row.group.title()]["properties"][row.name]
        assert field["description"] == row.help
        if row.bound:
            key = {"ge": "minimum", "gt": "exclusiveMinimum", "pattern": "pattern"}[row.bound[0]]
            said = [f[key] for f in (field, *field.get("anyOf", ())) if key in f]
            assert said[0] == row.bound[1], (row.key, field)  # the field's own, first
        assert field.get("default", ()) == row.default or row.default is None


def test_every_privilege_relaxes_a_declared_row():
    assert get_args(Privilege) == tuple(PRIVILEGES)
    assert {row.allow for row in HARDENING if row.allow} == set(PRIVILEGES)


@pytest.mark.parametrize("row", [r for r in HARDENING if r.group], ids=lambda r: r.key)
def test_relaxing_a_setting_asks_its_privilege_and_lowering_a_limit_asks_none(row):
    relaxed = {"on/off": False, "names": ("CHOWN",), "uid[:gid]": "0:0"}.get(row.unit)
    if relaxed is None:  # a limit: above its default, then below
        relaxed = row.default * 2
        lowered = Limits(**{row.name: type(row.default)(row.default / 2)})
        assert privileges_of(None, limits=lowered) == []
    record = {"limits": Limits, "security": Security}[row.group](**{row.name: relaxed})
    assert privileges_of(**{row.group: record}) == ([row.allow] if row.allow else [])
    assert privileges_of(Security(user="1234:1234")) == []  # another user is no privilege


def test_both_backends_set_every_declared_rlimit_and_cgroup():
    limits = Limits(file_size=1 << 20, open_files=64)
    declared = {r.rlimit: getattr(limits, r.name) if r.key else r.default
                for r in HARDENING if r.rlimit}  # fmt: skip
    docker = host_config(limits, Security(), "none", ())
    assert {u["Name"]: u["Hard"] for u in docker["Ulimits"]} == declared
    spec = SandboxSpec(image="sha256:" + "0" * 64, command=["true"], limits=limits)
    oci = runtime_config(spec, rootfs=Path("/r"), cgroup="/g", init_source=None)
    assert {r["type"]: r["hard"] for r in oci["process"]["rlimits"]} == {
        f"RLIMIT_{k.upper()}": v for k, v in declared.items()
    }
    assert set(CGROUPS) == set(LIMITED) <= set(oci["linux"]["resources"])
