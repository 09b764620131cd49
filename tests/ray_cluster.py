"""A real local Ray cluster for the tests and the benchmark: a head and worker nodes, each
started by `ray start` as its own processes with its own temp dir (and its own $TMPDIR, so
each node's scratch is its own), all on loopback.

Ray is imported only by the processes this starts and by gradebox's driver: a missing Ray
fails the test that asked for a cluster, it never skips it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gradebox.files.workspace import remove_tree, unmount_below

RAY = str(Path(sys.executable).with_name("ray"))

# These clusters run without Ray's token auth, said outright: with RAY_AUTH_MODE unset, Ray
# turns token auth on in any process that finds a ~/.ray/auth_token (one left in this user's
# home by some other Ray use), and its nodes and drivers then refuse each other's calls.
# Drivers the tests start inherit it from here.
os.environ["RAY_AUTH_MODE"] = "disabled"

# Node loss is noticed in about 3 s instead of Ray's default 30 s.
HEAD_ENV = {
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
    "RAY_health_check_timeout_ms": "1000",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_turn: dict[str, int] = {"held": 0, "fd": -1}


def _take_turn() -> None:
    """One process's Ray clusters at a time on this machine: the suite runs its files on
    several workers, and two clusters started at once on two cores turn the kill-mid-run
    tests' timing into chance. Held by this process until its last cluster stops."""
    if _turn["held"] == 0:
        path = Path(tempfile.gettempdir()) / f"gradebox-tests-ray-{os.getuid()}.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        _turn["fd"] = fd
    _turn["held"] += 1


def _give_turn() -> None:
    _turn["held"] -= 1
    if _turn["held"] == 0:
        os.close(_turn["fd"])  # the lock goes with it


class LocalRay:
    """``with LocalRay(workers=2) as cluster: ... cluster.address``."""

    def __init__(self, workers: int = 2, slots: int = 2,
                 worker_env: dict[int, dict[str, str]] | None = None) -> None:  # fmt: skip
        # Short: Ray's sockets live under it, and a unix socket path has 107 bytes at most.
        self.base = Path(tempfile.mkdtemp(prefix="gbray-", dir="/tmp"))
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.workers, self.slots = workers, slots
        self.worker_env = worker_env or {}
        self.sessions: dict[str, int] = {}  # node name -> the session id of its processes
        # The nodes' OCI state (containers, bundles): the cluster's own, so that what it left
        # is told apart from what other runs on this machine hold.
        self.oci_state = self.base / "oci"
        self.left_at_stop: list[str] | None = None  # containers still there once gc ran
        self.holding = False  # this cluster holds the machine's turn (``_take_turn``)

    def _env(self, name: str, extra: dict[str, str]) -> dict[str, str]:
        tmp = self.base / f"{name}-tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        return {**env, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled",
                "TMPDIR": str(tmp),
                "GRADEBOX_OCI_STATE": str(self.oci_state), **extra}  # fmt: skip

    def _start(self, name: str, args: list[str], extra: dict[str, str]) -> None:
        cpus = [] if "--num-cpus" in args else ["--num-cpus", "1"]
        # Each node's agents on free ports of their own: Ray's fixed defaults (52365 for the
        # dashboard agent, the job API's) would be taken by another cluster on this machine
        # (another test's, another user's), and the head's job agent would never come up.
        agents = [flag for option in ("--dashboard-agent-listen-port",
                                      "--dashboard-agent-grpc-port", "--metrics-export-port",
                                      "--runtime-env-agent-port")
                  for flag in (option, str(_free_port()))]  # fmt: skip
        cmd = [RAY, "start", "--node-ip-address", "127.0.0.1", *cpus, *agents,
               "--temp-dir", str(self.base / name), "--disable-usage-stats", *args]  # fmt: skip
        # A session of its own: every process of this node (Ray renames some, and overwrites
        # their environment) keeps this session id, so the node can be found and killed whole.
        proc = subprocess.Popen(
            cmd, env=self._env(name, extra), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True,
        )  # fmt: skip
        self.sessions[name] = proc.pid
        output, _ = proc.communicate(timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"ray start {name} failed:\n{output}")

    def start(self) -> LocalRay:
        self._hold()
        self._start("head", ["--head", "--port", str(self.port), "--include-dashboard=false",
                             "--resources", json.dumps({"gradebox": 0})], HEAD_ENV)  # fmt: skip
        for i in range(self.workers):
            self.add_worker(i, self.worker_env.get(i, {}))
        return self

    def add_worker(
        self, i: int, env: dict[str, str] | None = None, slots: int | None = None
    ) -> None:
        n = self.slots if slots is None else slots
        # A core and a GiB per slot: a test asks for its graders' limits (by default one
        # core and 1 GiB each), so a slot holds one such test.
        args = ["--num-cpus", str(n), "--memory", str(n << 30),
                "--resources", json.dumps({"gradebox": n})]  # fmt: skip
        self._start(f"w{i}", ["--address", self.address, *args], env or {})
        self.wait_nodes(i + 2)

    def wait_nodes(self, alive: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.alive_nodes() >= alive:
                return
            time.sleep(0.5)
        raise RuntimeError(f"{alive} Ray nodes did not come up in {timeout} s")

    def alive_nodes(self, gradebox_only: bool = False) -> int:
        """Live nodes (``gradebox_only``: those offering a ``gradebox`` resource)."""
        offers = " and n['Resources'].get('gradebox', 0) > 0" if gradebox_only else ""
        code = (
            "import ray,sys; ray.init(address=sys.argv[1], logging_level='ERROR', "
            f"log_to_driver=False); print(sum(n['Alive']{offers} for n in ray.nodes()))"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code, self.address], capture_output=True, text=True,
            timeout=60, check=False, env=self._env("probe", {}),
        )  # fmt: skip
        return int(proc.stdout.strip() or 0)

    def pids(self, name: str | None = None) -> list[int]:
        """Processes of one node (``w0``), or of the whole cluster, by their session."""
        wanted = {self.sessions[name]} if name else set(self.sessions.values())
        out = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                stat = (proc / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if fields[0] != "Z" and int(fields[3]) in wanted:
                out.append(int(proc.name))
        return out

    def kill(self, name: str | None = None, sig: int = signal.SIGKILL) -> int:
        """Signal every process of one node (or of all): a node lost as a machine is."""
        pids = self.pids(name)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return len(pids)

    def _hold(self) -> None:
        if not self.holding:
            _take_turn()
            self.holding = True

    def stop(self) -> None:
        try:
            self._stop()
        finally:
            if self.holding:
                self.holding = False
                _give_turn()

    def _stop(self) -> None:
        self.kill(None, signal.SIGTERM)
        # Ray's GCS server and raylets do not end on SIGTERM within 15 s (measured: they wait
        # for peers): a short grace, then SIGKILL, and the nodes' gc below does the rest.
        deadline = time.monotonic() + 2
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.3)
        self.kill(None, signal.SIGKILL)
        # A node killed mid-test leaves what a lost machine would (containers, workspaces
        # still mounted): the harness stands for that machine's reboot, and its `gradebox gc`.
        for tmp in self.base.glob("*-tmp"):
            gc = [str(Path(sys.executable).with_name("gradebox")), "gc"]
            env = {**os.environ, "TMPDIR": str(tmp), "GRADEBOX_OCI_STATE": str(self.oci_state)}
            subprocess.run(gc, env=env, capture_output=True, timeout=120, check=False)
        self.left_at_stop = [
            p.name for folder in (self.oci_state / "runtime", self.oci_state / "bundles")
            if folder.is_dir() for p in folder.iterdir()
        ]  # fmt: skip
        unmount_below(self.base)
        remove_tree(self.base)

    def __enter__(self) -> LocalRay:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


class AutoscalingRay(LocalRay):
    """A head alone, with Ray's fake multi-node autoscaler (the ``fake_multinode`` provider
    that ``ray.cluster_utils.AutoscalingCluster`` configures): ``min_workers: 0``, so no node
    offers ``gradebox`` until pending tasks ask for one; the autoscaler then starts worker
    nodes (processes of the head's session, on loopback) and stops them once idle.

    Not ``AutoscalingCluster.start`` itself: it runs ``ray stop --force``, which would kill
    every Ray process on this machine, other runs' too. ``dashboard``: the head serves
    Ray's job API (on loopback) for ``ray job submit``."""

    def __init__(self, slots: int = 2, max_workers: int = 2, dashboard: bool = False,
                 idle_timeout_minutes: float = 0.5) -> None:  # fmt: skip
        super().__init__(workers=0, slots=slots)
        self.max_workers, self.dashboard = max_workers, dashboard
        self.idle_timeout_minutes = idle_timeout_minutes
        self.dashboard_port = _free_port() if dashboard else None

    def config(self) -> dict:
        node = {"CPU": self.slots, "gradebox": self.slots, "memory": self.slots << 30}
        provider = {"type": "external", "module": "tests.ray_fake_provider.FakeProviderWithMemory",
                    "gcs_address": self.address, "disable_node_updaters": True,
                    "disable_launch_config_check": True}  # fmt: skip
        return {
            "cluster_name": "gradebox-test",
            "max_workers": self.max_workers,
            "upscaling_speed": 1.0,
            "idle_timeout_minutes": self.idle_timeout_minutes,
            "provider": provider,
            "auth": {"ssh_user": "ubuntu"},
            "head_node_type": "ray.head.default",
            "available_node_types": {
                "ray.head.default": {"resources": {"CPU": 1}, "node_config": {},
                                     "max_workers": 0},
                "gradebox.worker": {"resources": node, "node_config": {},
                                    "min_workers": 0, "max_workers": self.max_workers},
            },
            "file_mounts": {}, "cluster_synced_files": [], "file_mounts_sync_continuously": False,
            "rsync_exclude": [], "rsync_filter": [], "initialization_commands": [],
            "setup_commands": [], "head_setup_commands": [], "worker_setup_commands": [],
            "head_start_ray_commands": [], "worker_start_ray_commands": [],
        }  # fmt: skip

    def start(self) -> AutoscalingRay:
        self._hold()
        path = self.base / "autoscaling.json"
        path.write_text(json.dumps(self.config()))
        dash = (["--include-dashboard=true", "--dashboard-host", "127.0.0.1",
                 "--dashboard-port", str(self.dashboard_port)] if self.dashboard
                else ["--include-dashboard=false"])  # fmt: skip
        # The autoscaler imports the provider from tests/: the repository on its path.
        root = str(Path(__file__).resolve().parent.parent)
        path_env = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        env = {**HEAD_ENV, "RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1",
               "PYTHONPATH": path_env}  # fmt: skip
        self._start("head", ["--head", "--port", str(self.port), *dash,
                             f"--autoscaling-config={path}"], env)  # fmt: skip
        return self

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"
