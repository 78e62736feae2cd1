"""Each experiment's GPU configuration fits the wall time it states (sizing.budget_min), by the simulator's forecast.

The forecast is the preview's (``hybridbench plan``): every (arm, workload) trial of the experiment's GPU
configuration simulated on its target GPU, model and TP, times its minimum repeats, plus a server start at every
change of arm: trials run repeat by repeat, each arm's block on its own server (engines/server.py ``launch``), so a
run of A > 1 arms and R repeats starts A x R servers, of one arm a single one.
The workflows' steps run these configurations or fewer of their arms (seglen's nightly step: branching alone),
so a budget that holds here holds for them; tests/ci/test_workflows.py sums the budgets against each job's
timeout-minutes. The accuracy probe's passes are forecast too (hybridbench/preview/accuracy_forecast.py), on a set of
the nightly's gsm8k's shape (:func:`gsm8k_shape`), every answer run to its max_tokens; each must end within
checks.accuracy_timeout_s. The kl probe replays requests against a live server, which the simulator has not got: its
forecast covers the trials only, and its budget leaves room for the probe. The others' budgets stay within
:data:`SLACK_MIN` (or a tenth) of their forecast: a budget far above it was derived from another forecast (l2's 35
minutes, from a sample of its trace scaled 5x: 23 minutes of trials where the whole trace forecasts 11).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from hybridbench.config.schema import RunCfg
from hybridbench.config.store import register
from hybridbench.errors import ConfigError
from hybridbench.preview.accuracy_forecast import forecast_accuracy
from hybridbench.preview.forecast import forecast_run
from hybridbench.probes.registry import PROBES

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
# One SGLang server start on an H100: weights loaded, CUDA graphs captured (docs/guides/gpu-sizing.md).
STARTUP_MIN = 5.0
SLACK_MIN = 10.0
EXPERIMENTS = sorted(p.parent.name for p in (CONF / "sizing").glob("*/gpu.yaml"))


def gsm8k_shape(folder: Path) -> Path:
    """A question set of gsm8k's shape in evalscope's local format (the nightly's $DATA/gsm8k): its test split's
    1,319 questions at ~240 characters, and four train rows of ~450 characters as the examples every prompt opens
    with. Only lengths matter to the forecast."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test.jsonl").write_text("".join(json.dumps({"question": "q" * 240, "answer": "#### 1"}) + "\n"
                                               for _ in range(1319)))
    (folder / "train.jsonl").write_text("".join(json.dumps({"question": "s" * 200, "answer": "a" * 250}) + "\n"
                                                for _ in range(4)))
    return folder


def gpu_config(experiment: str) -> RunCfg:
    register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name="config", overrides=[f"+experiment={experiment}", "engine=sglang"])
    run = OmegaConf.to_object(cfg)
    assert isinstance(run, RunCfg)
    return run


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_the_forecast_of_each_gpu_configuration_fits_its_budget(experiment: str, tmp_path: Path) -> None:
    cfg = gpu_config(experiment)
    probing = "accuracy" in cfg.checks.enabled
    if probing:
        cfg.checks.accuracy_datasets = {"gsm8k": str(gsm8k_shape(tmp_path / "gsm8k"))}
    budget = cfg.sizing.budget_min
    assert budget > 0, f"{experiment}: its GPU configuration states no budget (sizing.budget_min)"
    try:
        fc = forecast_run(cfg, {})
    except ConfigError as exc:
        pytest.fail(f"{experiment}: no forecast of its GPU configuration ({exc})")
    starts = len(cfg.arms) * cfg.repeats if len(cfg.arms) > 1 else 1
    passes = forecast_accuracy(cfg, {}).passes if probing else ()
    minutes = (fc.total_s + sum(p.wall_s for p in passes)) / 60 + STARTUP_MIN * starts
    per_trial = ", ".join(f"{t.arm}/{t.workload} {t.wall_s / 60:.1f}" for t in fc.trials)
    assert minutes <= budget, (f"{experiment}: forecast {minutes:.0f} min ({fc.repeats} repeat(s) of: {per_trial}; "
                               f"{starts} server starts of {STARTUP_MIN:.0f} min) > sizing.budget_min {budget:g}")
    timeout = cfg.engine.request_timeout_s  # a request waiting longer fails as timed out: no survival verdict holds
    late = [f"{t.arm}/{t.workload} {t.slowest_s:.0f} s" for t in fc.trials if (t.slowest_s or 0.0) > timeout]
    assert not late, f"{experiment}: forecast requests wait past engine.request_timeout_s={timeout:g}: {late}"
    cut = cfg.checks.accuracy_timeout_s
    late = [f"{p.arm} {p.pass_} {p.wall_s:.0f} s" for p in passes if p.wall_s > cut]
    assert not late, f"{experiment}: forecast accuracy passes run past checks.accuracy_timeout_s={cut:g}: {late}"
    if not PROBES["kl"].wanted(cfg):  # replayed on a live server: not in the forecast
        assert budget - minutes <= max(SLACK_MIN, budget / 10), (
            f"{experiment}: sizing.budget_min {budget:g} is {budget - minutes:.0f} min above its forecast "
            f"({minutes:.1f} min: {per_trial}; {starts} server starts): re-derive it from the forecast")
