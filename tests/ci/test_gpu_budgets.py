"""Each experiment's GPU configuration fits the wall time it states (sizing.budget_min), by the simulator's forecast.

The forecast is the preview's (``hybridbench plan``): every (arm, workload) trial of the experiment's GPU
configuration simulated on its target GPU, model and TP, times its minimum repeats, plus a server start at every
change of arm: trials run repeat by repeat, each arm's block on its own server (engines/server.py ``launch``), so a
run of A > 1 arms and R repeats starts A x R servers, of one arm a single one.
The workflows' steps run these configurations or fewer of their arms (seglen's nightly step: branching alone),
so a budget that holds here holds for them; tests/ci/test_workflows.py sums the budgets against each job's
timeout-minutes. The probes of kl and accuracy replay requests against a live server, which the simulator has not
got: their forecasts cover the trials only, and their budgets leave room for the probes. The others' budgets stay
within :data:`SLACK_MIN` (or a tenth) of their forecast: a budget far above it was derived from another forecast
(l2's 35 minutes, from a sample of its trace scaled 5x: 23 minutes of trials where the whole trace forecasts 11).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from hybridbench.config.schema import RunCfg
from hybridbench.config.store import register
from hybridbench.errors import ConfigError
from hybridbench.preview.forecast import forecast_run
from hybridbench.probes.registry import PROBES

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
# One SGLang server start on an H100: weights loaded, CUDA graphs captured (docs/guides/gpu-sizing.md).
STARTUP_MIN = 5.0
SLACK_MIN = 10.0
EXPERIMENTS = sorted(p.parent.name for p in (CONF / "sizing").glob("*/gpu.yaml"))


def gpu_config(experiment: str) -> RunCfg:
    register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name="config", overrides=[f"+experiment={experiment}", "engine=sglang"])
    run = OmegaConf.to_object(cfg)
    assert isinstance(run, RunCfg)
    return run


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_the_forecast_of_each_gpu_configuration_fits_its_budget(experiment: str) -> None:
    cfg = gpu_config(experiment)
    budget = cfg.sizing.budget_min
    assert budget > 0, f"{experiment}: its GPU configuration states no budget (sizing.budget_min)"
    try:
        fc = forecast_run(cfg, {})
    except ConfigError as exc:
        pytest.fail(f"{experiment}: no forecast of its GPU configuration ({exc})")
    starts = len(cfg.arms) * cfg.repeats if len(cfg.arms) > 1 else 1
    minutes = fc.total_s / 60 + STARTUP_MIN * starts
    per_trial = ", ".join(f"{t.arm}/{t.workload} {t.wall_s / 60:.1f}" for t in fc.trials)
    assert minutes <= budget, (f"{experiment}: forecast {minutes:.0f} min ({fc.repeats} repeat(s) of: {per_trial}; "
                               f"{starts} server starts of {STARTUP_MIN:.0f} min) > sizing.budget_min {budget:g}")
    timeout = cfg.engine.request_timeout_s  # a request waiting longer fails as timed out: no survival verdict holds
    late = [f"{t.arm}/{t.workload} {t.slowest_s:.0f} s" for t in fc.trials if (t.slowest_s or 0.0) > timeout]
    assert not late, f"{experiment}: forecast requests wait past engine.request_timeout_s={timeout:g}: {late}"
    if not any(PROBES[p].wanted(cfg) for p in ("kl", "accuracy")):  # replayed on a live server: not in the forecast
        assert budget - minutes <= max(SLACK_MIN, budget / 10), (
            f"{experiment}: sizing.budget_min {budget:g} is {budget - minutes:.0f} min above its forecast "
            f"({minutes:.1f} min: {per_trial}; {starts} server starts): re-derive it from the forecast")
