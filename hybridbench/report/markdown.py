"""report.md: one table per workload, one column per arm, deltas vs the baseline arm; the verdicts."""

from __future__ import annotations

import math
from typing import Any

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


def render_report(bundle: dict[str, Any]) -> str:
    arms: list[str] = bundle["arms"]
    baseline: str = bundle["baseline_arm"]
    lines = [f"# hybridbench: {bundle['name']}", ""]
    if bundle.get("modelled"):
        lines += ["**Modelled** (engine `sim`): times come from a cost model, not a GPU.", ""]
    prov = bundle["provenance"]
    lines += [
        f"engine `{prov['engine']['name']}` {prov['engine']['version']} · git `{prov['git_sha'][:12] or 'n/a'}`"
        f"{' (dirty)' if prov['git_dirty'] else ''} · plan `{prov['plan_fingerprint']}` · baseline arm `{baseline}`",
        "",
    ]
    for workload, by_arm in bundle["aggregates"].items():
        lines += [f"## {workload}", ""]
        for arm in arms:
            s = by_arm.get(arm, {})
            delay, ttft = s.get("p99_client_delay_ms"), s.get("median_ttft_ms")
            if isinstance(delay, float) and isinstance(ttft, float) and ttft > 0 and delay > 0.1 * ttft:
                lines += [f"**Client delay flagged** ({arm}): p99 {delay:.1f} ms against a median TTFT of "
                          f"{ttft:.1f} ms — the client fell behind its schedule; TTFT may include client queueing.", ""]
        lines += ["| metric | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
        for key, label, fmt, _ in ROWS:
            base = by_arm.get(baseline, {}).get(key)
            cells = [_cell(by_arm.get(arm, {}).get(key), fmt, None if arm == baseline else base) for arm in arms]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## checks", "", "| check | workload | arm | verdict | observed | expected |", "|---" * 6 + "|"]
    for c in bundle["checks"]:
        mark = {"pass": "pass", "fail": "**FAIL**", "skip": "skip"}[c["status"]]
        detail = str(c["detail"]).replace("|", "\\|")  # a server log tail must not split the table row
        lines.append(f"| {c['check']} | {c['workload']} | {c['arm']} | {mark} | {detail} | {c['expected']} |")
    lines += ["", f"verdict: **{bundle['verdict']}**", ""]
    return "\n".join(lines)
