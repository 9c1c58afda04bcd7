"""The client on a machine without the service's stack (issue 35): a clean virtual environment
gets the built wheel without its dependencies, then only what the `client` extra lists (and what
those need), and calls a running service with every kind of call a user makes. torch, Ray,
MLflow, LightGBM and FastAPI are not importable there at all.

Offline and quick: the extra's distributions are not downloaded but linked from this
environment (the same installed files, found from their metadata), so CI needs no index."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from conftest import requires_data
from serving_server import LoopbackServer
from wheel_build import built_wheel

ROOT = Path(__file__).resolve().parent.parent
ABSENT = ("torch", "ray", "mlflow", "lightgbm", "sklearn", "fastapi", "uvicorn", "pandera")

pytestmark = [requires_data, pytest.mark.slow]  # a wheel, a venv and a champion: ~20-40 s


def _run(*args: object, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], check=True, capture_output=True, text=True,
                          timeout=300, **kwargs)  # fmt: skip


def _extra(wheel: Path, extra: str) -> list[str]:
    """The requirement names the wheel's metadata lists for `extra`."""
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(name).decode()
    found = []
    for line in text.splitlines():
        if line.startswith("Requires-Dist:") and f'extra == "{extra}"' in line:
            found.append(re.split(r"[\s;<>=!~\[]", line.split(":", 1)[1].strip())[0])
    return found


def _closure(names: list[str]) -> set[str]:
    """The installed distributions `names` need, recursively (their non-extra requirements
    whose markers hold here)."""
    from packaging.requirements import Requirement

    seen: set[str] = set()
    todo = list(names)
    while todo:
        dist = metadata.distribution(todo.pop())
        key = dist.metadata["Name"].lower()
        if key in seen:
            continue
        seen.add(key)
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def _link_distributions(names: set[str], into: Path) -> None:
    """Each distribution's top-level files (packages, modules, its dist-info) linked into one
    folder: what `pip install` of those names would have put in site-packages."""
    into.mkdir()
    for name in names:
        dist = metadata.distribution(name)
        tops = {Path(str(f)).parts[0] for f in dist.files or []}
        for top in tops:
            source = Path(dist.locate_file(top))
            if top in ("..", "bin") or top.endswith(".pth") or not source.exists():
                continue
            target = into / top
            if not target.exists():
                target.symlink_to(source)


@pytest.fixture(scope="module")
def service() -> str:
    """The service in this process with a scaling champion (the session's, else one trained
    here on muri-scaling)."""
    from perfcast.serving.app import create_app
    from perfcast.serving.settings import Settings
    from perfcast.training import model_store, trainer

    if model_store.load_champion("scaling") is None:
        trainer.train("scaling", "muri-scaling", model="gbm")
    with LoopbackServer(create_app(Settings(tasks=("scaling",)))) as url:
        yield url


CALLS = """
import json, sys
import pandas as pd
from perfcast.serving.client import PerfcastClient, ServiceError
absent = [m for m in {absent!r} if __import__("importlib.util").util.find_spec(m) is not None]
row = {{"job": "resnet18", "gpu_type": "v100", "num_nodes": 1, "num_gpus": 4,
        "local_batch_size": 128}}
with PerfcastClient({url!r}) as client:
    ready = client.ready()
    champions = client.models()["models"]
    from_dicts = client.predict("scaling", [row, {{**row, "num_gpus": 8, "num_nodes": 2}}])
    from_frame = client.predict("scaling", pd.DataFrame([row]))
    top = client.recommend({{"job": {{"job": "resnet18"}}, "local_batch_sizes": [64, 128],
        "pools": [{{"gpu_type": "V100", "gpus_per_node": 4, "nodes": 2}}],
        "work": {{"iterations": 1000}}}})["top"]
    try:
        client.predict("scaling", [{{**row, "gpu_type": "v1oo"}}])
        typo = None
    except Exception as err:
        typo = f"{{type(err).__name__}}: {{err}}"
print(json.dumps({{
    "importable": absent, "loaded": sorted(m for m in {absent!r} if m in sys.modules),
    "ready": ready, "tasks": [m["task"] for m in champions],
    "dicts": from_dicts["step_time_s"].tolist(), "frame": from_frame["step_time_s"].tolist(),
    "top": len(top), "typo": typo, "client": __import__("perfcast").__file__,
}}))
"""


def test_the_client_extra_alone_calls_a_running_service(tmp_path: Path, service: str) -> None:
    started = time.monotonic()
    wheel = built_wheel()
    extra = _extra(wheel, "client")
    assert set(extra) == {"httpx", "pandas"}, extra
    needed = _closure(extra)
    assert not {"torch", "ray", "mlflow", "fastapi"} & needed, needed

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    purelib = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))")
                   .stdout.strip())  # fmt: skip
    # the wheel itself, without its dependencies (as `pip install --no-deps` does: unpacked)
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(purelib)
    _link_distributions(needed, tmp_path / "client-deps")
    (purelib / "client-deps.pth").write_text(str(tmp_path / "client-deps") + "\n")

    code = CALLS.format(absent=ABSENT, url=service)
    answer = json.loads(_run(python, "-c", code, cwd=tmp_path, env={"PATH": "/usr/bin:/bin",
                        "PERFCAST_HOME": str(tmp_path / "home")}).stdout)  # fmt: skip
    assert answer["client"].startswith(str(venv)), answer["client"]
    assert answer["importable"] == [], f"the clean venv can import {answer['importable']}"
    assert answer["ready"] and answer["tasks"] == ["scaling"]
    assert len(answer["dicts"]) == 2 and all(s > 0 for s in answer["dicts"])
    assert answer["frame"] == answer["dicts"][:1]  # a frame and dicts: the same answer
    assert answer["top"] >= 1
    assert answer["typo"].startswith("ContractError") and "did you mean 'v100'" in answer["typo"]
    print(f"client-only venv: {len(needed)} distributions, {time.monotonic() - started:.1f} s")
