"""One-shot α tuning: the forked replay must choose what 21 independent replays choose."""

from __future__ import annotations

import random

import pytest
from toy_model import TOY

from reference_impl.marconi import ALPHA_GRID, MarconiCache


def trace(seed: int, n: int = 120) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    rng = random.Random(seed)
    system = tuple(rng.randrange(3, 300) for _ in range(30))
    hist: dict[int, tuple[int, ...]] = {}
    out = []
    for _ in range(n):
        s = rng.randrange(10)
        base = hist.get(s, system + (s + 1000,) * rng.randint(1, 40))
        inp = base + tuple(rng.randrange(3, 300) for _ in range(rng.randint(1, 20)))
        outp = tuple(rng.randrange(3, 300) for _ in range(rng.randint(1, 10)))
        hist[s] = inp + outp if rng.random() < 0.8 else base  # sometimes branch off history
        out.append((inp, outp))
    return out


def brute_force_alpha(reqs: list[tuple[tuple[int, ...], tuple[int, ...]]], cap: int, w: int, last: int) -> float:
    best, best_score = None, -1
    for alpha in ALPHA_GRID:
        c = MarconiCache(cap, TOY, eviction="marconi", eff_weight=alpha)
        reused = []
        for inp, outp in reqs[:w]:
            reused.append(c.lookup(inp))
            c.admit(inp, outp)
        score = sum(TOY.prefill_flops_int(x) for x in reused[-last:])
        if score > best_score:
            best, best_score = alpha, score
    assert best is not None
    return best


@pytest.mark.parametrize(("seed", "cap"), [(1, 1500), (2, 2500), (3, 4000)])
def test_tuned_alpha_equals_independent_replays(seed: int, cap: int) -> None:
    reqs = trace(seed)
    cache = MarconiCache(cap, TOY, eviction="marconi", bootstrap_multiplier=3, tuning_interval=25)
    for inp, outp in reqs:
        cache.lookup(inp)
        cache.admit(inp, outp)
    notes = dict(cache.stats().notes)
    w = int(notes["bootstrap_window"])
    assert w <= len(reqs) and notes["tuned_at_request"] == w
    assert notes["alpha"] == brute_force_alpha(reqs, cap, w, 25)


def test_alpha_stays_zero_when_the_window_is_never_reached() -> None:
    reqs = trace(4, 60)
    cache = MarconiCache(2000, TOY, eviction="marconi", bootstrap_multiplier=1000)
    for inp, outp in reqs:
        cache.lookup(inp)
        cache.admit(inp, outp)
    notes = dict(cache.stats().notes)
    assert notes["alpha"] == 0.0 and "tuned_at_request" not in notes


def test_fixed_alpha_is_never_tuned() -> None:
    cache = MarconiCache(1500, TOY, eviction="marconi", eff_weight=0.7, bootstrap_multiplier=1)
    for inp, outp in trace(5):
        cache.lookup(inp)
        cache.admit(inp, outp)
    assert dict(cache.stats().notes)["alpha"] == 0.7


def test_grid_matches_marconis_literals() -> None:
    assert ALPHA_GRID == (
        0,
        0.1,
        0.2,
        0.3,
        0.4,
        0.5,
        0.6,
        0.7,
        0.8,
        0.9,
        1.0,
        1.1,
        1.2,
        1.3,
        1.4,
        1.5,
        1.6,
        1.7,
        1.8,
        1.9,
        2.0,
    )
