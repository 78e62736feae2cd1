"""compare.md and compare.json: a baseline run (main) against a candidate run (a pull request)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import Any

from hybridbench.compare import Comparison
from hybridbench.report.compare_schema import COMPARE_SCHEMA_VERSION
from hybridbench.report.md_text import md_code, md_text

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
    # The labels carry each build's own version string, and every name comes from a config: Markdown text here
    # (the PR's job summary shows this file), never markup.
    lines = ["# hybridbench compare", "", f"baseline: {md_code(cmp.base)}  ", f"candidate: {md_code(cmp.candidate)}",
             ""]
    lines += [f"engine {md_code(cmp.engine)} · model {md_code(cmp.model)} · {len(cmp.pairs)} (workload, arm) pair(s) "
              "compared", ""]
    if cmp.modelled:
        lines += ["**Modelled** (engine `sim`): times come from a cost model, not a GPU.", ""]
    lines += ["Two separate runs: drift between them (machine, time of day) is not paired away as it is between "
              "the arms of one run; intervals count both runs' spread.", ""]
    if cmp.config_changes:
        lines += ["## what differs in the resolved config", "", "| key | baseline | candidate |", "|---|---|---|"]
        lines += [f"| {md_code(k, cell=True)} | {md_code(_short(a), cell=True)} | {md_code(_short(b), cell=True)} |"
                  for k, a, b in cmp.config_changes[:40]]
        if len(cmp.config_changes) > 40:
            lines.append(f"| … {len(cmp.config_changes) - 40} more | | |")
        lines.append("")
    if cmp.not_compared:
        lines += ["Not compared: " + "; ".join(md_text(n) for n in cmp.not_compared) + ".", ""]
    lines += ["## verdicts", "", "| workload | arm | metric | baseline | candidate | change (CI) | verdict |",
              "|---" * 7 + "|"]
    for d in cmp.deltas:
        # Three outcomes, each its own word: an interval astride the limit is "inconclusive", never read as a pass.
        mark = {"pass": "pass", "fail": "**FAIL**", "skip": "skip", "inconclusive": "**INCONCLUSIVE**"}[d.status]
        lines.append(f"| {md_text(d.workload)} | {md_text(d.arm)} | {d.metric} | {_value(d.metric, d.base)} | "
                     f"{_value(d.metric, d.candidate)} | {md_text(d.detail)} | {mark} |")
    lines += ["", f"verdict: **{cmp.verdict}**", ""]
    return "\n".join(lines)


def comparison_json(cmp: Comparison) -> dict[str, Any]:
    out = asdict(cmp)
    out["config_changes"] = [{"key": k, "baseline": a, "candidate": b} for k, a, b in cmp.config_changes]
    out["verdict"] = cmp.verdict
    out["schema_version"] = COMPARE_SCHEMA_VERSION
    return out
