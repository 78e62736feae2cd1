"""``hybridbench plan``: what a run would do, built by the run's own plan-time path (hybridbench.prepare), with
nothing launched: each trial's size, each arm's exact server command line and environment (from the installed
server's ``--help``), pools and arrivals, the machine's readiness as warnings, and the simulator's forecast.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from hybridbench.checks.evictions import counter_warnings
from hybridbench.config.gpu_kind import unknown_gpu_warning
from hybridbench.config.redact import scrub_obj, secret_values
from hybridbench.config.schema import EngineCfg, RunCfg
from hybridbench.engines.base import Engine
from hybridbench.engines.context_length import refuse_over_context
from hybridbench.engines.kv_pool import refuse_unfit_requests
from hybridbench.engines.mamba_chunk import short_chunk_warning
from hybridbench.engines.server import ServerEngine
from hybridbench.engines.sglang_cmd import sglang_attention_dp_groups
from hybridbench.engines.vllm_host_tier import host_tier_warnings
from hybridbench.engines.vllm_page import vllm_page
from hybridbench.errors import ConfigError
from hybridbench.load.trial import ServerTrials
from hybridbench.plan.build import effective_vocab
from hybridbench.plan.load import planned_schedules
from hybridbench.prepare import PreparedRun, generate_rows, prepare_run
from hybridbench.preview.accuracy_forecast import with_accuracy
from hybridbench.preview.compose import Composed
from hybridbench.preview.forecast import DEFAULT_MAX_REQUESTS, forecast_run
from hybridbench.preview.forecast_page import forecast_page
from hybridbench.preview.forecast_warnings import forecast_warnings
from workloads.trace import TraceRow

__all__ = ["Preview", "build_preview"]


@dataclass(frozen=True, slots=True)
class Preview:
    """What ``hybridbench plan --json`` prints (:meth:`to_json`)."""

    name: str
    engine: str
    run_dir: str
    arms: dict[str, dict[str, Any]]  # name -> {argv, env}
    workloads: dict[str, dict[str, Any]]  # name -> {kind, requests, input_tokens, output_tokens, load}
    trials: tuple[dict[str, Any], ...]
    pools: dict[str, Any]
    forecast: dict[str, Any] | None
    warnings: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"trials": list(self.trials), "warnings": list(self.warnings)}


def _server(engine: Engine) -> ServerEngine | None:
    return engine.engine if isinstance(engine, ServerTrials) else None


def _arms(prepared: PreparedRun) -> dict[str, dict[str, Any]]:
    server = _server(prepared.engine)
    commands = prepared.engine.info().extra.get("commands", {})
    out: dict[str, dict[str, Any]] = {}
    for spec in prepared.plan.arm_specs:
        env = server.spec.env_for(spec) if server is not None and server.spec.env_for else {}
        argv = [str(a) for a in commands.get(spec.name, [])]
        out[spec.name] = {"argv": argv, "env": dict(env), "port": "chosen at launch" if argv else None}
    return out


def _page(cfg: RunCfg) -> dict[str, Any]:
    """The page the server runs: vLLM sizes its own (vllm_page.py), so engine.page_size=1 is not what it serves;
    TokenSpeed's cache recipe may fix another than the one passed (tokenspeed_page.py)."""
    if cfg.engine.name == "vllm":
        page = vllm_page(cfg.model, cfg.engine)
        return {"page_size": page.tokens or "sized by vLLM at start-up", "page_size_set_by": page.why}
    served = forecast_page(cfg)
    if served.unknown:  # TokenSpeed 0.1.0 on a GDN model: the scheduler build decides (tokenspeed_page.py)
        return {"page_size": f"sized by {cfg.engine.name} at start-up", "page_size_set_by": served.unknown}
    if served.tokens != cfg.engine.page_size:
        return {"page_size": served.tokens, "page_size_set_by": served.set_by}
    return {"page_size": cfg.engine.page_size}


def _pools(composed: Composed, prepared: PreparedRun) -> dict[str, Any]:
    e = composed.cfg.engine
    pool = prepared.engine.kv_pool(composed.cfg)
    return {
        "kv_tokens": pool.tokens if pool is not None else (e.kv_tokens or "sized by the server from memory"),
        "kv_tokens_set_by": pool.key if pool is not None else ("engine.kv_tokens" if e.kv_tokens else "the server"),
        "max_mamba_cache_size": e.max_mamba_cache_size or "sized by the server from memory",
        "mem_fraction_static": e.mem_fraction_static, **_page(composed.cfg),
        "track_interval": e.track_interval if prepared.engine.traits.track_interval else
        f"not used by engine={e.name} (its server takes no tracking interval)",
        "chunked_prefill_size": e.chunked_prefill_size,
    }


def _load(load: Any) -> dict[str, Any]:
    return {"kind": load.kind, "max_concurrency": load.max_concurrency, "request_rate": load.request_rate,
            "slowdown": load.slowdown}


def _dp_attention_groups(cfg: RunCfg) -> int:
    if cfg.engine.name != "sglang":
        return 1
    return sglang_attention_dp_groups([str(a) for a in cfg.engine.extra_args])


def build_preview(composed: Composed, *, forecast: bool = True,
                  max_requests: int = DEFAULT_MAX_REQUESTS) -> Preview:
    """ConfigError (exit 2) for anything the run would refuse at plan time; machine findings are warnings."""
    cfg = composed.cfg
    prepared = prepare_run(cfg, composed.run_dir, composed.resolved)
    warnings = [f"{f.check}: {f.message}" for f in prepared.machine if not f.ok] + list(prepared.data_notes)
    if gpu_warning := unknown_gpu_warning(cfg.engine.gpu):
        warnings.append(gpu_warning)
    warnings += counter_warnings(cfg.checks.enabled, prepared.engine.name, prepared.engine.traits.counters,
                                 any(spec.host_tier for spec in prepared.plan.arm_specs))
    warnings += host_tier_warnings(cfg, prepared.plan.arm_specs)  # vLLM's GiB against the device pool
    if prepared.engine.traits.track_interval and (short := short_chunk_warning(cfg.model, cfg.engine,
                                                                               prepared.plan.arm_specs)):
        warnings.append(short)  # SGLang, the reference server and the simulator alike
    if not prepared.engine.traits.track_interval and cfg.engine.track_interval != EngineCfg().track_interval:
        warnings.append(f"engine.track_interval={cfg.engine.track_interval} has no effect on engine={cfg.engine.name}: "
                        "its server takes no tracking interval (vLLM's states follow its block size, engine.page_size)")
    traces: dict[str, list[TraceRow]] = {}
    kept: dict[str, Any] = {}
    vocab = effective_vocab(cfg)
    for w in prepared.plan.workloads:  # in memory: the run writes them into its run dir
        stream = generate_rows(w, cfg, vocab)
        traces[w.name] = list(stream.rows)
        kept[w.name] = stream.metadata.get("keep_sessions")
    if (pool := prepared.engine.kv_pool(cfg)) is not None:
        refuse_unfit_requests(prepared.engine.name, pool, traces)
    refuse_over_context(cfg, traces)
    planned_schedules(prepared.plan, traces)  # arrivals the run could follow, or one line naming load.*
    workloads = {
        w.name: {"kind": w.kind, "requests": len(traces[w.name]),
                 "sessions": len({r.session_id for r in traces[w.name]}), "sessions_kept_of": kept[w.name],
                 "input_tokens": sum(r.num_input_tokens for r in traces[w.name]),
                 "output_tokens": sum(r.num_output_tokens for r in traces[w.name]), "load": _load(w.load),
                 "argv": list(w.argv)}
        for w in prepared.plan.workloads
    }
    trials = tuple({"index": t.index, "arm": t.arm, "workload": t.workload, "repeat": t.repeat,
                    **{k: workloads[t.workload][k] for k in ("requests", "input_tokens", "output_tokens")}}
                   for t in prepared.plan.trials)
    fc: dict[str, Any] | None = None
    if forecast:
        try:
            fc = forecast_run(cfg, composed.resolved, traces=traces, max_requests=max_requests).to_json()
            fc = with_accuracy(fc, cfg, composed.resolved, max_requests=max_requests)
            warnings += forecast_warnings(fc, cfg)
        except ConfigError as exc:
            warnings.append(f"forecast: none ({exc})")
        if fc is not None and (groups := _dp_attention_groups(cfg)) > 1:
            warnings.append(f"forecast: one cache over engine.tp={cfg.engine.tp} GPUs; with --enable-dp-attention each "
                            f"of the {groups} groups has its own pools and requests, which the simulator does not "
                            f"model: read its figures as a single-cache server's")
    prepared.engine.close()
    secrets = secret_values(composed.resolved)  # what the config hides stays hidden wherever it shows up again
    return Preview(cfg.name, cfg.engine.name, str(composed.run_dir), scrub_obj(_arms(prepared), secrets),
                   scrub_obj(workloads, secrets), trials, _pools(composed, prepared), fc,
                   tuple(scrub_obj(warnings, secrets)))
