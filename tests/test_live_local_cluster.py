"""What `perfcast cluster down` stops (no Ray needed): the processes that name the cluster's
own folder or carry it in their environment, never another's, quickly even when they sit out
a SIGTERM; what `cluster up` does with a cluster an earlier `up` left running; the placement
strategy of a gang; the service's pid check."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfcast.scheduler.live.cli import _adopt
from perfcast.scheduler.live.local_cluster import CLUSTER_ENV, ClusterError, LocalCluster, _names
from perfcast.scheduler.live.reservations import strategy_for
from perfcast.scheduler.live.service import record_cluster, service_process

names = st.text(alphabet="abcdefghijklmnop0123456789_-", min_size=1, max_size=12)


@given(names, names)
def test_an_argument_names_the_folder_or_a_path_in_it_never_a_longer_name(folder, rest):
    folder = f"/tmp/perfcast-ray-{folder}"
    assert _names(folder, folder) and _names(f"--temp-dir={folder}", folder)
    assert _names(f"--log-dir={folder}/{rest}/logs", folder)
    assert not _names(f"{folder}{rest}", folder)  # another cluster's longer folder name


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 7)), min_size=1, max_size=8))
def test_a_gang_on_one_node_is_strictly_packed_else_spread(gpus):
    one_node = len({node for node, _ in gpus}) == 1
    assert strategy_for(gpus) == ("STRICT_PACK" if one_node else "SPREAD")


def _ignores_sigterm(pid: int) -> bool:
    """Whether process `pid` has set SIGTERM (signal 15, bit 14 of the mask) to be ignored."""
    with open(f"/proc/{pid}/status") as status:
        mask = next(line.split()[1] for line in status if line.startswith("SigIgn:"))
    return bool(int(mask, 16) & (1 << (15 - 1)))


def test_stop_ends_the_processes_of_its_folder_and_no_other(tmp_path):
    mine, other = tmp_path / "mine", tmp_path / "mine2"
    for folder in (mine, other):
        folder.mkdir()
    # processes that never fork: a shell's child, between fork and exec, would carry the
    # folder in its command line too (and be ended, rightly, but counted twice here)
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    stubborn = [sys.executable, "-c", "import signal, time; "
                "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"]  # fmt: skip
    ours = subprocess.Popen([*sleeper, f"--session-dir={mine}/session_1"])
    theirs = subprocess.Popen([*sleeper, f"--session-dir={other}/session_1"])
    # Ray's client server names nothing of the cluster on its command line and the GCS sits
    # out a SIGTERM: found by the environment `ray start` gave them, and killed; a raylet's
    # agents (retitled, which wipes their command line and environment): as its children
    env = {**os.environ, CLUSTER_ENV: str(mine)}
    agent = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', " \
            "'import time; time.sleep(60)'], env={}); time.sleep(60)"  # fmt: skip
    server = subprocess.Popen([*stubborn, "ray.util.client.server"], env=env)
    raylet = subprocess.Popen([sys.executable, "-c", agent], env=env)
    elsewhere = subprocess.Popen(sleeper, env={**os.environ, CLUSTER_ENV: str(other)})
    children = []
    try:
        cluster = LocalCluster("127.0.0.1:1", str(mine), str(tmp_path / "token"))
        # until the stubborn one ignores SIGTERM and the raylet has started its agent (a fixed
        # wait is too short on a busy machine)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            children = psutil.Process(raylet.pid).children()
            if children and _ignores_sigterm(server.pid):
                break
            time.sleep(0.05)
        assert len(children) == 1
        expected = [ours.pid, server.pid, raylet.pid, children[0].pid]
        assert sorted(p.pid for p in cluster.processes()) == sorted(expected)
        started = time.monotonic()
        assert cluster.stop(timeout_s=0.5) == 4
        assert time.monotonic() - started < 3
        assert not children[0].is_running() or children[0].status() == psutil.STATUS_ZOMBIE
        assert all(p.wait(5) is not None for p in (ours, server, raylet))
        assert theirs.poll() is None and elsewhere.poll() is None
        assert not mine.exists() and other.exists()
    finally:
        for proc in (ours, theirs, server, raylet, elsewhere):
            proc.kill()
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.kill()


def test_up_adopts_the_cluster_an_earlier_up_left_running_or_clears_a_headless_one(tmp_path):
    folder = tmp_path / "ray"
    folder.mkdir()
    local = LocalCluster("127.0.0.1:1", str(folder), str(tmp_path / "token"))
    info = {"address": local.address, "token_path": local.token_path, "local": local.__dict__}
    record_cluster(tmp_path, info)
    env = {**os.environ, CLUSTER_ENV: str(folder)}
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    head = subprocess.Popen([*sleeper, "gcs_server"], env=env)
    worker = subprocess.Popen([*sleeper, "raylet"], env=env)
    try:
        assert _adopt(tmp_path, None) == info  # its service is started again on it
        assert _adopt(tmp_path, local.address) == info
        with pytest.raises(ClusterError, match="still runs: `perfcast cluster down` first"):
            _adopt(tmp_path, "10.0.0.1:6379")  # not a second cluster beside it
        head.kill()
        head.wait(5)
        assert _adopt(tmp_path, None) == {}  # a new one is started: what was left is ended
        assert worker.wait(5) is not None and not folder.exists()
    finally:
        head.kill()
        worker.kill()


def test_a_recorded_pid_that_is_not_this_states_service_is_not_it(tmp_path):
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        record_cluster(tmp_path, {"scheduler_pid": stranger.pid})
        assert service_process(tmp_path) is None  # never signalled by `cluster down`
        record_cluster(tmp_path, {})
        assert service_process(tmp_path) is None
    finally:
        stranger.kill()
