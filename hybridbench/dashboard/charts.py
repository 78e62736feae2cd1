"""The dashboard's charts, as plotly figures built from saved runs: few series per chart (one per arm, or per
run and arm on a comparison page), facets instead of more lines."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from hybridbench.records.schema import Record

__all__ = ["cdf", "hit_rate_by_turn", "trend", "usage_over_time"]

_LAYOUT = {"template": "plotly_white", "height": 360, "margin": {"l": 60, "r": 20, "t": 40, "b": 50},
           "legend": {"orientation": "h", "y": -0.2}}


def _cdf_points(values: Sequence[float]) -> tuple[list[float], list[float]]:
    xs = sorted(values)
    n = len(xs)
    return xs, [(i + 1) / n for i in range(n)]


def cdf(title: str, series: Mapping[str, Sequence[float]], unit: str = "ms") -> go.Figure:
    """Empirical CDFs, one line per series (an arm, or "run · arm"); series without values are left out."""
    fig = go.Figure()
    for name, values in series.items():
        if not values:
            continue
        xs, ys = _cdf_points(values)
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=name, line={"shape": "hv"}))
    fig.update_layout(title=title, xaxis_title=unit, yaxis_title="fraction of requests", **_LAYOUT)
    return fig


def hit_rate_by_turn(title: str, records: Mapping[str, Sequence[Record]]) -> go.Figure:
    """Token hit rate (cached / prompt tokens) per turn of a session, one line per arm."""
    fig = go.Figure()
    for arm, recs in records.items():
        cached: dict[int, int] = defaultdict(int)
        prompt: dict[int, int] = defaultdict(int)
        for r in recs:
            if r.status == "ok" and r.cached_tokens is not None:
                cached[r.turn_id] += r.cached_tokens
                prompt[r.turn_id] += r.prompt_tokens
        turns = sorted(t for t in prompt if prompt[t])
        if turns:
            fig.add_trace(go.Scatter(x=turns, y=[cached[t] / prompt[t] for t in turns], mode="lines+markers",
                                     name=arm))
    fig.update_layout(title=title, xaxis_title="turn", yaxis_title="token hit rate", yaxis_range=[0, 1.02],
                      **_LAYOUT)
    return fig


def trend(title: str, series: Mapping[str, Sequence[tuple[str, float]]], *, change_points: Sequence[str] = (),
          published: float | None = None, unit: str = "") -> go.Figure:
    """A metric over runs (x: run time), one line per arm; change points as vertical lines, the seed's
    published figure as a dashed horizontal line."""
    fig = go.Figure()
    for arm, points in series.items():
        fig.add_trace(go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="lines+markers", name=arm))
    for x in change_points:
        fig.add_vline(x=x, line_dash="dot", line_color="firebrick")
    if published is not None:
        fig.add_hline(y=published, line_dash="dash", line_color="grey", annotation_text="published")
    fig.update_layout(title=title, xaxis_title="run", yaxis_title=unit, **_LAYOUT)
    return fig


def usage_over_time(title: str, series: Mapping[str, Sequence[tuple[float, float]]], unit: str) -> go.Figure:
    """A server pool's usage (0..1) against seconds since the series' first log line, one line per arm."""
    fig = go.Figure()
    for name, points in series.items():
        if points:
            fig.add_trace(go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="lines+markers",
                                     name=name, line={"shape": "hv"}))
    # From zero, scaled to the data: a pool a tenth full is still legible.
    fig.update_layout(title=title, xaxis_title="seconds since the trial's first batch line", yaxis_title=unit,
                      yaxis_rangemode="tozero", yaxis_tickformat=".1%", **_LAYOUT)
    return fig
