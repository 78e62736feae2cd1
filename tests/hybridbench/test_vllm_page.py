"""The page a vLLM plan records is the block vLLM serves with (hybridbench.engines.vllm_page), and a page vLLM would
replace is refused at plan time naming engine.page_size.

vLLM 0.32.0 raises a hybrid model's attention block until one page holds one mamba state: Qwen3-Next on 4 x H100
runs 272-token blocks whatever smaller --block-size it is given, so a plan that said page_size 1 (or 16) named a
hit granularity that never ran. The numbers are vLLM's own: tests/vllm_cpu/test_vllm_config_resolution.py runs its
alignment on these models' configs against vllm_page.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from machine_fakes import fake_vllm

from hybridbench.config.schema import EngineCfg, ModelCfg
from hybridbench.engines.vllm_cmd import vllm_command
from hybridbench.engines.vllm_page import vllm_page
from hybridbench.errors import ConfigError
from hybridbench.plan.arms import plan_arm
from hybridbench.prepare import prepare_run
from hybridbench.preview.build import build_preview
from hybridbench.preview.compose import compose_run
from hybridbench.preview.render import render_text
from hybridbench.results.bundle import build_bundle

ROOT = Path(__file__).resolve().parents[2]
V032 = (Path(__file__).parent / "fixtures" / "vllm_help_0_32.txt").read_text()
QWEN3_NEXT = ModelCfg(name="qwen3-next-80b-a3b", hf_id="Qwen/Qwen3-Next-80B-A3B-Instruct")


@pytest.fixture
def vllm_python(tmp_path: Path) -> Path:
    return fake_vllm(tmp_path)


def pools(python: Path, *overrides: str) -> tuple[dict[str, object], str]:
    preview = build_preview(compose_run(["+experiment=radix", "engine=vllm", f"engine.python={python}", *overrides]),
                            forecast=False)
    return preview.pools, next(x for x in render_text(preview).splitlines() if x.startswith("pools: "))


def command(engine: EngineCfg, model: ModelCfg = QWEN3_NEXT) -> list[str]:
    return vllm_command(python="/v/python", model=model, engine=engine, arm=plan_arm("lru"), port=8000,
                        help_text=V032)


def test_the_plan_records_the_block_vllm_raises_a_hybrid_model_to(vllm_python: Path) -> None:
    got, line = pools(vllm_python)  # Qwen3-Next, 4 x H100, engine.page_size=1: vLLM's own block
    assert got["page_size"] == 272, got  # the plan said 1
    assert str(got["page_size_set_by"]).startswith("raised by vLLM until one attention page holds one mamba state")
    assert "page_size 272 (raised by vLLM" in line and "set_by" not in line
    got, _ = pools(vllm_python, "engine.page_size=512")  # a block that already holds a state is served as given
    assert got["page_size"] == 512 and str(got["page_size_set_by"]).startswith("engine.page_size=512, whose"), got


def test_a_page_vllm_would_replace_is_refused_in_one_line_naming_engine_page_size(vllm_python: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "hybridbench.preview", "+experiment=radix", "engine=vllm",
                           f"engine.python={vllm_python}", "engine.page_size=16", "--no-forecast"], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: engine.page_size=16: vLLM 0.32.0 would serve model qwen3-next-80b-a3b on "
                                  "4 x h100 with 272-token blocks, not 16 ("), proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    # The smallest page it keeps is its own; any multiple of 16 above it is served as given.
    assert "--block-size" not in command(EngineCfg(tp=4))
    argv = command(EngineCfg(tp=4, page_size=288))
    assert argv[argv.index("--block-size") + 1] == "288"
    # A page that does not hold a state is raised in multiples of itself: 256 runs as 512, not as vLLM's own 272.
    with pytest.raises(ConfigError, match=r"^engine\.page_size=256: .* with 512-token blocks, not 256 .*; set "
                                          r"engine\.page_size=1 \(vLLM's own block, 272\) or a multiple of 16 of at "
                                          r"least 272$"):
        command(EngineCfg(tp=4, page_size=256))


@pytest.mark.parametrize(("engine", "model", "needle"), [
    (EngineCfg(tp=4, gpu="b200"), QWEN3_NEXT, "engine.gpu=b200"),  # Blackwell's FA4 head-256 kernel takes 128
    (EngineCfg(tp=4, extra_args=["--kv-cache-dtype", "fp8"]), QWEN3_NEXT, "engine.extra_args has --kv-cache-dtype"),
    (EngineCfg(tp=4, extra_args=["--speculative-config={}"]), QWEN3_NEXT, "has --speculative-config"),
    (EngineCfg(tp=4), ModelCfg(name="my-hybrid"), "model my-hybrid is not one whose state hybridbench knows"),
    (EngineCfg(tp=16), ModelCfg(name="nemotron-h-8b"), "does not split evenly over engine.tp=16"),  # groups padded
])
def test_a_block_that_cannot_be_said_is_not_claimed_and_a_page_there_is_refused(
        engine: EngineCfg, model: ModelCfg, needle: str) -> None:
    page = vllm_page(model, engine)
    assert page.tokens == 0 and needle in page.why, page
    engine.page_size = 256
    with pytest.raises(ConfigError, match=r"^engine\.page_size=256: .*; leave engine\.page_size=1 \(vLLM's own"):
        command(engine, model)


def test_a_dense_model_keeps_its_block() -> None:
    dense = ModelCfg(name="tiny-llama", hybrid=False)
    assert vllm_page(dense, EngineCfg(tp=1)).tokens == 16  # CacheConfig.DEFAULT_BLOCK_SIZE on every CUDA backend
    assert vllm_page(dense, EngineCfg(tp=1, page_size=32)).tokens == 32
    assert vllm_page(dense, EngineCfg(tp=1, gpu="cpu", page_size=64)).tokens == 64
    assert vllm_page(dense, EngineCfg(tp=1, gpu="cpu")).tokens == 0  # the CPU build's own: 128
    with pytest.raises(ConfigError, match=r"^engine\.page_size=24: vLLM's attention backends on h100 take blocks of "
                                          r"a multiple of 16 tokens, not 24"):
        command(EngineCfg(tp=1, page_size=24), dense)


def test_the_gpu_name_is_read_as_the_sglang_rules_read_it() -> None:
    # engine.gpu=H100 is the same GPU as h100 (lowercased where the config is composed: config.gpu_kind): its block
    # is computed, not left to "vLLM at start-up"
    engine = compose_run(["engine=vllm", "engine.tp=4", "engine.gpu=H100"]).cfg.engine
    assert vllm_page(QWEN3_NEXT, engine) == vllm_page(QWEN3_NEXT, EngineCfg(tp=4, gpu="h100"))
    assert vllm_page(QWEN3_NEXT, engine).tokens == 272


def test_a_run_records_the_planned_block_per_arm_beside_the_served_one(vllm_python: Path, tmp_path: Path) -> None:
    # The block the plan computed goes into the run's engine provenance (bundle.json), per arm, where the block each
    # server reports (served_page) is written: results compare the two from the saved files (test_served_block.py).
    def recorded(*overrides: str) -> tuple[dict[str, object], tuple[str, ...]]:
        composed = compose_run(["+experiment=radix", "engine=vllm", f"engine.python={vllm_python}", *overrides])
        prepared = prepare_run(composed.cfg, tmp_path / "run", composed.resolved)
        bundle = build_bundle(prepared.plan, prepared.engine.info(), [], {}, [])
        assert set(prepared.plan.arms) >= {"disabled", "lru"}, prepared.plan.arms
        return bundle["provenance"]["engine"]["extra"], prepared.plan.arms

    extra, arms = recorded()  # Qwen3-Next on 4 x H100: vLLM's own 272 for every arm
    assert extra["planned_page"] == dict.fromkeys(arms, 272), extra
    extra, arms = recorded("engine.page_size=512")
    assert extra["planned_page"] == dict.fromkeys(arms, 512), extra
    # Unknown from the config (the CPU build sizes its own): nothing recorded, so nothing is compared
    assert "planned_page" not in recorded("engine.gpu=cpu")[0]
