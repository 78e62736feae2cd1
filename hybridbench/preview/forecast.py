"""A run's forecast: the ``sim`` engine (reference_impl's simulator and cost model) on the run's own config, for the
run's GPU, model, TP and pools, before anything is launched.

Each (arm, workload) is simulated once, on repeat 0's arrivals; later repeats differ only in their Poisson draws
and are forecast alike. Where a workload has more than ``max_requests`` requests and a sample can stand for its
wall time, a deterministic sample of whole prefix groups is simulated instead (hybridbench.preview.sampling: which
loads, and how the wall time is scaled); the others are simulated whole. A sample's hit rate and TTFT are those of a
lighter load: they are kept apart (``sample``), never given as the GPU run's. The cost model's known error on the
published runs it was fitted to is :func:`known_error` (reference_impl.engine.calibration,
benchmarks/calibrate_sim.py).
"""

from __future__ import annotations

import copy
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hybridbench.config.schema import RunCfg
from hybridbench.engines.base import TrialContext
from hybridbench.engines.sim import SimEngine
from hybridbench.errors import ConfigError
from hybridbench.plan.build import build_plan, effective_vocab
from hybridbench.plan.types import MODELLED_ENGINES
from hybridbench.prepare import generate_rows
from hybridbench.preview.forecast_page import forecast_page
from hybridbench.preview.sampling import SendPhase, sample_load, whole_wall_s
from hybridbench.records.schema import Record
from reference_impl.engine.calibration import SEED_RADIX_TARGETS, TOLERANCE
from workloads.arrival import arrival_schedule
from workloads.trace import TraceRow

__all__ = ["DEFAULT_MAX_REQUESTS", "Forecast", "SampleFigures", "TrialForecast", "forecast_run", "known_error",
           "timeout_warnings"]

DEFAULT_MAX_REQUESTS = 400  # per workload a sample can stand for; a few seconds of simulation each on one CPU core


@dataclass(frozen=True, slots=True)
class SampleFigures:
    """What a sample measured of itself: a lighter load (fewer prefix groups cached, fewer sessions at once), so
    not a forecast of the GPU run's figures, nor of the order of its arms."""

    token_hit_rate: float | None
    mean_ttft_ms: float | None


@dataclass(frozen=True, slots=True)
class TrialForecast:
    arm: str
    workload: str
    requests: int  # in the workload (all of it, not the sample)
    simulated: int  # requests the simulator ran (a sample of whole prefix groups when fewer)
    wall_s: float  # forecast wall time of one trial of the whole load (a sample's scaled: sampling.whole_wall_s)
    token_hit_rate: float | None  # the whole load's; None when only a sample was simulated (see ``sample``)
    mean_ttft_ms: float | None
    failed: int = 0  # simulated requests the modelled server refused (e.g. longer than a pool fixed in the config)
    sample: SampleFigures | None = None  # the sample's own figures, when the load was sampled
    # The longest a request waits from its send to its last token, at least (seconds; None: not known): the slowest
    # simulated request, and for a sampled Poisson load of single requests sent on their arrivals (no cap) no less
    # than the whole load's wall time after its last arrival. Past engine.request_timeout_s it would fail.
    slowest_s: float | None = None


@dataclass(frozen=True, slots=True)
class Forecast:
    gpu: str
    model: str
    tp: int
    trials: tuple[TrialForecast, ...]  # one per (arm, workload); every repeat of it takes as long
    repeats: int
    sampled: tuple[str, ...]  # one line per workload forecast from a sample
    known_error: str
    compute_s: float  # how long the forecast itself took
    simulated_whole: tuple[str, ...] = ()  # one line per workload over the budget simulated whole, and why
    page_size: int = 1  # the page (hit granularity) simulated: the server's own where the plan knows it
    page_size_set_by: str = ""
    cache_model: str = ""  # engine=vllm: what the simulator models of its cache, in one line
    page_unknown: str = ""  # why the server's own page is not known (the forecast's is then engine.page_size's)

    @property
    def total_s(self) -> float:
        return self.repeats * sum(t.wall_s for t in self.trials)

    def arm_summary(self) -> dict[str, dict[str, float | None]]:
        """Per arm; hit rate and TTFT only where every workload of the arm was simulated whole (a mean over some of
        them would stand for the arm as if it were all of it)."""
        out: dict[str, dict[str, float | None]] = {}
        for arm in dict.fromkeys(t.arm for t in self.trials):
            mine = [t for t in self.trials if t.arm == arm]
            whole = all(t.sample is None for t in mine)
            hits = [t.token_hit_rate for t in mine if t.token_hit_rate is not None]
            ttft = [t.mean_ttft_ms for t in mine if t.mean_ttft_ms is not None]
            out[arm] = {"token_hit_rate": statistics.fmean(hits) if hits and whole else None,
                        "mean_ttft_ms": statistics.fmean(ttft) if ttft and whole else None,
                        "wall_s": self.repeats * sum(t.wall_s for t in mine)}
        return out

    def to_json(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "model": self.model, "tp": self.tp, "repeats": self.repeats,
                "total_s": self.total_s, "trials": [asdict(t) for t in self.trials], "arms": self.arm_summary(),
                "sampled": list(self.sampled), "simulated_whole": list(self.simulated_whole),
                "known_error": self.known_error, "compute_s": self.compute_s, "page_size": self.page_size,
                "page_size_set_by": self.page_size_set_by, "cache_model": self.cache_model,
                "page_unknown": self.page_unknown}


def known_error() -> str:
    """The cost model's calibration, as data: the seed run it was fitted to and the tolerance its test holds."""
    arms = ", ".join(f"{arm}: {rps} req/s, {ttft} ms mean TTFT" for arm, (rps, ttft, _) in SEED_RADIX_TARGETS.items())
    return (f"fitted to the radix-cache run of SGLang PR #11214 (Qwen3-Next-80B-A3B, TP4, H100, gsp 50x10, "
            f"concurrency 5; "
            f"{arms}): every figure within {TOLERANCE:.0%} (tests/reference_impl/engine/test_calibration.py); other "
            "models, GPUs and TP are extrapolations")


def _figures(records: list[Record]) -> tuple[float | None, float | None, int]:
    prompt = sum(r.prompt_tokens for r in records)
    cached = sum(r.cached_tokens or 0 for r in records)
    ttft = [r.ttft_ms for r in records if r.ttft_ms is not None]
    failed = sum(1 for r in records if r.status != "ok")
    return (cached / prompt if prompt else None), (statistics.fmean(ttft) if ttft else None), failed


def _slowest_s(records: list[Record], wall_s: float, last_arrival_s: float | None) -> float | None:
    waits = [r.end_s - r.sent_s for r in records if r.end_s is not None and r.sent_s is not None]
    bounds = waits + ([wall_s - last_arrival_s] if last_arrival_s is not None else [])
    return max(bounds) if bounds else None


def timeout_warnings(trials: Sequence[dict[str, Any]], timeout_s: float) -> list[str]:
    """One warning per forecast trial whose requests would wait past engine.request_timeout_s (``trials``: the
    forecast's JSON rows): the run would record them as failed, timed out, where the server only queued them."""
    return [f"forecast: requests of {t['workload']} on arm {t['arm']} wait {t['slowest_s']:.0f} s or more, past "
            f"engine.request_timeout_s={timeout_s:g}: they would fail as timed out (raise engine.request_timeout_s "
            f"above it, or leave the arm out)"
            for t in trials if t.get("slowest_s") is not None and t["slowest_s"] > timeout_s]


def forecast_run(cfg: RunCfg, resolved: dict[str, Any], *, traces: Mapping[str, Sequence[TraceRow]] | None = None,
                 max_requests: int = DEFAULT_MAX_REQUESTS) -> Forecast:
    """The simulator's forecast of this run on its target GPU; ConfigError when the simulator cannot model it (a
    model or GPU reference_impl does not know, an arm only the replayer has). ``traces``: the run's workloads
    already generated (the same seeds and parameters give the same rows), else generated here."""
    if cfg.engine.name == "reference":
        raise ConfigError("the reference engine runs a tiny CPU model: no GPU forecast applies")
    if cfg.engine.name in MODELLED_ENGINES and cfg.engine.name != "sim":
        raise ConfigError(f"engine={cfg.engine.name} is itself a model: no simulator forecast")
    started = time.monotonic()
    sim_cfg = copy.deepcopy(cfg)
    sim_cfg.engine.name = "sim"
    # The server's interpreter and extra flags are the run's, not the simulator's (it refuses them as inputs); the
    # data-parallel groups among those flags are read from the run's own config (preview/build.py).
    sim_cfg.engine.python, sim_cfg.engine.extra_args = "", []
    page = forecast_page(cfg)  # the page the server serves, where the plan knows it (vLLM's block)
    if page.block > cfg.engine.chunked_prefill_size:
        # vLLM advances a block wider than the chunk in sub-block steps (Scheduler._mamba_block_aligned_split); the
        # simulator's chunks are whole pages, so every prompt longer than the chunk would fail in it
        raise ConfigError(f"engine.chunked_prefill_size {cfg.engine.chunked_prefill_size} is shorter than the "
                          f"{page.block}-token block vLLM serves, which vLLM prefills in sub-block chunks and the "
                          "simulator, chunking whole pages, cannot")
    if not page.block:
        sim_cfg.engine.page_size = page.tokens
    engine = SimEngine(block=page.block)
    with tempfile.TemporaryDirectory(prefix="hybridbench-forecast-") as tmp:
        plan = build_plan(sim_cfg, Path(tmp), resolved)
        engine.validate(sim_cfg, plan)
        trials: list[TrialForecast] = []
        sampled: list[str] = []
        whole: list[str] = []
        vocab = effective_vocab(sim_cfg)
        for w in plan.workloads:
            # In memory, as the plan generates them (prepare.generate_rows: the rows materialize writes and reads
            # back); nothing of the forecast's temporary run dir is read, so writing the trace only cost time.
            everything = traces[w.name] if traces is not None else list(generate_rows(w, sim_cfg, vocab).rows)
            sample = sample_load(everything, w.load, max_requests)
            if sample.sampled:
                sampled.append(sample.describe(w.name))
            elif sample.why_whole:
                whole.append(sample.describe(w.name))
            for arm in plan.arms:
                trial = next(t for t in plan.trials if t.arm == arm and t.workload == w.name and t.repeat == 0)
                records: list[Record] = []
                ctx = TrialContext(plan, trial, sample.rows, records.append, (),
                                   schedule=arrival_schedule(sample.rows, w.load, trial.seed))
                engine.run_trial(sim_cfg, ctx)
                hits, ttft, failed = _figures(records)
                # Poisson: the whole load's own arrivals (its span is exact; the sample's is a k-th of it)
                arrivals = arrival_schedule(everything, w.load, trial.seed).times_s if sample.sampled else ()
                wall = whole_wall_s(sample, w.load, SendPhase.of(records), max(arrivals, default=0.0))
                own = SampleFigures(hits, ttft) if sample.sampled else None  # a lighter load's: kept apart
                # A sample's bound (TrialForecast.slowest_s) where each request is sent on its own arrival: Poisson
                # with no cap on requests in flight, one request a session (a later turn waits for the one before)
                single = len({r.session_id for r in everything}) == len(everything)
                own_pace = w.load.kind == "poisson" and not w.load.max_concurrency and single
                last = max(arrivals) if arrivals and own_pace else None
                trials.append(TrialForecast(arm, w.name, len(everything), len(sample.rows), wall,
                                            None if own else hits, None if own else ttft, failed, own,
                                            _slowest_s(records, wall, last)))
    return Forecast(cfg.engine.gpu, cfg.model.name, cfg.engine.tp, tuple(trials), cfg.repeats, tuple(sampled),
                    known_error(), time.monotonic() - started, tuple(whole), page.tokens, page.set_by,
                    page.cache_model, page.unknown)


def run_forecast(cfg: RunCfg, resolved: dict[str, Any], traces: Mapping[str, Sequence[TraceRow]]) -> dict[str, Any]:
    """What a GPU run keeps (forecast.json, bundle ``forecast``): the forecast, or why there is none. The CPU engines
    (reference, and the simulator itself) keep none: their run is the model."""
    try:
        return forecast_run(cfg, resolved, traces=traces).to_json()
    except ConfigError as exc:
        return {"none": str(exc)}
