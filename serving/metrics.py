"""Prometheus metrics of one app: requests, latency histograms, predictions by task and model.

Each app has its own registry, so several apps (tests) never clash on metric names.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

# seconds; fine-grained at the low end, where the single-row latency target lives
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ServiceMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "perfcast_http_requests",
            "HTTP requests answered, by method, route template and status code.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "perfcast_http_request_duration_seconds",
            "Time from request to the end of the response, by method and route template.",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.predictions = Counter(
            "perfcast_predictions",
            "Predictions made (rows answered), by task and model (family:version).",
            ["task", "model"],
            registry=self.registry,
        )
        self.models = Gauge(
            "perfcast_model_info",
            "The model each task is served with (1 per loaded champion), by task, family, "
            "registry version and MLflow run.",
            ["task", "family", "version", "run_id"],
            registry=self.registry,
        )
        self._champions: dict[str, object] = {}
        self.registry.register(_LiveError(lambda: self._champions))
        # labelled children, looked up once per label set (`labels()` is a locked lookup
        # that builds its key from the label values each time)
        self._answered: dict[tuple[str, str, int], tuple] = {}
        self._predicted: dict[tuple[str, str], object] = {}

    def record(self, method: str, route: str, status: int, seconds: float) -> None:
        """One HTTP request answered: counted by method, route template and status, timed."""
        key = (method, route, status)
        children = self._answered.get(key)
        if children is None:
            children = (
                self.requests.labels(method, route, str(status)),
                self.latency.labels(method, route),
            )
            if len(self._answered) < 10_000:  # routes are templates: a few dozen in practice
                self._answered[key] = children
        children[0].inc()
        children[1].observe(seconds)

    def predicted(self, task: str, model: str, rows: int) -> None:
        """`rows` predictions made by `model` (family:version) for `task`."""
        key = (task, model)
        child = self._predicted.get(key)
        if child is None:
            child = self._predicted[key] = self.predictions.labels(task, model)
        child.inc(rows)

    def served(self, champions: dict[str, object]) -> None:
        """Point the model gauge at the champions now loaded (after every reload)."""
        self._champions = dict(champions)
        self.models.clear()
        for task, c in champions.items():
            self.models.labels(task, c.family, str(c.version), c.run_id).set(1)


class _LiveError:
    """The live prediction error, computed at each scrape from the live scheduler's store
    (`serving/live_error.py`): the scaling champion's mean |predicted - measured| / measured
    step time over the live jobs measured so far, and how many jobs that is. No sample without
    a store or a counted job."""

    def __init__(self, champions) -> None:
        self._champions = champions

    def describe(self):
        return self._families()

    def collect(self):
        from perfcast.serving.live_error import TASK, default_store_path, live_error

        error, jobs = self._families()
        champion = self._champions().get(TASK)
        result = live_error(default_store_path(), champion) if champion is not None else None
        if result is not None and result.mape is not None:
            labels = [result.task, result.family, result.version]
            error.add_metric(labels, result.mape / 100)
            jobs.add_metric(labels, len(result.jobs))
        return [error, jobs]

    @staticmethod
    def _families() -> list[GaugeMetricFamily]:
        labels = ["task", "family", "version"]
        return [
            GaugeMetricFamily(
                "perfcast_live_prediction_error_ratio",
                "Mean |predicted - measured| / measured step time of the task's champion over "
                "the live scheduler's jobs measured so far, by task, family and version.",
                labels=labels,
            ),
            GaugeMetricFamily(
                "perfcast_live_prediction_jobs",
                "Live jobs the live prediction error is computed over.",
                labels=labels,
            ),
        ]
