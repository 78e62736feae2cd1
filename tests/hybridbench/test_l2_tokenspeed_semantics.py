"""``+experiment=l2`` on the reference server with TokenSpeed's cache semantics (``engine.cache_semantics=tokenspeed``).

TokenSpeed's l2 arm keeps KV **and** Mamba states on the host (``--enable-mamba-l2``), and a hybrid hit needs both;
its KV host tier alone (the seed's launch) can never give one after device eviction (docs/engines/tokenspeed.md; the
``tokenspeed`` tier checks both against the real scheduler). Here the whole harness runs that cache on the
reference server, sequentially (so the order, the evictions and every hit are deterministic), on a load small
enough for a CPU: once with the Mamba host tier, once with the KV host tier only.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hybridbench.plan.arms import plan_arm
from hybridbench.probes.exact_hits import predictor_config
from reference_impl.engine.config import EngineConfig
from reference_impl.server.args import UsageError, parse_config

ROOT = Path(__file__).resolve().parents[2]
SMALL_L2 = ["+experiment=l2", "engine=reference", "model=reference-tiny", "engine.cache_semantics=tokenspeed",
            "workloads.swebench.params.num_sessions=12", "workloads.swebench.params.max_turns=4",
            "workloads.swebench.params.max_input=9000", "engine.kv_tokens=2500", "load.kind=closed",
            "load.max_concurrency=1", "checks.enabled=[survival,cache_hits,evictions,host_hits]"]


def hb(run: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    proc = subprocess.run([sys.executable, "-m", "hybridbench", *SMALL_L2, *args, f"hydra.run.dir={run}"],
                          capture_output=True, text=True, timeout=600, check=False, cwd=ROOT)
    bundle = json.loads((run / "bundle.json").read_text()) if (run / "bundle.json").exists() else {}
    return proc, bundle


def hits(run: Path, arm: str) -> list[int]:
    recs = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]
    return [r["cached_tokens"] for r in sorted(recs, key=lambda r: r["request_index"]) if r["arm"] == arm]


def verdicts(bundle: dict[str, Any], arm: str) -> dict[str, str]:
    return {f"{c['check']}:{c['workload']}": c["status"] for c in bundle["checks"] if c["arm"] == arm}


def test_host_hits_only_where_kv_and_state_were_both_kept(tmp_path: Path) -> None:
    both, kv_only = tmp_path / "both", tmp_path / "kv_only"
    proc, bundle = hb(both)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    server = {t["arm"]: t["server"] for t in bundle["trials"]}
    assert "--cache-semantics" in bundle["provenance"]["engine"]["extra"]["commands"]["l2"]
    # Both arms lost prefixes from the device; only the host tier brought some back, as deeper hits.
    assert server["branching"]["evicted_tokens"] > 0 and server["l2"]["evicted_tokens"] > 0
    assert server["branching"]["host_loaded_tokens"] == 0 < server["l2"]["host_loaded_tokens"]
    device, host = hits(both, "branching"), hits(both, "l2")
    assert all(h >= d for d, h in zip(device, host, strict=True)) and sum(host) > sum(device)
    assert verdicts(bundle, "l2")["host_hits:swebench"] == "pass"
    # The exact_hits probe mirrors the server's TokenSpeed semantics (it reads --cache-semantics from /server_info).
    assert verdicts(bundle, "branching")["cache_hits:swebench/exact"] == "pass"

    proc, bundle = hb(kv_only, "arms=[l2]", "checks.baseline_arm=l2", "engine.extra_args=[--host-tier-kv-only]")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]  # host_hits fails: nothing came back
    (trial,) = bundle["trials"]
    assert trial["server"]["evicted_tokens"] > 0 and trial["server"]["host_loaded_tokens"] == 0
    assert hits(kv_only, "l2") == device  # host KV without host states: exactly the device-only hits
    assert verdicts(bundle, "l2")["host_hits:swebench"] == "fail"


@pytest.mark.parametrize(("args", "needle"), [
    (["arms=[lru]", "checks.baseline_arm=lru"], "engine.cache_semantics=tokenspeed: TokenSpeed always keeps"),
    # TokenSpeed evicts by its own LRU: a seglen arm would silently run LRU, so seglen vs LRU compared LRU with LRU.
    (["arms=[branching,seglen]", "checks.baseline_arm=branching"],
     "arm seglen: engine.cache_semantics=tokenspeed: TokenSpeed evicts least recently used"),
    (["engine=sim"], "only engine=reference mirrors another engine's cache"),
    (["engine.cache_semantics=vllm"], "engine.cache_semantics must be one of sglang, tokenspeed"),
])
def test_what_tokenspeed_semantics_cannot_express_is_refused_at_plan_time(tmp_path: Path, args: list[str],
                                                                          needle: str) -> None:
    proc, _ = hb(tmp_path, *args)
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "records.jsonl").exists()


def test_the_server_refuses_what_tokenspeed_cannot_express() -> None:
    assert parse_config(["--arm", "l2", "--cache-semantics", "tokenspeed"]).engine.cache == "tokenspeed"
    kv_only = parse_config(["--arm", "l2", "--cache-semantics", "tokenspeed", "--host-tier-kv-only"]).engine
    assert kv_only.host_kv_only and kv_only.host_state_slots > 0
    with pytest.raises(UsageError, match="always keeps branch-point states"):
        parse_config(["--arm", "lru", "--cache-semantics", "tokenspeed"])
    with pytest.raises(UsageError, match="needs --cache-semantics tokenspeed"):
        parse_config(["--arm", "l2", "--host-tier-kv-only"])
    for argv, named, hint in ((["--arm", "seglen"], "arm seglen evicts by seglen", "branching"),
                              (["--arm", "seglen+l2"], "arm seglen\\+l2 evicts by seglen", "l2"),
                              (["--arm", "branching", "--policy", "seglen"], "--policy seglen", "branching")):
        with pytest.raises(UsageError, match=f"^{named}: .*cannot apply it: TokenSpeed evicts least recently used.*"
                                             f"use --arm {hint},"):
            parse_config([*argv, "--cache-semantics", "tokenspeed"])
    with pytest.raises(ValueError, match="cannot apply to TokenSpeed's cache"):  # nor can the engine be built so
        EngineConfig(kv_tokens=1000, state_slots=16, cache="tokenspeed", policy="seglen")


def test_the_exact_hits_mirror_gives_a_reason_not_a_traceback_for_a_policy_tokenspeed_cannot_apply() -> None:
    info = {"version": "reference-0.1", "cache_semantics": "tokenspeed", "max_total_num_tokens": 4096}
    assert isinstance(predictor_config(plan_arm("branching"), info), EngineConfig)
    reason = predictor_config(plan_arm("seglen"), info)
    assert isinstance(reason, str) and "cannot apply to TokenSpeed's cache" in reason
