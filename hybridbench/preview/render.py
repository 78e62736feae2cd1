"""The preview as text: one line per arm, workload, trial and forecast figure (``--json`` prints the object)."""

from __future__ import annotations

import shlex
from typing import Any

from hybridbench.preview.build import Preview

__all__ = ["duration", "render_text"]


def duration(seconds: float) -> str:
    s = round(seconds)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}h {m:02d}m" if h else f"{m}m {sec:02d}s" if m else f"{seconds:.1f}s"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.0f} ms"


def _load(load: dict[str, Any]) -> str:
    if load["kind"] == "closed":
        return f"closed loop, {load['max_concurrency']} in flight"
    cap = f", at most {load['max_concurrency']} in flight" if load["max_concurrency"] else ""
    if load["kind"] == "poisson":
        return f"poisson at {load['request_rate']:g} req/s{cap}"
    return f"trace timestamps x{load['slowdown']:g}{cap}"


def _accuracy(acc: dict[str, Any]) -> list[str]:
    if "none" in acc:
        return [f"  accuracy passes: not forecast ({acc['none']})"]
    sets = ", ".join(f"{d['name']} {d['questions']:,} questions" for d in acc["datasets"])
    lines = [f"  accuracy passes (evalscope after each arm: {sets}; {acc['batch_size']} in flight; every answer run to "
             f"{acc['max_tokens']:,} tokens, an upper bound): {duration(acc['total_s'])}"]
    by_arm: dict[str, list[str]] = {}
    for p in acc["passes"]:
        by_arm.setdefault(p["arm"], []).append(f"{p['pass_']} {duration(p['wall_s'])}")
    cut = duration(acc["timeout_s"])
    lines += [f"    {arm}: {', '.join(passes)} (cut off at {cut})" for arm, passes in by_arm.items()]
    return lines


def _forecast(fc: dict[str, Any]) -> list[str]:
    acc = fc.get("accuracy")
    probes, probes_compute, split = 0.0, 0.0, ""
    if acc is not None and "none" not in acc:
        probes, probes_compute = acc["total_s"], acc["compute_s"]
        split = f"{duration(fc['total_s'])} of trials, {duration(probes)} of accuracy passes; "
    lines = [f"forecast (simulator: {fc['model']} on {fc['tp']} x {fc['gpu']}): {duration(fc['total_s'] + probes)} in "
             f"total ({split}{fc['repeats']} repeat(s); server start-up not included; computed in "
             f"{fc['compute_s'] + probes_compute:.1f}s)"]
    for t in fc["trials"]:
        failed = f", {t['failed']} of {t['simulated']} simulated requests failed" if t.get("failed") else ""
        if (own := t.get("sample")) is not None:  # a lighter load's figures: never printed as the GPU run's
            figures = (f"hit rate and TTFT not forecast (the sample's own {_pct(own['token_hit_rate'])} and "
                       f"{_ms(own['mean_ttft_ms'])} are a lighter load's: not comparable with the GPU run)")
        else:
            figures = f"token hit rate {_pct(t['token_hit_rate'])}, mean TTFT {_ms(t['mean_ttft_ms'])}"
        lines.append(f"  {t['arm']} / {t['workload']}: {duration(t['wall_s'])} per trial, {figures}{failed}")
    for arm, a in fc["arms"].items():
        figures = ("hit rate and TTFT not forecast (a workload of it sampled)"
                   if any(t.get("sample") is not None for t in fc["trials"] if t["arm"] == arm) else
                   f"token hit rate {_pct(a['token_hit_rate'])}, mean TTFT {_ms(a['mean_ttft_ms'])}")
        lines.append(f"  arm {arm}: {figures}, {duration(a['wall_s'])} of trials")
    lines += _accuracy(acc) if acc is not None else []
    lines += [f"  sampled: {s}" for s in fc["sampled"]]
    lines += [f"  simulated whole: {s}" for s in fc.get("simulated_whole", ())]
    if cache := fc.get("cache_model"):  # engine=vllm: the simulator is SGLang's cache at vLLM's block
        lines.append(f"  cache model: {cache}")
    lines.append(f"  known error: {fc['known_error']}")
    return lines


def render_text(p: Preview) -> str:
    n_arms, n_w = len(p.arms), len(p.workloads)
    repeats = len(p.trials) // max(1, n_arms * n_w)
    lines = [f"plan: {p.name} on {p.engine}: {n_arms} arm(s) x {n_w} workload(s) x {repeats} repeat(s) = "
             f"{len(p.trials)} trials; run dir {p.run_dir}"]
    for name, arm in p.arms.items():
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in arm["env"].items())
        cmd = shlex.join(arm["argv"]) if arm["argv"] else "(in-process: no server)"
        lines.append(f"arm {name}: {env + ' ' if env else ''}{cmd}")
    pools = dict(p.pools)
    set_by = pools.pop("kv_tokens_set_by", "the server")
    if set_by != "the server":  # what a number came from; "sized by the server from memory" says it already
        pools["kv_tokens"] = f"{pools['kv_tokens']} (set by {set_by})"
    if page_by := pools.pop("page_size_set_by", ""):  # the server's own page (vLLM's block, TokenSpeed's unflagged)
        pools["page_size"] = f"{pools['page_size']} ({page_by})"
    lines.append("pools: " + ", ".join(f"{k} {v}" for k, v in pools.items()))
    for name, w in p.workloads.items():
        sessions = f"{w['sessions']:,} sessions"
        if kept := w.get("sessions_kept_of"):  # workloads.<name>.keep_sessions cut the load to fit its budget
            sessions = f"the first {kept['kept']:,} of {kept['of']:,} sessions (workloads.{name}.keep_sessions)"
        lines.append(f"workload {name} ({w['kind']}): {w['requests']:,} requests in {sessions}, "
                     f"{w['input_tokens']:,} input and {w['output_tokens']:,} output tokens; "
                     f"arrivals {_load(w['load'])}")
    for t in p.trials:
        lines.append(f"trial {t['index']:03d}: arm {t['arm']}, workload {t['workload']}, repeat {t['repeat']}: "
                     f"{t['requests']:,} requests, {t['input_tokens']:,} input / {t['output_tokens']:,} output tokens")
    if p.forecast is not None:
        lines += _forecast(p.forecast)
    lines += [f"warning: {w}" for w in p.warnings]
    return "\n".join(lines)
