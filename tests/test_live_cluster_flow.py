"""The live CLI flow from a fresh shell, as a user runs it (`examples/live_cluster.sh`):
`perfcast cluster up` (a Ray head with its own token, and the scheduler service), `submit`,
`jobs` until the job is done, `cluster down`, which stops what `cluster up` started and
nothing else. One cluster start for the module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil

from perfcast.scheduler.live.store import JobStore

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]


def test_cluster_up_submit_jobs_down_from_a_shell(tmp_path):
    state = tmp_path / "state"
    job = tmp_path / "job.yaml"
    job.write_text("name: demo\niterations: 60\nbatch_size: 16\nwidth: 64\ncheckpoint_every: 20\n")
    # something that looks like another user's raylet: `ray stop` would kill it, we must not
    other = subprocess.Popen(["bash", "-c", "sleep 600; true", "/x/ray/core/src/ray/raylet/raylet"])
    seen: list[str] = []  # the cluster's temporary folder, read while it runs
    watcher = subprocess.Popen(
        ["bash", "-c", f"until [ -f {state}/cluster.json ]; do sleep 0.2; done; "
                       f"cat {state}/cluster.json"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "COLUMNS": "200",
           "JOB": str(job), "NUM_GPUS": "2"}  # fmt: skip
    try:
        done = subprocess.run(
            ["bash", str(ROOT / "examples" / "live_cluster.sh"), str(state)],
            capture_output=True, text=True, env=env, cwd=ROOT, timeout=400,
        )  # fmt: skip
        seen.append(json.loads(watcher.communicate(timeout=10)[0])["local"]["temp_dir"])
        out = done.stdout
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "scheduler service (fifo) running" in out and "submitted demo" in out
        record = JobStore(state / "state.db").job("demo")
        assert record.status == "done" and record.iteration == 60
        assert "scheduler service stopped" in out and "Ray processes of" in out
        assert not (state / "cluster.json").exists()
        leftover = [p.pid for p in psutil.process_iter(["cmdline"])
                    if any(seen[0] in a for a in p.info["cmdline"] or [])]  # fmt: skip
        assert leftover == [] and not Path(seen[0]).exists()
        assert other.poll() is None  # the look-alike was left alone
    finally:
        if (state / "cluster.json").exists():  # the script did not get to its own clean-up
            subprocess.run([BIN / "perfcast", "cluster", "down", "--state", state], timeout=120)
        other.kill()
        watcher.kill()
