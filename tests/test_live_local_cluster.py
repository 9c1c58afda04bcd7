"""What `perfcast cluster down` stops (no Ray needed): the processes that name the cluster's
own folder, never another's; the placement strategy of a gang; the service's pid check."""

from __future__ import annotations

import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st

from perfcast.scheduler.live.local_cluster import LocalCluster, _names
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


def test_stop_ends_the_processes_of_its_folder_and_no_other(tmp_path):
    mine, other = tmp_path / "mine", tmp_path / "mine2"
    for folder in (mine, other):
        folder.mkdir()
    # processes that never fork: a shell's child, between fork and exec, would carry the
    # folder in its command line too (and be ended, rightly, but counted twice here)
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    ours = subprocess.Popen([*sleeper, f"--session-dir={mine}/session_1"])
    theirs = subprocess.Popen([*sleeper, f"--session-dir={other}/session_1"])
    try:
        cluster = LocalCluster("127.0.0.1:1", str(mine), str(tmp_path / "token"))
        assert [p.pid for p in cluster.processes()] == [ours.pid]
        assert cluster.stop(timeout_s=5) == 1
        assert ours.wait(5) is not None and theirs.poll() is None
        assert not mine.exists() and other.exists()
    finally:
        ours.kill()
        theirs.kill()


def test_a_recorded_pid_that_is_not_this_states_service_is_not_it(tmp_path):
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        record_cluster(tmp_path, {"scheduler_pid": stranger.pid})
        assert service_process(tmp_path) is None  # never signalled by `cluster down`
        record_cluster(tmp_path, {})
        assert service_process(tmp_path) is None
    finally:
        stranger.kill()
