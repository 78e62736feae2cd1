"""Speed side by side: reference_impl vs SGLang's real hybrid cache on the same 10,000-op workload.

Workload (docs/concepts/reference-cache.md): 50% match_prefix / 50% insert; tokens from a vocabulary
of 50, each key one of 40 random prefixes (length 1-47) plus a random suffix (length 0-31); every
insert carries its own state slot; an allocation failure triggers an explicit evict; kv 8192 tokens,
128 state slots, seed 0. SGLang runs in its own venv (tests/sglang_oracle/build_env.sh) through
tests/sglang_oracle/sglang_driver.py; only the operation loop is timed on either side.

    python benchmarks/sglang_oracle_speed.py [--ops 10000] [--seed 0]
"""

from __future__ import annotations

import importlib
import random
import sys
import time
from pathlib import Path
from typing import Any

from whole_command import count  # a sibling: run as a script

from hybridbench.errors import OneLineParser
from reference_impl.policies.registry import make_policy
from reference_impl.radix.pools import KVPool, StatePool
from reference_impl.radix.tree import MambaRadixTree

ORACLE_DIR = Path(__file__).resolve().parents[1] / "tests" / "sglang_oracle"

Workload = list[tuple[str, list[int]]]


def workload(num_ops: int, seed: int) -> Workload:
    rng = random.Random(seed)
    prefixes = [[rng.randrange(50) for _ in range(rng.randint(1, 47))] for _ in range(40)]
    ops: Workload = []
    for _ in range(num_ops):
        tokens = rng.choice(prefixes) + [rng.randrange(50) for _ in range(rng.randint(0, 31))]
        ops.append(("match" if rng.random() < 0.5 else "insert", tokens))
    return ops


def run_reference(ops: Workload, semantics: str, kv_size: int, states: int) -> dict[str, Any]:
    tree = MambaRadixTree(KVPool(kv_size), StatePool(states), make_policy("lru"), semantics=semantics)
    kv, sp = tree.kv_pool, tree.state_pool
    sum_hit = 0
    t0 = time.perf_counter()
    for op, tokens in ops:
        if op == "match":
            sum_hit += tree.match_prefix(tokens).prefix_len
            continue
        need = len(tokens) - kv.available
        if need > 0:
            tree.evict(num_tokens=need)
        if not kv.alloc(len(tokens)):
            continue
        slot = sp.alloc()
        if slot is None:
            tree.evict(num_states=1)
            slot = sp.alloc()
        if slot is None:
            kv.free(len(tokens))
            continue
        r = tree.insert(tokens, slot)
        if semantics == "0.5.9":
            kv.free(r.duplicate_kv)
        if r.state_exists:
            sp.free(slot)
    elapsed = time.perf_counter() - t0
    return {
        "seconds": elapsed,
        "sum_hit": sum_hit,
        "states": tree.total_states(),
        "cached_tokens": tree.total_kv_tokens(),
    }


def run_sglang(ops: Workload, version: str, backend: str | None, kv_size: int, states: int) -> dict[str, Any] | str:
    if str(ORACLE_DIR) not in sys.path:
        sys.path.insert(0, str(ORACLE_DIR))
    oracle = importlib.import_module("oracle_client")  # lives beside the tests, not in a package
    if not oracle.env_ready(version):
        return f"venv missing (bash tests/sglang_oracle/build_env.sh {version})"
    driver = oracle.Driver(version)
    try:
        driver.call({"op": "init", "version": version, "backend": backend, "kv_size": kv_size, "mamba_size": states})
        reply: dict[str, Any] = driver.call({"op": "bench", "ops": [[op, tokens] for op, tokens in ops]})
        return reply
    finally:
        driver.close()


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--ops", type=count(1), default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kv", type=count(1), default=8192)
    ap.add_argument("--states", type=count(1), default=128)
    args = ap.parse_args(argv)
    ops = workload(args.ops, args.seed)
    rows: list[tuple[str, dict[str, Any] | str]] = [
        ("reference_impl (0.5.23 semantics)", run_reference(ops, "0.5.23", args.kv, args.states)),
        ("reference_impl (0.5.9 semantics)", run_reference(ops, "0.5.9", args.kv, args.states)),
        ("SGLang 0.5.23, Rust core", run_sglang(ops, "0.5.23", "rust", args.kv, args.states)),
        ("SGLang 0.5.23, Python core", run_sglang(ops, "0.5.23", "python", args.kv, args.states)),
        ("SGLang 0.5.9 MambaRadixCache", run_sglang(ops, "0.5.9", None, args.kv, args.states)),
    ]
    print(f"{args.ops} ops, seed {args.seed}, kv {args.kv}, states {args.states}")
    header = ("cache", "ops/s", "µs/op", "sum of hits", "states", "cached tokens")
    print("| {:<36} | {:>8} | {:>7} | {:>11} | {:>6} | {:>13} |".format(*header))
    print(f"|{'-' * 38}|{'-' * 10}|{'-' * 9}|{'-' * 13}|{'-' * 8}|{'-' * 15}|")
    for name, r in rows:
        if isinstance(r, str):
            print(f"| {name:<36} | {r} |")
            continue
        secs = float(r["seconds"])
        print(
            f"| {name:<36} | {args.ops / secs:>8.0f} | {secs / args.ops * 1e6:>7.1f} | {r['sum_hit']:>11} "
            f"| {r['states']:>6} | {r['cached_tokens']:>13} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
