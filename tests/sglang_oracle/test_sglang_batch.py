"""An extend batch of several requests: the reference's engine core evicts the states SGLang's own code does.

``batch_oracle.py`` runs each release's own cache, pools and ``alloc_req_slots`` on CPU in its venv: every request
of the batch is matched (a hit takes its copy-on-write slot) and locked, then the batch's slots are allocated once.
0.5.9 and 0.5.16 evict until 3 states per request of the batch are free, a continuing chunked request included;
0.5.23 until the slots the batch still takes are. The reference forms the same batch in ``EngineCore.schedule``.
Compared: each request's cached tokens, the free state slots after the batch's allocation, and which seeded states
survived (how much of each seed a match still reuses). The ``kv-short`` cases then allocate the batch's KV in a pool the
seeds fill: SGLang allocates it once for the batch (``alloc_token_slots``), and 0.5.9 and 0.5.16 evict the whole
allocation when the pool is short, 0.5.23 the shortfall; there the free KV after it is compared too. No expected
number is written here: SGLang's answer is it.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import pytest
import warm_release
from oracle_client import env_python, env_ready

from reference_impl.engine.config import EngineConfig
from reference_impl.engine.core import EngineCore

pytestmark = pytest.mark.sglang
HERE = Path(__file__).resolve().parent
RELEASES = ("0.5.9", "0.5.16", "0.5.23")

# Twenty seeded 8-token prompts, each with its state, in a pool of 24 slots: 4 free, the oldest seeds evict first.
SEEDS = [[100 * (i + 1) + j for j in range(8)] for i in range(20)]
HITS = [SEEDS[5] + [1, 2, 3], SEEDS[12] + [4, 5]]  # extend 3 and 2 tokens past a seeded state
MISS = [9000 + j for j in range(10)]
CASES: dict[str, dict[str, Any]] = {
    "no_buffer-hits-and-a-miss": {"extra_buffer": False, "batch": [*HITS, MISS]},
    "extra_buffer-hits-and-a-miss": {"extra_buffer": True, "batch": [*HITS, MISS]},
    "no_buffer-misses": {"extra_buffer": False, "batch": [MISS, [9100 + j for j in range(12)]]},
    # The hit is on the least recently used state and comes after a miss: the batch's eviction must not take it.
    "no_buffer-miss-then-oldest-hit": {"extra_buffer": False, "batch": [MISS, SEEDS[0] + [1, 2]]},
    # A 24-token miss chunked at 16: its second chunk (8 tokens, ending the prompt) leads the batch and the two
    # hits fill the rest of the chunk budget. Its first chunk is shorter than a mamba chunk: nothing is tracked or
    # cached for it, so the batch's eviction is all that differs between the releases.
    "extra_buffer-chunked-and-hits": {"extra_buffer": True, "batch": HITS,
                                      "chunked": [9500 + j for j in range(24)], "chunked_first": 16},
    # The seeds fill the KV pool (room for every state: only the KV allocation evicts). The batch's 15 extend tokens
    # are one allocation: evicting it whole, or only its shortfall, or request by request, evicts different seeds.
    "no_buffer-kv-short-hits-and-a-miss": {"extra_buffer": False, "batch": [*HITS, MISS], "kv": True,
                                           "kv_size": 160, "mamba_size": 64},
    # 10 tokens free, two misses extend 22: the first fits alone, the batch does not.
    "no_buffer-kv-short-misses": {"extra_buffer": False, "batch": [MISS, [9100 + j for j in range(12)]], "kv": True,
                                  "kv_size": 170, "mamba_size": 64},
    # 9 tokens free: the hits fit, the miss after them does not.
    "extra_buffer-kv-short-hits-and-a-miss": {"extra_buffer": True, "batch": [*HITS, MISS], "kv": True,
                                              "kv_size": 169, "mamba_size": 64},
}


def case(name: str) -> dict[str, Any]:
    return {"kv_size": 2048, "mamba_size": 24, "seeds": SEEDS, **CASES[name]}


@functools.cache
def _sglang_all(release: str) -> dict[str, dict[str, Any]]:
    """Every case through the release's own code, in one run (a fork of the release's warm server,
    warm_release.py: importing SGLang was most of a fresh process's time)."""
    request = {"cases": {name: case(name) for name in CASES}}
    proc = warm_release.run(env_python(release), [str(HERE / "batch_oracle.py")], input=json.dumps(request),
                            timeout=600, env=warm_release.oracle_env(), cwd=HERE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results: dict[str, dict[str, Any]] = json.loads(proc.stdout)["cases"]
    return results


def sglang(release: str, name: str) -> dict[str, Any]:
    if not env_ready(release):
        # CI builds the venvs first: missing there is a failure, never a quiet skip.
        (pytest.fail if os.environ.get("CI") or os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG") else pytest.skip)(
            f"SGLang {release} venv missing: run bash tests/sglang_oracle/build_env.sh {release}")
    return _sglang_all(release)[name]


def reference(release: str, case: dict[str, Any]) -> dict[str, Any]:
    """The same seeds and requests through the reference's engine core: one ``schedule`` forms the batch."""
    chunked = case.get("chunked")
    core = EngineCore(EngineConfig(
        kv_tokens=case["kv_size"], state_slots=case["mamba_size"], semantics=release, schedule_policy="fcfs",
        cache="extra_buffer" if case["extra_buffer"] else "no_buffer",
        chunked_prefill_size=case.get("chunked_first", 8192)))
    tree = core.tree
    for seed in SEEDS:
        assert tree.kv_pool.alloc(len(seed))
        slot = tree.state_pool.alloc()
        assert slot is not None
        tree.insert(seed, slot)
    prompts = ([chunked] if chunked else []) + case["batch"]
    requests = [core.add_request(rid, prompt, 1) for rid, prompt in enumerate(prompts)]
    if chunked:
        first = core.schedule()
        assert first is not None and [i.request for i in first.items] == requests[:1]
        assert first.items[0].end == case["chunked_first"]
        core.complete(first, [])
    batch = core.schedule()
    assert batch is not None and [i.request for i in batch.items] == requests, "one batch holds every request"
    kv = {"kv_avail": tree.kv_pool.available} if case.get("kv") else {}
    return {"cached": [r.cached_tokens for r in requests], "mamba_avail": tree.state_pool.available,
            "tracking_slots": len(requests[-1].cached.track_slots) if requests[-1].cached else None,
            "seeds": [tree.match_prefix(seed).prefix_len for seed in SEEDS], **kv}


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("name", list(CASES))
def test_one_extend_batch_evicts_the_states_sglang_evicts(release: str, name: str) -> None:
    real = sglang(release, name)
    if case(name).get("kv"):
        assert 0 in real["seeds"] and real["mamba_avail"] > 0, "the KV allocation evicts, the slots do not"
    else:
        assert 0 in real["seeds"] or real["mamba_avail"] < 4, "the pool is tight enough that the batch must evict"
    assert reference(release, case(name)) == real
