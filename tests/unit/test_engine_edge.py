"""The engine edge: which faults are retried, and how many calls run at once.

The Docker engine is not the subject here (our retry policy and call bound are), so a stub
stands in for the SDK's low-level client.
"""

import threading
import time
from types import SimpleNamespace

import docker.errors
import pytest
import requests
from requests.models import Response

from gradebox.engine import Engine, _is_transient
from gradebox.errors import EngineError


def api_error(status: int, text: str) -> docker.errors.APIError:
    response = Response()
    response.status_code = status
    return docker.errors.APIError(text, response=response, explanation=text)


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (requests.exceptions.ConnectionError("reset by peer"), True),
        (api_error(500, "server error"), True),
        (api_error(503, "busy"), True),
        (api_error(409, 'Conflict. The container name "/x" is already in use'), True),
        (api_error(409, "container is not running"), False),
        (api_error(404, "No such container"), False),
        (api_error(400, "invalid mount config"), False),
        (api_error(500, "No such image"), False),
        (ValueError("a bug"), False),
    ],
)
def test_only_transient_faults_are_retried(exc, transient):
    assert _is_transient(exc) is transient


def engine_with(create) -> Engine:
    client = SimpleNamespace(api=SimpleNamespace(create_container=create))
    return Engine(client, max_calls=2)  # type: ignore[arg-type]


def test_transient_create_is_retried_with_a_fresh_name():
    calls: list[str] = []

    def create(name, **kw):
        calls.append(name)
        if len(calls) < 3:
            raise requests.exceptions.ConnectionError("reset")
        return {"Id": "abc"}

    names = iter(["n1", "n2", "n3", "n4"])
    assert engine_with(create).create(lambda: next(names)) == "abc"
    assert calls == ["n1", "n2", "n3"]


def test_retries_are_bounded_then_translated():
    def create(name, **kw):
        raise api_error(500, "engine is sad")

    with pytest.raises(EngineError, match="docker create failed: engine is sad"):
        engine_with(create).create(lambda: "n")


def test_a_mistake_is_not_retried():
    calls = []

    def create(name, **kw):
        calls.append(name)
        raise api_error(400, "bad request")

    with pytest.raises(EngineError):
        engine_with(create).create(lambda: "n")
    assert len(calls) == 1


def test_concurrent_engine_calls_are_bounded():
    lock = threading.Lock()
    running = peak = 0

    def create(name, **kw):
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.05)
        with lock:
            running -= 1
        return {"Id": name}

    engine = engine_with(create)
    threads = [threading.Thread(target=engine.create, args=(lambda: "n",)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak == 2


def test_a_removal_the_engine_failed_once_is_asked_again_not_left(monkeypatch):
    """An emulated engine (the cgroup v2 guest) failed one forced remove under load: the
    container stayed for the rest of the session ("left behind"). It is asked again."""
    import threading

    from gradebox.sandbox import docker as docker_backend

    answers = [False, False, True]
    asked: list[str] = []

    class Engine:
        def remove(self, cid: str) -> bool:
            asked.append(cid)
            return answers.pop(0)

    box = object.__new__(docker_backend.DockerSandbox)
    box.engine, box._lock, box._live = Engine(), threading.Lock(), {"c1"}
    monkeypatch.setattr(docker_backend.time, "sleep", lambda s: None)
    box._remove_now("c1")
    assert asked == ["c1"] * 3 and box._live == set()
