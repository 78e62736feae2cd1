"""report.md: one table per workload, one column per arm, deltas vs the baseline arm; the verdicts."""

from __future__ import annotations

import math
from typing import Any

from hybridbench.metrics.noise import noise_floor
from hybridbench.metrics.summary import client_delay_flagged
from hybridbench.report.forecast import forecast_section
from hybridbench.report.md_text import md_code, md_text
from hybridbench.results.marks import scoring_overrides
from hybridbench.results.served_block import block_mismatches

__all__ = ["render_report"]

# (summary key, label, format, lower is better)
ROWS = (
    ("request_throughput", "req/s", "{:.2f}", False),
    ("mean_ttft_ms", "mean TTFT ms", "{:.1f}", True),
    ("median_ttft_ms", "median TTFT ms", "{:.1f}", True),
    ("p99_ttft_ms", "p99 TTFT ms", "{:.1f}", True),
    ("median_itl_ms", "median ITL ms", "{:.2f}", True),
    ("mean_e2e_latency_ms", "mean E2E ms", "{:.1f}", True),
    ("token_hit_rate", "token hit rate", "{:.3f}", False),
    ("completed", "completed", "{:d}", False),
)


def _cell(value: Any, fmt: str, base: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    text = fmt.format(value)
    if base not in (None, 0) and isinstance(base, (int, float)) and not math.isnan(base) and value != base:
        text += f" ({value / base - 1:+.1%})"
    return text


def _ms(value: Any) -> str:
    return f"{value:.1f} ms" if isinstance(value, (int, float)) else "n/a"


def _evicted(bundle: dict[str, Any], workload: str, arm: str, key: str) -> str:
    """Mean per repeat of a trial snapshot counter; "unknown" when no trial of the arm reported it (never 0)."""
    values = [v for t in bundle.get("trials", []) if t["workload"] == workload and t["arm"] == arm
              if isinstance(v := t.get("server", {}).get(key), (int, float))]
    return f"{sum(values) / len(values):,.0f}" if values else "unknown"


def _change(p: dict[str, Any], key: str) -> str:
    value = p.get(key)
    if not isinstance(value, (int, float)):
        return "—"
    return f"{value:+.1%}" if p.get("baseline_arm") else f"{value:.4g}"


def _published(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = ["## published vs this run", "",
             "| workload | metric | arms | published | source | this run | direction | verdict |", "|---" * 8 + "|"]
    for p in rows:
        arms = f"{p['baseline_arm']} → {p['arm']}" if p.get("baseline_arm") else p["arm"]
        source = f"{p['source']} ({p['engine']}, {p['hardware']}, {p['model']}, scale 1/{p['scale']})"
        mark = p["mark"] + (f" ({p['why']})" if p.get("why") else "")
        lines.append(f"| {p['workload']} | {p['metric']} | {arms} | {_change(p, 'value')} | {source} | "
                     f"{_change(p, 'observed')} | {p['direction']} | {mark} |".replace("\n", " "))
    return [*lines, ""]


def _ids(questions: list[Any]) -> str:
    # question ids come from the data set's files (a user's local copy): text, never Markdown
    return ", ".join(md_text(q) for q in questions) or "—"


def _accuracy(rows: list[dict[str, Any]]) -> list[str]:
    """The accuracy probe's answers per arm and pass, with every question that flipped against cache-off."""
    if not rows:
        return []
    out = ["## accuracy", "", "| arm | pass | correct | cached prompt tokens | differs first at | lost | gained |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        cached = "unmeasured" if r.get("cached_tokens") is None else str(r["cached_tokens"])
        # The model's own answer text and an evaluator's error: shown as text, never as Markdown.
        diff = md_text(r.get("error") or r.get("first_difference") or ("—" if "lost" in r else "(baseline)"))
        out.append(f"| {md_text(r['arm'])} | {r['pass']} | {r['correct']}/{r['questions']} | {cached} | {diff} | "
                   f"{_ids(r.get('lost', []))} | {_ids(r.get('gained', []))} |")
    return [*out, ""]


def _repeats_line(rep: dict[str, Any]) -> str:
    bounds = f"{rep.get('minimum')}" if rep.get("minimum") == rep.get("maximum") else \
        f"{rep.get('minimum')}..{rep.get('maximum')}"
    level = rep.get("confidence_at_stop")
    looks = f", {rep.get('looks')} look(s), the last at confidence {level:.4g}" if isinstance(level, float) else ""
    return f"**Repeats**: {rep.get('ran')} ran (bounds {bounds}{looks}); stopped: **{rep.get('stopped')}**"


def _noise(bundle: dict[str, Any]) -> list[str]:
    """+experiment=noise (an A/A run): each metric's noise floor on both clocks (hybridbench.metrics.noise)."""
    if bundle.get("name") != "noise":
        return []
    checks = ((bundle.get("provenance") or {}).get("config") or {}).get("checks") or {}
    confidence = float(checks.get("confidence", 0.95))
    rows = noise_floor(bundle.get("trials") or [], baseline=bundle["baseline_arm"], confidence=confidence)
    if not rows:
        return ["## noise floor", "", "Fewer than two paired repeats: no noise floor.", ""]
    out = ["## noise floor", "", f"The same arm twice: every difference below is noise ({confidence:.0%} "
           "interval, MDE at 80% power; the timing checks judge the clock `engine.timing` names).", "",
           "| workload | copy | metric | repeats | A/A change | sd per repeat | CI half-width | MDE |",
           "|---" * 8 + "|"]
    out += [f"| {r.workload} | {r.arm} | {r.label} | {r.repeats} | {r.estimate:+.1%} | {r.sd:.1%} | "
            f"±{r.half_width:.1%} | {r.mde:.1%} |" for r in rows]
    return [*out, ""]


def _served_block(prov: dict[str, Any]) -> list[str]:
    """A server that served another block than the plan computed (results/served_block.py), above everything
    measured: the verdict below is marked for it."""
    extra = (prov.get("engine") or {}).get("extra")
    mismatches = block_mismatches(extra) if isinstance(extra, dict) else ()
    if not mismatches:
        return []
    arms = "; ".join(f"arm {md_code(m.arm)} served {m.served}-token blocks, the plan computed {m.planned}"
                     for m in mismatches)
    return [f"**Served another block than planned** ({arms}; `served_page` and `planned_page` in bundle.json): the "
            "plan's hit granularity and forecast describe a server that did not run, so the verdict is marked.", ""]


def render_report(bundle: dict[str, Any]) -> str:
    arms: list[str] = bundle["arms"]
    baseline: str = bundle["baseline_arm"]
    lines = [f"# hybridbench: {bundle['name']}", ""]
    if bundle.get("modelled"):
        engine = bundle["provenance"]["engine"]["name"]
        lines += [f"**Modelled** (engine `{engine}`): times come from a cost model, not a GPU.", ""]
    prov = bundle["provenance"]
    lines += [
        # The version is the build's own string (a pull request's code reports it): text, never Markdown.
        f"engine {md_code(prov['engine']['name'])} {md_text(prov['engine']['version'])} · git "
        f"{md_code(prov['git_sha'][:12] or 'n/a')}"
        f"{' (dirty)' if prov['git_dirty'] else ''} · plan `{prov['plan_fingerprint']}` · baseline arm `{baseline}`",
        "",
    ]
    lines += _served_block(prov)
    if isinstance(rep := bundle.get("repeats"), dict):  # adaptive repeats (hybridbench/plan/repeats.py)
        lines += [_repeats_line(rep), ""]
    rescored = bundle.get("rescored")
    if isinstance(rescored, dict):
        changed = ", ".join(f"`{o}`" for o in rescored.get("overrides", [])) or "the run's own settings"
        lines += [f"**Re-scored** {rescored.get('created', '')} from the saved files, with {changed}.", ""]
    for workload, by_arm in bundle["aggregates"].items():
        lines += [f"## {workload}", ""]
        if note := (bundle.get("notes") or {}).get(workload):
            lines += [f"Note: {note}", ""]
        for arm in arms:
            s = by_arm.get(arm, {})
            # The flag is bundle data; bundles written before it existed get the same rule applied here.
            flagged = s.get("client_delay_flagged")
            if flagged is None:
                flagged = client_delay_flagged(s)
            if flagged:
                repeats = s.get("client_delay_flagged_repeats")
                which = f" in {repeats} of {s['repeats']} repeats" if repeats and "repeats" in s else ""
                lines += [f"**Client delay flagged** ({arm}{which}): p99 {_ms(s.get('p99_client_delay_ms'))} "
                          f"against a median TTFT of {_ms(s.get('median_ttft_ms'))} — the client fell behind its "
                          "schedule; TTFT may include client queueing.", ""]
        lines += ["| metric | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
        for key, label, fmt, _ in ROWS:
            base = by_arm.get(baseline, {}).get(key)
            cells = [_cell(by_arm.get(arm, {}).get(key), fmt, None if arm == baseline else base) for arm in arms]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        for key, label in (("evicted_tokens", "evicted KV tokens / repeat"),
                           ("evicted_states", "evicted states / repeat"),
                           ("host_loaded_tokens", "host-loaded KV tokens / repeat")):
            lines.append(f"| {label} | " + " | ".join(_evicted(bundle, workload, arm, key) for arm in arms) + " |")
        lines.append("")
    lines += _noise(bundle)
    lines += _published(bundle.get("published") or [])
    lines += forecast_section(bundle)
    lines += _accuracy(bundle.get("accuracy") or [])
    lines += ["## checks", "", "| check | workload | arm | verdict | observed | expected |", "|---" * 6 + "|"]
    for c in bundle["checks"]:
        mark = {"pass": "pass", "fail": "**FAIL**", "skip": "skip", "inconclusive": "**INCONCLUSIVE**"}[c["status"]]
        # A detail can hold a server log's tail (the build's own output): it must not split the row, nor add
        # markup (``<!--`` hid every row and the verdict below it on GitHub).
        lines.append(f"| {md_text(c['check'])} | {md_text(c['workload'])} | {md_text(c['arm'])} | {mark} | "
                     f"{md_text(c['detail'])} | {md_text(c['expected'])} |")
    if bundle.get("infrastructure_error"):  # the whole message: the survival row keeps only its head and tail
        lines += ["", f"**Infrastructure failure** (exit 3): {md_text(bundle['infrastructure_error'])}"]
    own = scoring_overrides(str((bundle.get("provenance") or {}).get("command", "")))
    if own:  # as results ls and the dashboard mark it: not the experiment's verdict as written
        lines += ["", f"Scoring set on its command line: {' '.join(md_code(o) for o in own)}."]
    lines += ["", f"verdict: **{bundle['verdict']}**", ""]
    return "\n".join(lines)
