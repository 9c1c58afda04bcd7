"""Prometheus metrics of one app: requests, latency histograms, predictions by task and model.

Each app has its own registry, so several apps (tests) never clash on metric names.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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

    def served(self, champions: dict[str, object]) -> None:
        """Point the model gauge at the champions now loaded (after every reload)."""
        self.models.clear()
        for task, c in champions.items():
            self.models.labels(task, c.family, str(c.version), c.run_id).set(1)
