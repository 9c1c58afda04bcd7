"""A simulation's HTML report: one self-contained file (inline SVG, no script, no network) with
the JCT CDF of one or several runs overlaid, GPUs busy and jobs waiting over time, and
preemptions per job. Built from what `write_outputs` leaves in a run's folder (metrics.json,
jobs.csv, timeline.csv), so runs of several policies compare by passing their folders.

The time series come from the engine's timeline (GPUs holding a job and jobs waiting, at every
change). A folder written before timelines existed has none; its series are then rebuilt from
the per-job table and the page says they are an estimate.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path

import numpy as np
import pandas as pd

from perfcast.atomic import atomic_write_text
from perfcast.errors import PerfcastError
from perfcast.units import duration, log_ticks, number, percent, ticks

COLOURS = ("#1f6feb", "#d1495b", "#2a9d8f", "#e9a23b", "#6c4ab6", "#5c677d")
GRID_POINTS = 400  # samples of a time series drawn (the step function itself is exact)
W, H, PAD = 640, 300, 54
TIMELINE_COLUMNS = ("time_s", "gpus_busy", "jobs_waiting")


class ReportError(PerfcastError):
    """A run folder lacks what the report reads (names the folder and file)."""


@dataclass(frozen=True)
class RunResult:
    label: str
    summary: dict
    jobs: pd.DataFrame
    timeline: pd.DataFrame | None = None  # TIMELINE_COLUMNS; None for folders written without


def load_run(folder: Path) -> RunResult:
    """A run written by `write_outputs`: its metrics.json and jobs.csv."""
    metrics, table = folder / "metrics.json", folder / "jobs.csv"
    for path in (metrics, table):
        if not path.is_file():
            raise ReportError(f"{path}: missing; a run folder holds what `perfcast simulate "
                              "--out DIR` writes")  # fmt: skip
    try:
        summary = json.loads(metrics.read_text())
    except json.JSONDecodeError as err:
        raise ReportError(f"{metrics}: not JSON ({err})") from None
    timeline = folder / "timeline.csv"
    steps = pd.read_csv(timeline) if timeline.is_file() else None
    if steps is not None and list(steps.columns) != list(TIMELINE_COLUMNS):
        raise ReportError(f"{timeline}: columns {list(steps.columns)}, expected "
                          f"{list(TIMELINE_COLUMNS)}")  # fmt: skip
    return RunResult(str(summary.get("policy", folder.name)), summary, pd.read_csv(table), steps)


def jct_cdf(jobs: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Sorted JCTs and the fraction of jobs done by each."""
    jct = np.sort(jobs["jct_s"].to_numpy(float))
    return jct, np.arange(1, len(jct) + 1) / max(len(jct), 1)


def queue_length(jobs: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Jobs waiting for their first start, as a step function: value[i] holds from times[i]."""
    changes = pd.concat(
        [
            pd.Series(1.0, index=jobs["submit_s"].to_numpy(float)),
            pd.Series(-1.0, index=jobs["start_s"].to_numpy(float)),
        ]
    )
    return _steps(changes)


def gpus_held(jobs: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """GPUs held over time, each job's attained GPU-seconds spread over its start to finish."""
    span = (jobs["finish_s"] - jobs["start_s"]).to_numpy(float)
    rate = np.divide(jobs["gpu_s"].to_numpy(float), span, out=np.zeros_like(span), where=span > 0)
    changes = pd.concat(
        [
            pd.Series(rate, index=jobs["start_s"].to_numpy(float)),
            pd.Series(-rate, index=jobs["finish_s"].to_numpy(float)),
        ]
    )
    return _steps(changes)


def _column(timeline: pd.DataFrame, name: str) -> tuple[np.ndarray, np.ndarray]:
    """One of the timeline's series as a step function (times, values)."""
    return timeline["time_s"].to_numpy(float), timeline[name].to_numpy(float)


def _steps(changes: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    if changes.empty:
        return np.zeros(1), np.zeros(1)
    summed = changes.groupby(level=0).sum().sort_index()
    values = np.cumsum(summed.to_numpy())
    values[np.abs(values) < 1e-9] = 0.0  # float crumbs of + and - the same rate
    return summed.index.to_numpy(float), values


def sample_steps(times: np.ndarray, values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """The step function's value at each grid time (0 before its first step)."""
    at = np.searchsorted(times, grid, side="right") - 1
    return np.where(at >= 0, values[np.clip(at, 0, None)], 0.0)


# ---- SVG --------------------------------------------------------------------------------------


CHAR_W = 6.6  # px per character of an 11 px label, generous (digits are ~6.1 in system-ui)


def _spaced(marks: Sequence[tuple[float, str]], gap: float = 10.0) -> list[tuple[float, str]]:
    """Marks (centre in px, text) without overlap: left to right, a label is kept only when it
    clears the last kept one by `gap` px, so no two tick labels ever touch."""
    kept: list[tuple[float, str]] = []
    for at, text in sorted(marks):
        half = CHAR_W * len(text) / 2
        if kept and at - half < kept[-1][0] + CHAR_W * len(kept[-1][1]) / 2 + gap:
            continue
        kept.append((at, text))
    return kept


def line_chart(
    series: Sequence[tuple[str, np.ndarray, np.ndarray]],
    x_label: str,
    y_label: str,
    *,
    log_x: bool = False,
    step: bool = False,
    ceiling: float | None = None,
    x_seconds: bool = True,
    y_format: Callable[[float], str] = number,
) -> str:
    """Curves (label, x, y) on shared axes; `step` draws each as a staircase; `ceiling` a
    dashed line (the cluster's GPUs). Ticks are round values in human units (`x_seconds`: the
    x axis is a duration, `10 min`, `3 h`, `2 d`), never e-notation, and never overlap."""
    xs = np.concatenate([x for _, x, _ in series]) if series else np.zeros(0)
    ys = np.concatenate([y for _, _, y in series]) if series else np.zeros(0)
    if log_x:
        xs = xs[xs > 0]
    if xs.size == 0:
        return '<p class="empty">no data</p>'
    x_lo, x_hi = float(xs.min()), float(xs.max())
    y_lo, y_hi = min(0.0, float(ys.min())), float(ys.max())
    x_hi = x_hi if x_hi > x_lo else x_lo + 1
    y_hi = max(y_hi, ceiling or 0.0)
    y_hi = y_hi if y_hi > y_lo else y_lo + 1

    def fx(v: float) -> float:
        if log_x:
            v, lo, hi = math.log10(max(v, x_lo)), math.log10(x_lo), math.log10(x_hi)
        else:
            lo, hi = x_lo, x_hi
        return PAD + (v - lo) / ((hi - lo) or 1) * (W - 2 * PAD)

    def fy(v: float) -> float:
        return H - PAD - (v - y_lo) / (y_hi - y_lo) * (H - 2 * PAD)

    out = [
        f'<svg viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
        f'aria-label="{escape(y_label)} against {escape(x_label)}">',
        f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="#4a5562"/>',
        f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{H - PAD}" stroke="#4a5562"/>',
    ]
    x_text = duration if x_seconds else number
    if log_x:
        x_ticks = log_ticks(x_lo, x_hi, seconds=x_seconds)
    else:
        x_ticks = ticks(x_lo, x_hi, seconds=x_seconds)
    # x labels clear of the y labels' column left of the axis, and of each other
    x_marks = [(fx(t), x_text(t)) for t in x_ticks]
    x_marks = [(at, text) for at, text in x_marks if at - CHAR_W * len(text) / 2 >= PAD - 2]
    for at, text in _spaced(x_marks):
        out.append(f'<text class="tick x" x="{at:.1f}" y="{H - PAD + 16}" font-size="11" '
                   f'text-anchor="middle">{escape(text)}</text>')  # fmt: skip
    for t in ticks(y_lo, y_hi):
        out.append(f'<text class="tick y" x="{PAD - 6}" y="{fy(t) + 4:.1f}" font-size="11" '
                   f'text-anchor="end">{escape(y_format(t))}</text>')  # fmt: skip
    out.append(f'<text x="{W / 2}" y="{H - 14}" font-size="12" text-anchor="middle">'
               f"{escape(x_label)}</text>")  # fmt: skip
    out.append(f'<text x="14" y="{H / 2}" font-size="12" text-anchor="middle" '
               f'transform="rotate(-90 14 {H / 2})">{escape(y_label)}</text>')  # fmt: skip
    for i, (label, x, y) in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        keep = x > 0 if log_x else np.ones(len(x), bool)
        px, py = [fx(v) for v in x[keep]], [fy(v) for v in y[keep]]
        if step and px:
            px, py = _staircase(px, py)
        points = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(px, py, strict=True))
        out.append(f'<polyline class="series" data-label="{escape(label)}" fill="none" '
                   f'stroke="{colour}" stroke-width="2" points="{points}"/>')  # fmt: skip
        out.append(f'<text x="{W - PAD - 4}" y="{PAD + 14 * i}" font-size="12" fill="{colour}" '
                   f'text-anchor="end">{escape(label)}</text>')  # fmt: skip
    if ceiling:
        out.append(f'<line class="ceiling" x1="{PAD}" y1="{fy(ceiling):.1f}" x2="{W - PAD}" '
                   f'y2="{fy(ceiling):.1f}" stroke="#5c677d" stroke-dasharray="5 4"/>'
                   f'<text x="{PAD + 4}" y="{fy(ceiling) - 4:.1f}" font-size="11" '
                   f'fill="#5c677d">cluster: {number(ceiling)} GPUs</text>')  # fmt: skip
    out.append("</svg>")
    return "".join(out)


def _staircase(px: list[float], py: list[float]) -> tuple[list[float], list[float]]:
    sx, sy = [px[0]], [py[0]]
    for a, b in zip(px[1:], py[1:], strict=True):
        sx += [a, a]
        sy += [sy[-1], b]
    return sx, sy


def bar_chart(counts: dict[str, dict[int, int]], x_label: str, y_label: str) -> str:
    """Grouped bars: for each run (label -> {value: jobs}), jobs per value."""
    values = sorted({v for c in counts.values() for v in c})
    if not values:
        return '<p class="empty">no jobs</p>'
    top = max(max(c.values(), default=0) for c in counts.values()) or 1
    group_w = (W - 2 * PAD) / len(values)
    bar_w = group_w * 0.8 / max(len(counts), 1)
    out = [
        f'<svg viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
        f'aria-label="{escape(y_label)} by {escape(x_label)}">',
        f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="#4a5562"/>',
    ]
    centres = [(PAD + g * group_w + group_w * 0.5, number(v)) for g, v in enumerate(values)]
    for at, text in _spaced(centres):
        out.append(f'<text class="tick x" x="{at:.1f}" y="{H - PAD + 16}" font-size="11" '
                   f'text-anchor="middle">{text}</text>')  # fmt: skip
    for g, value in enumerate(values):
        x0 = PAD + g * group_w + group_w * 0.1
        for i, (label, c) in enumerate(counts.items()):
            n = c.get(value, 0)
            h = n / top * (H - 2 * PAD)
            out.append(
                f'<rect class="bar" data-label="{escape(label)}" data-value="{value}" '
                f'data-jobs="{n}" x="{x0 + i * bar_w:.1f}" y="{H - PAD - h:.1f}" '
                f'width="{bar_w:.1f}" height="{h:.1f}" fill="{COLOURS[i % len(COLOURS)]}">'
                f"<title>{escape(label)}: {n} jobs with {value}</title></rect>"
            )
    out.append(f'<text x="{W / 2}" y="{H - 14}" font-size="12" text-anchor="middle">'
               f"{escape(x_label)}</text>")  # fmt: skip
    for i, label in enumerate(counts):  # the legend, each run in its bars' colour
        colour = COLOURS[i % len(COLOURS)]
        out.append(f'<text x="{W - PAD - 4}" y="{PAD + 14 * i}" font-size="12" '
                   f'fill="{colour}" text-anchor="end">{escape(label)}</text>')  # fmt: skip
    out.append(f'<text class="tick y" x="{PAD - 6}" y="{PAD + 4}" font-size="11" '
               f'text-anchor="end">{number(top)}</text>')  # fmt: skip
    out.append(f'<text x="14" y="{H / 2}" font-size="12" text-anchor="middle" '
               f'transform="rotate(-90 14 {H / 2})">{escape(y_label)}</text>')  # fmt: skip
    out.append("</svg>")
    return "".join(out)


# ---- the page ---------------------------------------------------------------------------------

SUMMARY_FIELDS = (  # (metrics.json key, row name, how a person reads it)
    ("jobs", "jobs", number),
    ("avg_jct_s", "average JCT", duration),
    ("median_jct_s", "median JCT", duration),
    ("p99_jct_s", "p99 JCT", duration),
    ("makespan_s", "makespan", duration),
    ("avg_queue_s", "average first wait", duration),
    ("utilization", "GPU utilization", percent),
    ("preemptions", "preemptions", number),
    ("migrations", "migrations", number),
    ("resizes", "resizes", number),
)


def render_report(runs: Sequence[RunResult], title: str, total_gpus: int | None = None) -> str:
    """The page; `total_gpus` (the cluster's, when known) caps the GPUs-held estimate."""
    if not runs:
        raise ReportError("a report needs at least one run")
    end = max(float(r.jobs["finish_s"].max()) if len(r.jobs) else 0.0 for r in runs) or 1.0
    grid = np.linspace(0.0, end, GRID_POINTS)
    cdf = [(r.label, *jct_cdf(r.jobs)) for r in runs]
    measured = all(r.timeline is not None for r in runs)
    if measured:
        held = [
            (r.label, grid, sample_steps(*_column(r.timeline, "gpus_busy"), grid)) for r in runs
        ]
        queue = [
            (r.label, grid, sample_steps(*_column(r.timeline, "jobs_waiting"), grid)) for r in runs
        ]
    else:
        held = [(r.label, grid, sample_steps(*gpus_held(r.jobs), grid)) for r in runs]
        queue = [(r.label, grid, sample_steps(*queue_length(r.jobs), grid)) for r in runs]
    if total_gpus and not measured:
        held = [(label, x, np.minimum(y, total_gpus)) for label, x, y in held]
    preemptions = {
        r.label: {int(k): int(v) for k, v in r.jobs["preemptions"].value_counts().items()}
        for r in runs
    }
    cap = f"; capped at the cluster's {total_gpus} GPUs" if total_gpus else ""
    held_chart = line_chart(held, "time", "GPUs held", step=measured, ceiling=total_gpus)
    if measured:
        held_note = "GPUs holding at least one job, from the simulator's timeline."
        queue_note = "Jobs submitted and not running (never started, or preempted)."
    else:
        held_note = (
            "An estimate: a run folder without timeline.csv (written by an older perfcast), so "
            "each job's attained GPU-seconds are spread evenly over its first start to finish "
            f"(exact for jobs never preempted or resized{cap}); the run's measured utilization "
            "is in the table."
        )
        queue_note = "Jobs submitted and not yet started for the first time."
    cdf_chart = line_chart(
        cdf, "job completion time (log scale)", "jobs done", log_x=True,
        y_format=lambda v: f"{number(100 * v)}%",
    )  # fmt: skip
    header = "".join(f"<th>{escape(r.label)}</th>" for r in runs)
    rows = []
    for key, name, fmt in SUMMARY_FIELDS:
        cells = "".join(
            f'<td class="num" data-key="{key}" data-value="{r.summary.get(key, "")}">'
            f"{fmt(r.summary[key]) if key in r.summary else '–'}</td>"
            for r in runs
        )
        rows.append(f"<tr><th>{name}</th>{cells}</tr>")
    most = pd.concat([r.jobs.assign(run=r.label) for r in runs], ignore_index=True).nlargest(
        15, "preemptions"
    )
    most = most[most["preemptions"] > 0]
    most_rows = "".join(
        f"<tr><td>{escape(str(j.run))}</td><td>{escape(str(j.job_id))}</td>"
        f"<td>{escape(str(j.job_type))}</td><td class='num'>{int(j.num_gpus)}</td>"
        f"<td class='num'>{int(j.preemptions)}</td>"
        f"<td class='num' data-value='{j.jct_s!r}'>{duration(j.jct_s)}</td></tr>"
        for j in most.itertuples()
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>
<style>
body {{ font: 14px/1.45 system-ui, sans-serif; margin: 1.5em; color: #1d232b; }}
table {{ border-collapse: collapse; margin: .5em 0 1.5em; }}
th, td {{ border: 1px solid #d9dee4; padding: .25em .6em; text-align: left; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; }}
svg {{ border: 1px solid #d9dee4; background: #fff; }}
.note {{ color: #4a5562; max-width: 55em; }}
</style></head><body>
<h1>{escape(title)}</h1>
<table id="summary"><tr><th></th>{header}</tr>{"".join(rows)}</table>
<h2>Job completion time</h2>
<div id="jct-cdf">{cdf_chart}</div>
<h2>GPUs held over time</h2>
<p class="note">{held_note}</p>
<div id="gpus-held">{held_chart}</div>
<h2>Queue length over time</h2>
<p class="note">{queue_note}</p>
<div id="queue">{line_chart(queue, "time", "jobs waiting", step=True)}</div>
<h2>Preemptions per job</h2>
<div id="preemptions">{bar_chart(preemptions, "preemptions of a job", "jobs")}</div>
<table id="most-preempted"><tr><th>run</th><th>job</th><th>type</th><th>GPUs</th>
<th>preemptions</th><th>JCT</th></tr>{most_rows}</table>
</body></html>
"""


def write_report(
    folders: Sequence[Path], path: Path, title: str | None = None, total_gpus: int | None = None
) -> Path:
    """report.html at `path` comparing the runs in `folders` (atomic write)."""
    runs = [load_run(Path(f)) for f in folders]
    title = title or "Simulation: " + ", ".join(
        f"{r.summary.get('trace', '?')} / {r.label}" for r in runs
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, render_report(runs, title, total_gpus))
