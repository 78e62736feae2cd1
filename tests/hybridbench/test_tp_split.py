"""engine.tp that the model's heads do not split is refused at plan time (hybridbench/engines/tp_split.py).

``engine.tp=3`` (16 attention heads) or ``engine.tp=1000`` planned and forecast "on 1000 x h100" with exit 0, and
SGLang, vLLM and TokenSpeed stop at start-up on such a value. The releases' own code deciding the same splits:
tests/sglang_oracle/test_sglang_tp_split.py, tests/vllm_cpu/test_vllm_config_resolution.py, tests/tokenspeed/
test_tokenspeed_tp_split.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hybridbench.engines.tp_split import split_refusal
from hybridbench.errors import ConfigError
from hybridbench.preview.build import build_preview
from hybridbench.preview.compose import compose_run

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("engine", ["sglang", "vllm", "tokenspeed", "sim"])
@pytest.mark.parametrize("tp", [3, 1000])
def test_a_tp_the_attention_heads_do_not_split_is_refused_on_compose(engine: str, tp: int) -> None:
    server = "the simulated SGLang server" if engine == "sim" else engine
    want = (rf"^engine\.tp={tp}: model qwen3-next-80b-a3b has 16 num_attention_heads \(model\.attention_heads, "
            rf"from its config\.json\); engine\.tp must divide them, and {tp} does not, so {server} would stop at "
            r"start-up; engine\.tp values that split every layer of it: 1, 2, 4, 8, 16$")
    with pytest.raises(ConfigError, match=want):
        build_preview(compose_run(["+experiment=radix", f"engine={engine}", f"engine.tp={tp}"]), forecast=False)


@pytest.mark.parametrize(("model", "tp", "engine", "key", "rule"), [
    # Qwen3.5-122B: 32 attention heads and 64 value heads take 32 ranks; its 16 key heads do not
    ("qwen3.5-122b-a10b", 32, "vllm", "16 linear_num_key_heads (model.linear_key_heads", "engine.tp must divide them"),
    # Nemotron-H: 8 groups on 16 ranks, more than one group: SGLang and vLLM assert, TokenSpeed too
    ("nemotron-h-8b", 16, "sglang", "8 n_groups (model.mamba_groups", "engine.tp must divide them (or they must be 1)"),
    ("nemotron-h-8b", 16, "tokenspeed", "8 n_groups (model.mamba_groups", "engine.tp must divide them, and"),
    # 4 KV heads on 6 ranks: neither split nor copied (16 heads already refuse 6; the KV rule is named when they pass)
    ("qwen3.5-9b", 6, "sglang", "16 num_attention_heads", "engine.tp must divide them"),
])
def test_each_layer_kind_is_named(model: str, tp: int, engine: str, key: str, rule: str) -> None:
    composed = compose_run([f"model={model}", f"engine={engine}", f"engine.tp={tp}"])
    why = split_refusal(composed.cfg)
    assert key in why and rule in why, why


def test_kv_heads_fewer_than_ranks_must_be_copied_evenly() -> None:
    # 3 KV heads are nothing conf/model has; the rule, on the composed config with a model key overridden
    composed = compose_run(["model=qwen3.5-9b", "engine=sglang", "engine.tp=8", "model.kv_heads=3"])
    assert split_refusal(composed.cfg).startswith(
        "engine.tp=8: model qwen3.5-9b has 3 num_key_value_heads (model.kv_heads, from its config.json); with fewer "
        "of them than ranks, engine.tp must be a multiple of them (a copy on each rank), and 8 is not")
    ok = compose_run(["model=qwen3.5-9b", "engine=sglang", "engine.tp=16"])  # 4 KV heads copied 4 times
    assert split_refusal(ok.cfg) == ""


def test_sglang_dp_attention_splits_the_layers_over_its_groups() -> None:
    # 32 ranks in 4 data-parallel attention groups: the attention and linear layers run on 8 ranks each
    extra = "engine.extra_args=[--enable-dp-attention,--dp-size,4]"
    assert split_refusal(compose_run(["engine=sglang", "engine.tp=32", extra]).cfg) == ""
    why = split_refusal(compose_run(["engine=sglang", "engine.tp=32", "engine.extra_args=[--dp-size,4]"]).cfg)
    assert why.startswith("engine.tp=32: model qwen3-next-80b-a3b has 16 num_attention_heads"), why
    assert split_refusal(compose_run(["engine=vllm", "engine.tp=32"]).cfg)  # vLLM: no such groups here


@pytest.mark.parametrize("tp", [1, 2, 4, 8, 16])
def test_the_tps_that_split_plan_as_before(tp: int) -> None:
    build_preview(compose_run(["+experiment=radix", "engine=sim", "model=qwen3.5-9b", f"engine.tp={tp}"]),
                  forecast=False)


def test_a_model_without_head_facts_is_not_checked() -> None:
    assert split_refusal(compose_run(["engine=sim", "model=marconi-7b", "engine.tp=3"]).cfg) == ""
    assert split_refusal(compose_run(["engine=reference", "engine.tp=3", "engine.gpu=cpu"]).cfg) == ""


def test_the_plan_and_the_run_refuse_it_with_one_line(tmp_path: Path) -> None:
    plan = subprocess.run([sys.executable, "-m", "hybridbench.cli", "plan", "+experiment=radix", "engine=sim",
                           "engine.tp=1000"], capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert plan.returncode == 2, plan.stderr[-2000:]
    assert len(plan.stderr.strip().splitlines()) == 1 and "engine.tp=1000: model qwen3-next-80b-a3b" in plan.stderr
    assert "1000 x h100" not in plan.stdout  # the forecast for a server that never starts
    run = subprocess.run([sys.executable, "-m", "hybridbench", "+experiment=radix", "engine=sim", "engine.tp=3",
                          f"hydra.run.dir={tmp_path / 'run'}"], capture_output=True, text=True, cwd=ROOT, timeout=300,
                         check=False)
    assert run.returncode == 2, run.stderr[-2000:]
    assert run.stderr.startswith("error: engine.tp=3: model qwen3-next-80b-a3b has 16 num_attention_heads"), run.stderr
    assert not (tmp_path / "run").exists()
