"""The ask page's form: its fields as text, read into the same `RecommendRequest` that
`POST /v1/recommend` takes, so the page answers with the very code the API runs."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from pydantic import ValidationError

from perfcast.errors import PerfcastError
from perfcast.serving import schemas
from perfcast.serving.ui.charts import Format, Point
from perfcast.units import duration, number


class FormError(PerfcastError):
    """A field of the ask form cannot be read (the page shows which and why)."""


@dataclass(frozen=True)
class AskForm:
    job: str = "resnet18"
    gpu_types: str = "v100"
    gpus_per_node: str = "8"
    nodes: str = "2"
    prices: str = "2.48"  # per GPU-hour, one per GPU type, comma-separated; empty: no cost
    batch_sizes: str = "64,128,256"
    gpu_counts: str = ""  # empty: every count the pools allow
    objective: str = "min_time"
    samples: str = "12800000"
    top_k: str = "10"

    @classmethod
    def from_query(cls, query: dict[str, str]) -> AskForm:
        known = {k: v.strip() for k, v in query.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def request_body(self) -> dict:
        """The JSON body of the equivalent `POST /v1/recommend`."""
        types = _words(self.gpu_types, "gpu_types")
        prices = [_number(p, "prices") for p in _words(self.prices)] if self.prices else []
        if prices and len(prices) != len(types):
            raise FormError(
                f"prices: give one price per GPU type ({len(types)}), or none; got {len(prices)}"
            )
        pools = []
        for i, gpu_type in enumerate(types):
            pool = {
                "gpu_type": gpu_type,
                "gpus_per_node": _integer(self.gpus_per_node, "gpus_per_node"),
                "nodes": _integer(self.nodes, "nodes"),
            }
            if prices:
                pool["price_per_gpu_hour"] = prices[i]
            pools.append(pool)
        body: dict = {
            "job": {"job": self.job},
            "pools": pools,
            "local_batch_sizes": [_integer(b, "batch_sizes") for b in _words(self.batch_sizes)],
            "objective": self.objective,
            "top_k": _integer(self.top_k, "top_k"),
        }
        if self.samples:
            body["work"] = {"samples": _integer(self.samples, "samples")}
        if self.gpu_counts:
            body["gpu_counts"] = [_integer(c, "gpu_counts") for c in _words(self.gpu_counts)]
        return body

    def request(self) -> schemas.RecommendRequest:
        try:
            return schemas.RecommendRequest.model_validate(self.request_body())
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "request"
            raise FormError(f"{where}: {first['msg']}") from None

    def fields(self) -> dict[str, str]:
        return asdict(self)


def _words(text: str, field: str = "") -> list[str]:
    words = [w.strip() for w in text.split(",") if w.strip()]
    if field and not words:
        raise FormError(f"{field}: give at least one value (comma-separated)")
    return words


def _integer(text: str, field: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise FormError(f"{field}: {text!r} is not a whole number") from None


def _number(text: str, field: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise FormError(f"{field}: {text!r} is not a number") from None


def dollars(value: float) -> str:
    """`$7.43`, `$7,434`: cents only where they count."""
    return f"${value:,.0f}" if abs(value) >= 1000 else f"${value:,.2f}"


def plot_axes(
    answer: schemas.RecommendResponse,
) -> tuple[list[Point], str, str, Format, Format]:
    """Each recommended configuration as (time, cost); without work the time is the step time,
    without prices the cost is GPU-hours. Then the axes' labels and their ticks' formats."""
    has_total = any(c.total_time_s.value is not None for c in answer.top)
    has_cost = any(c.cost.value is not None for c in answer.top)
    points = []
    for c in answer.top:
        time_s = c.total_time_s.value if has_total else c.step_time_s.value
        if has_cost:
            cost = c.cost.value
        else:
            cost = None if time_s is None or not has_total else time_s * c.num_gpus / 3600
        label = f"{c.num_gpus}x{c.gpu_type} on {c.num_nodes} node(s), batch {c.local_batch_size}"
        points.append(
            Point(
                float("nan") if time_s is None else time_s,
                float("nan") if cost is None else cost,
                label,
                c.rank,
            )
        )
    x_label = "predicted total time" if has_total else "predicted step time"
    y_label = "predicted cost" if has_cost else "GPU-hours"
    return points, x_label, y_label, duration, dollars if has_cost else number
