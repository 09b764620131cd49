"""What the base ``Sandbox`` gives a backend that overrides little: images from an engine's
store when it has one, and a plain refusal when it has none."""

from __future__ import annotations

import pytest

from gradebox.sandbox.base import RunOutcome, Sandbox, SandboxSpec
from gradebox.sandbox.host import HostSandbox
from gradebox.sandbox.self_check import _Warm

PINNED = "sha256:" + "0" * 64


class _Bare(Sandbox):
    name = "bare"

    def run(self, spec: SandboxSpec) -> RunOutcome:
        raise AssertionError("nothing runs here")


def test_a_sandbox_without_an_engine_says_it_resolves_no_images():
    # It was an AttributeError (no _lock), or an ImageResolver over no engine at all.
    for options in ({}, {"locked": True}):
        with pytest.raises(NotImplementedError, match="_Bare has no engine"):
            _Bare().images(**options)
    with pytest.raises(NotImplementedError, match="resolves no images"):
        _Bare().resolve_image("python")
    assert _Bare().resolve_image(PINNED) == PINNED  # an id needs no store


def test_the_warm_wrapper_resolves_with_the_images_of_its_box():
    warm = _Warm(HostSandbox())
    assert warm.images().resolve("python") == "host"
    assert warm.images(locked=True, build=True).resolve({"build": "x"}) == "host"
