"""Every eviction-policy experiment's simulator configuration evicts by construction (issue 15): pools from the
simulator's GPU memory model (never the reference engine's small pools), loads that outgrow them, and no request
that fails for being longer than the pool. Runs through the real config (``python -m hybridbench``, Hydra).

At full size the three runs take minutes, so the test shrinks both sides by the same measure: every load 4x
(``engine.workload_scale``: lengths and counts, so ~16x fewer tokens live) and the memory left for the pools 16x
(a lower ``--mem-fraction-static``, through the same sizing code). Pressure is kept; a load that only evicted
because the pools were the reference engine's would not be found out by this, hence the compose checks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from hybridbench.config.schema import RunCfg
from hybridbench.config.store import register
from reference_impl.engine.cost_model import CostModel
from reference_impl.engine.hardware import get_gpu
from reference_impl.models import get_model

ROOT = Path(__file__).resolve().parents[2]
SHRINK = 4  # workload scale; the pools' memory shrinks SHRINK**2
# The loads that cannot evict at GPU scale, so declare they are not judged on evictions (workloads.W.judged_by in
# conf/sizing/seglen/gpu.yaml): ShareGPT first turns cache nothing (a short prompt, 128 output tokens, no tracked
# state); that load is the PR's TTFT and throughput regression check. The SWE-bench traces, cut to their first two
# sessions to fit the budget (keep_sessions), fit the pools whole.
QUIET = {("seglen", "sharegpt"), ("seglen", "swebench")}


def sim_cfg(experiment: str, engine: str = "sim", *more: str) -> RunCfg:
    register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose(config_name="config", overrides=[f"+experiment={experiment}", f"engine={engine}", *more])
    run = OmegaConf.to_object(cfg)
    assert isinstance(run, RunCfg)
    return run


def shrunk_fraction(cfg: RunCfg) -> float:
    """The memory fraction that leaves the pools 1/SHRINK**2 of the memory ``cfg`` leaves them."""
    timer = CostModel(get_model(cfg.model.name), get_gpu(cfg.engine.gpu), tp=cfg.engine.tp,
                      quantization=cfg.model.quantization)
    hbm = timer.gpu.hbm_bytes * timer.tp
    budget = hbm * cfg.engine.mem_fraction_static - timer.total_weight_bytes()
    return (timer.total_weight_bytes() + budget / SHRINK**2) / hbm


@pytest.mark.parametrize("experiment", ["seglen", "survival", "l2"])
def test_sim_configuration_sizes_pools_from_gpu_memory(experiment: str) -> None:
    cfg = sim_cfg(experiment)
    assert (cfg.engine.kv_tokens, cfg.engine.max_mamba_cache_size) == (0, 0), "pools must come from memory"
    assert all(w.scale == 1 for w in cfg.workloads.values()), "the simulator runs full-size loads"
    reference = sim_cfg(experiment, "reference")  # the reference engine keeps its small pools
    assert reference.engine.kv_tokens > 0 and reference.engine.max_mamba_cache_size > 0
    # the GPU configuration's caveats stay its own (the reference engine's l2 has one of its own: one repeat)
    assert not {w.note for w in cfg.workloads.values() if w.note} & {w.note for w in reference.workloads.values()}
    # A command-line value still wins over the experiment's per-engine one.
    assert sim_cfg(experiment, "sim", "engine.kv_tokens=5000").engine.kv_tokens == 5000
    if experiment == "seglen":
        assert (cfg.model.name, cfg.engine.tp, cfg.engine.mem_fraction_static) == ("qwen3.5-9b", 1, 0.70)
        assert cfg.engine.track_interval == 256


@pytest.mark.parametrize("experiment", ["seglen", "survival", "l2"])
def test_sim_configuration_evicts_in_every_compared_arm(experiment: str, tmp_path: Path) -> None:
    cfg = sim_cfg(experiment)
    arms = [a for a in cfg.arms if a != "disabled"]  # no cache, nothing to evict: not a compared arm here
    proc = subprocess.run(
        [sys.executable, "-m", "hybridbench", f"+experiment={experiment}", "engine=sim", "repeats=1",
         f"arms=[{','.join(arms)}]", f"engine.workload_scale={SHRINK}",
         f"engine.mem_fraction_static={shrunk_fraction(cfg):.6f}", f"hydra.run.dir={tmp_path}"],
        capture_output=True, text=True, timeout=900, check=False, cwd=ROOT)
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    bundle = json.loads((tmp_path / "bundle.json").read_text())
    checks = {(c["check"], c["workload"], c["arm"]): c["status"] for c in bundle["checks"]}
    for trial in bundle["trials"]:
        assert trial["summary"]["failed"] == 0, trial["trial_id"]  # no request longer than the pool
        assert checks["survival", trial["workload"], trial["arm"]] == "pass"
    for workload in cfg.workloads:
        for arm in arms:
            expected = "skip" if (experiment, workload) in QUIET else "pass"  # skip: not judged, never red
            assert checks["evictions", workload, arm] == expected, (workload, arm)
    report = (tmp_path / "report.md").read_text()
    for workload in cfg.workloads:  # an inconclusive row by design is explained in the report, the rest are not
        section = report.split(f"## {workload}\n", 1)[1].split("\n## ", 1)[0]
        explained = section.lstrip().startswith("Note: ") and "judged on those alone" in section
        assert explained == ((experiment, workload) in QUIET), workload
    if experiment == "l2":
        assert checks["host_hits", "swebench", "l2"] == "pass"
