"""The noise floor of an A/A run (+experiment=noise): the same arm twice, so every difference is noise.

Per workload and metric, on each clock a run has (wall; the reference server's modelled clock), from the per-repeat
pairs of the baseline arm and each other arm: the sd of the per-repeat change (what one repeat's verdict wobbles
by), the half-width of this run's paired t-interval, and the minimum detectable effect at 80% power. These are
what a tolerance must exceed on this machine and engine for a pass to be possible at this many repeats.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hybridbench.metrics.decision import mde
from hybridbench.metrics.stats import paired_relative_change

__all__ = ["NOISE_METRICS", "NoiseFloor", "noise_floor"]

# (summary key, label): each on the wall clock and, where the server reports one, the modelled clock
NOISE_METRICS = (
    ("mean_ttft_ms", "mean TTFT (wall)"),
    ("modelled_mean_ttft_ms", "mean TTFT (modelled)"),
    ("request_throughput", "request throughput (wall)"),
    ("modelled_request_throughput", "request throughput (modelled)"),
    ("input_throughput", "input throughput (wall)"),
    ("modelled_input_throughput", "input throughput (modelled)"),
)


@dataclass(frozen=True, slots=True)
class NoiseFloor:
    workload: str
    arm: str  # the copy compared with the baseline arm
    metric: str  # a summary key
    label: str
    repeats: int  # paired repeats
    estimate: float  # mean per-repeat relative change (an A/A's bias)
    sd: float  # sd of the per-repeat relative change
    half_width: float  # of the paired t-interval at the run's confidence
    mde: float  # 80% power


def noise_floor(trials: Sequence[Mapping[str, Any]], *, baseline: str, confidence: float) -> list[NoiseFloor]:
    """From bundle.json's ``trials`` (each with ``workload``, ``arm``, ``repeat`` and ``summary``)."""
    by: dict[tuple[str, str], dict[int, Mapping[str, Any]]] = {}
    for t in trials:
        summary = t.get("summary")
        if isinstance(summary, Mapping):
            by.setdefault((str(t["workload"]), str(t["arm"])), {})[int(t["repeat"])] = summary
    out = []
    for (workload, arm), cand in sorted(by.items()):
        base = by.get((workload, baseline))
        if arm == baseline or base is None:
            continue
        repeats = sorted(set(base) & set(cand))
        for key, label in NOISE_METRICS:
            b = [float(base[r].get(key, math.nan)) for r in repeats]
            c = [float(cand[r].get(key, math.nan)) for r in repeats]
            ch = paired_relative_change(b, c, confidence=confidence)
            if not math.isfinite(ch.high):
                continue
            out.append(NoiseFloor(workload, arm, key, label, ch.n, ch.estimate, ch.se * math.sqrt(ch.n),
                                  (ch.high - ch.low) / 2, mde(ch, confidence=confidence)))
    return out

