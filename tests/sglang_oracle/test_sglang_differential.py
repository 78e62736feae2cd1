"""reference_impl against SGLang's own hybrid cache code (0.5.23 Rust and Python cores, 0.5.9), compared
after every operation: reply fields, pool sizes, evictable/protected counts and the whole tree.

Three levels: tree operations (insert — also with a protected prefix, ``prev_prefix_len`` — match with
and without COW, lock/unlock, evict) for every version and core; and whole requests for 0.5.23
without the extra buffer (SGLang's match_kv_cache / lock / alloc_req_slots / checkpoint_kv_cache /
release_kv_cache against ``reference_impl.lifecycle.NoBufferStrategy``), compared at admission, after
every checkpoint and at finish.

Needs the venvs from ``tests/sglang_oracle/build_env.sh``; skipped with a reason when they are absent, except
under CI (which builds them first), where that fails.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

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
        # CI builds the venvs first: missing there is a failure, never a quiet skip.
        (pytest.fail if os.environ.get("CI") or os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG") else pytest.skip)(
            f"SGLang {version} venv missing: run bash tests/sglang_oracle/build_env.sh {version}")
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

# SGLang's unit tests (https://github.com/sgl-project/sglang) and the oracle scenarios docs/concepts/reference-cache.md,
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
    """Pin the driver itself to the outputs recorded in docs/concepts/reference-cache.md."""
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


# ------------------------------------------------------------------ tree level: prev_prefix_len > 0
# An insert whose caller already owns the tree's indices for a prefix (what a checkpoint does): the
# driver matches the key, keeps min(k, matched) tree indices and allocates the rest fresh.
PREV_OPS = st.lists(
    st.one_of(
        st.builds(lambda t: {"op": "insert", "tokens": t}, TOKENS),
        st.builds(lambda t, k: {"op": "insert", "tokens": t, "prev_prefix_len": k}, TOKENS, st.integers(1, 10)),
        st.builds(lambda t, k: {"op": "insert", "tokens": t, "prev_prefix_len": k}, TOKENS, st.integers(1, 10)),
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
PREV_EXAMPLES = int(os.environ.get("HYBRIDBENCH_ORACLE_PREV_EXAMPLES", "150"))


@pytest.mark.parametrize(("version", "backend"), CONFIGS, ids=CONFIG_IDS)
def test_random_prev_prefix_inserts_agree(version: str, backend: str | None) -> None:
    driver = driver_for(version)

    @settings(
        max_examples=PREV_EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(ops=PREV_OPS, kv=st.sampled_from([24, 64]), mamba=st.sampled_from([3, 8]))
    def run(ops: list[Op], kv: int, mamba: int) -> None:
        check_sequence(driver, backend, kv, mamba, valid_ops(ops))

    run()


# ------------------------------------------------------------------ request lifecycle (0.5.23)
# No extra buffer (no_buffer), page size 1: SGLang's match_kv_cache / lock / alloc_req_slots /
# checkpoint_kv_cache / release_kv_cache in the driver against reference_impl.lifecycle's
# NoBufferStrategy, compared at admission, after every checkpoint and at finish.
LIFECYCLE_CONFIGS = [("0.5.23", "rust"), ("0.5.23", "python")]
LIFECYCLE_IDS = ["0.5.23-rust", "0.5.23-python"]


def req(inp: list[int], out: list[int], chunks: list[int] | None = None, chunk_size: int | None = None) -> Op:
    op: Op = {"op": "request", "input": inp, "output": out}
    if chunks:
        op["chunks"] = chunks
    if chunk_size:
        op["chunk_size"] = chunk_size
    return op


S3 = list(range(4000, 4256))
Q = list(range(5000, 5300))  # 300 tokens
T1 = list(range(6000, 6100))
T1_OUT = [7, 8, 9]
T2 = T1 + T1_OUT + list(range(6100, 6150))
T2_OUT = [10, 11]
T3 = T2 + T2_OUT + [6200]
LIFECYCLE_SCENARIOS: list[tuple[str, int, int, list[Op]]] = [
    # docs/concepts/reference-cache.md, plus the checkpoint after the final prefill chunk that the
    # batch result processor takes when the request has more outputs to produce.
    (
        "oracle_d_requests",
        2048,
        20,
        [
            req(P + S1, [1, 2, 3, 4]),
            req(P + S2, [1, 2, 3, 4]),
            req(P + S3, [1, 2, 3, 4], chunks=[256]),
            req(Q, [7, 8], chunks=[128, 256, 300]),
        ],
    ),
    ("oracle_d2b_chunked_256_513", 2048, 20, [req(P + S1, [1, 2, 3, 4], chunks=[256, 513])]),
    ("single_output_no_final_checkpoint", 2048, 20, [req(P + S1, [1]), req(P + S1 + [1, 5], [2])]),
    (
        "multi_turn_continuation",
        2048,
        20,
        [req(T1, T1_OUT), req(T2, T2_OUT, chunk_size=64), req(T3, [3, 4, 5]), req(T1, [7, 8, 9])],
    ),
    ("repeat_same_prompt_input_len_cap", 2048, 20, [req(Q, [1, 2]), req(Q, [1, 2]), req(Q, [3])]),
    (
        "small_mamba_pool_evicts",
        2048,
        3,
        [req(Q, [1, 2], chunks=[100, 200]), req(P + S1, [3, 4], chunks=[256]), req([*Q, 9], [5, 6]), req(Q, [1])],
    ),
    (
        "small_kv_pool_evicts",
        600,
        8,
        [req(Q, [1, 2], chunks=[128]), req(P + S1, [3, 4]), req([*Q, 1], [5, 6]), req(P + S2, [7])],
    ),
    (
        "requests_mixed_with_tree_ops",
        2048,
        6,
        [
            req(T1, T1_OUT),
            match(T1 + T1_OUT),
            evict(mamba_num=1),
            req(T2, T2_OUT, chunks=[50, 103]),
            {"op": "insert", "tokens": [*T2, 1], "prev_prefix_len": 200},
            req([*T2, 1, 2], [3]),
        ],
    ),
]


@pytest.mark.parametrize(("version", "backend"), LIFECYCLE_CONFIGS, ids=LIFECYCLE_IDS)
@pytest.mark.parametrize("scenario", LIFECYCLE_SCENARIOS, ids=[s[0] for s in LIFECYCLE_SCENARIOS])
def test_request_lifecycle_scenario(
    version: str, backend: str | None, scenario: tuple[str, int, int, list[Op]]
) -> None:
    _name, kv, mamba, ops = scenario
    check_sequence(driver_for(version), backend, kv, mamba, ops)


def test_request_lifecycle_driver_records_sglang_facts() -> None:
    """Pin what SGLang 0.5.23 itself does (independently of the reference): the recorded oracle facts plus the final
    prefill checkpoint, and the committed KV at finish = input + output - 1."""
    d = driver_for("0.5.23")
    d.call({"op": "init", "version": "0.5.23", "backend": "rust", "kv_size": 2048, "mamba_size": 20})

    def states(stage: dict[str, Any]) -> list[int]:
        return sorted(len(path) for path, has_state, _lock in stage["obs"]["tree"] if has_state)

    d1 = d.call(req(P + S1, [1, 2, 3, 4]))["stages"]
    assert [s["stage"] for s in d1] == ["admit", "chunk", "finish"]
    assert d1[0]["cached_tokens"] == 0
    assert d1[1]["end"] == 513 and states(d1[1]) == [513]  # checkpoint after the final prefill
    assert d1[2]["committed_kv"] == 513 + 4 - 1  # the last sampled token has no KV
    assert states(d1[2]) == [513, 516]
    d2 = d.call(req(P + S2, [1, 2, 3, 4]))["stages"]
    assert (d2[0]["cached_tokens"], d2[0]["branching_seqlen"]) == (0, 256)  # no branch-point state
    d2b = d.call(req(P + S3, [1, 2, 3, 4], chunks=[256]))["stages"]
    assert [s.get("end") for s in d2b] == [None, 256, 513, None]
    assert 256 in states(d2b[1])
    d3 = d.call(req(Q, [7, 8], chunks=[128, 256, 300]))["stages"]
    assert [s.get("end") for s in d3] == [None, 128, 256, 300, None]
    assert d3[-1]["committed_kv"] == 301
    again = d.call(req(P + S1 + [1, 2, 3, 9], [5]))["stages"]
    assert again[0]["cached_tokens"] == 516 and again[0]["cow"]  # turn 2 hits turn 1's finish state


# Random request sequences: prompts drawn from a few shared prefixes (so hits, misses and branch
# splits happen), optional multi-turn continuation of the previous request, random chunk ends, 1-4
# outputs, a small mamba pool (3-6 slots) and a KV pool a few requests deep, so both kinds of
# eviction happen; occasional plain matches and explicit evictions in between.
FAMILIES = [[], [1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 9, 9], [5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7, 8]]
MAX_REQ_LEN = 56
# The mamba chunk (branching-seqlen grid) is shrunk to 4 so short prompts report branch points.
RANDOM_CHUNK = 4
REQ_SPEC = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["new", "new", "cont", "cont", "match", "evict"]),
        "family": st.integers(0, len(FAMILIES) - 1),
        "suffix": st.lists(st.integers(0, 3), min_size=1, max_size=14),
        "output": st.lists(st.integers(0, 3), min_size=1, max_size=4),
        "chunks": st.lists(st.integers(1, MAX_REQ_LEN), max_size=3),
        "evict": st.tuples(st.integers(0, 12), st.integers(0, 2)),
    }
)
LIFECYCLE_EXAMPLES = int(os.environ.get("HYBRIDBENCH_ORACLE_LIFECYCLE_EXAMPLES", "60"))


def build_requests(specs: list[dict[str, Any]]) -> list[Op]:
    """Resolve drawn specs into concrete ops (continuations need the previous request's tokens)."""
    ops: list[Op] = []
    last: list[int] | None = None
    for spec in specs:
        if spec["kind"] == "evict":
            ops.append(evict(*spec["evict"]))
            continue
        if spec["kind"] == "match":
            ops.append(match(FAMILIES[spec["family"]] + spec["suffix"]))
            continue
        base = FAMILIES[spec["family"]]
        if spec["kind"] == "cont" and last is not None and len(last) + len(spec["suffix"]) + 4 <= MAX_REQ_LEN:
            base = last  # multi-turn: the whole previous turn (input + output) plus new tokens
        inp = base + spec["suffix"]
        out = list(spec["output"])
        ops.append(req(inp, out, chunks=sorted({c for c in spec["chunks"] if c < len(inp)})))
        last = inp + out
    return ops


@pytest.mark.parametrize(("version", "backend"), LIFECYCLE_CONFIGS, ids=LIFECYCLE_IDS)
def test_random_request_sequences_agree(version: str, backend: str | None) -> None:
    driver = driver_for(version)

    @settings(
        max_examples=LIFECYCLE_EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(
        specs=st.lists(REQ_SPEC, min_size=3, max_size=16),
        kv=st.sampled_from([64, 96]),
        mamba=st.sampled_from([3, 4, 6]),
    )
    def run(specs: list[dict[str, Any]], kv: int, mamba: int) -> None:
        check_sequence(driver, backend, kv, mamba, build_requests(specs), chunk_size=RANDOM_CHUNK)

    run()
