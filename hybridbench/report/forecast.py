"""The report's "forecast vs measured": what the simulator forecast before the run (bundle ``forecast``, written by
the run as forecast.json) beside what was measured, per workload and arm, so a GPU run that departs from the model
(a cache anomaly, or a gap in the simulator) shows at a glance."""

from __future__ import annotations

from typing import Any

__all__ = ["forecast_section"]


def _pct(x: Any) -> str:
    return f"{x:.1%}" if isinstance(x, (int, float)) else "n/a"


def _ms(x: Any) -> str:
    return f"{x:,.0f}" if isinstance(x, (int, float)) else "n/a"


def _s(x: Any) -> str:
    return f"{x:,.1f}" if isinstance(x, (int, float)) else "n/a"


def forecast_section(bundle: dict[str, Any]) -> list[str]:
    fc = bundle.get("forecast")
    if not isinstance(fc, dict) or not fc.get("trials"):
        return []
    lines = ["## forecast vs measured", "",
             f"Simulator forecast for {fc.get('model')} on {fc.get('tp')} x {fc.get('gpu')}, made before the run; "
             f"known error: {fc.get('known_error', 'n/a')}.", ""]
    if fc.get("cache_model"):  # engine=vllm: the simulator is SGLang's cache at the block vLLM serves
        lines += [f"Cache model: {fc['cache_model']}.", ""]
    lines += [f"Sampled: {s}." for s in fc.get("sampled", [])]
    if fc.get("sampled"):
        lines.append("A sampled workload's hit rate and TTFT are not forecast: the sample is a lighter load.")
    lines += ["", "| workload | arm | token hit rate (forecast / measured) | mean TTFT ms (forecast / measured) | "
                  "trial duration s (forecast / measured) |", "|---|---|---|---|---|"]
    aggregates = bundle.get("aggregates") or {}
    for t in fc["trials"]:
        m = (aggregates.get(t["workload"]) or {}).get(t["arm"]) or {}
        # A sample is a lighter load: its hit rate and TTFT are not set beside the run's (a forecast kept before the
        # sample's figures were kept apart still holds them, so fewer simulated requests is the test).
        whole = t.get("sample") is None and t.get("simulated", 0) >= t.get("requests", 0)
        hits, ttft = (_pct(t.get("token_hit_rate")), _ms(t.get("mean_ttft_ms"))) if whole else ("sampled",) * 2
        cells = (f"{hits} / {_pct(m.get('token_hit_rate'))}", f"{ttft} / {_ms(m.get('mean_ttft_ms'))}",
                 f"{_s(t.get('wall_s'))} / {_s(m.get('duration'))}")
        lines.append(f"| {t['workload']} | {t['arm']} | " + " | ".join(cells) + " |")
    return [*lines, "", *_accuracy_passes(fc.get("accuracy"), bundle.get("accuracy") or [])]


def _accuracy_passes(fc: Any, measured: list[dict[str, Any]]) -> list[str]:
    """Each evalscope pass's forecast (an upper bound: every answer at max_tokens) beside how long it took."""
    if not isinstance(fc, dict) or not fc.get("passes"):
        return []
    took = {(r.get("arm"), r.get("pass")): r.get("wall_s") for r in measured}
    lines = [f"Accuracy passes: forecast with every answer at {fc.get('max_tokens')} tokens (an upper bound), "
             f"{fc.get('batch_size')} in flight, cut off at {_s(fc.get('timeout_s'))} s.", "",
             "| arm | pass | duration s (forecast bound / measured) |", "|---|---|---|"]
    lines += [f"| {p['arm']} | {p['pass_']} | {_s(p.get('wall_s'))} / {_s(took.get((p['arm'], p['pass_'])))} |"
              for p in fc["passes"]]
    return [*lines, ""]
