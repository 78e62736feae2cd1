"""``build_site(root, out)``: the static dashboard over a results root — an index of runs with verdicts, a
page per run, a page per pull-request comparison (compare.json under a run) and trend pages.

Everything is read from saved files through the typed results reader and the store; every chart and table
row carries the command that reproduces it.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import plotly.offline

from hybridbench.dashboard import charts
from hybridbench.dashboard.compare_file import read_compare
from hybridbench.dashboard.compared import Compared, Side, compared
from hybridbench.dashboard.html import PLOTLY_JS, Markup, Page, chart, command, fragment, link, table, verdict_badge
from hybridbench.dashboard.trends import trend_page
from hybridbench.results import Run, ServerUsage, UsageSeries, read_usage
from hybridbench.results.baselines import BRANCH
from hybridbench.results.marks import verdict_marks
from hybridbench.results.redaction import run_secrets, scrub
from hybridbench.results.store import Store, load_store
from workloads.atomic_file import write_text_atomic

__all__ = ["Site", "build_site", "page_name", "slug"]

KEY_METRICS = ("completed", "mean_ttft_ms", "p99_ttft_ms", "request_throughput", "token_hit_rate")


def slug(rel: str) -> str:
    return "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "_" for c in rel)[:80]


def page_name(kind: str, key: str) -> str:
    """``kind-KEY.html`` when KEY is letters, digits, ``-`` and ``_`` only (``run-main-1.html``,
    ``summary-pr.html``: CI links to those); else ``kind-SLUG.HASH.html``, which no plain key can spell (a
    plain key has no dot): ``nightly/a`` and ``nightly_a`` get two pages, each the same on every build."""
    plain = slug(key)
    if plain == key and key:
        return f"{kind}-{key}.html"
    return f"{kind}-{plain}.{hashlib.sha256(key.encode()).hexdigest()[:12]}.html"


@dataclass(frozen=True, slots=True)
class Site:
    out: Path
    pages: tuple[str, ...]  # file names, index.html first
    compare_pages: tuple[str, ...]
    skipped: tuple[str, ...]


def _fmt(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return "" if v is None else str(v)
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _run_command(run: Run) -> str:
    b = run.bundle
    if b is not None and b.provenance.command:
        return b.provenance.command
    return f"python -m hybridbench +experiment={run.plan.name} engine={run.plan.engine}  # resolved config: plan.json"


def _index(store: Store, root: Path, out: Path, compares: list[tuple[str, Compared]]) -> str:
    rows = []
    for r in store.runs.sort_values("created", ascending=False).to_dict("records"):
        name = r["run"] if r["branch"] == BRANCH else link(page_name("run", r["run"]), r["run"])  # no run page
        marks = [m for m in str(r.get("marks") or "").split("; ") if m]
        rows.append([r["created"].strftime("%Y-%m-%d %H:%M") if r["created"] == r["created"] else "",
                     name, r["experiment"], verdict_badge(r["verdict"], marks=marks),
                     r["failed_checks"], f"{r['engine']} {r['engine_version']}", r["model"], r["gpu"], r["branch"],
                     r["git_sha"][:10]])
    page = Page("hybridbench runs", charts=False)
    page.add(fragment('<p class="muted">{{ n }} run(s) under {{ root }}{% if not n %}: no readable runs yet '
                      "(a new store, or every run skipped below){% endif %}</p>", n=len(rows), root=str(root)),
             table(["time", "run", "experiment", "verdict", "not passed", "engine", "model", "GPU", "branch", "git"],
                   rows),
             command(f"python -m hybridbench.dashboard {shlex.quote(str(root))} -o {shlex.quote(str(out))}"))
    if compares:
        page.add(Markup("<h2>Pull-request comparisons</h2>"), table(
            ["comparison", "verdict", "baseline", "candidate"],
            [[link(page_name("compare", name), name),
              verdict_badge(c.shown, marks=(*c.notes, *(f"not compared: {n}" for n in c.not_compared))),
              _side(c.base), _side(c.cand)]
             for name, c in compares]))
    if store.skipped:
        page.add(Markup("<h2>Skipped</h2>"), table(["directory"], [[s] for s in store.skipped]))
    return page.render()


def _usage_charts(usage: ServerUsage, workload: str, arms: tuple[str, ...], cmd: str) -> list[str]:
    """Token and mamba usage over time, one line per arm (its first repeat: few series per chart), with the log
    lines they come from; or the note saying why there is nothing to draw."""
    first: dict[str, UsageSeries] = {}
    for s in sorted(usage.of(workload), key=lambda s: s.repeat):
        first.setdefault(s.arm, s)
    picked = [first[a] for a in arms if a in first]
    if not picked:
        return [fragment('<p class="muted">server usage over time: {{ n }}</p>', n=usage.note)] if workload else []
    where = "; ".join(f"{s.arm}: {s.log_file}" + (f" lines {s.lines[0] + 1}-{s.lines[1]}" if s.lines else "")
                      for s in picked)
    repeat = " (first repeat)" if workload and any(s.repeat for s in usage.of(workload)) else ""
    out = []
    for key, label in (("token_usage", "token usage"), ("mamba_usage", "mamba usage")):
        series = {s.arm: [(p.t_s, v) for p in s.points if (v := getattr(p, key)) is not None] for s in picked}
        if any(series.values()):
            title = f"{workload or 'whole log'}: server {label} over time{repeat}"
            out.append(chart(charts.usage_over_time(title, series, label), f"{key}-{slug(workload or 'log')}", cmd))
    note = f" · {usage.note}" if usage.note else ""
    return [fragment('<p class="muted usage-source">server usage from {{ w }}{{ n }}</p>', w=where, n=note), *out]


def _run_page(run: Run, name: str) -> str:
    b = run.bundle
    assert b is not None
    prov = b.provenance
    page = Page(f"{run.plan.name} · {name}")
    page.add(fragment('<p class="verdict-line">verdict {{ badge }} · engine {{ e }} {{ v }} · model {{ m }} · git '
                      "{{ sha }} · {{ created }}</p>", badge=verdict_badge(b.verdict, marks=verdict_marks(run)),
                      e=prov.engine.name, v=prov.engine.version, m=run.plan.model, sha=prov.git_sha[:12] or "n/a",
                      created=b.created),
             command(_run_command(run)))
    cmd = _run_command(run)
    usage = read_usage(run)
    for w in run.plan.workloads:
        page.add(fragment("<h2>{{ n }}</h2>", n=w.name))
        ttft = {arm: [r.ttft_ms for r in run.records_of(w.name, arm) if r.ttft_ms is not None] for arm in b.arms}
        page.add(chart(charts.cdf(f"{w.name}: TTFT", ttft), f"ttft-{slug(w.name)}", cmd))
        by_arm = {arm: run.records_of(w.name, arm) for arm in b.arms}
        page.add(chart(charts.hit_rate_by_turn(f"{w.name}: hit rate by turn", by_arm), f"hits-{slug(w.name)}", cmd))
        page.add(*_usage_charts(usage, w.name, b.arms, cmd))
        agg = b.aggregates.get(w.name, {})
        page.add(table(["arm", *KEY_METRICS], [[arm, *(_fmt(agg.get(arm, {}).get(k)) for k in KEY_METRICS)]
                                                for arm in b.arms]))
        trials = [t for t in b.trials if t.workload == w.name]
        page.add(table(["trial", "state", "evicted KV tokens", "evicted states", "peak token usage",
                        "peak mamba usage", "retractions"],
                       [[t.trial_id, t.state, *(_fmt(t.server.get(k)) for k in (
                           "evicted_tokens", "evicted_states", "peak_token_usage", "peak_mamba_usage", "retractions"))]
                        for t in trials]))
    if usage.of(""):
        page.add(Markup("<h2>Server usage (whole logs)</h2>"), *_usage_charts(usage, "", b.arms, cmd))
    page.add(Markup("<h2>Checks</h2>"), table(["check", "workload", "arm", "verdict", "detail"],
                                      [[c.check, c.workload, c.arm, verdict_badge(c.status), c.detail]
                                       for c in b.checks]))
    accuracy = b.raw.get("accuracy")
    if isinstance(accuracy, list) and accuracy:
        page.add(Markup("<h2>Accuracy (cache on vs off)</h2>"), table(
            ["arm", "pass", "correct", "cached prompt tokens", "first differing answer", "lost", "gained"],
            [[str(r.get("arm")), str(r.get("pass")), f"{r.get('correct')}/{r.get('questions')}",
              _fmt(r.get("cached_tokens")), str(r.get("error") or r.get("first_difference") or ""),
              ", ".join(map(str, r.get("lost") or [])), ", ".join(map(str, r.get("gained") or []))]
             for r in accuracy if isinstance(r, dict)]))
    if b.published:
        page.add(Markup("<h2>Published vs this run</h2>"), table(
            ["metric", "workload", "arm", "published", "this run", "outcome", "source"],
            [[str(p.get(k, "")) for k in ("metric", "workload", "arm", "published", "observed", "outcome", "source")]
             for p in b.published]))
    return page.render()


def _verdict(c: Compared) -> Markup:
    """The comparison's verdict as the dashboard shows it, with why it is not compare.json's when it is not."""
    return verdict_badge(c.shown, marks=c.notes)


def _side(s: Side) -> Markup:
    """A compared run: its name, its own verdict and marks (as they are now, when its directory still holds it)."""
    return fragment("{{ label }}{% if verdict %} · its own run {{ badge }}{% endif %}", label=s.label,
                    verdict=s.verdict, badge=verdict_badge(s.verdict, marks=s.marks))


def _scope(cmp: Mapping[str, Any], c: Compared) -> Markup:
    """What was compared, under the verdict and on the PNG: the engine and model, a modelled clock, and what only
    one run has (a pull request's own arm, such as seglen beside main's branching, is listed, never compared)."""
    return fragment('<p class="scope">engine {{ e }} · model {{ m }}{% if modelled %} · <b>modelled</b>: times come '
                    "from a cost model, not a GPU{% endif %}</p>{% if nc %}<p class=\"not-compared\"><b>Not compared"
                    "</b>: {{ nc | join('; ') }}</p>{% endif %}", e=str(cmp.get("engine", "")),
                    m=str(cmp.get("model", "")), modelled=bool(cmp.get("modelled")), nc=c.not_compared)


def _config_changes(cmp: Mapping[str, Any]) -> Markup:
    rows = [[str(r.get("key", "")), _fmt(r.get("baseline")), _fmt(r.get("candidate"))]
            for r in cmp.get("config_changes") or [] if isinstance(r, Mapping)]
    if not rows:
        return Markup("")
    return Markup("<h2>What differs in the resolved config</h2>") + table(["key", "baseline", "candidate"], rows)


def _compare_page(name: str, cmp: Mapping[str, Any], c: Compared) -> tuple[str, str]:
    """The comparison page and its chart-free summary (the PR comment's PNG is taken of the latter)."""
    cmd = str(cmp.get("command", "")) or "python -m hybridbench.compare BASELINE CANDIDATE"
    head = fragment('<p class="verdict-line">verdict {{ badge }} · baseline {{ b }} · candidate {{ c }}</p>',
                    badge=_verdict(c), b=_side(c.base), c=_side(c.cand))
    deltas = table(["workload", "arm", "metric", "baseline", "candidate", "change (CI)", "verdict"],
                   [[str(d.get("workload")), str(d.get("arm")), str(d.get("metric")), _fmt(d.get("base")),
                     _fmt(d.get("candidate")), str(d.get("detail", "")), verdict_badge(str(d.get("status")))]
                    for d in cmp["deltas"]])
    scope = _scope(cmp, c)
    summary = Page(f"compare {name}", charts=False).add(head, scope, deltas, command(cmd)).render()
    page = Page(f"compare {name}").add(head, scope, deltas, command(cmd), _config_changes(cmp))
    base, cand = c.base.run, c.cand.run
    if base is not None and cand is not None:
        for workload, arm in cmp["pairs"]:
            series = {f"{label} · {arm}": [r.ttft_ms for r in run.records_of(workload, arm) if r.ttft_ms is not None]
                      for label, run in (("baseline", base), ("candidate", cand))}
            page.add(chart(charts.cdf(f"{workload} · {arm}: TTFT", series), f"cmp-{slug(workload)}-{slug(arm)}", cmd))
    else:
        page.add(Markup('<p class="muted">run directories not found beside compare.json, or holding other runs '
                        'than it compared: no distributions</p>'))
    return page.render(), summary


def _write(out: Path, name: str, text: str, secrets: frozenset[str]) -> None:
    # The page holds every string HTML-escaped: a secret with a ``&`` or a quote is masked in that form too.
    write_text_atomic(out / name, scrub(text, secrets | {str(Markup.escape(v)) for v in secrets}))


def build_site(root: Path, out: Path) -> Site:
    """Every page is rendered in memory first, then written: a store that cannot be read is one line and no
    half-written site. An empty store is a site saying so."""
    store = load_store(root)
    secrets = store.secrets
    rendered: dict[str, str] = {}
    compares = []
    skipped = list(store.skipped)
    for path, cmp, problem in read_compare(root):
        if cmp is None:
            skipped.append(f"skipped {path}: {problem}")
            continue
        key = str(path.parent.parent.relative_to(root))
        c = compared(cmp, root)
        secrets = secrets | frozenset().union(*(run_secrets(s.run) for s in c.sides if s.run is not None))
        name = page_name("compare", key)
        rendered[name], rendered[name.replace("compare-", "summary-", 1)] = _compare_page(key, cmp, c)
        compares.append((key, c))
    for rel, run in store.loaded.items():
        rendered[page_name("run", rel)] = _run_page(run, rel)
    store.skipped[:] = skipped
    rendered["trends.html"] = trend_page(store, root)
    rendered["index.html"] = _index(store, root, out, compares)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / PLOTLY_JS, plotly.offline.get_plotlyjs())
    for name, text in rendered.items():
        _write(out, name, text, secrets)
    pages = [n for n in rendered if n.startswith(("compare-", "run-"))]
    return Site(out, ("index.html", "trends.html", *pages), tuple(page_name("compare", k) for k, _ in compares),
                tuple(skipped))
