"""No flush endpoint: every trial still starts cold, on a freshly started server (issue 7's protocol).

vLLM serves /reset_prefix_cache only with VLLM_SERVER_DEV_MODE=1; without it the endpoint is a 404.
Here the reference server (a real process) is asked to flush at a path it does not serve, so it
really answers 404; the harness must then restart the server between trials instead of running the
next trial on a warm cache and calling it controlled.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from hybridbench.app import run
from hybridbench.config.schema import RunCfg
from hybridbench.config.store import register
from hybridbench.engines import registry
from hybridbench.engines.reference import REFERENCE
from hybridbench.engines.server import ServerEngine
from hybridbench.load.trial import ServerTrials

CONF = Path(__file__).resolve().parents[2] / "conf"


@pytest.mark.parametrize("flush_path", ["/flush_cache", "/reset_prefix_cache_absent"])
def test_every_trial_starts_cold_with_or_without_a_flush_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], flush_path: str
) -> None:
    monkeypatch.setitem(registry.ENGINES, "reference", lambda: ServerTrials(ServerEngine(
        dataclasses.replace(REFERENCE, flush_path=flush_path))))
    register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        # One arm, two repeats back to back on one server; sequential, so each trial is deterministic.
        cfg = compose(config_name="config", overrides=[
            "+experiment=smoke", "model=reference-tiny", "arms=[branching]", "repeats=2", "load.max_concurrency=1",
            "checks.enabled=[survival]", "workloads.gsp.params.num_groups=2",
            "workloads.gsp.params.prompts_per_group=3"])
    run_cfg = OmegaConf.to_object(cfg)
    assert isinstance(run_cfg, RunCfg)
    assert run(run_cfg, tmp_path, {}) == 0
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    by_repeat = {r: [x["cached_tokens"] for x in records if x["repeat"] == r] for r in (0, 1)}
    assert by_repeat[0][0] == 0 and by_repeat[1] == by_repeat[0]  # repeat 1 saw no trace of repeat 0
    assert all(x["cache_state"] == "cold-flushed" for x in records)
    servers = json.loads((tmp_path / "bundle.json").read_text())["trials"]
    if flush_path == "/flush_cache":
        assert [t["server"]["cold_by"] for t in servers] == ["flushed", "flushed"]
    else:
        assert [t["server"]["cold_by"] for t in servers] == ["restarted", "restarted"]
        assert "answered 404: a fresh server per trial" in capsys.readouterr().err
