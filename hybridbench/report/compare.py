"""compare.md and compare.json: a baseline run (main) against a candidate run (a pull request)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import Any

from hybridbench.compare import Comparison
from hybridbench.report.compare_schema import COMPARE_SCHEMA_VERSION

__all__ = ["COMPARE_SCHEMA_VERSION", "comparison_json", "render_comparison"]

_FORMATS = {"ttft": "{:.1f} ms", "throughput": "{:.3f} req/s", "token_hit_rate": "{:.3f}", "survival": "{:.0f} lost"}


def _value(metric: str, value: float | None) -> str:
    if value is None or math.isnan(value):
        return "—"
    return _FORMATS[metric].format(value)


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def render_comparison(cmp: Comparison) -> str:
    lines = ["# hybridbench compare", "", f"baseline: `{cmp.base}`  ", f"candidate: `{cmp.candidate}`", ""]
    lines += [f"engine `{cmp.engine}` · model `{cmp.model}` · {len(cmp.pairs)} (workload, arm) pair(s) compared", ""]
    if cmp.modelled:
        lines += ["**Modelled** (engine `sim`): times come from a cost model, not a GPU.", ""]
    lines += ["Two separate runs: drift between them (machine, time of day) is not paired away as it is between "
              "the arms of one run; intervals count both runs' spread.", ""]
    if cmp.config_changes:
        lines += ["## what differs in the resolved config", "", "| key | baseline | candidate |", "|---|---|---|"]
        lines += [f"| `{k}` | `{_short(a)}` | `{_short(b)}` |" for k, a, b in cmp.config_changes[:40]]
        if len(cmp.config_changes) > 40:
            lines.append(f"| … {len(cmp.config_changes) - 40} more | | |")
        lines.append("")
    if cmp.not_compared:
        lines += ["Not compared: " + "; ".join(cmp.not_compared) + ".", ""]
    lines += ["## verdicts", "", "| workload | arm | metric | baseline | candidate | change (CI) | verdict |",
              "|---" * 7 + "|"]
    for d in cmp.deltas:
        # Three outcomes, each its own word: an interval astride the limit is "inconclusive", never read as a pass.
        mark = {"pass": "pass", "fail": "**FAIL**", "skip": "skip", "inconclusive": "**INCONCLUSIVE**"}[d.status]
        detail = d.detail.replace("|", "\\|")
        lines.append(f"| {d.workload} | {d.arm} | {d.metric} | {_value(d.metric, d.base)} | "
                     f"{_value(d.metric, d.candidate)} | {detail} | {mark} |")
    lines += ["", f"verdict: **{cmp.verdict}**", ""]
    return "\n".join(lines)


def comparison_json(cmp: Comparison) -> dict[str, Any]:
    out = asdict(cmp)
    out["config_changes"] = [{"key": k, "baseline": a, "candidate": b} for k, a, b in cmp.config_changes]
    out["verdict"] = cmp.verdict
    out["schema_version"] = COMPARE_SCHEMA_VERSION
    return out
