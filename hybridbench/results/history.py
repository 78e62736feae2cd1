"""Nightly history: one series per (experiment, workload, arm, metric) over like-for-like runs, judged by the
PyTorch HUD's rule and searched for change points.

Like for like: the same model, GPU (a CPU engine's: its CPU), engine family, load fingerprint (a run of another
size or seed is another series) and trace (the workload's trace bytes, results.trace_digest: a generator changed on
main sends other rows for the same arguments; "unknown" for a run that recorded none and kept no trace file, which
is never taken for a known one), and the same sizing (chunked prefill, pools, page, track interval, TP,
checkpoint, quantization: what ``compare`` requires to match): a point is judged only against earlier points sized
as it is, and where the sizing changed the verdict names the change, so a step that came from the configuration is
not read as the code's (nor does a faster sizing hide a slower code).

The HUD rule: the trailing >= 2 points all violate the tolerance against a baseline window (the median of up to
``window`` earlier points) -> ``regression``; some but not all -> ``inconclusive``
(the trailing set straddles the tolerance: the next night decides, and until then it is no "ok"); a run of >= 3
violations elsewhere -> ``suspicious``; fewer than 2 baseline points -> ``insufficient data``. Change points:
ruptures' PELT on the series, each kept only when a Welch t-test between the segments around it gives p < ``max_p``.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

import numpy as np
import pandas as pd

from hybridbench.results.store import Store
from hybridbench.results.trace_digest import trace_digest

__all__ = [
    "HIGHER_IS_WORSE",
    "SERIES_METRICS",
    "UNKNOWN",
    "Point",
    "Series",
    "SeriesKey",
    "Verdict",
    "change_points",
    "history",
    "hud_rule",
    "judge",
    "judge_all",
    "load_changes",
    "sizing_changes",
]

# The trace key of a run that recorded no digest and kept no trace file: its own series (never equal to a known trace)
UNKNOWN = "unknown"
Status = Literal["regression", "inconclusive", "suspicious", "ok", "insufficient data", "no data"]
SERIES_METRICS = ("mean_ttft_ms", "p99_ttft_ms", "request_throughput", "input_throughput", "token_hit_rate")
HIGHER_IS_WORSE = frozenset({"mean_ttft_ms", "p99_ttft_ms", "median_ttft_ms", "mean_tpot_ms", "mean_itl_ms",
                             "mean_e2e_latency_ms"})


@dataclass(frozen=True, slots=True, order=True)
class SeriesKey:
    experiment: str
    workload: str
    arm: str
    metric: str
    model: str
    gpu: str
    engine: str
    load: str  # results.store.load_fingerprint
    trace: str = UNKNOWN  # the workload's trace sha256 (results.trace_digest), or UNKNOWN


@dataclass(frozen=True, slots=True)
class Point:
    run: str
    created: str  # ISO time
    value: float
    sizing: str = ""  # the run's sizing as canonical JSON (results.store's "sizing" column); "" = not recorded


@dataclass(frozen=True, slots=True)
class Series:
    key: SeriesKey
    points: tuple[Point, ...]  # oldest first


@dataclass(frozen=True, slots=True)
class Verdict:
    key: SeriesKey
    status: Status
    detail: str
    change_points: tuple[str, ...]  # the runs where a new level starts
    points: int = 0
    sizing_changes: tuple[str, ...] = ()  # "RUN: key old -> new, ..." for each run sized unlike the one before
    # Nights sized otherwise than the latest had a baseline (>= 2 of one sizing) that the change left behind
    baseline_left: bool = False
    # "RUN: gpu/model/engine/load/trace OLD -> NEW ..." when it took over from a series with a baseline (load_changes)
    load_change: str = ""

    @property
    def unjudged_after_resize(self) -> bool:
        """A baseline before, none now: a sizing change on main left the series without one (history exits 1). A
        series whose earlier sizing never had two nights had no baseline to lose (a new store, resized early)."""
        return self.status == "insufficient data" and bool(self.sizing_changes) and self.baseline_left

    @property
    def unjudged(self) -> bool:
        """Without the baseline it had (a sizing change) or the series it took over from had (a load, trace, GPU,
        model or engine change on main): no earlier night judges the latest, which is not "no regression" (history
        exits 1; the trends badge)."""
        return self.unjudged_after_resize or (self.status == "insufficient data" and bool(self.load_change))

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self.key), "points": self.points, "status": self.status, "detail": self.detail,
                "change_points": list(self.change_points), "sizing_changes": list(self.sizing_changes),
                "load_change": self.load_change}


def _violates(value: float, base: float, tolerance: float, higher_is_worse: bool) -> bool:
    if base == 0:
        return False
    change = (value - base) / abs(base)
    return change > tolerance if higher_is_worse else change < -tolerance


def hud_rule(values: Sequence[float], *, tolerance: float, higher_is_worse: bool, window: int = 5,
             trailing: int = 2) -> tuple[Status, str]:
    if len(values) < trailing + 2:
        return "insufficient data", f"{len(values)} point(s): a baseline needs >= 2 points before the last {trailing}"
    head, tail = values[:-trailing], values[-trailing:]
    base = statistics.median(head[-window:])
    violating = [v for v in tail if _violates(v, base, tolerance, higher_is_worse)]
    if violating:
        worst = max(violating, key=lambda v: abs(v - base))
        worst_text = f"worst {worst:.4g}, {(worst - base) / abs(base):+.1%}"
        if len(violating) == len(tail):
            return "regression", (f"the last {trailing} points violate ±{tolerance:.0%} against the baseline median "
                                  f"{base:.4g} ({worst_text})")
        return "inconclusive", (f"{len(violating)} of the last {trailing} points violate ±{tolerance:.0%} against the "
                                f"baseline median {base:.4g} ({worst_text}): not yet a regression, not ok")
    run = longest = 0
    for i, v in enumerate(values[:-trailing]):
        ref = statistics.median(values[max(0, i - window):i]) if i >= 2 else None
        run = run + 1 if ref is not None and _violates(v, ref, tolerance, higher_is_worse) else 0
        longest = max(longest, run)
    if longest >= 3:
        return "suspicious", f"{longest} consecutive points violate ±{tolerance:.0%} earlier in the series"
    return "ok", f"the last {trailing} points are within ±{tolerance:.0%} of the baseline median {base:.4g}"


def change_points(values: Sequence[float], *, min_size: int = 2, penalty: float = 3.0,
                  max_p: float = 0.05) -> list[int]:
    """Indices where a new segment starts, each confirmed by a Welch t-test between its neighbours."""
    if len(values) < 2 * min_size:
        return []
    import ruptures as rpt  # noqa: PLC0415 - seconds to import: only when there is a series to search
    from scipy import stats  # noqa: PLC0415 - a second of every results/dashboard start-up otherwise

    x = np.asarray(values, dtype=float)
    scale = float(np.std(x)) or 1.0
    ends = rpt.Pelt(model="l2", min_size=min_size).fit((x - x.mean()) / scale).predict(pen=penalty)
    starts = [0, *ends[:-1]]
    confirmed = []
    for i in range(1, len(starts)):
        left, right = x[starts[i - 1]:starts[i]], x[starts[i]:ends[i]]
        if len(left) < 2 or len(right) < 2:
            continue
        if float(np.std(left)) == 0 and float(np.std(right)) == 0:
            p = 0.0 if left[0] != right[0] else 1.0
        else:
            p = float(stats.ttest_ind(left, right, equal_var=False).pvalue)
        if math.isfinite(p) and p < max_p:
            confirmed.append(starts[i])
    return confirmed


def _trace_keys(store: Store) -> Callable[[str, str], str]:
    """(run, workload) -> the trace key, each run's traces read once (an older run's saved files are hashed; a run
    the store holds no typed run for, or whose trace is gone, is UNKNOWN)."""
    seen: dict[str, dict[str, str]] = {}

    def key(run: str, workload: str) -> str:
        if run not in seen:
            got = store.loaded.get(run)
            seen[run] = {w.name: trace_digest(got, w) or UNKNOWN for w in got.plan.workloads} if got else {}
        return seen[run].get(workload, UNKNOWN)
    return key


def history(store: Store, metrics: Sequence[str] = SERIES_METRICS) -> list[Series]:
    """Every like-for-like series in the store (runs that did not finish their trials are left out)."""
    trace = _trace_keys(store)
    runs = store.runs[store.runs["verdict"].isin(["pass", "fail", "inconclusive"])]
    agg = store.aggregates[store.aggregates["metric"].isin(list(metrics))]
    joined = agg.merge(runs, on="run")
    out: dict[SeriesKey, list[Point]] = defaultdict(list)
    # A run without a time (a bundle without ``created``) first, as the oldest: sorted last (NaT), it was read as
    # tonight's night, and its figure judged in the latest's place.
    for row in joined.sort_values(["created", "run"], na_position="first").to_dict("records"):
        key = SeriesKey(row["experiment"], row["workload"], row["arm"], row["metric"], row["model"], row["gpu"],
                        row["engine"], row["load"], trace(str(row["run"]), str(row["workload"])))
        created = row["created"].isoformat() if isinstance(row["created"], pd.Timestamp) else ""
        sized = row.get("sizing")
        out[key].append(Point(row["run"], created, float(row["value"]), sized if isinstance(sized, str) else ""))
    return [Series(k, tuple(v)) for k, v in sorted(out.items())]


def _sizing_diff(before: str, after: str) -> str:
    old, new = json.loads(before), json.loads(after)
    keys = sorted(set(old) | set(new))
    return ", ".join(f"{k} {old.get(k, 'unset')} -> {new.get(k, 'unset')}" for k in keys if old.get(k) != new.get(k))


def sizing_changes(points: Sequence[Point]) -> list[str]:
    """``"RUN: key old -> new"`` for each point sized unlike the point before it (both sizings recorded)."""
    return [f"{b.run}: {_sizing_diff(a.sizing, b.sizing)}" for a, b in itertools.pairwise(points)
            if a.sizing and b.sizing and a.sizing != b.sizing]


def judge(series: Series, *, tolerance: float, window: int = 5) -> Verdict:
    changes = tuple(sizing_changes(series.points))
    if series.points and not math.isfinite(series.points[-1].value):
        last = series.points[-1]
        return Verdict(series.key, "no data", f"the latest run ({last.run}, {last.created}) has no finite "
                       f"{series.key.metric}: nothing measured there, so nothing is judged ok", (), len(series.points),
                       changes)
    finite = [p for p in series.points if math.isfinite(p.value)]  # an older night without data: left out
    # Judged like for like: the points sized as the latest run (one of unrecorded sizing counts as alike).
    latest = finite[-1].sizing if finite else ""
    alike = [p for p in finite if not (latest and p.sizing and p.sizing != latest)]
    status, detail = hud_rule([p.value for p in alike], tolerance=tolerance,
                              higher_is_worse=series.key.metric in HIGHER_IS_WORSE, window=window)
    if len(alike) < len(finite):
        detail += (f"; judged on the {len(alike)} of {len(finite)} point(s) sized as the latest run (the sizing "
                   f"changed: {'; '.join(changes)})")
    values = [p.value for p in finite]
    cps = tuple(finite[i].run for i in change_points(values))
    earlier = Counter(p.sizing for p in finite if latest and p.sizing and p.sizing != latest)
    return Verdict(series.key, status, detail, cps, len(values), changes, any(n >= 2 for n in earlier.values()))


def _measured(key: SeriesKey) -> tuple[str, ...]:
    return key.experiment, key.workload, key.arm, key.metric


# What else keys a series: a night that differs in one is another series, with no baseline of its own yet.
_SETUP = ("gpu", "model", "engine", "load", "trace")


def _differing(old: SeriesKey, new: SeriesKey) -> list[str]:
    """The setup keys (_SETUP) in which two series differ."""
    return [k for k in _SETUP if getattr(old, k) != getattr(new, k)]


def _shown(key: SeriesKey, name: str) -> str:
    value = str(getattr(key, name))
    return value[:12] if name == "trace" and value != UNKNOWN else value  # a sha256: its first 12 say which


def _setup_diff(old: SeriesKey, new: SeriesKey) -> str:
    return ", ".join(f"{k} {_shown(old, k)} -> {_shown(new, k)}" for k in _differing(old, new))


def load_changes(series: Sequence[Series]) -> dict[SeriesKey, tuple[str, SeriesKey]]:
    """Series that took over from a series of the same experiment, workload, arm and metric but another GPU, model,
    engine, load or trace, which had >= 2 nights and ended before this one's first: main's setup changed. Each is a new
    series (other hardware, another model or requests), so its first nights have no baseline; unlike one added
    beside one still running (a second runner, a load added), the latest nights are then judged by nothing while the
    old series' last verdict still reads ok. Maps each to ("RUN: gpu OLD -> NEW, ...; ...", the series it took over
    from)."""
    groups: dict[tuple[str, ...], list[Series]] = defaultdict(list)
    for s in series:
        if s.points:
            groups[_measured(s.key)].append(s)
    out = {}
    for group in groups.values():
        for s in group:
            first = _start(s)
            before = [t for t in group if t is not s and _end(t) < first
                      and sum(math.isfinite(p.value) for p in t.points) >= 2]
            # The same GPU, model and engine on another load or trace: that runner's load changed (two runners may
            # switch loads on the same night, each its own change). Another GPU, model or engine only where nothing else
            # took over the ended series first: a runner added beside one that replaced it long ago is no change.
            hardware = [t for t in before if _hardware(t.key) == _hardware(s.key)]
            other = [t for t in before if _hardware(t.key) != _hardware(s.key)
                     and not any(r is not s and _end(t) < _start(r) < first for r in group)]
            if hardware or other:
                t = max(hardware or other, key=_end)
                out[s.key] = (f"{s.points[0].run}: {_setup_diff(t.key, s.key)}; the earlier series had "
                              f"{len(t.points)} night(s), the last {t.points[-1].run}", t.key)
    return out


def _start(s: Series) -> tuple[str, str]:
    return s.points[0].created, s.points[0].run


def _end(s: Series) -> tuple[str, str]:
    return s.points[-1].created, s.points[-1].run


def _hardware(key: SeriesKey) -> tuple[str, str, str]:
    return key.gpu, key.model, key.engine


def _changed(old: SeriesKey, new: SeriesKey) -> str:
    """``the load`` or ``the GPU and load``: what changed, as the verdict's detail names it."""
    # a CPU engine's hardware label is its CPU (results.store): "the CPU changed", not "the GPU"
    cpus = old.gpu.startswith("cpu") and new.gpu.startswith("cpu")
    names = {"gpu": "CPU" if cpus else "GPU", "model": "model", "engine": "engine", "load": "load", "trace": "trace"}
    return "the " + " and ".join(names[k] for k in _differing(old, new))


def judge_all(series: Sequence[Series], *, tolerance: float, window: int = 5) -> list[Verdict]:
    """:func:`judge` of each series; one that took over from another GPU's, model's, engine's, load's or trace's
    (:func:`load_changes`) says so, and so does the series it took over from (its verdict is of nights before the
    change, not of the latest)."""
    changed = load_changes(series)
    ended = {old: (new, why) for new, (why, old) in changed.items()}
    out = []
    for s in series:
        v = judge(s, tolerance=tolerance, window=window)
        if s.key in changed:
            why, old = changed[s.key]
            v = replace(v, load_change=why, detail=f"{v.detail}; {_changed(old, s.key)} changed on main at {why}")
        elif s.key in ended:
            new = ended[s.key][0]
            later = ", ".join(f"{k} {_shown(new, k)}" for k in _differing(s.key, new))
            v = replace(v, detail=f"{v.detail}; ended at {s.points[-1].run}: later nights ran {later}")
        out.append(v)
    return out
