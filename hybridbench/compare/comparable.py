"""Whether two saved runs may be compared at all: the same engine kind, model, GPUs, traces, load and sizing.

Anything else is refused with the difference named (exit 2), never silently compared; what only one run has is
returned in words.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hybridbench.compare.runs import SavedRun
from hybridbench.config.comparable_keys import flatten, must_match, with_defaults
from hybridbench.config.gpu_kind import gpu_kind
from hybridbench.config.schema import SERVING_ENGINES
from hybridbench.errors import ConfigError
from hybridbench.plan.types import MODELLED_ENGINES

__all__ = ["check_comparable", "config_changes", "other_cpu", "planted_in_baseline", "unknown_gpus"]


def config_changes(base: Mapping[str, Any], candidate: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """Every resolved-config key whose value differs (what the pull request's run changed, e.g. engine.python)."""
    a, b = with_defaults(flatten(base)), with_defaults(flatten(candidate))  # an older run lacks the newer keys
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def _gpu_text(names: Sequence[str]) -> str:
    return ", ".join(f"{names.count(n)}x {n}" for n in sorted(set(names)))


def check_comparable(base: SavedRun, cand: SavedRun) -> list[str]:
    if base.engine != cand.engine:
        raise ConfigError(f"not comparable: engine {base.engine!r} (baseline) vs {cand.engine!r} (candidate)")
    if base.model != cand.model:
        raise ConfigError(f"not comparable: model {base.model!r} (baseline) vs {cand.model!r} (candidate)")
    b_gpus, c_gpus = base.gpus, cand.gpus
    if b_gpus and c_gpus and sorted(b_gpus) != sorted(c_gpus):  # engine.gpu is a label; these are what ran
        raise ConfigError(f"not comparable: the baseline ran on {_gpu_text(b_gpus)} and the candidate on "
                          f"{_gpu_text(c_gpus)} (nvidia-smi's names; the same GPUs are what make two builds "
                          "comparable)")
    for name in sorted(set(base.workload_digests) & set(cand.workload_digests)):
        b, c = base.workload_digests[name], cand.workload_digests[name]
        if b.argv != c.argv or (b.trace and c.trace and b.trace != c.trace):
            raise ConfigError(f"not comparable: workload {name!r} sent different requests in the two runs "
                              "(different trace: seed, parameters or scale changed)")
    for key, a, b in config_changes(base.config, cand.config):
        if must_match(key):  # the load, and the server's sizing (hybridbench.config.comparable_keys)
            raise ConfigError(f"not comparable: {key} is {a!r} in the baseline and {b!r} in the candidate "
                              "(the same load on the same sizing is what makes two builds comparable)")
    notes = [f"workload {w!r} only in the {side} run"
             for side, mine, other in (("baseline", base, cand), ("candidate", cand, base))
             for w in sorted(set(mine.workload_digests) - set(other.workload_digests))]
    notes += [f"arm {a!r} only in the {side} run"
              for side, mine, other in (("baseline", base, cand), ("candidate", cand, base))
              for a in mine.arms if a not in other.arms]
    return notes


def _served_on_cpu(run: SavedRun) -> bool:
    engine = run.config.get("engine")
    return isinstance(engine, dict) and gpu_kind(engine.get("gpu") or "") == "cpu"  # "CPU" saved before normalising


def unknown_gpus(base: SavedRun, cand: SavedRun) -> str:
    """Why the hardware of a serving engine's two runs cannot be compared ("" when it can): one run names its GPUs and
    the other does not (no bundle.json, or one without nvidia-smi's names), or neither does, so the same label may
    hide other hardware. Served on the CPU (``engine.gpu=cpu``, a vLLM CPU build) the CPU is the hardware: both must
    record the same one."""
    if base.engine not in SERVING_ENGINES or (base.gpus and cand.gpus):
        return ""
    if not base.gpus and not cand.gpus:
        if _served_on_cpu(base) and _served_on_cpu(cand):
            if base.cpu and base.cpu == cand.cpu:
                return ""
            return (f"both were served on a CPU, the baseline's {base.cpu or 'unrecorded'} and the candidate's "
                    f"{cand.cpu or 'unrecorded'} (provenance.machine): whether both ran on the same CPU is unknown")
        return ("neither run names its GPUs (no provenance.engine.extra.gpus in bundle.json): whether both ran on the "
                "same GPUs is unknown")
    (known, run), (unnamed, other) = sorted((("baseline", base), ("candidate", cand)), key=lambda x: not x[1].gpus)
    return (f"the {unnamed} names no GPUs ({other.path / 'bundle.json'}: no provenance.engine.extra.gpus) and the "
            f"{known} ran on {_gpu_text(run.gpus)}: whether both ran on the same GPUs is unknown")


def other_cpu(base: SavedRun, cand: SavedRun, clock: str) -> str:
    """Why two runs' timings on a CPU's wall clock cannot be compared ("" when they can): the reference server timed
    by the wall clock (``clock``: the clock both judged) measures its host, so both must record the same CPU model
    and core count (bundle.json's provenance.machine; older bundles and unfinished runs record none). GPU engines are
    held to their GPUs instead; modelled clocks (the simulator, the replayer, the reference's cost model) to none."""
    if base.engine in SERVING_ENGINES or base.engine in MODELLED_ENGINES or clock != "wall":
        return ""
    if base.cpu and base.cpu == cand.cpu:
        return ""
    unknown = [side for side, run in (("baseline", base), ("candidate", cand)) if not run.cpu]
    if unknown:
        return (f"the {' and the '.join(unknown)} recorded no host CPU (no provenance.machine in bundle.json): "
                "wall-clock timings of two CPUs that may differ decide nothing")
    return (f"the baseline was timed on {base.cpu} and the candidate on {cand.cpu}: wall-clock timings of two CPUs "
            "decide nothing")


def _planted(run: SavedRun, arm: str) -> float:
    engine = run.config.get("engine")
    slowdown = engine.get("prefill_slowdown") if isinstance(engine, dict) else None
    value = slowdown.get(arm) if isinstance(slowdown, dict) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def planted_in_baseline(base: SavedRun, cand: SavedRun, arm: str) -> str:
    """Why ``arm``'s timings cannot pass the candidate ("" when they can): the baseline's server for it was slowed on
    purpose (``engine.prefill_slowdown``, the noise experiment's planted regression) more than the candidate's, so
    a slower build read as no slower. A candidate slowed on purpose is compared as ever: that is what planting tests."""
    b, c = _planted(base, arm), _planted(cand, arm)
    if b <= c:
        return ""
    return (f"the baseline's {arm} server was slowed on purpose (engine.prefill_slowdown {b:g}, the candidate's "
            f"{c:g}): its timings are not the build's, so they pass nothing")
