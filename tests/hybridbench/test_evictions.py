"""Eviction pressure: every trial records what it evicted, and a policy comparison that evicted nothing is
inconclusive (never a pass, exit 1); published results sit beside the run, scored only when comparable."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hybridbench.checks.base import CheckInput
from hybridbench.checks.evictions import evictions, host_hits
from hybridbench.config.schema import ChecksCfg
from hybridbench.metrics.published import compare_published
from reference_impl.engine.config import EngineConfig
from reference_impl.engine.core import EngineCore
from reference_impl.server.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]


def check(snaps: dict[str, list[dict[str, Any]]]) -> dict[str, tuple[str, str]]:
    inp = CheckInput(ChecksCfg(), ("disabled", "lru", "seglen"), "lru", ("w",), {},  {},
                     {("w", arm): s for arm, s in snaps.items()}, 0, cache_off=frozenset({"disabled"}))
    return {r.arm: (r.status, r.detail) for r in evictions(inp)}


def test_an_arm_that_evicted_nothing_or_cannot_say_is_inconclusive() -> None:
    got = check({"disabled": [{}], "lru": [{"evicted_tokens": 120, "evicted_states": 3}] * 2,
                 "seglen": [{"evicted_tokens": 50, "evicted_states": 0}, {"evicted_tokens": 0, "evicted_states": 0}]})
    assert "disabled" not in got  # no cache, no policy to exercise
    assert got["lru"][0] == "pass" and "240 KV tokens, 6 states" in got["lru"][1]
    assert got["seglen"][0] == "inconclusive" and "1 of 2 repeat(s)" in got["seglen"][1]
    unknown = check({"lru": [{"evicted_tokens": None, "evicted_states": None}], "seglen": []})
    assert unknown["lru"][0] == "inconclusive" and "without eviction counters" in unknown["lru"][1]
    assert "unknown KV tokens, unknown states" in unknown["lru"][1]
    assert unknown["seglen"][0] == "inconclusive"
    states_only = check({"lru": [{"evicted_tokens": None, "evicted_states": 4}], "seglen": [{"evicted_states": 1}]})
    assert states_only["lru"][0] == states_only["seglen"][0] == "pass"
    assert "unknown KV tokens, 4 states" in states_only["lru"][1] and "0 KV tokens" not in states_only["lru"][1]


def test_an_unknown_counter_is_never_evidence_of_eviction() -> None:
    """SGLang has no evicted-state counter: its 0 evicted tokens beside an unknown state count is no eviction
    (inconclusive), and the report says 'unknown', never '0 states'; likewise the other way round."""
    sglang_like = check({"lru": [{"evicted_tokens": 0, "evicted_states": None}] * 2,
                         "seglen": [{"evicted_tokens": 300, "evicted_states": None}]})
    assert sglang_like["lru"][0] == "inconclusive" and "0 KV tokens, unknown states" in sglang_like["lru"][1]
    assert sglang_like["seglen"] == ("pass", "300 KV tokens, unknown states evicted over 1 repeat(s)")
    tokens_unknown = check({"lru": [{"evicted_tokens": None, "evicted_states": 0}], "seglen": []})
    assert tokens_unknown["lru"][0] == "inconclusive" and "unknown KV tokens, 0 states" in tokens_unknown["lru"][1]
    mixed = check({"lru": [{"evicted_tokens": 90, "evicted_states": None}, {"evicted_tokens": None,
                                                                               "evicted_states": 2}], "seglen": []})
    assert mixed["lru"][0] == "pass"
    assert "90 KV tokens (unknown in 1 of 2 repeat(s)), 2 states (unknown in 1 of 2 repeat(s))" in mixed["lru"][1]


def test_reference_server_eviction_counters_survive_a_flush() -> None:
    """A flush builds a new tree whose counters start at 0; the server's lifetime counters must not go back."""
    metrics = Metrics()
    core = EngineCore(EngineConfig(kv_tokens=1000, state_slots=20, cache="no_buffer"))
    core.tree.tokens_evicted_total, core.tree.states_evicted_total = 70, 4
    metrics.snapshot(core)
    assert (metrics.evicted_tokens, metrics.evicted_states) == (70, 4)
    fresh = EngineCore(EngineConfig(kv_tokens=1000, state_slots=20, cache="no_buffer"))
    metrics.snapshot(fresh)
    assert (metrics.evicted_tokens, metrics.evicted_states) == (70, 4)
    fresh.tree.tokens_evicted_total = 5
    metrics.snapshot(fresh)
    assert metrics.evicted_tokens == 75
    assert "sglang:evicted_tokens_total" in metrics.render("m")


def published(**kw: Any) -> dict[str, Any]:
    base = {"metric": "mean_ttft_ms", "workload": "w", "arm": "seglen", "baseline_arm": "lru", "value": -0.3,
            "source": "seed", "engine": "sglang", "hardware": "H100", "model": "m", "scale": 1, "tolerance": 0.25}
    return {**base, **kw}


def config(engine: str = "sglang", scale: int = 1, *rows: dict[str, Any]) -> dict[str, Any]:
    return {"engine": {"name": engine, "workload_scale": 1}, "model": {"name": "m"},
            "workloads": {"w": {"scale": scale}}, "published": list(rows)}


AGG = {"w": {"lru": {"mean_ttft_ms": 100.0, "failed": 0}, "seglen": {"mean_ttft_ms": 80.0, "failed": 0}}}


@pytest.mark.parametrize(("value", "mark", "direction"), [
    (-0.3, "reproduced", "same"), (-0.5, "not reproduced", "same"), (0.1, "not reproduced", "opposite"),
])
def test_published_relative_change_is_reproduced_only_in_its_direction_and_size(value: float, mark: str,
                                                                                 direction: str) -> None:
    (row,) = compare_published(config("sglang", 1, published(value=value)), AGG)
    assert row["observed"] == pytest.approx(-0.2) and row["mark"] == mark and row["direction"] == direction


def test_another_engine_or_scale_is_not_comparable_but_still_shown() -> None:
    (row,) = compare_published(config("reference", 32, published()), AGG)
    assert row["mark"] == "not comparable" and "engine reference vs sglang" in row["why"] and "1/32" in row["why"]
    assert row["observed"] == pytest.approx(-0.2) and row["direction"] == "same"
    (absolute,) = compare_published(config("sglang", 1, published(metric="failed", baseline_arm="", value=0,
                                                                    tolerance=0)), AGG)
    assert absolute["mark"] == "reproduced"
    (missing,) = compare_published(config("sglang", 1, published(arm="marconi")), AGG)
    assert missing["mark"] == "not comparable" and missing["observed"] is None


def hb(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hybridbench", *args], capture_output=True, text=True,
                          timeout=300, check=False, cwd=ROOT)


def test_sim_trials_record_evictions_and_a_quiet_comparison_exits_1_inconclusive(tmp_path: Path) -> None:
    common = ("+experiment=smoke", "engine=sim", "arms=[lru,seglen]", "checks.enabled=[survival,evictions]")
    quiet = hb(*common, f"hydra.run.dir={tmp_path / 'quiet'}")
    assert quiet.returncode == 1, quiet.stderr
    bundle = json.loads((tmp_path / "quiet" / "bundle.json").read_text())
    assert bundle["verdict"] == "inconclusive"
    assert all(t["server"]["evicted_tokens"] == 0 for t in bundle["trials"])
    assert "**INCONCLUSIVE**" in (tmp_path / "quiet" / "report.md").read_text()
    pressed = hb(*common, "engine.kv_tokens=600", "engine.max_mamba_cache_size=12", f"hydra.run.dir={tmp_path / 'p'}")
    assert pressed.returncode == 0, pressed.stdout + pressed.stderr
    bundle = json.loads((tmp_path / "p" / "bundle.json").read_text())
    assert all(t["server"]["evicted_tokens"] + t["server"]["evicted_states"] > 0 for t in bundle["trials"])
    # The same run as an engine that does not count evicted KV tokens and counted no state eviction: the saved
    # run re-scored from its files must not pass, and its report says "unknown", not "0 KV tokens".
    for t in bundle["trials"]:
        t["server"].update(evicted_tokens=None, evicted_states=0)
    (tmp_path / "p" / "bundle.json").write_text(json.dumps(bundle))
    rescored = subprocess.run([sys.executable, "-m", "hybridbench.rescore", str(tmp_path / "p")],
                              capture_output=True, text=True, timeout=120, check=False, cwd=ROOT)
    assert rescored.returncode == 1, rescored.stdout + rescored.stderr
    assert json.loads((tmp_path / "p" / "bundle.json").read_text())["verdict"] == "inconclusive"
    report = (tmp_path / "p" / "report.md").read_text()
    assert "| evicted KV tokens / repeat | unknown | unknown |" in report
    assert "unknown KV tokens, 0 states in all" in report and "0 KV tokens" not in report


def test_host_hits_pass_only_when_the_device_evicted_and_the_host_loaded_back() -> None:
    def judged(snaps: list[dict[str, Any]]) -> tuple[str, str]:
        inp = CheckInput(ChecksCfg(), ("branching", "l2"), "branching", ("w",), {}, {},
                         {("w", "l2"): snaps, ("w", "branching"): snaps}, 0)
        (result,) = host_hits(inp)  # only the arm with a host tier is judged
        assert result.arm == "l2"
        return result.status, result.detail

    def verdict(snaps: list[dict[str, Any]]) -> str:
        return judged(snaps)[0]

    assert verdict([{"evicted_tokens": 900, "evicted_states": 4, "host_loaded_tokens": 256}] * 2) == "pass"
    assert verdict([{"evicted_tokens": 900, "evicted_states": 4, "host_loaded_tokens": 0}]) == "fail"
    assert verdict([{"evicted_tokens": 0, "evicted_states": 0, "host_loaded_tokens": 0}]) == "inconclusive"
    assert verdict([{"evicted_tokens": 900, "evicted_states": 4}]) == "inconclusive"  # no counter: cannot say
    # No eviction count is not "evicted nothing": the detail says the count is unknown
    status, detail = judged([{"evicted_tokens": 900, "evicted_states": 4, "host_loaded_tokens": 256},
                             {"evicted_tokens": None, "evicted_states": None, "host_loaded_tokens": 0}])
    assert (status, detail) == ("inconclusive", "no device eviction count for 1 of 2 repeat(s): whether the host "
                                                "tier had anything to rescue is unknown")
    # SGLang counts no evicted states: 0 KV tokens beside no state count is not "nothing evicted" either
    assert judged([{"evicted_tokens": 0, "evicted_states": None, "host_loaded_tokens": 0}])[1].startswith(
        "no device eviction count for 1 of 1 repeat(s)")
    # both counted, both 0: the device evicted nothing
    assert judged([{"evicted_tokens": 0, "evicted_states": 0, "host_loaded_tokens": 0}])[1].startswith(
        "the device evicted nothing")


def test_sim_l2_trials_record_host_load_backs(tmp_path: Path) -> None:
    run = tmp_path / "l2"
    # Small device pools given explicitly (the experiment's simulator pools come from GPU memory and need its
    # full-size load, test_sim_eviction_pressure.py): this is about the records, not the sizing.
    proc = hb("+experiment=l2", "engine=sim", "engine.workload_scale=4", "engine.max_vocab=4096",
              "workloads.swebench.params.num_sessions=24", "engine.kv_tokens=60000", "engine.max_mamba_cache_size=40",
              "checks.enabled=[survival,evictions,host_hits]", f"hydra.run.dir={run}")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    trials = {t["arm"]: t["server"] for t in json.loads((run / "bundle.json").read_text())["trials"]}
    assert trials["branching"]["host_loaded_tokens"] == 0 < trials["l2"]["host_loaded_tokens"]
    assert "host-loaded KV tokens / repeat" in (run / "report.md").read_text()
