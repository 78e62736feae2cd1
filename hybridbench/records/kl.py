"""One KL sample per probe: the logprobs of a cache-hit run and of a cache-free replay of the same tokens.

SGLang's KL tests (https://github.com/sgl-project/sglang) compare the logprob of every *sampled* token of a run that
hit the cache with the logprob the same token gets in a flushed, full prefill of prompt + output. The
k3 estimator ``mean(exp(r) - 1 - r)``, ``r = ref - hit``, estimates KL(hit || cache-free) from those
tokens alone; it is >= 0 and 0 only when every pair matches. Samples are saved raw, so the ``kl`` check
(and any later re-scoring with another threshold) works from the file alone.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from hybridbench.records.typed import checked_fields

__all__ = ["KL_VARIANTS", "KlSample", "k3", "kl_sample_from_json"]

KlVariant = Literal["prefill", "decode", "branch"]
# prefill: the same prompt again (a prefill hit); decode: turn 2 extends turn 1's prompt + output (a hit
# on decoded tokens); branch: a third suffix on a prefix two earlier requests diverged on (a branch point).
KL_VARIANTS: tuple[KlVariant, ...] = ("prefill", "decode", "branch")


def k3(ref: list[float], hit: list[float]) -> float:
    """``mean(exp(r) - 1 - r)`` with ``r = ref - hit`` per token (SGLang's ``compare_kl_divergence``)."""
    if len(ref) != len(hit) or not ref:
        raise ValueError(f"k3 needs two equally long, non-empty logprob lists (got {len(ref)} and {len(hit)})")
    try:
        return sum(math.expm1(r - h) - (r - h) for r, h in zip(ref, hit, strict=True)) / len(ref)
    except OverflowError:  # a logprob far from its twin (-1000 against 0): divergent, which the kl check fails
        return math.inf


@dataclass(slots=True)
class KlSample:
    trial_id: str
    arm: str
    workload: str
    repeat: int
    variant: KlVariant
    sample: int
    prompt_tokens: int  # the probed request's prompt
    cached_tokens: int | None  # what the server reported for the probed request
    min_cached: int  # the hit gate: the sample counts only when cached_tokens >= this
    hit_logprobs: list[float] = field(default_factory=list)  # sampled tokens, in the cache-hit run
    ref_logprobs: list[float] = field(default_factory=list)  # the same tokens, in the cache-free replay
    error: str = ""  # non-empty: the probe failed and the sample carries no logprobs
    skipped: str = ""  # non-empty: the arm cannot hit this variant by design (why), so nothing was sent
    # non-empty: the probe could not tell how to probe this variant on this server (why; e.g. where vLLM keeps decoded
    # states), so nothing was sent: a hit was possible, so the variant is inconclusive, never skipped
    unmeasured: str = ""

    @property
    def hit(self) -> bool:
        if self.error or self.skipped or self.unmeasured or self.cached_tokens is None:
            return False
        return self.cached_tokens >= self.min_cached

    @property
    def kl(self) -> float | None:
        if self.error or not self.hit_logprobs:
            return None
        return k3(self.ref_logprobs, self.hit_logprobs)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "kl": self.kl, "hit": self.hit}


_FIELDS = {f.name for f in fields(KlSample)}


def kl_sample_from_json(obj: dict[str, Any]) -> KlSample:
    sample = KlSample(**checked_fields(KlSample, obj, _FIELDS))
    if len(sample.hit_logprobs) != len(sample.ref_logprobs):  # k3 pairs them token by token
        raise TypeError(f"{len(sample.hit_logprobs)} hit_logprobs but {len(sample.ref_logprobs)} ref_logprobs")
    return sample

