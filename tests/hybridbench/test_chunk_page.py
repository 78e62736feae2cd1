"""engine.chunked_prefill_size against the page the run's server serves, not always engine.page_size.

A chunk shorter than a page never advances a longer prompt on SGLang's and the reference scheduler's whole-page
chunks, so config/validate.py refuses it, but it compared engine.page_size: a TokenSpeed 0.1.1 run of a Qwen3.5 model
passed 64 and served 128 (its cache recipe's page, hybridbench/engines/tokenspeed_page.py), so a 100-token chunk
planned, and its forecast (at 128) said only "none". TokenSpeed now checks the page the plan computed (the one passed
where that is unknown: on 0.1.0 the least it can be). vLLM 0.32.0 advances a block wider than the chunk in sub-block
steps (Scheduler._mamba_block_aligned_split), so its check is dropped: a 256-token chunk under Qwen3-Next's 272-token
block was refused when engine.page_size said 272 and planned when it said 1 (vLLM's own block, the same 272), whose
forecast then failed every simulated request (the simulator chunks whole pages): it now says why it has none.

TokenSpeed 0.1.1 with prefix caching on floors the chunk to a multiple of its recurrent-state checkpoint grain (128 for
the Qwen3.5 and Nemotron-H recipes; tests/tokenspeed/test_tokenspeed_served_page.py runs the release's own floor), and
with it off keeps it: a 200-token chunk planned, ran 128 on the cache-on arms and 200 on the disabled one, and the
record said 200 for all. It is refused now where an arm has the cache on.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from machine_fakes import fake_vllm
from test_tokenspeed_page import SMALL, fake_tokenspeed

from hybridbench.errors import ConfigError
from hybridbench.preview.build import build_preview
from hybridbench.preview.compose import compose_run
from hybridbench.preview.forecast import forecast_run


def plans(*overrides: str) -> dict[str, object]:
    pools: dict[str, object] = build_preview(compose_run(list(overrides)), forecast=False).pools
    return pools


def refusal(*overrides: str) -> str:
    with pytest.raises(ConfigError) as err:
        plans(*overrides)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_tokenspeed_checks_the_page_its_release_serves(tmp_path: Path) -> None:
    ts = f"engine.python={fake_tokenspeed(tmp_path, '0.1.1')}"
    why = refusal(*SMALL, ts, "engine.chunked_prefill_size=100")  # engine.page_size=64: 0.1.1 serves 128
    assert why.startswith("engine.chunked_prefill_size 100 is smaller than the page TokenSpeed serves for model "
                          "qwen3.5-9b, 128 (TokenSpeed 0.1.1's Qwen3.5 GDN (qwen_gdn) cache recipe serves 128-token "
                          "pages"), why
    assert why.endswith("set it to at least 128")
    assert plans(*SMALL, ts, "engine.chunked_prefill_size=128")["page_size"] == 128
    # a plain-attention model serves the page passed
    dense = (ts, "model=vllm-tiny-llama", "model.architecture=LlamaForCausalLM",
             "workloads.gsp.scale=4")  # radix at a quarter: inside the tiny Llama's 4K context
    assert refusal(*SMALL, *dense, "engine.chunked_prefill_size=60").startswith(
        "engine.chunked_prefill_size 60 is smaller than a page (engine.page_size=64)")
    plans(*SMALL, *dense, "engine.chunked_prefill_size=64")


def test_tokenspeed_0_1_1_refuses_a_chunk_its_cache_on_arms_would_floor(tmp_path: Path) -> None:
    ts = f"engine.python={fake_tokenspeed(tmp_path, '0.1.1')}"  # SMALL's arms: disabled, branching
    assert refusal(*SMALL, ts, "engine.chunked_prefill_size=200") == (
        "engine.chunked_prefill_size 200 is not a multiple of 128, the recurrent-state checkpoint grain TokenSpeed "
        "0.1.1 serves model qwen3.5-9b with: with prefix caching on (arms branching) it floors the chunk to 128 and "
        "with it off keeps 200, so the plan and record would say a chunk those arms do not run: set it to a multiple "
        "of 128 (128 or 256)")
    assert plans(*SMALL, ts, "engine.chunked_prefill_size=256")["page_size"] == 128
    nemotron = ("model=nemotron-h-8b", "model.architecture=NemotronHForCausalLM")
    assert "not a multiple of 128" in refusal(*SMALL, ts, *nemotron, "engine.chunked_prefill_size=8000")
    # nothing to floor: prefix caching off on every arm, a plain-attention model, or 0.1.0 (no such floor)
    plans(*SMALL, ts, "arms=[disabled]", "engine.chunked_prefill_size=200")
    plans(*SMALL, ts, "model=vllm-tiny-llama", "model.architecture=LlamaForCausalLM",
             "workloads.gsp.scale=4", "engine.chunked_prefill_size=200")
    plans(*SMALL, f"engine.python={fake_tokenspeed(tmp_path, '0.1.0')}", "engine.chunked_prefill_size=200")
    # where the page (and so the grain) cannot be said, it is not guessed
    plans(*SMALL, ts, "engine.extra_args=[--hf-overrides,{}]", "engine.chunked_prefill_size=200")


def test_tokenspeed_checks_the_page_passed_where_the_one_served_is_unknown(tmp_path: Path) -> None:
    ts = f"engine.python={fake_tokenspeed(tmp_path, '0.1.0')}"  # a GDN model: the scheduler build decides
    why = refusal(*SMALL, ts, "engine.chunked_prefill_size=60")
    assert why.startswith("engine.chunked_prefill_size 60 is smaller than the page passed (engine.page_size=64; the "
                          "one served is not known before it starts: TokenSpeed 0.1.0 serves engine.page_size=64 "
                          "with a radix tokenspeed-scheduler build"), why
    plans(*SMALL, ts, "engine.chunked_prefill_size=64")


def test_vllm_takes_a_chunk_shorter_than_its_block_whichever_way_the_block_is_given(tmp_path: Path) -> None:
    vllm = ("+experiment=radix", "engine=vllm", "repeats=1", f"engine.python={fake_vllm(tmp_path)}",
            "engine.chunked_prefill_size=256")  # Qwen3-Next on 4 x H100: a 272-token block
    for page in ("engine.page_size=1", "engine.page_size=272"):
        assert plans(*vllm, page)["page_size"] == 272
        # the simulator chunks whole pages: its forecast says why it has none (it used to fail every request)
        composed = compose_run([*vllm, page])
        with pytest.raises(ConfigError, match=r"^engine\.chunked_prefill_size 256 is shorter than the 272-token block "
                                              r"vLLM serves, which vLLM prefills in sub-block chunks and the "
                                              r"simulator, chunking whole pages, cannot$"):
            forecast_run(composed.cfg, composed.resolved)


def test_engines_that_serve_engine_page_size_still_check_it() -> None:
    assert refusal("+experiment=smoke", "engine=reference", "engine.page_size=64",
                   "engine.chunked_prefill_size=32") == "engine.chunked_prefill_size 32 is smaller than a page (64)"
