"""TokenSpeed's real scheduler as a hit-length oracle for ``reference_impl``'s TokenSpeed semantics.

``tokenspeed-scheduler`` 0.1.0 (the only PyPI build with the radix-era hybrid cache of the seed's PR #162) imports
on CPU; ``scheduler_driver.py`` runs request sequences through it in the TokenSpeed parser venv (as
tests/sglang_oracle drives SGLang's cache code in its own venvs) and reports each request's ``cached_tokens``.
The same sequences run through ``reference_impl.engine.EngineCore`` with ``cache="tokenspeed"`` (and the host
tier TokenSpeed's flags give). Every row of docs/engines/tokenspeed.md's table is reproduced by the real scheduler,
and every hit the real scheduler reports must be the reference's. Build with ``bash tests/tokenspeed/build_env.sh``.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from dataclasses import asdict, dataclass
from functools import cache

import pytest
from tokenspeed_env import HERE, PYTHON, SCHEDULER_010, require

from reference_impl.engine.config import EngineConfig
from reference_impl.engine.core import EngineCore

pytestmark = [pytest.mark.tokenspeed, pytest.mark.slow]

SCHEDULER = SCHEDULER_010

require(SCHEDULER, what="scheduler env")

PAGE = 64
OUT = 900_000  # output token ids: far from every prompt's


@dataclass(frozen=True)
class Setup:
    """One TokenSpeed launch, as the scheduler sees it (docs/engines/tokenspeed.md's trial: page 64, chunk 128)."""

    mamba: bool = True  # a hybrid model (False: KV only)
    host_pages: int = 0  # the KV host tier (kvstore); 0 = --disable-kvstore
    mamba_l2: bool = False  # the Mamba host tier (--enable-mamba-l2)
    device_pages: int = 16
    state_slots: int = 8
    host_state_slots: int = 8
    page_size: int = PAGE
    chunk: int = 128

    def engine(self, cache: str = "tokenspeed") -> EngineConfig:
        return EngineConfig(
            # The scheduler never hands out one of its device pages (available_kv_pages starts at N - 1).
            kv_tokens=(self.device_pages - 1) * PAGE, state_slots=self.state_slots, cache=cache,  # type: ignore[arg-type]
            page_size=PAGE, chunked_prefill_size=self.chunk, track_interval=PAGE,
            # Nor one of its host pages (page_allocator.cpp:36, the same allocator); every host state slot is used.
            host_kv_tokens=max(0, self.host_pages - 1) * PAGE,
            host_state_slots=self.host_state_slots if self.mamba_l2 else 0,
            host_kv_only=self.host_pages > 0 and not self.mamba_l2)


Request = tuple[tuple[int, ...], int]  # prompt, number of output tokens


def outputs(n: int) -> list[int]:
    return [OUT + k for k in range(n)]


A = tuple(range(1, 301))  # the note's 300-token prompt
FILLERS: list[Request] = [(tuple(range(10_000 * k, 10_000 * k + 300)), 4) for k in (1, 2, 3)]  # push A off the device


def fresh(n: int, base: int) -> tuple[int, ...]:
    return tuple(range(base, base + n))


# docs/engines/tokenspeed.md's table: (row, setup, requests, the note's hit for the last request).
TABLE: list[tuple[str, Setup, list[Request], int]] = [
    ("kv-only/same prompt", Setup(mamba=False), [(A, 4), (A, 4)], 256),
    ("kv-only/prompt+100", Setup(mamba=False), [(A, 4), (A + fresh(100, 5000), 4)], 256),
    ("kv-only/shares first 200", Setup(mamba=False), [(A, 4), (A[:200] + fresh(100, 7000), 4)], 192),
    ("mamba device/same prompt", Setup(), [(A, 4), (A, 4)], 256),
    ("mamba device/prompt+100", Setup(), [(A, 4), (A + fresh(100, 5000), 4)], 256),
    ("mamba device/shares first 200", Setup(), [(A, 4), (A[:200] + fresh(100, 7000), 4)], 128),
    ("fillers/no host tier", Setup(), [(A, 4), *FILLERS, (A, 4)], 0),
    ("fillers/KV host tier only", Setup(host_pages=64), [(A, 4), *FILLERS, (A, 4)], 0),
    ("fillers/KV + Mamba host tier", Setup(host_pages=64, mamba_l2=True), [(A, 4), *FILLERS, (A, 4)], 256),
]

B = A[:200] + fresh(100, 7000)  # branches off A at 200: KV match 192, deepest state 128
# Where TokenSpeed keeps states beyond the table (the hits are the real scheduler's; the reference must agree).
BEYOND: list[tuple[str, Setup, list[Request]]] = [
    # The branch point (192) lies in B's forward [128, 256), whose end is page-aligned: the end wins.
    ("branch point inside an aligned forward", Setup(), [(A, 4), (B, 4), (B, 4), (A[:200] + fresh(50, 8000), 4)]),
    # The forward [128, 220) ends unaligned: its checkpoint is the last aligned point, the branch point.
    ("branch point in an unaligned last forward", Setup(), [(A, 4), (A[:200] + fresh(20, 7000), 4),
                                                            (A[:200] + fresh(100, 8000), 4)]),
    ("last forward floors to a page", Setup(), [(A[:200], 4), (A[:200] + fresh(100, 7000), 4)]),
    # 300 + 85 outputs: 384 committed tokens, page-aligned, yet no state is kept past the prompt.
    ("nothing tracked during decode", Setup(), [(A, 85), (A + tuple(outputs(85)) + fresh(50, 5000), 4)]),
    ("host tier after a branch", Setup(host_pages=64, mamba_l2=True), [(A, 4), (B, 4), *FILLERS, (B, 4)]),
    # The host tier is consulted only when the device has no hit: B's path back on the device gives A a 128-token
    # hit, and A's 256 tokens (state included) stay on the host.
    ("no load-back behind a device hit", Setup(host_pages=64, mamba_l2=True),
     [(A, 4), (B, 4), *FILLERS, (B, 4), (A, 4)]),
    ("no load-back behind a device hit at a page", Setup(host_pages=64, mamba_l2=True),
     [(A, 4), *FILLERS, (A[:130] + fresh(100, 50_000), 4), (A, 4)]),
    # A device KV match without a state is no hit: the host supplies all 256.
    ("load-back behind a stateless device match", Setup(host_pages=64, mamba_l2=True),
     [(A, 4), *FILLERS, (A[:64] + fresh(100, 50_000), 4), (A, 4)]),
    # The host keeps every checkpoint the request wrote back, not only its last.
    ("host hit at an earlier checkpoint", Setup(host_pages=64, mamba_l2=True),
     [(A, 4), *FILLERS, (A[:200] + fresh(100, 60_000), 4)]),
]



def random_requests(rng: random.Random) -> list[Request]:
    """3-10 requests cut from three random prompts at random points, each with a random tail and output."""
    bases = [tuple(rng.randrange(1, 50_000) for _ in range(rng.randint(100, 500))) for _ in range(3)]
    reqs: list[Request] = []
    for _ in range(rng.randint(3, 10)):
        base = rng.choice(bases)
        tail = tuple(rng.randrange(50_000, 90_000) for _ in range(rng.randint(0, 150)))
        prompt = base[: rng.randint(2, len(base))] + tail
        reqs.append((prompt, rng.randint(1, 40)))
    return reqs


# Pools large enough that nothing is evicted (where the two evict differently, see POOL_PRESSURE): every hit of
# every request must agree, on sharing patterns nobody wrote by hand.
_rng = random.Random(20261125)
RANDOM: list[tuple[str, Setup, list[Request]]] = [
    (f"random {i}", Setup(device_pages=96, state_slots=64), random_requests(_rng)) for i in range(60)]

# Under pool pressure (reference_impl.lifecycle.tokenspeed_pool: whole-page reservations, LRU leaves evicted whole,
# states dropped without their KV): three prompts through a 12-page device (11 usable). For Z the scheduler evicts
# all of X: it makes room for a whole page per later chunk even when the last page has room.
X, Y, Z = fresh(300, 11_000), fresh(300, 12_000), fresh(300, 13_000)
POOL_PRESSURE: list[tuple[str, Setup, list[Request]]] = [
    ("KV pressure", Setup(device_pages=12, state_slots=64), [(X, 4), (Y, 4), (Z, 4), (X, 4)]),
]

# The random sequences again on small devices (12-32 pages) with 8 state slots: 4 running requests' worth.
_prng = random.Random(20261126)
PRESSURED: list[tuple[str, Setup, list[Request]]] = [
    (f"pressured {i}", Setup(device_pages=_prng.choice((12, 16, 20, 24, 32)), state_slots=8), random_requests(_prng))
    for i in range(200)]
# The same with both host tiers on (KV + Mamba, small): only partly modelled (HOST_PRESSURE_DIFFER).
_hrng = random.Random(20261127)
HOST_PRESSURED: list[tuple[str, Setup, list[Request]]] = [
    (f"host-pressured {i}", Setup(device_pages=_hrng.choice((12, 16, 20, 24, 32)), state_slots=8,
                                  host_pages=_hrng.choice((16, 32, 64)), mamba_l2=True,
                                  host_state_slots=_hrng.choice((4, 8, 16))), random_requests(_hrng))
    for i in range(100)]
# Scheduler 0.1.0 is not deterministic on every one of these: on host-pressured 11 and 75 the same sequence gives
# other hits from run to run (about 1 run in 5 and 1 in 20; likely ties its C++ breaks by pointer order), also
# within one process. Each runs HOST_REPEATS times; the reference agrees where it gives one of the outcomes.
HOST_REPEATS = 8
HOST_NONDETERMINISTIC = frozenset({"host-pressured 11", "host-pressured 75"})
# The sequences on which the reference gives none of the scheduler's outcomes (2 of 100, measured on scheduler 0.1.0;
# 18 before the one-tree host model, reference_impl.lifecycle.tokenspeed_host): pinned by name, so one more differing
# (a regression) or one fewer (an improvement: unpin it) fails.
HOST_PRESSURE_DIFFER = frozenset(f"host-pressured {i}" for i in (49, 75))
HOST_PRESSURE_GAP = (
    "partly modelled: TokenSpeed's host tiers (reference_impl.lifecycle.tokenspeed_host: write-back of the path the "
    "host lacks, device copies released once written, host LRU on the one tree's times, one state loaded back). "
    "Not modelled: a released node's state the host lacks keeps its device slot (revived when its KV returns), "
    "DemoteIdleMambaDeviceCopiesPresentOnHost for paths locked at write-back, host LRU keys refreshed only when a "
    "host lock is released (the reference uses each node's newest stamp)")

# Host-pressured 8's first three requests with pools so large nothing is evicted: request 0's path goes to the host
# and its device copies are released; request 1's checkpoint at 64 lies under KV the host already holds, so it is
# not written back, and its KV is released: request 2 finds no hit (the reference gave 64 before the release).
_H8 = next(reqs for name, _, reqs in HOST_PRESSURED if name == "host-pressured 8")[:3]
HOST_UNPRESSURED: tuple[str, Setup, list[Request]] = (
    "host tiers, nothing evicted", Setup(device_pages=96, state_slots=64, host_pages=256, mamba_l2=True,
                                         host_state_slots=64), _H8)

# A sequence on which the scheduler stalls (the 130th of the same generator seeded with 1, 20 pages): request 7's
# first decode step needs a free state slot before its unused checkpoint slot is freed, and none can be evicted
# (the scheduler's state-leaf set lost two states to splits, the rest are on the request's path): without a host
# tier it aborts the request, and so does the reference (EngineCore.abort, Strategy.abort_reason).
_srng = random.Random(1)
STALL: tuple[str, Setup, list[Request]] = [
    ("state-slot stall", Setup(device_pages=_srng.choice((12, 16, 20, 24, 32)), state_slots=8),
     random_requests(_srng)) for _ in range(130)][-1]

# With the KV host tier on and no Mamba host tier (the seed's launch), the scheduler gives B a hit deeper than any
# state it has for it: an upstream bug, pinned (test_kv_host_tier_hit_outruns_its_state).
KV_HOST_BUG: tuple[str, Setup, list[Request]] = ("KV host tier: branch", Setup(host_pages=64), [(A, 4), (B, 4)])


def scheduler_hits(scenarios: list[tuple[Setup, list[Request]]]) -> list[list[int] | None]:
    """Run every scenario through the real scheduler in one subprocess (None: it stalled)."""
    payload = [{"config": asdict(setup), "requests": [{"tokens": list(p), "outputs": outputs(n)} for p, n in reqs]}
               for setup, reqs in scenarios]
    proc = subprocess.run([str(PYTHON), str(HERE / "scheduler_driver.py")], input=json.dumps(payload),
                          env={**os.environ, "PYTHONPATH": str(SCHEDULER)}, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    hits: list[list[int] | None] = json.loads(proc.stdout.splitlines()[-1])
    return hits


def scheduler_trace(scenarios: list[tuple[Setup, list[Request]]]) -> list[list[dict[str, int]]]:
    """Per scenario, every extend forward's prefix, end, COW source slot and checkpoint slot (``trace`` mode)."""
    payload = [{"config": asdict(setup), "requests": [{"tokens": list(p), "outputs": outputs(n)} for p, n in reqs]}
               for setup, reqs in scenarios]
    proc = subprocess.run([str(PYTHON), str(HERE / "scheduler_driver.py"), "trace"], input=json.dumps(payload),
                          env={**os.environ, "PYTHONPATH": str(SCHEDULER)}, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    traces: list[list[dict[str, int]]] = json.loads(proc.stdout.splitlines()[-1])
    return traces


@cache
def _all_real() -> dict[str, list[int] | None]:
    # HOST_PRESSURED runs apart, repeated (_host_outcomes)
    runs: list[tuple[str, Setup, list[Request]]] = [
        *((n, s, r) for n, s, r, _ in TABLE), *BEYOND, *RANDOM, *POOL_PRESSURE, *PRESSURED, STALL, KV_HOST_BUG,
        HOST_UNPRESSURED]
    return dict(zip([n for n, _, _ in runs], scheduler_hits([(s, r) for _, s, r in runs]), strict=True))


def real(name: str) -> list[int]:
    """The real scheduler's hits for a named scenario (all scenarios run in one subprocess, once)."""
    hits = _all_real()[name]
    assert hits is not None, f"{name}: the real scheduler stalled"
    return hits


def reference_hits(setup: Setup, requests: list[Request], cache: str = "tokenspeed") -> list[int]:
    """The same requests, one after another, through the reference engine core."""
    core = EngineCore(setup.engine(cache))
    hits = []
    for rid, (prompt, n) in enumerate(requests):
        req = core.add_request(rid, prompt, n)
        out = iter(outputs(n))
        while not core.idle:
            batch = core.schedule()
            assert batch is not None
            sampling = [i for i in batch.items if batch.kind == "decode" or i.end == len(i.request.fill_tokens)]
            core.complete(batch, [next(out) for _ in sampling])
        assert req.status == "finished" and req.cached_tokens is not None
        hits.append(req.cached_tokens)
    return hits


@pytest.mark.parametrize(("row", "setup", "requests", "note"), TABLE, ids=[t[0] for t in TABLE])
def test_real_scheduler_reproduces_the_research_table(row: str, setup: Setup, requests: list[Request],
                                                      note: int) -> None:
    hits = real(row)
    assert hits[-1] == note, f"{row}: tokenspeed-scheduler 0.1.0 reports {hits}, the note says {note}"
    if setup.mamba:  # reference_impl models hybrid caches only; the KV-only rows are the scheduler's alone
        assert reference_hits(setup, requests) == list(hits), f"{row}: reference differs from the real scheduler"


@pytest.mark.parametrize(("name", "setup", "requests"), BEYOND, ids=[b[0] for b in BEYOND])
def test_reference_tokenspeed_semantics_match_the_real_scheduler(name: str, setup: Setup,
                                                                 requests: list[Request]) -> None:
    assert reference_hits(setup, requests) == real(name), f"{name}: real scheduler {real(name)}"


def test_random_sequences_agree_without_pool_pressure() -> None:
    differ = [(name, real(name), hits) for name, setup, reqs in RANDOM
              if (hits := reference_hits(setup, reqs)) != real(name)]
    assert not differ, f"{len(differ)} of {len(RANDOM)} differ; first (name, real, reference): {differ[0]}"


def test_eviction_under_pool_pressure() -> None:
    name, setup, requests = POOL_PRESSURE[0]
    assert real(name) == [0, 0, 0, 0], real(name)  # X was evicted whole while Z ran
    assert reference_hits(setup, requests) == real(name)


def test_random_sequences_agree_under_pool_pressure() -> None:
    stalled = [name for name, _, _ in PRESSURED if _all_real()[name] is None]
    assert not stalled, f"the scheduler stalls on {stalled}"
    differ = [(name, real(name), hits) for name, setup, reqs in PRESSURED
              if (hits := reference_hits(setup, reqs)) != real(name)]
    assert not differ, f"{len(differ)} of {len(PRESSURED)} differ; first (name, real, reference): {differ[0]}"
    trees = [reference_core(setup, reqs).tree for _, setup, reqs in PRESSURED]
    kv, states = sum(t.tokens_evicted_total > 0 for t in trees), sum(t.states_evicted_total > 0 for t in trees)
    # 94 and 169 of 200 when written: the set must keep both pools under pressure
    assert kv >= len(PRESSURED) * 2 // 5 and states >= len(PRESSURED) * 3 // 4, (kv, states)


@cache
def _host_outcomes() -> dict[str, set[tuple[int, ...] | None]]:
    """Every outcome of HOST_REPEATS runs of each host-pressured sequence through the scheduler (None: stalled)."""
    runs = scheduler_hits([(setup, reqs) for _, setup, reqs in HOST_PRESSURED] * HOST_REPEATS)
    seen: dict[str, set[tuple[int, ...] | None]] = {name: set() for name, _, _ in HOST_PRESSURED}
    for i, hits in enumerate(runs):
        seen[HOST_PRESSURED[i % len(HOST_PRESSURED)][0]].add(None if hits is None else tuple(hits))
    return seen


def _host_pressured_differ() -> set[str]:
    outcomes = _host_outcomes()
    return {name for name, setup, reqs in HOST_PRESSURED if tuple(reference_hits(setup, reqs)) not in outcomes[name]}


def test_the_scheduler_varies_only_where_known() -> None:
    varying = {name for name, seen in _host_outcomes().items() if len(seen) > 1}
    assert varying <= HOST_NONDETERMINISTIC, f"scheduler 0.1.0 also varies on {sorted(varying - HOST_NONDETERMINISTIC)}"


def test_host_tiers_under_pool_pressure_differ_only_where_known() -> None:
    differ = _host_pressured_differ()
    new = sorted(differ - HOST_PRESSURE_DIFFER)
    assert not new, f"the reference now also differs on {new}"
    assert not HOST_PRESSURE_DIFFER - differ, (
        f"the reference now agrees on {sorted(HOST_PRESSURE_DIFFER - differ)}: drop them from HOST_PRESSURE_DIFFER")


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=HOST_PRESSURE_GAP)
def test_host_tiers_under_pool_pressure_agree() -> None:
    assert not _host_pressured_differ()


def test_host_tiers_without_pressure_agree() -> None:
    name, setup, requests = HOST_UNPRESSURED
    core = reference_core(setup, requests)
    assert core.host is not None and core.host.tree.tokens_evicted_total == 0
    assert core.tree.tokens_evicted_total > 0  # nothing evicted for room, but written-back copies released
    assert real(name) == [0, 0, 0] and reference_hits(setup, requests) == real(name)


def reference_core(setup: Setup, requests: list[Request]) -> EngineCore:
    """The reference engine core after the requests ran one after another (finished or not)."""
    core = EngineCore(setup.engine())
    for rid, (prompt, n) in enumerate(requests):
        core.add_request(rid, prompt, n)
        out = iter(outputs(n))
        while not core.idle and (batch := core.schedule()) is not None:
            sampling = [i for i in batch.items if batch.kind == "decode" or i.end == len(i.request.fill_tokens)]
            core.complete(batch, [next(out) for _ in sampling])
    return core


def test_the_reference_meets_the_schedulers_state_slot_stall() -> None:
    name, setup, requests = STALL
    assert _all_real()[name] is None, "the scheduler no longer stalls here: drop STALL and its docs line"
    assert reference_core(setup, requests).strategy.counters.state_alloc_failures == 1


def test_the_reference_aborts_as_the_scheduler_does() -> None:
    _, setup, requests = STALL
    core = reference_core(setup, requests)
    assert core.counters.aborted == 1


def test_kv_host_tier_hit_outruns_its_state() -> None:
    """Scheduler 0.1.0 with the KV host tier on and no Mamba host tier: B (sharing A's first 200 tokens) gets a
    192-token hit whose recurrent state is A's checkpoint after 128 tokens, so tokens 128-191 never reach the
    Mamba layers; without the host tier the same B hits 128 (the table). The reference predicts 128, what a
    correct cache gives. If this fails, the scheduler changed: drop the finding from docs/engines/tokenspeed.md."""
    name, setup, requests = KV_HOST_BUG
    assert real(name) == [0, 192] and real("mamba device/shares first 200") == [0, 128]
    assert reference_hits(setup, requests) == [0, 128]
    (trace,) = scheduler_trace([(setup, requests)])
    b_first = next(e for e in trace if e["request"] == 1)
    written = [e for e in trace if e["request"] == 0 and e["checkpoint"] == b_first["cow"]]
    assert b_first["prefix"] == 192 and written and written[-1]["end"] == 128, trace


def test_sglang_semantics_are_not_tokenspeeds() -> None:
    """The comparison has teeth: SGLang's extra_buffer (branch point kept, decode tracked) differs."""
    differ = [name for name, setup, reqs in BEYOND if reference_hits(setup, reqs, cache="extra_buffer") != real(name)]
    assert {"branch point inside an aligned forward", "nothing tracked during decode"} <= set(differ), differ
