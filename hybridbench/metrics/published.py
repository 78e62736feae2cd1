"""Published vs this run: each result the seeds published (the experiment's ``published`` list) beside the
same metric of this run, from the bundle's aggregates alone.

A relative result (``baseline_arm`` set) is ``reproduced`` when this run moves the metric the same way by
at least half the published change, ``not reproduced`` otherwise; an absolute one when this run's value is
within ``tolerance`` x max(|published|, 1). A run on another engine, model or workload scale than the source,
or on another GPU type (by engine.gpu, and by the GPUs nvidia-smi named, an unknown one included), TP,
quantization or arrival process and rate than the source states, or on a load cut to its first sessions
(``keep_sessions``), is ``not comparable``, with the reason: its direction and change are still shown, never
scored. None of this gates the exit code: the checks do.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from reference_impl.engine.hardware import gpu_key

__all__ = ["Mark", "compare_published"]

Mark = Literal["reproduced", "not reproduced", "not comparable"]


def _value(aggregates: Mapping[str, Any], workload: str, arm: str, metric: str) -> float | None:
    agg = aggregates.get(workload, {}).get(arm, {})
    if agg.get("completed") == 0:  # nothing completed: its rates read 0.0 (a 0% hit rate "reproduced" a 1% figure)
        return None
    v = agg.get(metric)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
        return None
    return float(v)


def _direction(published: float, observed: float) -> str:
    if published == 0 or observed == 0:
        return "flat" if published == observed else "differs"
    return "same" if (published > 0) == (observed > 0) else "opposite"


def _arrival(config: Mapping[str, Any], workload: Mapping[str, Any]) -> str:
    """This run's arrivals for one workload, in PublishedCfg.arrival's form."""
    load = config.get("load", {}) or {}
    kind = str(load.get("kind", ""))
    if kind == "closed":
        return f"closed:{int(load.get('max_concurrency', 0) or 0)}"
    if kind == "poisson":
        return f"poisson:{float(workload.get('request_rate') or load.get('request_rate') or 0):g}"
    return kind


def _same_arrival(ours: str, theirs: str) -> bool:
    a, _, x = ours.partition(":")
    b, _, y = theirs.partition(":")
    try:
        return a == b and (x == y or float(x) == float(y))
    except ValueError:
        return False


def _setup_differs(config: Mapping[str, Any], workload: Mapping[str, Any], p: Mapping[str, Any],
                   gpus: Sequence[str] = ()) -> list[str]:
    """What of the published run's stated setup this run does not share: GPU type (the label engine.gpu, and the
    GPUs nvidia-smi named where the run recorded them), TP, quantization, arrivals."""
    engine, model = config.get("engine", {}) or {}, config.get("model", {}) or {}
    out = []
    if p.get("gpu") and str(engine.get("gpu", "")).strip().lower() != str(p["gpu"]).strip().lower():
        out.append(f"GPU {engine.get('gpu', '?')} vs {p['gpu']}")
    elif p.get("gpu") and (other := next((g for g in gpus if gpu_key(g) != str(p["gpu"]).lower()), None)):
        out.append(f"GPU {other} (nvidia-smi; engine.gpu={engine.get('gpu', '?')}) vs {p['gpu']}")
    if p.get("tp") and int(engine.get("tp", 0) or 0) != int(p["tp"]):
        out.append(f"TP {engine.get('tp', '?')} vs {p['tp']}")
    if p.get("quantization"):
        ours = str(model.get("quantization") or "none")
        if ours != str(p["quantization"]):
            out.append(f"quantization {ours} vs {p['quantization']}")
    if p.get("arrival"):
        ours = _arrival(config, workload)
        if not _same_arrival(ours, str(p["arrival"])):
            out.append(f"arrivals {ours} vs {p['arrival']}")
    if kept := int(workload.get("keep_sessions", 0) or 0):  # a cut load is not the source's load
        out.append(f"only the first {kept} sessions of the load (keep_sessions)")
    return out


def compare_published(config: Mapping[str, Any], aggregates: Mapping[str, Any],
                      gpus: Sequence[str] = ()) -> list[dict[str, Any]]:
    """One row per published result; ``config`` is the run's resolved config (plan.json's), ``gpus`` the names
    nvidia-smi gave the server's GPUs (bundle.json's provenance), where the run recorded them."""
    engine = str(config.get("engine", {}).get("name", ""))
    model = str(config.get("model", {}).get("name", ""))
    engine_scale = int(config.get("engine", {}).get("workload_scale", 1) or 1)
    workloads = config.get("workloads", {}) or {}
    rows = []
    for p in config.get("published", []) or []:
        w = str(p["workload"])
        scale = int((workloads.get(w) or {}).get("scale", 1) or 1) * engine_scale
        arm, base = str(p["arm"]), str(p.get("baseline_arm") or "")
        observed = _value(aggregates, w, arm, p["metric"])
        if base and observed is not None:
            before = _value(aggregates, w, base, p["metric"])
            observed = observed / before - 1 if before else None
        differs = [f"{what} {ours} vs {theirs}" for what, ours, theirs in (
            ("engine", engine, p["engine"]), ("model", model, p["model"]), ("scale", f"1/{scale}", f"1/{p['scale']}"))
            if ours != theirs]
        differs += _setup_differs(config, workloads.get(w) or {}, p, gpus)
        value = float(p["value"])
        mark: Mark
        if observed is None:
            mark, why, direction = "not comparable", f"{w}/{arm} has no {p['metric']} in this run", "—"
        else:
            direction = _direction(value, observed) if base else "—"
            if base:
                ok = direction == "same" and abs(observed) >= abs(value) / 2
            else:
                ok = abs(observed - value) <= float(p.get("tolerance", 0.25)) * max(abs(value), 1.0)
            mark = "reproduced" if ok else "not reproduced"
            why = ""
            if differs:
                mark, why = "not comparable", "; ".join(differs)
        rows.append({**dict(p), "observed": observed, "direction": direction, "mark": mark, "why": why,
                     "run_scale": scale})
    return rows
