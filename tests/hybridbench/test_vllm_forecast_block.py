"""A vLLM run's forecast is made at the block vLLM serves (hybridbench/preview/forecast_page.py), not at
engine.page_size: vLLM 0.32.0 raises Qwen3-Next's block to 272 tokens on 4 x H100 (vllm_page.py, proven against
vLLM's own alignment in tests/vllm_cpu) and its align mode keeps mamba states, and so hits, on whole blocks only.

The forecast used to simulate engine.page_size (1) with SGLang's no_buffer for the lru arm (vLLM's align mode):
a state at each prompt's unaligned end and hits at any token. vLLM 0.32.0's scheduler instead stops a prefill at
block boundaries and at a shared prefix's junction floored to the block (``Scheduler._mamba_block_aligned_split``),
which is SGLang's extra_buffer on a 272-token grid. Real vLLM is held to the same model, request by request, in
tests/vllm_cpu/test_vllm_engine.py::test_smoke_on_real_vllm_hybrid_align_mode_hits (its run replayed through the
simulator at the served block).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from machine_fakes import fake_vllm

from hybridbench.preview.build import build_preview
from hybridbench.preview.compose import compose_run
from hybridbench.preview.forecast import Forecast, forecast_run
from hybridbench.preview.forecast_warnings import forecast_warnings
from hybridbench.preview.render import render_text
from hybridbench.report.forecast import forecast_section

# One group of six prompts sent one at a time: a 1000-token system prompt (not a multiple of 272) and 200-token
# questions, so each prompt is 1200 tokens and shares 1000 with the others.
SMALL = ["+experiment=radix", "arms=[lru]", "repeats=1", "load.max_concurrency=1",
         "+workloads.gsp.params.num_groups=1", "+workloads.gsp.params.prompts_per_group=6",
         "+workloads.gsp.params.system_prompt_len=1000", "+workloads.gsp.params.question_len=200",
         "+workloads.gsp.params.output_len=8"]


def forecast(*overrides: str) -> Forecast:
    composed = compose_run([*SMALL, *overrides])
    return forecast_run(composed.cfg, composed.resolved)


@pytest.fixture
def vllm_python(tmp_path: Path) -> Path:
    return fake_vllm(tmp_path)


def test_a_vllm_forecast_hits_whole_272_token_blocks_of_a_shared_prefix() -> None:
    """The first prompt caches nothing the others share (its states are at 1088 and beyond); the second checkpoints
    the junction floored to the block, 816 = 3 x 272 of the 1000 shared tokens; the four after it hit 816 each. At
    page 1 the forecast hit nothing here (no_buffer keeps no state inside the shared prefix) and kept no page."""
    fc = forecast("engine=vllm")  # Qwen3-Next on 4 x H100, engine.page_size=1: vLLM's own block
    assert (fc.page_size, fc.tp, fc.gpu) == (272, 4, "h100")
    [trial] = fc.trials
    assert trial.failed == 0 and trial.sample is None
    assert trial.token_hit_rate == pytest.approx(4 * 816 / (6 * 1200))
    # The same semantics at SGLang's grid (extra_buffer, the model's 64-token chunk) hit 960 of the 1000: the block
    # alone costs the difference.
    [sglang] = forecast("engine=sim", "arms=[branching]").trials
    assert sglang.token_hit_rate == pytest.approx(4 * 960 / (6 * 1200))
    assert fc.page_size_set_by.startswith("raised by vLLM until one attention page holds one mamba state")
    assert fc.to_json()["page_size"] == 272 and not fc.page_unknown
    assert not forecast_warnings(fc.to_json(), compose_run([*SMALL, "engine=vllm"]).cfg)


def test_a_block_vllm_sizes_at_start_up_is_warned_of_and_the_page_given_is_simulated() -> None:
    """With a KV cache dtype in engine.extra_args the block is vLLM's to size at start-up (vllm_page.PAGE_FLAGS):
    the forecast keeps engine.page_size and says that its hits are at that granularity, not vLLM's."""
    overrides = ("engine=vllm", "engine.extra_args=[--kv-cache-dtype,fp8]")
    fc = forecast(*overrides).to_json()
    assert fc["page_size"] == 1 and "--kv-cache-dtype" in fc["page_unknown"]
    [line] = [w for w in forecast_warnings(fc, compose_run([*SMALL, *overrides]).cfg) if "granularity" in w]
    assert line.startswith("forecast: its hits are at engine.page_size's 1-token granularity, not at the block vLLM "
                           "serves, which is not known before it starts (engine.extra_args has --kv-cache-dtype"), line
    assert "at engine.page_size's 1-token page, not at the block vLLM serves" in fc["cache_model"]


def test_plan_and_report_say_the_simulator_models_sglangs_cache_at_vllms_block_only_on_vllm(vllm_python: Path) -> None:
    text = render_text(build_preview(compose_run([*SMALL, "engine=vllm", f"engine.python={vllm_python}"])))
    [line] = [x for x in text.splitlines() if x.startswith("  cache model: ")]
    assert line.startswith("  cache model: SGLang's radix-cache semantics at the 272-token block vLLM serves: "), line
    sim = render_text(build_preview(compose_run([*SMALL, "engine=sim", "load.max_concurrency=2"])))
    assert "forecast (simulator" in sim and "cache model" not in sim
    # The run's report sets the same line above its forecast-vs-measured table.
    report = forecast_section({"forecast": forecast("engine=vllm").to_json()})
    assert "Cache model: SGLang's radix-cache semantics at the 272-token block vLLM serves: " in "\n".join(report)
