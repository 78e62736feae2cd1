"""reference_impl against SGLang's own hybrid cache code (0.5.23 Rust and Python cores, 0.5.9), compared
after every operation: reply fields, pool sizes, evictable/protected counts and the whole tree.

Needs the venvs from ``tests/sglang_oracle/build_env.sh``; skipped with a reason when they are absent.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle_client import Driver, Op, check_sequence, env_ready, valid_ops

pytestmark = pytest.mark.sglang

# (version, tree-core backend) pairs; 0.5.9 has one implementation.
CONFIGS = [("0.5.23", "rust"), ("0.5.23", "python"), ("0.5.9", None)]
CONFIG_IDS = ["0.5.23-rust", "0.5.23-python", "0.5.9"]

_drivers: dict[str, Driver] = {}


@pytest.fixture(scope="module", autouse=True)
def _close_drivers() -> Iterator[None]:
    yield
    for d in _drivers.values():
        d.close()
    _drivers.clear()


def driver_for(version: str) -> Driver:
    if not env_ready(version):
        pytest.skip(f"SGLang {version} venv missing: run bash tests/sglang_oracle/build_env.sh {version}")
    if version not in _drivers:
        _drivers[version] = Driver(version)
    return _drivers[version]


def ins(*tokens: int) -> Op:
    return {"op": "insert", "tokens": list(tokens)}


def match(tokens: list[int], *, cow: bool = False, lock: bool = False) -> Op:
    return {"op": "match", "tokens": tokens, "cow": cow, "lock": lock}


def evict(num_tokens: int = 0, mamba_num: int = 0) -> Op:
    return {"op": "evict", "num_tokens": num_tokens, "mamba_num": mamba_num}


R = list(range(1, 8))

# SGLang's unit tests (research/sglang.md §8.1) and the oracle scenarios (sglang_cpu_oracle.md §3),
# as (name, kv_size, mamba_size, ops).
P = list(range(1000, 1257))  # 257 tokens
S1 = list(range(2000, 2256))
S2 = list(range(3000, 3256))
SCENARIOS: list[tuple[str, int, int, list[Op]]] = [
    (
        "test_mamba_radix_cache_1",
        128,
        20,
        [
            ins(1, 2, 3), ins(*R), ins(10, 11, 12), ins(1, 2, 3, 4, 5, 60, 70),
            evict(num_tokens=1), evict(mamba_num=1),
            match([1, 2, 3, 4, 5]), match([1, 2, 3, 4, 5, 60, 70]), match(R),
            evict(mamba_num=1), match([1, 2, 3, 4, 5, 60, 70]), match(R, cow=True),
        ],
    ),
    (
        "oracle_b_shared_prefix_branching",
        2048,
        20,
        [ins(*P, *S1), match(P + S2), match(P + S1), match([*P, *S1, 9, 9, 9])],
    ),
    (
        "test_mamba_lru_match_refreshes_only_used_node",
        128,
        20,
        [
            ins(1, 2, 3), ins(1, 2, 3, 4, 5, 6), ins(7, 8, 9), ins(7, 8, 9, 10, 11, 12),
            match([1, 2, 3, 4, 5, 6]), match([7, 8, 9, 10, 11, 12]), match([1, 2, 3, 4, 5, 6]),
            evict(mamba_num=1),
            match([1, 2, 3]), match([1, 2, 3, 4, 5, 6]), match([7, 8, 9]), match([7, 8, 9, 10, 11, 12]),
        ],
    ),
    (
        "test_mamba_evict_only_and_breaks_match",
        128,
        20,
        [ins(*R), ins(1, 2, 3), ins(1, 2, 3, 4, 5, 6, 7, 8, 9), evict(mamba_num=10), match(R), match([1, 2, 3])],
    ),
    ("test_mamba_evict_cascades_on_full_leaf", 128, 20, [ins(1, 2, 3), evict(mamba_num=1), match([1, 2, 3])]),
    (
        "test_mamba_cow_on_match",
        128,
        2,
        [ins(1, 2, 3), ins(4, 5, 6), match([1, 2, 3, 9], cow=True), match([4, 5, 6], cow=True), match([7], cow=True)],
    ),
    (
        "test_evict_iterative_tombstone_cleanup",
        128,
        20,
        [
            ins(1, 2), ins(1, 2, 3, 4), ins(1, 2, 3, 4, 5, 6), ins(9), match([9]),
            evict(mamba_num=2), evict(num_tokens=1), match([1, 2, 3, 4, 5, 6]), match([9]),
        ],
    ),
    (
        "test_evict_respects_lru_order",
        128,
        20,
        [ins(1, 2), ins(3, 4), ins(5, 6), match([1, 2]), evict(num_tokens=2), evict(num_tokens=2), match([1, 2])],
    ),
    (
        "locks_protect_paths",
        128,
        20,
        [
            ins(1, 2, 3), ins(1, 2, 3, 4, 5), ins(9, 9), match([1, 2, 3, 4, 5, 6], lock=True),
            evict(num_tokens=100, mamba_num=100), match([1, 2, 3, 4, 5]), match([1, 2, 3]),
            {"op": "unlock", "lock": 1}, evict(num_tokens=100),
        ],
    ),
    (
        "insert_existing_state_and_revive_tombstone",
        128,
        20,
        [
            ins(1, 2, 3), ins(1, 2, 3, 4), ins(1, 2, 3), evict(mamba_num=1), match([1, 2, 3]), ins(1, 2, 3),
            match([1, 2, 3]),
        ],
    ),
    (
        "pool_exhaustion_skips_inserts",
        16,
        3,
        [ins(1, 2, 3, 4, 5), ins(6, 7, 8, 9, 10), ins(11, 12, 13, 14, 15, 16, 17), ins(1, 2), ins(3), ins(4)],
    ),
]


@pytest.mark.parametrize(("version", "backend"), CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_sglang_scenario(version: str, backend: str | None, scenario: tuple[str, int, int, list[Op]]) -> None:
    _name, kv, mamba, ops = scenario
    check_sequence(driver_for(version), backend, kv, mamba, ops)


def test_oracle_b_reports_the_recorded_sglang_outputs() -> None:
    """Pin the driver itself to the outputs recorded in research/sglang_cpu_oracle.md §3(b)."""
    d = driver_for("0.5.23")
    d.call({"op": "init", "version": "0.5.23", "backend": "rust", "kv_size": 2048, "mamba_size": 20})
    assert d.call(ins(*P, *S1))["prefix_len"] == 0
    r = d.call(match(P + S2))
    assert (r["prefix_len"], r["branching_seqlen"], r["full_kv_hit_length"]) == (0, 256, 257)
    assert d.call(match(P + S1))["prefix_len"] == 513


# ---------------------------------------------------------------------------------------- random
TOKENS = st.lists(st.integers(0, 3), min_size=1, max_size=10)
OPS = st.lists(
    st.one_of(
        st.builds(lambda t: {"op": "insert", "tokens": t}, TOKENS),
        st.builds(lambda t: {"op": "insert", "tokens": t}, TOKENS),
        st.builds(
            lambda t, cow, lock: {"op": "match", "tokens": t, "cow": cow, "lock": lock},
            TOKENS,
            st.booleans(),
            st.booleans(),
        ),
        st.builds(lambda i: {"op": "unlock", "lock": i}, st.integers(0, 7)),
        st.builds(lambda n, m: {"op": "evict", "num_tokens": n, "mamba_num": m}, st.integers(0, 8), st.integers(0, 3)),
    ),
    min_size=1,
    max_size=40,
)
# Enough examples for a few thousand operations per configuration in CI; raise locally with
# HYBRIDBENCH_ORACLE_EXAMPLES.
EXAMPLES = int(os.environ.get("HYBRIDBENCH_ORACLE_EXAMPLES", "200"))


@pytest.mark.parametrize(("version", "backend"), CONFIGS, ids=CONFIG_IDS)
def test_random_sequences_agree_after_every_operation(version: str, backend: str | None) -> None:
    driver = driver_for(version)

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(ops=OPS, kv=st.sampled_from([24, 64]), mamba=st.sampled_from([3, 8]))
    def run(ops: list[Op], kv: int, mamba: int) -> None:
        check_sequence(driver, backend, kv, mamba, valid_ops(ops))

    run()
