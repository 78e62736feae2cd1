"""The plan warns of a trial whose requests the forecast has waiting past engine.request_timeout_s: the run would
record them as failed (timed out) where the server only queued them. seglen's cache-off arm on GPUs, which
conf/sizing/seglen/gpu.yaml and docs/guides/gpu-sizing.md say `arms=[disabled,branching,seglen]` runs, cannot keep
up with the pull request's Poisson rates: its mixed_prefix requests queue for most of half an hour."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from hybridbench.config.schema import RunCfg
from hybridbench.config.store import register
from hybridbench.preview.forecast import forecast_run, timeout_warnings

CONF = Path(__file__).resolve().parents[2] / "conf"


def _cfg(*overrides: str) -> RunCfg:
    register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name="config", overrides=["+experiment=seglen", "engine=sim", *overrides])
    run = OmegaConf.to_object(cfg)
    assert isinstance(run, RunCfg)
    return run


def test_seglen_cache_off_arm_on_gpus_is_warned_of_and_the_documented_timeout_holds() -> None:
    cfg = _cfg("arms=[disabled,branching]")
    rows = forecast_run(cfg, {}).to_json()["trials"]
    slow = {t["arm"]: t["slowest_s"] for t in rows if t["workload"] == "mixed_prefix"}
    assert slow["disabled"] > 1200 and slow["branching"] < 60, slow  # queued behind the PR's 8 req/s
    warned = timeout_warnings(rows, cfg.engine.request_timeout_s)
    assert len(warned) == 1 and "mixed_prefix on arm disabled" in warned[0], warned
    assert "engine.request_timeout_s=600" in warned[0]
    assert not timeout_warnings(rows, 2400.0)  # what the docs tell a user running the cache-off arm to set


def test_no_warning_without_a_known_wait() -> None:
    rows = [{"arm": "lru", "workload": "gsp", "slowest_s": None}, {"arm": "lru", "workload": "x", "slowest_s": 599.0}]
    assert timeout_warnings(rows, 600.0) == []
