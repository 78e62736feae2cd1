"""The correctness contract: a request served from a cache hit computes the logits of a cold prefill.

Each test drives the real engine core and the tiny model (no server) and compares the logits every
output token was sampled from with one cache-free prefill of ``prompt + output``. The fault tests
prove the comparison is sharp enough to catch a wrong state.
"""

from __future__ import annotations

import random

import pytest
import torch

from reference_impl.engine.config import EngineConfig
from reference_impl.model import HybridModel, ModelConfig
from reference_impl.model.offline import OfflineEngine, OfflineResult, cold_logits

TOL = 1e-4  # float32 rounding of differently shaped matmuls; a wrong state moves logits by > 1e-2

MODEL = HybridModel(ModelConfig())


def toks(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(300, 4096) for _ in range(n)]


def engine(cache: str = "extra_buffer", **kw: object) -> OfflineEngine:
    faults = {k: bool(kw.pop(k)) for k in ("branch_off_by_one", "stale_cow_source") if k in kw}
    cfg = dict(kv_tokens=8000, state_slots=40, cache=cache, chunked_prefill_size=2048, track_interval=64)
    cfg.update(kw)
    return OfflineEngine(EngineConfig(**cfg), MODEL, **faults)  # type: ignore[arg-type]


def max_diff(prompt: list[int], res: OfflineResult) -> float:
    return float((res.logits - cold_logits(MODEL, prompt, res.output)).abs().max())


def branching_run(eng: OfflineEngine, suffix: int = 256) -> list[tuple[int, float]]:
    """SGLang's PrefixCacheBranchingMixin: a 257-token prefix, three different suffixes, one after another."""
    rng = random.Random(0)
    prefix = toks(rng, 257)
    out = []
    for _ in range(3):
        prompt = prefix + toks(rng, suffix)
        res = eng.generate(prompt, 8)
        out.append((res.cached_tokens, max_diff(prompt, res)))
    return out


@pytest.mark.parametrize(("page", "expect"), [(1, 256), (4, 256), (128, 256)])
def test_branch_point_hit_equals_cold_prefill(page: int, expect: int) -> None:
    runs = branching_run(engine(page_size=page, track_interval=max(64, page)))
    assert [c for c, _ in runs] == [0, 0, expect]
    assert max(d for _, d in runs) < TOL


def test_no_buffer_continuation_hit_equals_cold_prefill() -> None:
    rng = random.Random(1)
    eng = engine("no_buffer", chunked_prefill_size=64)  # chunked: a state per chunk end, too
    first = toks(rng, 200)
    r1 = eng.generate(first, 12)
    second = first + r1.output + toks(rng, 40)
    r2 = eng.generate(second, 12)
    assert r2.cached_tokens == len(first) + len(r1.output) - 1  # the last sampled token never had KV
    assert max_diff(first, r1) < TOL and max_diff(second, r2) < TOL


def test_decode_hit_equals_cold_prefill() -> None:
    rng = random.Random(2)
    eng = engine(track_interval=64)
    first = toks(rng, 100)
    r1 = eng.generate(first, 150)  # decode tracks states at 128, 192
    second = first + r1.output + toks(rng, 30)
    r2 = eng.generate(second, 10)
    assert r2.cached_tokens == 192  # the last decode-tracked state, past the prompt's own 64
    assert max_diff(second, r2) < TOL


def test_concurrent_batch_and_retraction_keep_logits_exact() -> None:
    rng = random.Random(3)
    eng = engine(kv_tokens=650, state_slots=30, init_new_token_ratio=0.05, min_new_token_ratio=0.05)
    shared = toks(rng, 130)
    prompts = [shared + toks(rng, rng.randint(5, 90)) for _ in range(6)]
    for p in prompts:
        eng.submit(p, 60)
    results = eng.run()
    assert eng.core.counters.retractions > 0  # the small KV pool really forced retractions
    assert max(max_diff(p, r) for p, r in zip(prompts, results, strict=True)) < TOL


def test_host_tier_load_back_equals_cold_prefill() -> None:
    rng = random.Random(4)
    eng = engine(state_slots=10, kv_tokens=1200, host_kv_tokens=20_000, host_state_slots=64)
    base = toks(rng, 300)
    r0 = eng.generate(base, 4)
    for _ in range(4):  # other prompts push the first one's KV and state off the device
        eng.generate(toks(rng, 300), 4)
    prompt = base + r0.output[:-1] + toks(rng, 20)
    r = eng.generate(prompt, 8)
    assert eng.core.host is not None and eng.core.host.counters.load_backs > 0
    assert r.cached_tokens == 256
    assert max_diff(prompt, r) < TOL
    assert eng.executor.pool.copies > 0  # the load-back copied a real host tensor


@pytest.mark.parametrize("fault", ["branch_off_by_one", "stale_cow_source"])
def test_injected_state_faults_break_the_contract(fault: str) -> None:
    runs = branching_run(engine(**{fault: True}))
    assert [c for c, _ in runs] == [0, 0, 256]  # the bookkeeping cannot tell ...
    assert runs[0][1] < TOL and runs[1][1] < TOL
    assert runs[2][1] > 1e-2  # ... but the hit's logits are wrong


def test_cold_logits_differ_between_prompts() -> None:
    # Guards the contract's sharpness: the model's output really depends on the whole prompt.
    rng = random.Random(5)
    a = toks(rng, 50)
    b = [*a[:-40], *toks(rng, 40)]
    la, lb = cold_logits(MODEL, a, [1]), cold_logits(MODEL, b, [1])
    assert float((la - lb).abs().max()) > 0.1
    assert torch.isfinite(la).all()
