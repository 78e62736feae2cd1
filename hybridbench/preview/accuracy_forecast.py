"""The accuracy probe's passes in the forecast: evalscope's questions simulated as the load they are on the server.

After an arm's last trial evalscope asks every question of each set (hybridbench/probes/accuracy.py): the
cache-off arm once, every cache-on arm twice after a flush (cold, then warm: whole-prompt hits). On a GPU these
passes, not the short warm-up trials, are most of the run: gsm8k's 1,319 questions, each answered in up to
``checks.accuracy_max_tokens`` tokens, at ``checks.accuracy_batch_size`` in flight. Each pass is simulated as what it
sends: a closed loop of ``batch_size`` over one prefix group per set (the few-shot examples every prompt starts
with, then its question; lengths estimated from the files: hybridbench/probes/accuracy_data.py), every answer run
to ``max_tokens``. An upper bound: a model stops early when it has answered, which the simulator cannot know. A
pass past ``checks.accuracy_timeout_s`` is cut off there, and the accuracy check fails that pass (no answers to judge).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from hybridbench.config.schema import LoadCfg, RunCfg, WorkloadCfg
from hybridbench.errors import ConfigError
from hybridbench.plan.arms import plan_arms
from hybridbench.preview.forecast import DEFAULT_MAX_REQUESTS, forecast_run
from hybridbench.probes.accuracy_data import DatasetShape, dataset_shapes

__all__ = ["AccuracyForecast", "AccuracyPass", "forecast_accuracy", "pass_timeout_warnings", "with_accuracy"]


@dataclass(frozen=True, slots=True)
class AccuracyPass:
    arm: str
    pass_: str  # "cold" (after the flush) or "warm" (the same questions again: whole-prompt hits)
    wall_s: float  # every set, one after another, each answer run to max_tokens
    slowest_s: float | None  # the longest a question waits from its send to its last token
    failed: int = 0  # simulated questions the modelled server refused: their time is not in wall_s (no bound)


@dataclass(frozen=True, slots=True)
class AccuracyForecast:
    datasets: tuple[DatasetShape, ...]
    max_tokens: int
    batch_size: int
    timeout_s: float
    passes: tuple[AccuracyPass, ...]
    compute_s: float = 0.0  # how long this forecast took

    @property
    def total_s(self) -> float:
        return sum(p.wall_s for p in self.passes)

    def to_json(self) -> dict[str, Any]:
        return {"datasets": [asdict(d) for d in self.datasets], "max_tokens": self.max_tokens,
                "batch_size": self.batch_size, "timeout_s": self.timeout_s, "total_s": self.total_s,
                "passes": [asdict(p) for p in self.passes], "compute_s": self.compute_s}


def _pass_cfg(cfg: RunCfg, shapes: Sequence[DatasetShape], arms: list[str], *, warm: bool) -> RunCfg:
    """The run's config with its workloads replaced by one pass's questions (its server, pools and arms kept)."""
    out = copy.deepcopy(cfg)
    c = cfg.checks
    out.workloads = {
        f"accuracy_{s.name}": WorkloadCfg(kind="gsp", params={
            "num_groups": 1, "prompts_per_group": s.questions, "system_prompt_len": s.shared_tokens,
            "question_len": s.question_tokens, "output_len": c.accuracy_max_tokens, "ordered": True})
        for s in shapes}
    # warm: the cold pass's prompts are in the cache; prime sends them once, unrecorded, first
    out.load = LoadCfg(kind="closed", max_concurrency=c.accuracy_batch_size, prime=warm)
    out.arms = arms
    out.repeats, out.repeats_max = 1, 0
    out.checks.baseline_arm = arms[0]
    return out


# What the simulator decodes per pass at most: tokens (a sample's questions times max_tokens) and decode steps (those
# over the questions in flight). The GPU sizing's pass (400 sampled questions, 1,024 tokens, 64 in flight) takes about
# 0.3 s; at 1 in flight and 32,768 tokens a question, 400 questions did not end in five minutes, and 512 questions
# of 8,192 tokens at 256 in flight (past the KV pool: retractions) took 34 s a pass.
DECODED_TOKENS = 1_000_000
DECODE_STEPS = 100_000
# Past this many tokens even the smallest sample (two questions per slot of the loop) is not simulated: no forecast.
MOST_TOKENS = 2 * DECODED_TOKENS


def _sample_size(cfg: RunCfg, shapes: Sequence[DatasetShape], max_requests: int) -> int:
    """Questions a pass's sample may hold (a closed loop's sample keeps two per slot all the same); ConfigError when
    even that is past :data:`MOST_TOKENS` (the plan then says the passes are not forecast, and why)."""
    c = cfg.checks
    tokens, batch = max(1, c.accuracy_max_tokens), c.accuracy_batch_size
    questions = max(min(s.questions, 2 * batch) for s in shapes)
    if questions * tokens > MOST_TOKENS:
        raise ConfigError(f"a pass's smallest sample ({questions:,} questions in a loop of {batch}, up to {tokens:,} "
                          f"tokens each) is {questions * tokens:,} decoded tokens, past the {MOST_TOKENS:,} the "
                          "forecast simulates")
    return max(1, min(max_requests, DECODED_TOKENS // tokens, DECODE_STEPS * batch // tokens))


def forecast_accuracy(cfg: RunCfg, resolved: dict[str, Any], *,
                      max_requests: int = DEFAULT_MAX_REQUESTS) -> AccuracyForecast:
    """Every pass of every arm; ConfigError where the simulator cannot model the run (as for its trials)."""
    started = time.monotonic()
    shapes = dataset_shapes(cfg)
    sample = _sample_size(cfg, shapes, max_requests)
    specs = plan_arms(list(cfg.arms), cfg.arm)
    cached = [s.name for s in specs if s.cache_on]
    walls: dict[tuple[str, str], tuple[float, float | None, int]] = {}
    for pass_, arms in (("cold", [s.name for s in specs]), ("warm", cached)):
        if not arms:
            continue
        fc = forecast_run(_pass_cfg(cfg, shapes, arms, warm=pass_ == "warm"), resolved, max_requests=sample)
        for arm in arms:
            mine = [t for t in fc.trials if t.arm == arm]
            slowest = [t.slowest_s for t in mine if t.slowest_s is not None]
            walls[(arm, pass_)] = (sum(t.wall_s for t in mine), max(slowest) if slowest else None,
                                   sum(t.failed for t in mine))
    passes = tuple(AccuracyPass(s.name, p, *walls[(s.name, p)])
                   for s in specs for p in (("cold", "warm") if s.cache_on else ("cold",)))
    c = cfg.checks
    return AccuracyForecast(shapes, c.accuracy_max_tokens, c.accuracy_batch_size, c.accuracy_timeout_s, passes,
                            time.monotonic() - started)


def pass_timeout_warnings(fc: dict[str, Any]) -> list[str]:
    """A warning naming every pass forecast past checks.accuracy_timeout_s, and one naming every pass whose simulated
    questions the modelled server refused (its time is then no bound) (``fc``: AccuracyForecast.to_json())."""
    out = []
    if refused := [p for p in fc["passes"] if p.get("failed")]:
        which = ", ".join(f"{p['arm']} {p['pass_']}" for p in refused)
        out.append(f"forecast: {sum(p['failed'] for p in refused)} simulated questions of the accuracy probe's passes "
                   f"({which}) failed (longer than the pools this "
                   f"config fixes, with checks.accuracy_max_tokens={fc['max_tokens']}?): their times are no bound")
    late = [p for p in fc["passes"] if p["wall_s"] > fc["timeout_s"]]
    if not late:
        return out
    names = ", ".join(f"{p['arm']} {p['pass_']}" for p in late)
    return [*out, f"forecast: {len(late)} of the accuracy probe's {len(fc['passes'])} passes ({names}) take up to "
            f"{max(p['wall_s'] for p in late):.0f} s with every answer at checks.accuracy_max_tokens="
            f"{fc['max_tokens']}, past checks.accuracy_timeout_s={fc['timeout_s']:g}: each would be cut off and the "
            f"accuracy check fail it unjudged (raise checks.accuracy_batch_size or checks.accuracy_timeout_s)"]


def with_accuracy(fc: dict[str, Any], cfg: RunCfg, resolved: dict[str, Any], *,
                  max_requests: int = DEFAULT_MAX_REQUESTS) -> dict[str, Any]:
    """``fc`` (a forecast's JSON) with the accuracy probe's passes under ``accuracy`` when the run asks for them."""
    if "accuracy" not in cfg.checks.enabled or "none" in fc:
        return fc
    try:
        passes = forecast_accuracy(cfg, resolved, max_requests=max_requests).to_json()
    except ConfigError as exc:
        passes = {"none": str(exc)}
    return fc | {"accuracy": passes}
