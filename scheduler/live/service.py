"""The scheduler service: one long-running scheduler per state folder.

`perfcast cluster up` starts it in the background (`perfcast cluster serve`, its output in
`<state>/scheduler.log`); it runs scheduling rounds until it is told to stop, picking up every
job `perfcast submit` writes into the state database and every `perfcast job ...` command.
Its process id is recorded in `<state>/cluster.json` (by the service itself too, so a service
restarted by hand with `perfcast cluster serve` is the one `submit` sees and `down` stops);
`perfcast cluster down` stops it (and only it) with SIGTERM, after which the jobs' detached
workers are stopped with the cluster or, on a cluster perfcast did not start, left for the next
service to reattach to.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from perfcast.atomic import atomic_write_text
from perfcast.scheduler.live.local_cluster import ClusterError

SERVE_ARGS = ("cluster", "serve")  # how the service names itself on its command line


def cluster_info(state: Path) -> dict:
    """What `cluster up` recorded in `state` (empty: nothing)."""
    path = state / "cluster.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def record_cluster(state: Path, info: dict) -> None:
    atomic_write_text(state / "cluster.json", json.dumps(info))


def service_process(state: Path) -> psutil.Process | None:
    """The running scheduler service of `state`, if any (a recorded pid that now belongs to
    another program, or to another process of the same name, does not count)."""
    info = cluster_info(state)
    pid = info.get("scheduler_pid")
    if not pid:
        return None
    try:
        proc = psutil.Process(pid)
        cmdline, started = proc.cmdline(), proc.create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    serving = all(arg in cmdline for arg in SERVE_ARGS)
    if "scheduler_started" in info:  # the same process, not a later one with its pid
        serving = serving and abs(started - info["scheduler_started"]) < 0.01
    else:
        serving = serving and str(state) in cmdline
    return proc if serving and proc.status() != psutil.STATUS_ZOMBIE else None


def register_service(state: Path, pid: int) -> None:
    """Record `pid` as the state's scheduler service (with its start time: a pid reused
    later is not taken for it)."""
    started = psutil.Process(pid).create_time()
    record_cluster(state, {**cluster_info(state), "scheduler_pid": pid,
                           "scheduler_started": started})  # fmt: skip


def start_service(
    state: Path,
    policy: str,
    round_s: float,
    timeout_s: float = 300.0,  # a loaded host starts Ray workers in minutes
    *,
    predictor: str = "none",
    predictor_url: str = "http://127.0.0.1:8000",
    gpu_type: str | None = None,
) -> int:
    """Start `perfcast cluster serve` for `state` in the background and wait until its first
    round; its pid. ClusterError, with its log's tail, if it exits first. `predictor` and the
    options after it: the service's prediction backend (`predictions.py`)."""
    perfcast = str(Path(sys.executable).parent / "perfcast")
    cmd = [perfcast, *SERVE_ARGS, "--policy", policy, "--round-s", str(round_s)]
    cmd += ["--predictor", predictor, "--predictor-url", predictor_url]
    cmd += ["--gpu-type", gpu_type] if gpu_type else []
    cmd += ["--state", str(state)]
    log = (state / "scheduler.log").open("ab")
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
    )
    register_service(state, proc.pid)
    ready = state / "scheduler.ready"
    deadline = time.monotonic() + timeout_s
    while not (ready.is_file() and ready.read_text() == str(proc.pid)):
        code = proc.poll()
        if code is not None or time.monotonic() > deadline:
            proc.kill()
            why = f"exited with code {code}" if code is not None else f"no round in {timeout_s:g} s"
            tail = (state / "scheduler.log").read_text(errors="replace")[-2000:]
            raise ClusterError(
                f"the scheduler service did not start ({why}; `perfcast cluster down` stops "
                f"what `cluster up` started):\n{tail}"
            )
        time.sleep(0.2)
    return proc.pid


def mark_ready(state: Path, pid: int) -> None:
    """Said by the service once its first round is done."""
    atomic_write_text(state / "scheduler.ready", str(pid))


def stop_service(state: Path, timeout_s: float = 30.0) -> bool:
    """Stop the state's scheduler service (SIGTERM, then SIGKILL). False: none was running."""
    proc = service_process(state)
    (state / "scheduler.ready").unlink(missing_ok=True)
    if proc is None:
        return False
    proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while not _ended(proc):
        if time.monotonic() > deadline:
            proc.kill()
            break
        time.sleep(0.05)
    return True


def _ended(proc: psutil.Process) -> bool:
    """Whether `proc` has exited. A zombie has: a service started by another process (a
    shell's `perfcast cluster serve &`) stays one until that parent reaps it, and psutil's
    `wait` on a process not our child waits out its whole timeout on a zombie (30 s of every
    `cluster down` of a hand-started service)."""
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT: the service finishes its round and leaves."""
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    return stopping
