"""vLLM sizes its host tier in GiB (arm.l2.host_tier_gb -> --kv-offloading-size), pinned at 130 in the GPU
configurations of l2, kl and accuracy: twice the device KV the default model leaves on 4 x H100 at 0.85, as SGLang's
--hicache-ratio 2 sizes its own. An override that changes the device pool (engine.tp=8, another model, another
engine.mem_fraction_static) leaves 130 behind: on 8 x H100 the host tier is 0.62x the device pool, so the l2 arm
cannot keep what the device evicts and is no longer the arm SGLang and TokenSpeed run. The plan says so, with the size
that restores the ratio."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_experiment_sizing import composed

from hybridbench.engines.vllm_host_tier import device_kv_gib, host_tier_warnings
from hybridbench.plan.arms import plan_arms

ROOT = Path(__file__).resolve().parents[2]
MAIN_HELP = Path(__file__).resolve().parent / "fixtures" / "vllm_help_main.txt"


def _warnings(*overrides: str) -> list[str]:
    cfg = composed("+experiment=l2", "engine=vllm", *overrides)
    return host_tier_warnings(cfg, plan_arms(list(cfg.arms), cfg.arm))


def test_the_pinned_size_is_twice_the_default_device_pool() -> None:
    cfg = composed("+experiment=l2", "engine=vllm")
    assert cfg.arm.l2.host_tier_gb == pytest.approx(2 * device_kv_gib(cfg), rel=0.02)  # 130 vs 2 x 65
    assert _warnings() == []


@pytest.mark.parametrize(("overrides", "ratio"), [
    (("engine.tp=8",), "is 0.62x"),  # smaller than the device pool itself (208 GiB)
    (("model=qwen3.5-9b", "engine.tp=1"), ""),
])
def test_an_override_that_moves_the_device_pool_is_warned_of(overrides: tuple[str, ...], ratio: str) -> None:
    cfg = composed("+experiment=l2", "engine=vllm", *overrides)
    want = 2 * device_kv_gib(cfg)
    [warned] = _warnings(*overrides)
    assert "arm l2" in warned and "arm.l2.host_tier_gb=130" in warned and f"arm.l2.host_tier_gb={want:.0f}" in warned
    assert f"{ratio}" in warned and "--kv-offloading-size" in warned


def test_a_size_the_user_set_for_the_override_is_not_warned_of() -> None:
    cfg = composed("+experiment=l2", "engine=vllm", "engine.tp=8")
    assert _warnings("engine.tp=8", f"arm.l2.host_tier_gb={2 * device_kv_gib(cfg):.0f}") == []


def test_other_engines_and_arms_without_a_host_tier_are_not_concerned() -> None:
    cfg = composed("+experiment=l2", "engine=sglang", "engine.tp=8")
    assert host_tier_warnings(cfg, plan_arms(list(cfg.arms), cfg.arm)) == []
    cfg = composed("+experiment=radix", "engine=vllm", "engine.tp=8")
    assert host_tier_warnings(cfg, plan_arms(list(cfg.arms), cfg.arm)) == []


def test_the_plan_prints_it(tmp_path: Path) -> None:
    fake = tmp_path / "python"  # a vLLM main build: its version and its `serve --help=all`
    fake.write_text(f'#!/bin/sh\ncase "$*" in *--help=all*) cat "{MAIN_HELP}";; *) echo 0.20.0;; esac\n')
    fake.chmod(0o755)
    proc = subprocess.run([sys.executable, "-m", "hybridbench.preview", "+experiment=l2", "engine=vllm",
                           f"engine.python={fake}", "engine.tp=8", "--no-forecast"],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "--kv-offloading-size 130" in proc.stdout
    assert "warning: arm l2: arm.l2.host_tier_gb=130" in proc.stdout + proc.stderr
