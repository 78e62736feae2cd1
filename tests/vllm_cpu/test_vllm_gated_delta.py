"""The gated-delta hybrid (Qwen3-Next's layout: GDN + attention, MoE) on vLLM's CPU build, on both of its x86 paths.

Whether align-mode prefix caching can hit this model depends on the CPU (traced in
docs/evidence/2026-11-28-vllm-cpu-gated-delta.md). vLLM 0.32.0 asks torch whether the CPU has AVX-512 BF16;
if so it loads its ``_C`` build, runs the accelerated GDN kernels, and resets the SSM state cache to float32
(vllm/platforms/cpu.py:301-320). The float32 state doubles the Mamba page, the attention block grows to match
it (platforms/interface.py, ``_align_hybrid_block_size``: 384 tokens for the tiny model) and align mode caches
states only at block boundaries: the smoke load's 300-token shared prefix never fills one block, so nothing
hits. Without AVX-512 BF16 (``_C_AVX512`` or ``_C_AVX2``: AMD Zen 3, older Xeons) the state stays bf16, the
block is 256 tokens, and every request after its group's first hits 256.

So the tests detect the path (vLLM's own kernel selection, run in the env) and assert that path's behaviour:
no hits, seen by hybridbench's own checks, on the accelerated path; on the other, hits in whole blocks that
vLLM's /metrics counters equal, with greedy hit and cache-free replays agreeing (the ``kl`` probe's prefill
variant at temperature 0; align mode keeps no state while decoding, so its decode variant is skipped). The
second test forces the AVX2 path at launch (``cpu_isa/``'s sitecustomize), so an AVX-512 BF16 machine proves
both paths. A change in what either path does (block size, dtype reset, hits) fails with that news.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import vllm_run
from vllm_run import (
    CPU_ISA,
    PYTHON,
    QWEN3NEXT,
    loaded_native,
    native_path,
    needs,
    run_hybridbench,
    server_processes,
    tagged_pids,
)

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
vllm_env_required = vllm_run.vllm_env_required  # the fixture needs() names: found in this namespace

needs_qwen3next = needs(QWEN3NEXT)
SMOKE_LENS = {340}  # gsp smoke: 300-token system prompt + 40-token question
SHARED_PREFIX = 300
GROUPS = 3  # conf/workload/smoke_gsp.yaml: 3 system prompts, 6 questions each
# The tiny model's block (tokens) as vLLM 0.32.0 aligns it, by SSM state dtype: float32 on the accelerated GDN
# path, bf16 otherwise. Mamba page = 2 value heads x 128 x 128 state + 3 x 512 conv, attention page 512 B/token.
BLOCK = {"float32": 384, "bfloat16": 256}
RESET = "Reset SSM cache type to float32 for accelerated GDN mamba backend"
BLOCK_LINE = re.compile(r"Setting attention block size to (\d+) tokens")
NEWS = "UPSTREAM CHANGE in vLLM's CPU gated-delta path: update tests/vllm_cpu and docs/engines/vllm-cpu-notes.md"


def run_gdn(run_dir: Path, force_avx2: bool, vllm_layout: bool = False) -> tuple[int, str, dict[str, Any]]:
    proc, tag = run_hybridbench(
        run_dir, "arms=[lru]", f"model.hf_id={QWEN3NEXT}", "model.hybrid=true", "model.name=tiny-qwen3next",
        "checks.enabled=[survival,cache_hits,kl]", "checks.kl_samples=2", "checks.kl_temperature=0",
        "checks.kl_variants=[prefill,decode]",
        "load.max_concurrency=1", site=CPU_ISA, force_avx2=force_avx2,
        vllm_layout=vllm_layout)
    assert (run_dir / "bundle.json").exists(), proc.stderr[-2000:]
    assert not tagged_pids(tag)  # every process of the server gone: API server, engine core (and worker)
    return proc.returncode, proc.stderr, json.loads((run_dir / "bundle.json").read_text())


def check_gdn_path(run_dir: Path, code: int, stderr: str, bundle: dict[str, Any], path: dict[str, Any], *,
                   processes: frozenset[str] = frozenset({"APIServer", "EngineCore"})) -> None:
    """What the path ``path`` (native_path()) must show; a run that differs fails naming the difference."""
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    assert records and all(r["status"] == "ok" and r["output_tokens"] == 16 for r in records), records[:2]
    assert {r["prompt_tokens"] for r in records} <= SMOKE_LENS
    lru = bundle["provenance"]["engine"]["extra"]["commands"]["lru"]
    assert lru[:5] == [str(PYTHON), "-m", "vllm.entrypoints.cli.main", "serve", str(QWEN3NEXT)]
    assert "--enable-prefix-caching" in lru and lru[lru.index("--mamba-cache-mode") + 1] == "align"
    log = (run_dir / "logs" / "server-lru.log").read_text(errors="replace")
    # The server's own account of its path: the native build its processes imported (vLLM's import_kernels, seen
    # by cpu_isa), the SSM dtype reset logged on the accelerated path only, and the block aligned to that dtype.
    assert server_processes(log) == processes  # ONE_WORKER_PROCESS: the worker in the engine core, unless vllm_layout
    loaded = loaded_native(log)
    dtype = "float32" if RESET in log else "bfloat16"
    sizes = [int(s) for s in BLOCK_LINE.findall(log)]
    if loaded != {path["native"]} or (dtype == "float32") != path["accelerated_gdn"] or sizes != [BLOCK[dtype]]:
        pytest.fail(f"{NEWS}: torch's predicates say {path}, the server loaded {sorted(loaded)}, logged SSM dtype "
                    f"{dtype} and block size(s) {sizes}")
    block = BLOCK[dtype]
    hits = [r["cached_tokens"] for r in records]
    assert all(h is not None for h in hits)  # reported (--enable-prompt-tokens-details), not missing
    server = bundle["trials"][0]["server"]
    # vLLM's own counters: its queries saw exactly the prompts sent, its hits are the requests' hits.
    assert server["metrics_prompt_tokens"] == sum(r["prompt_tokens"] for r in records), server
    assert server["metrics_cached_tokens"] == sum(hits), (server, hits)
    checks = {(c["check"], c["workload"]): c for c in bundle["checks"]}
    kl = {w: c for (name, w), c in checks.items() if name == "kl"}
    assert set(kl) == {"gsp/prefill", "gsp/decode"}, sorted(checks)
    # align mode keeps no state while decoding (a request decoded past a 256-token block end on the bf16 path hit
    # only its prompt's block): the decode probe is skipped as such a hit cannot happen, never failed
    decode = kl.pop("gsp/decode")
    assert decode["status"] == "skip" and "align cache mode" in decode["detail"], decode
    if block > SHARED_PREFIX:  # no whole block in any shared prefix: nothing can hit, and hybridbench says so
        if any(hits):
            pytest.fail(f"{NEWS}: {path}, block {block} > the {SHARED_PREFIX}-token shared prefix, yet hits {hits}")
        assert code == 1, stderr[-2000:]  # the run's verdict: fail
        assert checks[("cache_hits", "gsp")]["status"] == "fail", checks[("cache_hits", "gsp")]
        assert all(c["status"] == "fail" and c["detail"].startswith("only 0 of 2 probe(s) hit")
                   for c in kl.values()), kl
        return
    # Hits at whole blocks only (align mode keeps GDN states at block ends): one request at a time, so each
    # group's first request misses and every other request hits its group's one block.
    if hits.count(0) != GROUPS or set(hits) != {0, block}:
        pytest.fail(f"{NEWS}: {path}, block {block}: hits {hits}, expected {block} on all but one request per group")
    assert code == 0, stderr[-2000:]
    assert checks[("cache_hits", "gsp")]["status"] == "pass", checks[("cache_hits", "gsp")]
    # Greedy (temperature 0) hit and cache-free replays agree: every probe hits, mean k3 under the 0.003 gate
    # (measured 1e-6 to 5e-5: bf16 rounding of a prefill resumed from a cached state, not a different answer).
    c = kl["gsp/prefill"]
    assert c["status"] == "pass" and "over 2 hit(s) of 2" in c["detail"] and c["observed"] < 0.003, kl


@needs_qwen3next
def test_gated_delta_hybrid_hits_as_this_cpus_vllm_path_says(tmp_path: Path) -> None:
    """Unforced: whatever this CPU is, the path vLLM takes here and that path's hits."""
    path = native_path()
    code, stderr, bundle = run_gdn(tmp_path, force_avx2=False)
    check_gdn_path(tmp_path, code, stderr, bundle, path)


@needs_qwen3next
def test_gated_delta_hybrid_on_the_forced_avx2_path_hits_whole_blocks(tmp_path: Path) -> None:
    """vLLM's AVX2-only path (an AMD Zen 3's), forced on this machine at launch: ``_C_AVX2`` loaded, bf16 state,
    256-token blocks, hits. On a CPU that takes that path anyway the test above has just run it."""
    if native_path()["native"] == "vllm._C_AVX2":
        pytest.skip("this CPU takes vLLM's AVX2 path unforced: the unforced test ran it")
    path = native_path(force_avx2=True)
    assert (path["native"], path["accelerated_gdn"], path["amx"]) == ("vllm._C_AVX2", False, False), path
    # vLLM's own layout here (worker spawned apart): the one healthy server whose stop must take a worker with it
    code, stderr, bundle = run_gdn(tmp_path, force_avx2=True, vllm_layout=True)
    check_gdn_path(tmp_path, code, stderr, bundle, path, processes=frozenset({"APIServer", "EngineCore", "Worker"}))
