"""The trends page: each like-for-like series over runs (one chart per experiment, workload, metric and
comparable group; one line per arm), its HUD verdict and the change points found in it."""

from __future__ import annotations

import shlex
from collections import defaultdict
from pathlib import Path

from hybridbench.dashboard import charts
from hybridbench.dashboard.html import Markup, Page, chart, table, verdict_badge
from hybridbench.results.baselines import BRANCH
from hybridbench.results.history import Series, Verdict, history, judge_all
from hybridbench.results.store import Store

__all__ = ["TOLERANCE", "trend_page"]

TOLERANCE = 0.10
_STATUS_CLASS = {"regression": "fail", "inconclusive": "inconclusive", "suspicious": "interrupted", "ok": "pass",
                 "insufficient data": "skip", "no data": "error"}


def _published(store: Store) -> dict[tuple[str, str, str, str, str], float]:
    """(experiment, workload, metric, model, arm) -> the published figure (results/baselines/, branch published)."""
    pub = store.runs[store.runs["branch"] == BRANCH]
    rows = store.aggregates.merge(pub[["run", "experiment", "model"]], on="run")
    return {(r["experiment"], r["workload"], r["metric"], r["model"], r["arm"]): float(r["value"])
            for r in rows.to_dict("records")}


def _badge(v: Verdict) -> Markup:
    # A series a change of sizing, load, trace, GPU, model or engine left unjudged fails the history gate (exit 1) as an
    # inconclusive one does.
    return verdict_badge("inconclusive" if v.unjudged else _STATUS_CLASS[v.status], v.status)


def trend_page(store: Store, root: Path) -> str:
    page = Page("trends")
    published = _published(store)
    groups: dict[tuple[str, ...], list[Series]] = defaultdict(list)
    main = store.runs[store.runs["branch"] == "main"]
    nightly = Store(store.root, main, store.aggregates[store.aggregates["run"].isin(set(main["run"]))], store.trials,
                    store.checks, loaded=store.loaded)  # the typed runs: each workload's trace digest
    every = history(nightly)
    judged = {v.key: v for v in judge_all(every, tolerance=TOLERANCE)}  # across loads and GPUs: a change names both
    for s in every:
        k = s.key
        groups[(k.experiment, k.workload, k.metric, k.model, k.gpu, k.engine, k.load, k.trace)].append(s)
    cmd = f"python -m hybridbench.results history {shlex.quote(str(root))} --tolerance {TOLERANCE}"
    rows = []
    for i, (g, series) in enumerate(sorted(groups.items())):
        experiment, workload, metric, model, gpu, engine, load, trace = g
        verdicts = [judged[s.key] for s in series]
        cps = sorted({run for v in verdicts for run in v.change_points})
        when = {p.run: p.created for s in series for p in s.points}
        # The first arm (by name) with a published figure for this experiment, workload, metric and model.
        pub = next((published[(experiment, workload, metric, model, arm)] for arm in sorted(s.key.arm for s in series)
                    if (experiment, workload, metric, model, arm) in published), None)
        title = f"{experiment} · {workload} · {metric} ({model}, {gpu}, {engine}, load {load[:8]}, trace {trace[:8]})"
        fig = charts.trend(title,
                           {s.key.arm: [(p.created, p.value) for p in s.points] for s in series},
                           change_points=[when[r] for r in cps], published=pub, unit=metric)
        page.add(chart(fig, f"trend-{i}", f"{cmd} --experiment {experiment} --workload {workload}"))
        rows += [[experiment, workload, v.key.arm, metric, _badge(v), v.detail,
                  ", ".join(v.change_points)] for v in verdicts]
    if not groups:
        page.add(Markup('<p class="muted">no finished runs yet</p>'))
    page.parts.insert(0, table(["experiment", "workload", "arm", "metric", "history", "detail", "change points at"],
                               rows))
    return page.render()
