"""A Ray cluster that perfcast starts on this machine, and stops without touching any other.

`ray start` leaves daemons behind (GCS, raylets, log monitors, agents, Ray's client server,
workers) and `ray stop` kills every Ray process of the user, including other people's clusters
on a shared machine. Here each cluster gets a temporary folder of its own (`ray start
--temp-dir`) and every process `ray start` runs inherits `PERFCAST_RAY_CLUSTER=<that folder>`;
`stop` ends exactly the processes that carry the variable or name the folder on their command
line (Ray's client server names neither the folder nor anything else of the cluster on its
command line: found by the folder alone, it outlived `down` by minutes).

Ray 2.60 turns token authentication on as soon as `~/.ray/auth_token` exists (any local
`ray.init()` writes one) and a driver then presents whatever that file holds at the time. The
cluster gets a token of its own instead, kept beside the state (mode 0600) and passed through
`RAY_AUTH_MODE=token` / `RAY_AUTH_TOKEN_PATH` to the daemons it starts and to every perfcast
process that connects to it (`auth_env`).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from perfcast.atomic import atomic_write_text
from perfcast.errors import PerfcastError


class ClusterError(PerfcastError):
    """The Ray cluster cannot be started, reached or stopped."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


CLUSTER_ENV = "PERFCAST_RAY_CLUSTER"  # set to the cluster's folder in all its processes


def _ray_cli() -> str:
    return str(Path(sys.executable).parent / "ray")


def auth_env(token_path: str | Path | None) -> dict[str, str]:
    """The environment that makes Ray present the token in `token_path` (none: Ray's
    defaults)."""
    if token_path is None:
        return {}
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_path)}


def use_token(token_path: str | Path | None) -> None:
    """Make this process present the token in `token_path` to the cluster it connects to
    next (before or after an earlier `ray.init` of this process). Ray reads the mode into its
    config and caches the token it loaded: both are refreshed, as Ray itself does."""
    if token_path is None:
        return
    from ray._raylet import AuthenticationTokenLoader, Config

    os.environ.update(auth_env(token_path))
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


@dataclass
class LocalCluster:
    """A head and any raylets added to it, all started by perfcast under `temp_dir`."""

    address: str
    temp_dir: str
    token_path: str
    nodes: list[dict] = field(default_factory=list)  # the `ray start` options of each node

    @classmethod
    def start(
        cls, token_path: Path, num_gpus: int | None, num_cpus: int | None = None
    ) -> LocalCluster:
        """Start a head node with a new token written to `token_path`."""
        token_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(token_path, secrets.token_hex(32), permissions=0o600)
        # short: Ray puts unix sockets under it (about 107 characters at most)
        temp_dir = tempfile.mkdtemp(prefix="perfcast-ray-", dir="/tmp")
        port = _free_port()
        cluster = cls(f"{socket.gethostbyname('localhost')}:{port}", temp_dir, str(token_path))
        cmd = ["--head", f"--port={port}", f"--temp-dir={temp_dir}", "--include-dashboard=false"]
        cmd += [f"--dashboard-port={_free_port()}", f"--ray-client-server-port={_free_port()}"]
        cluster._ray_start(cmd, num_gpus, num_cpus)
        return cluster

    def add_node(
        self, num_gpus: int | None, num_cpus: int | None = None, resources: dict | None = None
    ) -> None:
        """Start another raylet on this machine, joined to the head."""
        extra = [f"--resources={json.dumps(resources)}"] if resources else []
        self._ray_start([f"--address={self.address}", *extra], num_gpus, num_cpus)

    def _ray_start(self, options: list[str], num_gpus: int | None, num_cpus: int | None) -> None:
        cmd = [_ray_cli(), "start", "--disable-usage-stats", *options]
        cmd += [f"--dashboard-agent-listen-port={_free_port()}"]  # two raylets: two agents
        cmd += [f"--num-gpus={num_gpus}"] if num_gpus is not None else []
        cmd += [f"--num-cpus={num_cpus}"] if num_cpus is not None else []
        env = {**os.environ, **auth_env(self.token_path), CLUSTER_ENV: self.temp_dir}
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        self.nodes.append({"num_gpus": num_gpus, "num_cpus": num_cpus, "options": options})
        if done.returncode:
            self.stop()
            raise ClusterError(f"`ray start` failed:\n{(done.stderr or done.stdout)[-2000:]}")

    def processes(self) -> list[psutil.Process]:
        """This cluster's processes: those that carry its `CLUSTER_ENV` or whose command line
        names its temporary folder, and their descendants (a raylet's agents and workers
        retitle themselves `ray::DashboardAgent` and so on, which overwrites both their
        command line and their environment); this process excepted."""
        mine: dict[int, psutil.Process] = {}
        for proc in psutil.process_iter(["cmdline", "environ"]):
            args = proc.info["cmdline"] or []
            ours = (proc.info["environ"] or {}).get(CLUSTER_ENV) == self.temp_dir
            if ours or any(_names(arg, self.temp_dir) for arg in args):
                mine[proc.pid] = proc
        for proc in list(mine.values()):
            with contextlib.suppress(psutil.Error):
                mine.update((child.pid, child) for child in proc.children(recursive=True))
        mine.pop(os.getpid(), None)
        return list(mine.values())

    def head_alive(self) -> bool:
        """Whether the head's GCS still runs (the cluster can be connected to)."""
        return any("gcs_server" in " ".join(p.info["cmdline"] or []) for p in self.processes())

    def stop(self, timeout_s: float = 2.0) -> int:
        """End this cluster's processes (SIGTERM, then SIGKILL after `timeout_s`: the GCS and
        the head's raylet sit out a SIGTERM for 15 s and more) and remove its temporary folder;
        processes started meanwhile (a worker a raylet was spawning) are ended the same way.
        Returns how many processes were ended."""
        ended: set[int] = set()
        for _ in range(5):
            procs = [p for p in self.processes() if p.pid not in ended]
            if not procs:
                break
            for proc in procs:
                _signal(proc, signal.SIGTERM)
            _, alive = psutil.wait_procs(procs, timeout=timeout_s)
            for proc in alive:
                _signal(proc, signal.SIGKILL)
            psutil.wait_procs(alive, timeout=5.0)
            ended.update(p.pid for p in procs)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        return len(ended)

    def save(self, path: Path) -> None:
        atomic_write_text(path, json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> LocalCluster:
        return cls(**json.loads(path.read_text()))


def _names(arg: str, folder: str) -> bool:
    """Whether a command-line argument names `folder` or a path inside it."""
    at = arg.find(folder)
    return at >= 0 and arg[at + len(folder) : at + len(folder) + 1] in ("", "/", ",", " ")


def _signal(proc: psutil.Process, sig: int) -> None:
    with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
        proc.send_signal(sig)


def wait_for_nodes(count: int, timeout_s: float = 60.0) -> None:
    """Wait until the connected cluster has `count` alive nodes."""
    import ray

    deadline = time.monotonic() + timeout_s
    while sum(n["Alive"] for n in ray.nodes()) < count:
        if time.monotonic() > deadline:
            raise ClusterError(f"the cluster did not reach {count} nodes in {timeout_s:g} s")
        time.sleep(0.2)
