"""The one edge between gradebox and the Docker SDK.

Everything above this module speaks gradebox types and errors; ``docker.errors`` and
``requests`` exceptions are caught here and translated. Transient engine faults are retried
here, once, for every call: a grader *run* is never retried, only the engine call that failed
before the grader started (create, start) or after it ended (inspect, remove).

May import: core.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from tenacity import (
    before_sleep_log,
    retry,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from ..core import settings
from ..errors import EngineError, EngineUnavailable, ImageError

if TYPE_CHECKING:
    import docker

# The Docker SDK (with requests and urllib3: ~100 ms to import) loads when an engine is
# connected, not when a module that names an Engine or catches NotFound is imported (loading
# a grader file or a suite, `import gradebox`); a command that resolves an image name through
# the engine (grade, run, validate) still loads it then.

__all__ = ["Engine", "NotFound"]

log = logging.getLogger("gradebox.engine")
T = TypeVar("T")
LOAD_TIMEOUT = 3600  # seconds an ``images load`` may wait for the engine to unpack


class NotFound(EngineError):
    """The object (container, image) does not exist."""


def _is_transient(exc: BaseException) -> bool:
    # lazy: the Docker SDK loads only when an engine connects (tests/unit/test_api.py)
    import docker.errors
    import requests.exceptions

    # Connection resets and 5xx answers happen when the engine is busy (many parallel creates
    # on 2 cores) or restarting; a 409 on create means our generated name collided, and each
    # attempt generates a fresh one. 4xx other than 409 are our mistakes and are not retried.
    if isinstance(
        exc, requests.exceptions.ConnectionError | requests.exceptions.ChunkedEncodingError
    ):
        return True
    if isinstance(exc, docker.errors.APIError) and exc.status_code is not None:
        if exc.status_code == 409:
            return "is already in use" in str(exc)
        return exc.status_code >= 500 and "No such" not in str(exc)
    return False


_retry = retry(
    retry=retry_if_exception(_is_transient),
    stop=stop_after_attempt(4),
    wait=wait_exponential(multiplier=0.1, max=2.0),
    # A retry is no fault of its own (the last failure is reported, once): said with -v, so
    # an engine lost mid-run is a few lines on stderr, not one per attempt of every call.
    before_sleep=before_sleep_log(log, logging.INFO),
    reraise=True,
)


def _engine_call(what: str, bounded: bool = True) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Retry transient faults, then translate whatever is left into gradebox errors.

    ``bounded`` calls hold one of the engine's call slots: on a small machine the engine's own
    CPU is the bottleneck, and a burst of parallel creates/starts only makes each one slower
    (and invites 5xx timeouts). Long waits (``wait``, ``build``) take no slot.
    """

    def deco(fn: Callable[..., T]) -> Callable[..., T]:
        retried = _retry(fn)

        @functools.wraps(fn)
        def wrapper(self: Engine, *args: Any, **kwargs: Any) -> T:
            try:
                if bounded:
                    with self.slots:
                        return retried(self, *args, **kwargs)
                return retried(self, *args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - the engine's own are translated, the rest re-raised
                ours = _translated(what, exc)
                if ours is exc:
                    raise
                raise ours from None

        return wrapper

    return deco


def _translated(what: str, exc: Exception) -> Exception:
    """The gradebox error for an SDK or connection error; any other exception as it was."""
    # lazy: the Docker SDK loads only when an engine connects (tests/unit/test_api.py)
    import docker.errors
    import requests.exceptions

    if isinstance(exc, docker.errors.ImageNotFound):
        return ImageError(f"image not found: {exc.explanation}")
    if isinstance(exc, docker.errors.NotFound):
        return NotFound(f"docker {what}: {exc.explanation}")
    if isinstance(exc, docker.errors.APIError):
        return EngineError(f"docker {what} failed: {exc.explanation or exc}")
    if isinstance(exc, requests.exceptions.RequestException):
        return EngineError(f"docker {what}: engine connection failed: {exc}")
    if isinstance(exc, docker.errors.DockerException):
        return EngineError(f"docker {what} failed: {exc}")
    return exc


def default_engine_calls() -> int:
    """Concurrent engine calls: $GRADEBOX_ENGINE_CALLS, else 2 per core (at least 4)."""
    return settings.current().engine_calls or max(4, 2 * (os.cpu_count() or 1))


class Engine:
    """A thin, retried, translated view of the Docker Engine API.

    Example::

        engine = Engine.connect()
        print(engine.version())
    """

    def __init__(self, client: docker.DockerClient, max_calls: int | None = None) -> None:
        self.client = client
        self.api: docker.APIClient = client.api
        self.max_calls = max_calls or default_engine_calls()
        self.slots = threading.BoundedSemaphore(self.max_calls)

    @classmethod
    def connect(cls, timeout: float = 120.0) -> Engine:
        # lazy: the Docker SDK loads only when an engine connects (tests/unit/test_api.py)
        import requests.exceptions

        import docker  # lazy: as above

        where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        try:
            client = docker.from_env(timeout=int(timeout))
            client.ping()
        except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
            reason = str(exc).split("(")[0].strip() or type(exc).__name__
            raise EngineUnavailable(
                f"cannot reach the Docker engine at {where} ({reason}); start Docker, or point "
                "DOCKER_HOST at a running engine, then check with `docker info`"
            ) from None
        return cls(client)

    @_engine_call("version")
    def version(self) -> str:
        return str(self.api.version().get("Version", "?"))

    @_engine_call("info")
    def info(self) -> dict[str, Any]:
        """``docker info``: the storage driver, the cgroup version, the runtimes..."""
        return dict(self.api.info())

    # -- containers ------------------------------------------------------------------------

    @_engine_call("create")
    def create(self, name_factory: Callable[[], str], **kwargs: Any) -> str:
        return str(self.api.create_container(name=name_factory(), **kwargs)["Id"])

    @_engine_call("attach")
    def attach(self, container: str) -> Any:
        return self.api.attach_socket(
            container, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        )

    @_engine_call("start")
    def start(self, container: str) -> None:
        self.api.start(container)

    @_engine_call("inspect")
    def inspect(self, container: str) -> dict[str, Any]:
        return dict(self.api.inspect_container(container))

    def kill(self, container: str) -> None:
        """SIGKILL the container's PID 1; the kernel then kills every process in its namespace."""
        # lazy: the Docker SDK loads only when an engine connects (tests/unit/test_api.py)
        import docker.errors
        import requests.exceptions

        try:
            self.api.kill(container, signal="SIGKILL")
        except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
            # 409 "is not running": it already ended, which is what we wanted.
            log.debug("kill %s: %s", container[:12], exc)

    @_engine_call("wait", bounded=False)
    def wait(self, container: str, timeout: float) -> int:
        return int(self.api.wait(container, timeout=max(1, int(timeout + 0.999)))["StatusCode"])

    def remove(self, container: str) -> bool:
        """Force-remove; True when the container is gone. Never raises: cleanup runs on every
        path, including error paths that must not be masked by a second error."""
        try:
            self._remove(container)
            return True
        except NotFound:
            return True
        except EngineError as exc:
            if "already in progress" in str(exc):
                return True
            log.warning("could not remove container %s: %s", container[:12], exc)
            return False

    @_engine_call("remove")
    def _remove(self, container: str) -> None:
        self.api.remove_container(container, force=True, v=True)

    @_engine_call("list")
    def containers(self, labels: dict[str, str | None]) -> list[dict[str, Any]]:
        filters = [k if v is None else f"{k}={v}" for k, v in labels.items()]
        return list(self.api.containers(all=True, filters={"label": filters}))

    # -- images ----------------------------------------------------------------------------

    @_engine_call("image inspect")
    def image(self, ref: str) -> dict[str, Any]:
        return dict(self.api.inspect_image(ref))

    @_engine_call("image list")
    def images(self, label: str) -> list[dict[str, Any]]:
        return list(self.api.images(filters={"label": label}))

    @_engine_call("import")
    def import_image(self, tar_path: str, repository: str, tag: str, changes: list[str]) -> str:
        out = self.api.import_image_from_file(
            tar_path, repository=repository, tag=tag, changes=changes
        )
        return str(out)

    @_engine_call("build", bounded=False)
    def build(self, **kwargs: Any) -> list[dict[str, Any]]:
        return list(self.api.build(decode=True, rm=True, forcerm=True, **kwargs))

    def export_image(self, image: str, sink: Callable[[bytes], None]) -> None:
        """Stream the flattened filesystem of ``image`` (a tar) into ``sink``."""
        cid = self.create(
            lambda: f"gradebox-export-{os.getpid()}-{os.urandom(4).hex()}",
            image=image,
            command=["/bin/true"],
            network_disabled=True,
        )
        try:
            for chunk in self._export(cid):
                sink(chunk)
        finally:
            self.remove(cid)

    @_engine_call("export", bounded=False)
    def _export(self, container: str) -> Any:
        return self.api.export(container, chunk_size=1 << 20)

    @_engine_call("image save", bounded=False)
    def save_image(self, ref: str, sink: Callable[[bytes], None]) -> None:
        """``docker save`` of one image (its tag included), streamed into ``sink``."""
        for chunk in self.api.get_image(ref, chunk_size=1 << 20):
            sink(chunk)

    @_engine_call("image load", bounded=False)
    def load_image(self, stream: Any) -> None:
        # The engine answers only once it has unpacked every layer: an emulated one (the
        # cgroup v2 guest) took 216 s for 1.2 GiB, past the client's 120 s read timeout. This
        # one call waits as long as the engine works, on a client of its own.
        import docker  # lazy: the Docker SDK, as connect's

        long = docker.from_env(timeout=LOAD_TIMEOUT)  # as ``connect`` makes the first one
        try:
            for _ in long.api.load_image(stream):
                pass
        finally:
            long.close()

    @_engine_call("image remove")
    def remove_image(self, image: str) -> None:
        # Never forced: the engine then refuses to remove an image a container uses (a stopped
        # one too) or another image is built on.
        self.api.remove_image(image, force=False)

    @_engine_call("tag")
    def tag(self, image: str, repository: str, tag: str) -> None:
        self.api.tag(image, repository, tag, force=True)
