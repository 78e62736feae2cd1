"""Seeded sampling primitives shared by the generators: lengths, token ids, think times.

Every function takes the caller's ``random.Random``; nothing here touches the global RNG, so a
generator's output is a pure function of its parameters and seed.
"""

from __future__ import annotations

import math
import random
from array import array
from typing import Any

import numpy as np

from workloads.errors import WorkloadError, require

__all__ = [
    "MAX_SEQUENCE_TOKENS",
    "MAX_VOCAB",
    "clipped_lognormal",
    "compute_random_lens",
    "distinct_tokens",
    "poisson",
    "random_token_array",
    "random_tokens",
]

MAX_VOCAB = 2**32  # token ids are packed as uint32 by random_tokens and by the stats prefix tree
# Longer than any model's context by far (the longest serve 1-10M tokens); getrandbits overflows past 2**26 tokens.
MAX_SEQUENCE_TOKENS = 2**24


def compute_random_lens(full_len: int, range_ratio: float, num: int, rng: random.Random) -> list[int]:
    """SGLang's ``compute_random_lens``: uniform ints in ``[max(int(full_len*range_ratio), 1), full_len]``.

    ``range_ratio=1.0`` gives exactly ``full_len``; ``full_len <= 0`` gives zeros (as in SGLang).
    """
    require(0.0 <= range_ratio <= 1.0, f"range ratio must be in [0, 1], got {range_ratio}")
    if full_len <= 0:
        return [0] * num
    low = max(int(full_len * range_ratio), 1)
    if low >= full_len:
        return [full_len] * num
    return [rng.randint(low, full_len) for _ in range(num)]


def _draw(rng: random.Random, n: int, vocab_size: int) -> Any:
    """``n`` ids in ``[0, vocab_size)`` as a numpy array: one ``getrandbits`` call, its little-endian 32-bit words
    each taken modulo ``vocab_size`` (numpy does the modulo: a Python int per id cost most of a plan's time)."""
    if n > MAX_SEQUENCE_TOKENS:
        raise WorkloadError(f"a sequence of {n} tokens is longer than any model's context "
                            f"(at most {MAX_SEQUENCE_TOKENS}): check the workload's lengths")
    # numpy's modulo by 0 gives 0 with a warning where Python's raised: every caller validates, this keeps it so
    require(1 <= vocab_size <= MAX_VOCAB, f"vocab size must be in [1, 2**32], got {vocab_size}")
    words = np.frombuffer(rng.getrandbits(32 * n).to_bytes(4 * n, "little"), "<u4")
    return words % np.uint32(vocab_size) if vocab_size < MAX_VOCAB else words


def random_tokens(rng: random.Random, n: int, vocab_size: int) -> tuple[int, ...]:
    """``n`` token ids drawn uniformly from ``[0, vocab_size)`` (one ``getrandbits`` call)."""
    return tuple(_draw(rng, n, vocab_size).tolist()) if n > 0 else ()


def random_token_array(rng: random.Random, n: int, vocab_size: int) -> array[int]:
    """``random_tokens`` as an ``array("I")``: the same ids from the same draw, with no Python int per id."""
    out: array[int] = array("I")
    if n > 0:
        out.frombytes(_draw(rng, n, vocab_size).astype(np.uint32).tobytes())
    return out


def distinct_tokens(rng: random.Random, k: int, vocab_size: int, what: str) -> list[int]:
    """``k`` pairwise-distinct token ids; they make sequences that must diverge actually diverge."""
    if k > vocab_size:
        raise WorkloadError(f"vocab size {vocab_size} is too small for {k} distinct {what}")
    return rng.sample(range(vocab_size), k)


def clipped_lognormal(rng: random.Random, mean: float, sigma: float, low: int, high: int) -> int:
    """A log-normal integer with the given arithmetic ``mean``, clipped to ``[low, high]``."""
    if sigma <= 0.0:
        return min(max(round(mean), low), high)
    mu = math.log(mean) - sigma * sigma / 2.0
    return min(max(round(rng.lognormvariate(mu, sigma)), low), high)


def poisson(rng: random.Random, lam: float) -> int:
    """A Poisson(lam) integer (numpy's ``np.random.poisson`` semantics, as Marconi's think time uses).

    Sequential inversion; exact and fast for the small means used here (``art`` of 5-10 s).
    """
    require(0.0 <= lam <= 500.0, f"Poisson mean must be in [0, 500], got {lam}")
    u = rng.random()
    k = 0
    p = math.exp(-lam)
    cdf = p
    while u > cdf:
        k += 1
        p *= lam / k
        cdf += p
        if p == 0.0 and cdf < u:  # floating-point tail exhausted
            break
    return k
