"""The checks of docs/reference/checks.md that need more than request records: ``kl`` and ``prefill_overhead``.

``kl`` scores the KL probe's samples (hybridbench/probes/kl_requests.py) exactly as SGLang's KL tests do:
samples whose probed request did not hit the cache are left out of the mean, and more than half of
them must hit, otherwise a cache that silently never hits would pass. A pass also needs every planned sample
measured (``checks.kl_samples`` per variant for each trial that ran): a trial holding fewer distinct prompts of
>= 8 tokens probes fewer, and one hit of the 4 planned is "more than half" of 1, not evidence.
``prefill_overhead`` is SGLang PR #11214's measurement: what the radix cache costs when nothing is reused, as the
input-token throughput of a cache-on arm over the ``disabled`` arm's (the PR measured 0.88 on Qwen3-Next-80B, TP8).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

from hybridbench.checks.base import CheckInput, CheckResult, Status
from hybridbench.checks.builtin import repeat_judgement, timing_key
from hybridbench.records.kl import KlSample
from hybridbench.records.schema import SAMPLES_WRITTEN
from hybridbench.records.timed import untimed, untimed_detail

__all__ = ["kl", "prefill_overhead"]


def _planned(inp: CheckInput, workload: str, arm: str, samples: Sequence[KlSample]) -> tuple[int, int]:
    """How many samples of each variant the probe was to write for (workload, arm), and over how many trials: the
    trials that ran (the probe runs after a trial's load ends), and any that wrote samples before it ended."""
    probed = {t.trial_id for t in inp.trials.get((workload, arm), []) if t.state == "ran"}
    probed |= {s.trial_id for s in samples}
    return inp.cfg.kl_samples * len(probed), len(probed)


def _kl_verdict(samples: list[KlSample], threshold: float, min_hit_fraction: float,
                planned: tuple[int, int]) -> tuple[Status, float | None, str]:
    if all(s.skipped for s in samples):
        return "skip", None, samples[0].skipped
    samples = [s for s in samples if not s.skipped]
    if unmeasured := [s for s in samples if s.unmeasured]:  # a hit was possible: no verdict either way
        return "inconclusive", None, (f"{len(unmeasured)} of {len(samples)} probe(s) unmeasured: "
                                      f"{unmeasured[0].unmeasured}")
    failed = [s for s in samples if s.error]
    if failed:
        return "fail", None, f"{len(failed)} of {len(samples)} probe(s) failed: {failed[0].error}"
    hits = [s for s in samples if s.hit]
    if len(hits) <= min_hit_fraction * len(samples):
        return "fail", None, (f"only {len(hits)} of {len(samples)} probe(s) hit the cache "
                              f"(need more than {min_hit_fraction:.0%}); KL is unmeasured")
    values = [v for s in hits if (v := s.kl) is not None]
    if len(values) < len(hits):  # a hit whose tokens carry no logprobs measured nothing
        return "fail", None, f"{len(hits) - len(values)} of {len(hits)} hit(s) carry no logprobs; KL is unmeasured"
    mean = sum(values) / len(values)
    measured = f"mean k3 {mean:.3g} over {len(hits)} hit(s) of {len(samples)}, max {max(values):.3g}"
    want, trials = planned
    if mean < threshold and len(samples) < want:  # a divergence fails on the samples there are; a pass needs all
        return "inconclusive", None, (
            f"{measured}, but {len(samples)} of {want} planned sample(s) measured (checks.kl_samples={want // trials} "
            f"x {trials} trial(s); a trial with fewer distinct prompts of >= 8 tokens probes fewer): too few to pass")
    status: Status = "pass" if mean < threshold else "fail"
    return status, mean, measured


def kl(inp: CheckInput) -> Sequence[CheckResult]:
    """Mean k3 over the probes that hit below the engine's threshold, more than half of them hitting; a pass needs
    every planned sample measured (checks.kl_samples per variant for each trial that ran), else inconclusive; every
    planned variant (checks.kl_variants) has a row, inconclusive where none of its samples is there."""
    groups: dict[tuple[str, str, str], list[KlSample]] = defaultdict(list)
    for (workload, arm), samples in inp.kl_samples.items():
        for s in samples:
            groups[(workload, arm, s.variant)].append(s)
    out = []
    for (workload, arm), _ in sorted(inp.records.items()):
        if arm in inp.cache_off:
            continue
        seen = {v for (w, a, v) in groups if (w, a) == (workload, arm)}
        if not seen:
            # No sample, so the KL the check asks about is unmeasured, never a pass by omission (nor a skip beside
            # which the run passes): the probe ran and found nothing to probe (its trial snapshots count what it
            # wrote), or it never ran (a re-scoring that enables kl; the plan refuses an engine it cannot serve).
            ran = any(isinstance(w := s.get(SAMPLES_WRITTEN), dict) and "kl" in w
                      for s in inp.snapshots.get((workload, arm), []))
            out.append(CheckResult("kl", workload, arm, "inconclusive", None, f"mean k3 < {inp.kl_threshold:g}",
                                   "no KL samples: no prompt had >= 8 tokens" if ran else
                                   "no KL samples: the kl probe did not run for this arm, or no trial counted what it "
                                   "wrote (kl not enabled when the run was made, its trials ended before the probe, or "
                                   "a run saved before trials counted them)"))
            continue
        planned = _planned(inp, workload, arm, inp.kl_samples.get((workload, arm), []))
        # Every planned variant has a row: one whose samples are all missing (the probe stopped after the others)
        # had none, and the run passed on the rest.
        for variant in sorted(seen | set(inp.cfg.kl_variants)):
            if not (got := groups.get((workload, arm, variant))):
                out.append(CheckResult("kl", f"{workload}/{variant}", arm, "inconclusive", None,
                                       f"mean k3 < {inp.kl_threshold:g}",
                                       f"0 of {planned[0]} planned sample(s) of the {variant} probe measured "
                                       "(checks.kl_variants): its KL is unmeasured"))
                continue
            status, value, detail = _kl_verdict(got, inp.kl_threshold, inp.cfg.kl_min_hit_fraction, planned)
            out.append(CheckResult("kl", f"{workload}/{variant}", arm, status, value,
                                   f"mean k3 < {inp.kl_threshold:g}", detail))
    return out


def prefill_overhead(inp: CheckInput) -> Sequence[CheckResult]:
    """Pass when the whole interval of the ratio is at or above the floor, fail when wholly below, else
    inconclusive (one repeat included: no interval)."""
    floor = inp.cfg.min_prefill_throughput_ratio
    key = timing_key(inp, "input_throughput")
    expected = f"input throughput / disabled's >= {floor:.2f}"
    out = []
    off = next((a for a in inp.arms if a in inp.cache_off), None)  # the radix-off baseline, from the plan's specs
    for workload in inp.workloads:
        base = [float(s.get(key, math.nan)) for s in inp.trial_summaries.get((workload, off), [])] if off else []
        for arm in inp.arms:
            if arm in inp.cache_off:
                continue
            if not base:  # no cache-off arm (refused at plan time), or its trials measured nothing
                out.append(CheckResult("prefill_overhead", workload, arm, "inconclusive", None, expected,
                                       "no cache-off arm's input throughput to compare with" if off else
                                       "the run has no cache-off (`disabled`) arm to compare with"))
                continue
            if floor <= 0:  # a ratio is never below 0: such a floor passes anything, so it is said, not passed
                out.append(CheckResult("prefill_overhead", workload, arm, "skip", None, "a ratio floor",
                                       "no floor set (checks.min_prefill_throughput_ratio=0), so not judged"))
                continue
            unseen = [(side, bad) for side, a in (("baseline", off or ""), ("candidate", arm))
                      if (bad := untimed(inp.records.get((workload, a), [])))]
            if unseen:  # completed records with no believable end time: the throughputs are unknown
                out.append(CheckResult("prefill_overhead", workload, arm, "inconclusive", None, expected,
                                       "; ".join(untimed_detail(bad, who=side) for side, bad in unseen)))
                continue
            cand = [float(s.get(key, math.nan)) for s in inp.trial_summaries.get((workload, arm), [])]
            # The ratio is 1 + the change: judged on the change against floor - 1, shown as a ratio.
            out.append(repeat_judgement("prefill_overhead", workload, arm, inp, base=base, cand=cand, limit=floor - 1,
                                        worse="below", expected=expected, offset=1.0, fmt="{:.3f}"))
    return out
