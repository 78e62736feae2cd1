"""`engine=vllm` with `--api-key` in engine.extra_args, against the real vLLM CPU build: the server refuses every `/v1`
request without the key (vllm/entrypoints/serve/middleware/authenticate.py), so the run's load and its `kl` probe
succeed only if hybridbench sends it; and the key is on no file of the run. Before hybridbench sent it, every request
of such a run was answered HTTP 401. One server start (one arm).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import vllm_run
from vllm_run import LLAMA, needs, run_hybridbench, tagged_pids

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
vllm_env_required = vllm_run.vllm_env_required  # the fixture needs() names: found in this namespace

KEY = "sk-VLLMKEY7f3a9c"


@needs(LLAMA)
def test_a_server_started_with_an_api_key_serves_the_whole_run_and_the_key_stays_off_disk(tmp_path: Path) -> None:
    proc, tag = run_hybridbench(tmp_path, "arms=[lru]", "checks.enabled=[survival,kl]", "checks.kl_samples=1",
                                f"engine.extra_args=[--enforce-eager,--api-key,{KEY}]")
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert records and all(r["status"] == "ok" and not r["error"] for r in records), [r["error"] for r in records]
    assert sum(r["cached_tokens"] or 0 for r in records) > 0  # real hits, reported by the guarded /v1/completions
    bundle = json.loads((tmp_path / "bundle.json").read_text())
    assert bundle["trials"][0]["server"]["metrics_cached_tokens"] is not None  # /metrics read (unguarded)
    kl = [c for c in bundle["checks"] if c["check"] == "kl"]
    assert kl and all(c["status"] == "pass" for c in kl), kl  # the probe's /v1/completions got through too
    command = bundle["provenance"]["engine"]["extra"]["commands"]["lru"]
    assert command[command.index("--api-key") + 1] == "***"
    log = (tmp_path / "logs" / "server-lru.log").read_text(errors="replace")
    assert "Resetting prefix cache" in log  # the flush reached the server
    leaks = [str(p) for p in tmp_path.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert not leaks, leaks
    assert KEY not in proc.stdout + proc.stderr
    assert not tagged_pids(tag)
