"""``ExtraBufferStrategy`` (and ``ExtraBufferLazyStrategy``) and ``MambaRadixTree``'s branch point against SGLang
0.5.23's, 0.5.16's and 0.5.9's own extra_buffer (and 0.5.16's and 0.5.23's extra_buffer_lazy) code.

``extra_buffer_oracle.py`` (0.5.23), ``extra_buffer_oracle_0516.py`` (0.5.16) and ``extra_buffer_oracle_0509.py``
(0.5.9) run the release's scheduler, ping-pong pool and Mamba cache functions on the same inputs in its venv (each
docstring lists each function with file:line); the reference runs with that release's ``semantics``, its tree
given the model chunk as ``EngineCore`` gives it (``cache_chunk_size``: 0.5.9 ignores it). Per request case both
sides must agree on what every prefill and decode forward tracks, what is donated to the tree (at each unfinished
checkpoint and at the finish: key length and the length of the state in the donated slot) and how many state
slots the request holds; per match case, on the branch point reported.

Cases: a seeded sample of a grid (model chunk 64/128, page 1/16/64, track intervals on and off the chunk grid,
overlap on and off, cached prefixes on and off a chunk boundary, branch points, prompt, chunked-prefill and output
lengths) plus hand-picked edges. Needs the venv from ``tests/sglang_oracle/build_env.sh``; skipped with a reason
when it is absent, a failure under CI.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import types
from pathlib import Path
from typing import Any

import pytest
import warm_release
from oracle_client import env_python, env_ready

from reference_impl.lifecycle.request import CachedRequest
from reference_impl.lifecycle.strategies import ExtraBufferLazyStrategy, ExtraBufferStrategy
from reference_impl.policies.registry import make_policy
from reference_impl.radix.pools import KVPool, StatePool
from reference_impl.radix.tree import MambaRadixTree, cache_chunk_size

pytestmark = pytest.mark.sglang

HERE = Path(__file__).resolve().parent
SEED = 20261129
# Per release: its oracle and how many life cases are sampled from the grid (with the edges and the match cases,
# ~9 s a release on 2 cores in a fresh process, most of it SGLang's import, which warm_release.py's server does once).
RELEASES = {"0.5.23": (HERE / "extra_buffer_oracle.py", 1500), "0.5.16": (HERE / "extra_buffer_oracle_0516.py", 1500),
            "0.5.9": (HERE / "extra_buffer_oracle_0509.py", 1500)}

Case = dict[str, Any]


# ---------------------------------------------------------------- cases
def _floor(x: int, page: int) -> int:
    return x // page * page


def decode_grid(version: str, grid: int, interval: int) -> int:
    """Where decode tracks: 0.5.23 on lcm(chunk grid, interval), 0.5.16 and 0.5.9 on the interval itself."""
    return math.lcm(grid, interval) if version == "0.5.23" else interval


def chunk_grid(version: str, chunk: int, page: int) -> int:
    """The release's checkpoint grid for a model chunk: 0.5.9's is FLA's 64 whatever the model's (server_args.py:5128
    in 0.5.9), written out here so that the reference's own rule (``cache_chunk_size``) is what is tested."""
    return max(64 if version == "0.5.9" else chunk, page)


def _life_grid(version: str) -> list[Case]:
    cases = []
    for chunk, page in itertools.product((64, 128), (1, 16, 64)):
        grid = chunk_grid(version, chunk, page)
        # 100 and 320 are off a 64/128 chunk grid for some pages; SGLang requires interval % page == 0
        intervals = sorted(i for i in {256, 512, 2 * grid, 3 * grid, grid + grid // 2, 320, 100} if i % page == 0)
        prefixes = sorted({0, grid, 2 * grid, _floor(96, page), _floor(grid // 2, page)})
        # chunked prefill sizes are page multiples (SGLang's prefill adder truncates a chunk to whole pages)
        steps = [None, *sorted({_floor(grid + grid // 2, page), 4 * grid})]
        for interval, overlap, prefix in itertools.product(intervals, (False, True), prefixes):
            track = decode_grid(version, grid, interval)
            for prompt in (prefix + 10, prefix + grid, prefix + grid + 30, prefix + 5 * grid + 17, prefix + 700):
                branches = [None, *range(grid * (prefix // grid + 1), prompt, grid)][:5]  # match: on the grid
                # the last decode commits exactly a multiple of the decode grid (0.5.16: one step before, too)
                exact = (prompt // track + 1) * track - prompt + 1
                early = {exact - 1} if version == "0.5.16" and exact > 2 else set()
                outputs = sorted({1, 2, interval - 5, interval + 3, 2 * interval + 1, exact} | early)
                for branch, step, n in itertools.product(branches, steps, outputs):
                    cases.append({"C": chunk, "P": page, "I": interval, "overlap": overlap, "prefix": prefix,
                                  "L": prompt, "S": step, "n": n, "branch": branch})
    return cases


def _case(*, c: int = 64, p: int = 1, i: int = 256, ov: bool = False, prefix: int = 0, prompt: int = 300,
          s: int | None = None, n: int = 2, b: int | None = None) -> Case:
    return {"C": c, "P": p, "I": i, "overlap": ov, "prefix": prefix, "L": prompt, "S": s, "n": n, "branch": b}


EDGES: list[Case] = [
    # max_new_tokens=1: the prefill finishes the request (no checkpoint after the last chunk, no decode)
    _case(n=1), _case(n=1, ov=True), _case(n=1, s=128), _case(n=1, prompt=256, s=128, b=128),
    # a forward shorter than a chunk tracks nothing; so does a short last chunk
    _case(prompt=40, n=5), _case(prefix=64, prompt=100, n=3), _case(prompt=150, s=128, n=4),
    _case(c=128, p=64, prefix=128, prompt=192, n=2),
    # engine.chunked_prefill_size below the chunk (0.5.23 warns it "can skip Mamba state checkpoints"; the plan warns):
    # no prefill chunk tracks, decode still does
    _case(prompt=300, s=32, n=4), _case(prompt=300, s=48, n=220), _case(c=128, p=64, prompt=500, s=64, n=3),
    # branch point on a chunk boundary of the forward (tracked), off it (prefix 96), at the forward's end
    _case(prompt=300, b=128), _case(prefix=96, prompt=400, b=128), _case(prefix=96, prompt=400, b=224),
    _case(prompt=256, b=256), _case(prompt=300, s=128, b=192), _case(p=16, prefix=32, prompt=500, s=160, b=192),
    # output ending exactly on a decode track boundary (committed = L + n - 1), with and without overlap
    _case(prompt=200, n=313), _case(prompt=200, n=313, ov=True), _case(prompt=200, n=312, ov=True),
    _case(i=100, prompt=1500, n=101), _case(i=100, prompt=1500, n=101, ov=True),  # grid lcm(64, 100) = 1600
    _case(c=128, p=64, i=192, prompt=300, n=85), _case(c=128, p=64, i=192, prompt=300, n=85, ov=True),
    _case(p=16, i=96, prompt=100, n=93, ov=True),
    # 0.5.16's decode grid is the interval: the last decode commits a multiple of it (committed = L + n - 1), the
    # overlap's look-ahead batch reaches one (L + n), the first decode batch is one (L + 1)
    _case(prompt=200, n=57), _case(prompt=200, n=57, ov=True), _case(prompt=200, n=56),
    _case(prompt=200, n=56, ov=True), _case(prompt=255, n=3), _case(prompt=255, n=3, ov=True),
    _case(prompt=255, n=300, ov=True), _case(i=100, prompt=1500, n=100, ov=True),
    _case(c=128, p=64, i=192, prompt=300, n=84, ov=True),
]


def _reportable(version: str, case: Case) -> bool:
    """0.5.16's and 0.5.9's matches report only branch points on the chunk grid (0.5.16
    mamba_component.py:111-115, 0.5.9 mamba_radix_cache.py:985-988) and their prefills assert that (0.5.16
    schedule_batch.py:2429, 0.5.9 :1693): an off-grid branch point is not an input they can see."""
    branch = case["branch"]
    return version == "0.5.23" or branch is None or branch % chunk_grid(version, case["C"], case["P"]) == 0


# extra_buffer_lazy (0.5.16 and 0.5.23; it needs the overlap schedule): a sample of the grid's overlap cases, the
# overlap edges, and some of each with SGLang's SGLANG_TEST_MAMBA_LAZY_ALLOC_FAIL (the boundary's second slot is not
# had: the forward writes over the one slot, and a finish whose kept state was written over donates nothing).
LAZY_RELEASES = ("0.5.16", "0.5.23")
LAZY_SAMPLE, LAZY_FAILING = 400, 200
# the last decode commits one before a decode track boundary: 0.5.23's look-ahead batch, 0.5.16's booking reach it
LAZY_EDGES = [_case(n=1, ov=True, prompt=255), _case(n=2, ov=True, prompt=255), _case(n=312, ov=True, prompt=200),
              _case(n=56, ov=True, prompt=200), _case(i=100, prompt=1500, n=100, ov=True)]


def lazy_cases(version: str) -> list[Case]:
    if version not in LAZY_RELEASES:
        return []
    grid = [c for c in _life_grid(version) if c["overlap"]]
    cases = [dict(c, lazy=True) for c in [*EDGES, *LAZY_EDGES] if c["overlap"]]
    cases += [dict(c, lazy=True) for c in random.Random(SEED + 1).sample(grid, LAZY_SAMPLE)]
    failing = [dict(c, lazy=True, fail=True) for c in LAZY_EDGES]
    return cases + failing + [dict(c, fail=True) for c in random.Random(SEED + 2).sample(cases, LAZY_FAILING)]


def life_cases(version: str) -> list[Case]:
    cases = EDGES + random.Random(SEED).sample(_life_grid(version), RELEASES[version][1]) + lazy_cases(version)
    return [c for c in cases if _reportable(version, c)]


def match_cases() -> list[Case]:
    cases = []
    for chunk, page in itertools.product((64, 128), (1, 16, 64)):
        grid, step = max(chunk, page), max(page, 16)
        for best in range(0, 4 * grid + 1, step):
            cases += [{"C": chunk, "P": page, "best": best, "kv": kv} for kv in range(best, best + 3 * grid + 1, step)]
    return cases


# ---------------------------------------------------------------- the reference, in process
def reference_life(case: Case, semantics: str = "0.5.23") -> dict[str, Any]:
    """One request through ``ExtraBufferStrategy``'s own prefill_chunk / decode / finish on a real tree and pools."""
    chunk, page, prefix, prompt, n = case["C"], case["P"], case["prefix"], case["L"], case["n"]
    tree = MambaRadixTree(KVPool(1 << 22), StatePool(1 << 12), make_policy("lru"), page_size=page,
                          chunk_size=cache_chunk_size(chunk, semantics), semantics=semantics)  # as EngineCore
    kind = ExtraBufferLazyStrategy if case.get("lazy") else ExtraBufferStrategy
    strat = kind(tree, chunked_prefill_size=case["S"], track_interval=case["I"], overlap=case["overlap"])
    if case.get("fail"):  # SGLang's SGLANG_TEST_MAMBA_LAZY_ALLOC_FAIL: the boundary's second slot is never had
        strat._alloc_transient = types.MethodType(lambda self, r: None, strat)  # type: ignore[attr-defined]
    req = CachedRequest.of(range(prompt))
    # What admit() leaves after a match that hit `prefix` and reported `branch` (the inputs, as on SGLang's side).
    req.prefix_len = req.protected_len = req.kv_len = prefix
    req.branch_seqlen = case["branch"]
    req.live_state = tree.state_pool.alloc()
    req.track_slots = [tree.state_pool.alloc() for _ in range(strat._num_track_slots())]
    slots = len(req.held_states())
    tracks: list[int | None] = []
    tracked: list[int] = []  # positions a forward tracked: what a donated slot's content can be
    donated: list[list[Any]] = []
    phase = ["ckpt"]

    # The one patch: _insert records the donation instead of inserting. The prefix and branch point are inputs,
    # not a match on a populated tree, so there is no path for the real insert to extend and re-lock; what is
    # compared is what the strategy hands the tree (the tree's own insert is the differential tier's business).
    def record(self: ExtraBufferStrategy, r: CachedRequest, cache_len: int, slot: int) -> None:
        content = tree.state_pool.content.get(slot)
        state = next((pos for pos in tracked if r.fingerprint(pos) == content), None)
        donated.append([phase[0], cache_len, state])
        r.protected_len = max(r.protected_len, cache_len)

    strat._insert = types.MethodType(record, strat)  # type: ignore[method-assign]

    def tracked_now(before: int, position: int | None) -> int | None:
        """The forward tracked iff it copied a state into a ping-pong slot."""
        if strat.counters.state_copies == before:
            return None
        assert position is not None
        if position not in tracked:
            tracked.append(position)
        return position

    start = prefix
    while start < prompt:
        end = min(start + case["S"], prompt) if case["S"] else prompt
        before, position = strat.counters.state_copies, strat.track_position(req, start, end)
        if position is not None:  # known before prefill_chunk, whose checkpoint may donate it
            tracked.append(position)
        strat.prefill_chunk(req, end, finishes_after_prefill=n == 1)
        tracks.append(tracked_now(before, position))
        start = end
    for k in range(n):  # the first token comes from the prefill; each later one is a decode forward
        before = strat.counters.state_copies
        strat.decode(req, [10**6 + k])
        if (position := tracked_now(before, req.track_seqlen)) is not None:
            tracks.append(position)
    phase[0] = "finish"
    strat.finish(req)
    return {"tracks": tracks, "donated": donated, "slots": slots}


def reference_match(case: Case, semantics: str = "0.5.23") -> int | None:
    """The branch point ``MambaRadixTree.match_prefix`` reports: state ends at ``best``, KV reaches ``kv``."""
    page, best, kv = case["P"], case["best"], case["kv"]
    tree = MambaRadixTree(KVPool(1 << 20), StatePool(16), make_policy("lru"), page_size=page,
                          chunk_size=cache_chunk_size(case["C"], semantics), semantics=semantics)
    tokens = list(range(1, kv + 1))
    assert tree.kv_pool.alloc(kv)
    if best > 0:
        tree.insert(tokens[:best], tree.state_pool.alloc())
    deeper = tree.insert(tokens, tree.state_pool.alloc(), prev_prefix_len=best)
    if kv > best:
        tree._tombstone(deeper.node)  # the deeper state was evicted, its KV stays: a KV hit past the state
    match = tree.match_prefix(tokens + [-1] * page)
    assert match.prefix_len == best, (case, match.prefix_len)
    return match.branch_seqlen


# ---------------------------------------------------------------- SGLang, once
@pytest.fixture(scope="module", params=list(RELEASES))
def oracle(request: pytest.FixtureRequest) -> dict[str, Any]:
    version: str = request.param
    if not env_ready(version):
        # CI builds the venv first: missing there is a failure, never a quiet skip.
        (pytest.fail if os.environ.get("CI") or os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG") else pytest.skip)(
            f"SGLang {version} venv missing: run bash tests/sglang_oracle/build_env.sh {version}")
    cases = {"life": life_cases(version), "match": match_cases()}
    proc = warm_release.run(env_python(version), [str(RELEASES[version][0])], input=json.dumps(cases), timeout=600,
                            env=warm_release.oracle_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    reply: dict[str, Any] = json.loads(proc.stdout)
    assert reply["version"] == version
    return {"cases": cases, **reply}


def _report(version: str, kind: str, bad: list[str], total: int) -> str:
    return (f"{len(bad)} of {total} {kind} cases differ from SGLang {version}; the first ones:\n"
            + "\n".join(bad[:8]))


def test_tracks_donations_and_slots_equal_sglang(oracle: dict[str, Any]) -> None:
    cases, version = oracle["cases"]["life"], oracle["version"]
    bad = []
    for i, (case, sg) in enumerate(zip(cases, oracle["life"], strict=True)):
        ref = reference_life(case, version)
        diffs = [f"    {k}: sglang={sg[k]} reference={ref[k]}" for k in ("tracks", "donated", "slots")
                 if sg[k] != ref[k]]
        if diffs:
            bad.append(f"  life case #{i} {case}:\n" + "\n".join(diffs))
    assert not bad, _report(version, "life", bad, len(cases))
    # the cases exercise what is compared: decode tracks, both donation kinds, 1 and 2 ping-pong slots (0.5.9: 2
    # with and without overlap)
    assert sum(len(r["tracks"]) > len(r["donated"]) for r in oracle["life"]) > len(cases) // 4
    assert {d[0] for r in oracle["life"] for d in r["donated"]} == {"ckpt", "finish"}
    assert {r["slots"] for r in oracle["life"]} == ({3} if version == "0.5.9" else {2, 3})
    assert {c["overlap"] for c in cases} == {False, True}
    if version in LAZY_RELEASES:  # lazy: one ping-pong slot; some failing cases lose the finish their twins donate
        lazy = {json.dumps(c, sort_keys=True): r for c, r in zip(cases, oracle["life"], strict=True) if c.get("lazy")}
        assert {r["slots"] for r in lazy.values()} == {2}
        finishes = {key: any(d[0] == "finish" for d in r["donated"]) for key, r in lazy.items()}
        twins = [(finishes[json.dumps({k: v for k, v in json.loads(key).items() if k != "fail"}, sort_keys=True)],
                  done) for key, done in finishes.items() if json.loads(key).get("fail")]
        assert (True, False) in twins and (True, True) in twins


def test_branch_point_equals_sglang(oracle: dict[str, Any]) -> None:
    cases, version = oracle["cases"]["match"], oracle["version"]
    bad = [f"  match case #{i} {case}: sglang={sg} reference={ref}"
           for i, (case, sg) in enumerate(zip(cases, oracle["match"], strict=True))
           if sg != (ref := reference_match(case, version))]
    assert not bad, _report(version, "match", bad, len(cases))
    assert any(b is None for b in oracle["match"]) and any(b is not None for b in oracle["match"])
