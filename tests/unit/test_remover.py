"""The background remover (``sandbox._shared.BackgroundRemover``): what its ``remove`` raises
never ends its thread with the item lost (that left a container behind until the sandbox
closed, in the cgroup v2 guest)."""

from __future__ import annotations

import logging

from gradebox.sandbox._shared import BackgroundRemover


def test_a_removal_that_raises_once_is_tried_again_and_the_rest_go_on():
    calls: list[str] = []

    def remove(item: str) -> None:
        calls.append(item)
        if calls.count(item) == 1 and item == "a":
            raise KeyError("PYTEST_CURRENT_TEST")  # os.environ changed under requests

    remover = BackgroundRemover(remove, "test-rm")
    for item in ("a", "b"):
        remover.put(item)
    remover.join()
    assert calls == ["a", "a", "b"]


def test_a_removal_that_always_fails_is_said_once_and_never_blocks_join(caplog):
    def remove(item: str) -> None:
        if item == "stuck":
            raise RuntimeError("engine said no")

    remover = BackgroundRemover(remove, "test-rm")
    with caplog.at_level(logging.WARNING, logger="gradebox.sandbox"):
        remover.put("stuck")
        remover.put("fine")
        remover.join()
    said = [r.getMessage() for r in caplog.records if "could not remove" in r.getMessage()]
    assert said == ["could not remove stuck (engine said no): the sandbox's close sweeps it"]
