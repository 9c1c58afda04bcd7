"""Shared test set-up: every test session gets its own perfcast home (MLflow store, caches),
so tests never touch a user's `var/` and never see each other's models. Also the helpers
several test modules use: `MeasuredBackend`, a prediction backend that answers from real
measurements (Pollux's per-placement T4 step times through the `pollux-scaling` loader, Gavel's
measured co-located throughputs through the verified `fetch`); it speaks
`predictor.backend.PredictionBackend`, and rows it has no measurement for get NaN. The p10/p90
of a scaling row are the 10th/90th percentiles over the placements with the same nodes, GPUs
and local batch size."""

from __future__ import annotations

import os

# Under pytest-xdist (`make test` runs one worker per core) each worker computes on one thread:
# two workers each asking BLAS, OpenMP (LightGBM) and torch for every core would oversubscribe
# the machine and spin. Set before numpy, LightGBM or torch is imported.
if "PYTEST_XDIST_WORKER" in os.environ:
    for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, "1")

import ast
import fcntl
import functools
import json
import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pandas as pd
import pytest
from _pytest.nodeid import NodeId
from hypothesis import HealthCheck, settings

from perfcast import datasets
from perfcast.datasets.fetch import fetch, shared_data_available
from perfcast.predictor import make_predictor

# CI machines are shared: a property holds however long an example takes, so no test fails on
# hypothesis' per-example deadline or its "too slow" check when the machine is busy
settings.register_profile(
    "shared-machine", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("shared-machine")

requires_data = pytest.mark.skipif(
    not shared_data_available(),
    reason="the public datasets are not available (no ../shared/datasets, no PERFCAST_DATA_DIR)",
)


_FITS: list[Path] = []  # the folder `fitted_once` shares models in (none: not under xdist)


@pytest.fixture(autouse=True, scope="session")
def _perfcast_home(tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ["PERFCAST_HOME"] = str(tmp_path_factory.mktemp("perfcast-home"))
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    if "PYTEST_XDIST_WORKER" in os.environ:  # a worker's basetemp lies in the run's basetemp
        _FITS.append(tmp_path_factory.getbasetemp().parent / "fitted-once")


_MLFLOW_TEMPLATE: list[Path] = []  # this process's migrated empty MLflow store, once made


def _initialize_from_template(original: Callable[[object], None]) -> Callable[[object], None]:
    """MLflow's `_initialize_tables` for an empty sqlite store: the tables and alembic's
    version copied from a store this process migrated once, not ~70 migrations run again
    (2-5 s of a test that trains in a fresh PERFCAST_HOME). The copy is that store page for
    page; MLflow then makes its Default experiment and verifies the schema as on any store.
    Any other store (a server's, an older one to upgrade) runs MLflow's own."""
    import sqlite3
    import tempfile

    import sqlalchemy
    from mlflow.store.db.utils import _is_empty_database

    def initialize(engine: sqlalchemy.engine.Engine) -> None:
        database = engine.url.database
        if engine.dialect.name != "sqlite" or database in (None, "", ":memory:"):
            return original(engine)
        if not _is_empty_database(engine):
            return original(engine)
        if not _MLFLOW_TEMPLATE:
            path = Path(tempfile.mkdtemp(prefix="perfcast-mlflow-template-")) / "mlflow.db"
            template = sqlalchemy.create_engine(f"sqlite:///{path}")
            original(template)
            template.dispose()
            _MLFLOW_TEMPLATE.append(path)
        source, target = sqlite3.connect(_MLFLOW_TEMPLATE[0]), sqlite3.connect(database)
        try:
            source.backup(target)
        finally:
            source.close()
            target.close()

    return initialize


@pytest.fixture(autouse=True)
def _mlflow_store_from_template() -> None:
    """Once MLflow is loaded in this process, fresh stores start from `_MLFLOW_TEMPLATE`."""
    import sys

    if "mlflow" not in sys.modules:
        return
    import mlflow.store.db.utils as db_utils
    import mlflow.store.model_registry.sqlalchemy_store as registry_store

    if getattr(db_utils._initialize_tables, "from_template", False):
        return
    initialize = _initialize_from_template(db_utils._initialize_tables)
    initialize.from_template = True  # type: ignore[attr-defined]
    db_utils._initialize_tables = initialize
    registry_store._initialize_tables = initialize


T = TypeVar("T")


def fitted_once(build: Callable[..., T]) -> Callable[..., T]:
    """`build(*args)` once per test run, not once per pytest-xdist worker: the first worker to
    ask fits it and pickles it into a folder of this run's basetemp, which every worker shares;
    a worker asking meanwhile waits for it (no CPU) rather than fitting the same model again.
    Every run fits afresh (the folder is the run's own). Callers only read what it returns."""

    @functools.cache
    @functools.wraps(build)
    def once(*args: object) -> T:
        if not _FITS:
            return build(*args)
        _FITS[0].mkdir(exist_ok=True)
        path = _FITS[0] / f"{build.__name__}-{'-'.join(map(str, args))}.pickle"
        with open(path.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if path.is_file():
                return pickle.loads(path.read_bytes())
            value = build(*args)
            path.with_suffix(".part").write_bytes(pickle.dumps(value))
            path.with_suffix(".part").replace(path)
            return value

    return once


GAVEL_GPUS = ("k80", "p100", "v100")
SCALING_KEY = ["job", "gpu_type", "num_nodes", "num_gpus", "local_batch_size"]
PAIR_KEY = ["gpu_type", "a_job", "a_batch_size", "b_job", "b_batch_size"]

needs_data = requires_data


@functools.cache
def pollux_placements() -> pd.DataFrame:
    """Pollux's measured per-placement step times (4xT4 nodes) as scaling-contract rows, from
    the `pollux-scaling` loader; job = the model's folder name (bert, cifar10, ...)."""
    table = datasets.load("pollux-scaling")
    placed = table[table["placement"].notna()]
    columns = ["job", "gpu_type", "num_nodes", "num_gpus", "placement", "local_batch_size",
               "step_time_s"]  # fmt: skip
    return placed.assign(job=placed["application"])[columns].reset_index(drop=True)


@functools.cache
def scaling_table() -> pd.DataFrame:
    grouped = pollux_placements().groupby(SCALING_KEY)["step_time_s"]
    return pd.DataFrame(
        {
            "step_time_s": grouped.median(),
            "step_time_s_p10": grouped.quantile(0.1),
            "step_time_s_p90": grouped.quantile(0.9),
        }
    ).reset_index()


@functools.cache
def gavel_muri_scaling_rows() -> pd.DataFrame:
    """Gavel's and Muri's scaling rows, each naming its cluster."""
    return pd.concat(
        [
            datasets.load(name).assign(cluster=name.removesuffix("-scaling"))
            for name in ("gavel-scaling", "muri-scaling")
        ],
        ignore_index=True,
    )


@fitted_once
def scaling_model_without_k80_multi():
    """A gbm scaling model fitted on `gavel_muri_scaling_rows` less the K80's multi-GPU rows
    (a GPU known from its one-GPU rows only). Shared by the fast-path tests, which only read
    it: one fit for all of them."""
    rows = gavel_muri_scaling_rows()
    k80 = (rows["gpu_type"] == "k80") & (rows["num_gpus"] > 1)
    return make_predictor("scaling", "gbm").fit(rows[~k80])


# the runtime model of tests/test_runtime_unseen.py: five devices, one model held out
RUNTIME_HELD_MODEL = "gpt2_large"
RUNTIME_TRAIN_DEVICES = (
    "AMD_Instinct_MI100",
    "AMD_Instinct_MI210",
    "NVIDIA_A100-PCIE-40GB",
    "Tesla_V100-PCIE-32GB",
    "Tesla_T4",
)


@fitted_once
def runtime_model_without_a_model():
    """A gbm runtime model fitted on NeuSight's graphs of RUNTIME_TRAIN_DEVICES less
    RUNTIME_HELD_MODEL's; shared (read only) by the tests of unseen models and devices and the
    flag properties: one fit, the slowest of the runtime tests, for all of them."""
    graphs = datasets.load("neusight-graphs")
    train = graphs["device"].isin(RUNTIME_TRAIN_DEVICES) & (graphs["model"] != RUNTIME_HELD_MODEL)
    return make_predictor("runtime", "gbm").fit(graphs[train])


@fitted_once
def spark_query_model(every: int = 5):
    """(a gbm query model, the queries and the scale it never saw): fitted on Decima's Spark
    TPC-H runs less every `every`-th query and the largest scale; shared (read only) by the
    query flag tests."""
    spark = datasets.load("decima-tpch-stages")
    queries = sorted(spark["query"].unique())[::every]
    largest = float(spark["scale_factor"].max())
    train = spark[~spark["query"].isin(queries) & (spark["scale_factor"] < largest)]
    return make_predictor("query", "gbm").fit(train), queries, largest


_GAVEL_NAME = re.compile(r"^(?P<job>.+) \(batch size (?P<bs>\d+)\)$")


@functools.cache
def gavel_pairs() -> pd.DataFrame:
    """Gavel's measured single-GPU co-locations as interference-contract rows."""
    data = json.loads(fetch("gavel/physical_cluster_throughputs.json").read_text())
    rows = []
    for gpu in GAVEL_GPUS:
        for a_key, others in data[gpu].items():
            a_name, a_scale = ast.literal_eval(a_key)
            a = _GAVEL_NAME.match(a_name)
            if a_scale != 1 or a is None:
                continue
            for b_key, pair in others.items():
                if b_key == "null" or pair == [0, 0]:  # [0, 0]: not measured
                    continue
                b_name, _ = ast.literal_eval(b_key)
                b = _GAVEL_NAME.match(b_name)
                if b is None or b_key not in data[gpu]:
                    continue
                rows.append(
                    {
                        "gpu_type": gpu,
                        "a_job": a["job"],
                        "a_batch_size": int(a["bs"]),
                        "b_job": b["job"],
                        "b_batch_size": int(b["bs"]),
                        "a_speed": pair[0] / others["null"],
                        "b_speed": pair[1] / data[gpu][b_key]["null"],
                    }
                )
    return pd.DataFrame(rows)


@fitted_once
def interference_model_on_gavel_pairs():
    """A gbm interference model fitted on every row of `gavel_pairs`; shared (read only) by
    the fast-path and flag tests."""
    return make_predictor("interference", "gbm").fit(gavel_pairs())


class MeasuredBackend:
    """Answers `scaling` and `interference` rows from the measured tables (NaN if unmeasured)."""

    def predict(self, task: str, rows: pd.DataFrame) -> pd.DataFrame:
        if task == "scaling":
            table, key, targets = scaling_table(), SCALING_KEY, ["step_time_s"]
        elif task == "interference":
            table, key, targets = gavel_pairs(), PAIR_KEY, ["a_speed", "b_speed"]
            table = table.assign(**{f"{t}_{q}": table[t] for t in targets for q in ("p10", "p90")})
        else:
            raise ValueError(f"MeasuredBackend has no {task!r} data")
        columns = [c for t in targets for c in (t, f"{t}_p10", f"{t}_p90")]
        left = rows[key].reset_index(drop=True)
        for name in key:  # align dtypes with the table for the merge
            left[name] = left[name].astype(table[name].dtype)
        out = left.merge(table[key + columns], on=key, how="left", validate="many_to_one")
        return out[columns]


# Under `make test` (pytest-xdist, `--dist loadgroup`) each test module runs whole on one worker,
# so its module- and cache-scoped fitted models are built once; the modules that start Ray
# clusters share one worker: Ray gives a node 30 s (hard-coded) to register, which two clusters
# starting at once on a busy two-core machine can miss.
RAY_MODULES = frozenset(
    {
        "test_live_cluster_flow",
        "test_live_executor",
        "test_live_multinode",
        "test_live_restart",
        "test_tune_search",
        "test_ui_dashboard",
    }
)


# After xdist's own hook: xdist 3.8 sends a test to its group's worker by the `@group` suffix of
# its node id, which it sets through `item._nodeid`, an attribute pytest 9 no longer reads (the
# id is `item._id`); so no test was grouped and two Ray clusters started at once. The suffix is
# set here, where xdist's did not take.
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    grouping = getattr(config.option, "loadgroup", False)  # set on xdist's workers
    ray: set[int] = set()  # the items of the Ray group
    for item in items:
        marker = item.get_closest_marker("xdist_group")
        if marker is None:
            module = item.module.__name__.rsplit(".", 1)[-1] if item.module else item.nodeid
            item.add_marker(pytest.mark.xdist_group("ray" if module in RAY_MODULES else module))
            marker = item.get_closest_marker("xdist_group")
        name = marker.args[0] if marker.args else marker.kwargs.get("name", "default")
        if name == "ray":
            ray.add(id(item))
        nodeid = item.nodeid
        if grouping and nodeid.rfind("@") <= nodeid.rfind("]"):  # no group suffix yet
            item._id = NodeId.parse(f"{nodeid}@{name}")
    # the Ray group is the longest (over half the wall time) and runs on one worker:
    # first in the queue (`make test` keeps this order, --no-loadscope-reorder), it starts at
    # once and the other worker takes the rest, instead of starting after other modules
    items.sort(key=lambda item: id(item) not in ray)
