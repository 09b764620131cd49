"""The plan of a run, made before its first container starts.

Everything that can be checked without running anything is checked here, so that a mistake in
a suite or a grader file is exit 2 with nothing run, never a verdict charged to the agent:

- every image (targets, hooks, graders, custom assertions) resolves to an immutable id, and
  under ``--locked`` matches the lock;
- every script a command names by path exists, and TypeScript has a runtime in its image;
- every hardening setting a grader relaxes is one that whoever runs gradebox allowed, and so
  is every Dockerfile a run would build (``build``: its RUN steps run as root, with
  capabilities, on the engine).

Privileges are the runner's decision, never the grader file's: a third-party grader that asks
for root, capabilities, the network, a writable root or limits above the defaults is refused
unless the suite (``allow: [...]``) or the command line (``--allow ...``) allows it, and each
result records what its grader was allowed (``privileges``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, collect
from ..graders.assertion import GraderAssertion, leaves
from ..graders.checks import check_build, check_grader, check_privileges, check_runtime
from ..images import DEFAULT_IMAGE, ImageResolver
from ..sandbox.hardening import PRIVILEGES, privileges_of

__all__ = [
    "PRIVILEGES",
    "Plan",
    "check_build",
    "check_grader",
    "check_privileges",
    "check_runtime",
    "plan_suite",
    "privileges_of",
]


@dataclass
class Plan:
    """What a run will use: the image id for every reference, found before anything ran."""

    images: dict[str, str] = field(default_factory=dict)
    graders: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"images": self.images, "graders": self.graders}


def plan_suite(suite: Any, images: ImageResolver, allowed: Iterable[str] = ()) -> Plan:
    """Check a loaded suite end to end and resolve every image it names. Runs nothing.

    Example::

        plan = plan_suite(load_suite("suite.yaml"), ImageResolver(engine, locked=True))
    """
    allow = set(allowed) | set(suite.spec.allow)
    file = str(suite.path)
    plan = Plan()
    default_image = suite.spec.defaults.image or DEFAULT_IMAGE

    def resolve(ref: Any, source: Path | None) -> None:
        ref = ref or default_image
        text = ref if isinstance(ref, str) else f"build:{ref.build}"
        plan.images[text] = images.resolve(ref, source)

    check_build(
        suite.spec.defaults.image, allow, what="the suite's defaults", file=file, field="defaults"
    )
    target = suite.spec.target
    if target is not None:
        check_privileges(
            privileges_of(None, target.network, target.limits),
            allow,
            what="the target",
            file=file,
            field="target",
        )
        check_build(target.image, allow, what="the target", file=file, field="target")
        resolve(target.image, suite.root)
    if suite.spec.workspace is not None or any(t.workspace for t in suite.tests):
        resolve(None, suite.root)
    errors: list[ConfigError] = []  # every one, so `validate` lists them all
    seen: set[int] = set()
    for test in suite.tests:
        template = suite.template_dir(test.workspace)
        for assertion in leaves(test.every_assertion()):
            if not isinstance(assertion, GraderAssertion) or id(assertion) in seen:
                continue
            seen.add(id(assertion))  # a suite-level assertion is shared by every test
            grader = assertion.grader
            try:
                check_grader(
                    grader,
                    allow,
                    file=assertion.file or file,
                    field=assertion.field,
                    line=assertion.line,
                    workspaces=(template,) if template else (),
                )
                access = getattr(grader, "target", None)
                if access is not None and suite.targets is not None:
                    try:
                        suite.targets.get(access.name, file=None, field=None)
                    except ConfigError as exc:
                        raise ConfigError(
                            exc.message,
                            file=assertion.file or file,
                            line=assertion.line,
                            field=f"{assertion.field}.target",
                        ) from None
                resolve(grader.image, grader.source_dir)
            except ConfigError as exc:
                errors.append(exc)
            plan.graders += 1
    collect(list({str(e): e for e in errors}.values()))
    return plan
