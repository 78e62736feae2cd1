"""The page hybridbench plans for a TokenSpeed run (hybridbench/engines/tokenspeed_page.py) against the page each
release's own start-up code gives the models hybridbench names (conf/model), from their configs.

0.1.1: the recipe dispatch and the cache layout the scheduler's ``prefix_granularity`` comes from
(``_resolve_cache_family``, ``cache_recipe(...).setup()``), at two flag values. 0.1.0: ``create_attn_components``,
which raises a GDN model's ``block_size`` on a flat-KV ``tokenspeed-scheduler`` build; run with the installed (radix,
PyPI 0.1.0) build and with its ``FLAT_KVCACHE`` set. Where the two builds give different pages the config cannot say
which runs, and the plan must say it does not know rather than pick one. Build with ``bash
tests/tokenspeed/build_env.sh``; the model configs are the public checkpoints' config.json fields (the ones
reference_impl/models.py cites), no weights.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from tokenspeed_env import HERE, HOME, PYTHON, SCHEDULER_010, pythonpath, release, require

from hybridbench.config.schema import EngineCfg, ModelCfg
from hybridbench.engines.tokenspeed_cmd import TOKENSPEED_VERSIONS
from hybridbench.engines.tokenspeed_page import tokenspeed_page

pytestmark = [pytest.mark.tokenspeed, pytest.mark.slow]

ROOT = HERE.parents[1]

require(SCHEDULER_010, *map(release, TOKENSPEED_VERSIONS), what="env")

TP = 4  # conf/engine/tokenspeed.yaml's
PAGES = (64, 256)  # conf/engine/tokenspeed.yaml's, and one above 0.1.1's recipe page


def _qwen35_text(hidden: int, layers: int, heads: int, kv_heads: int, lv_heads: int, **mlp: int) -> dict[str, Any]:
    return {"hidden_size": hidden, "num_hidden_layers": layers, "full_attention_interval": 4,
            "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * (layers // 4),
            "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": 256, "attn_output_gate": True,
            "linear_num_key_heads": 16, "linear_num_value_heads": lv_heads, "linear_key_head_dim": 128,
            "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "vocab_size": 248320,
            "max_position_embeddings": 262144, "rms_norm_eps": 1e-6, "dtype": "bfloat16",
            "mamba_ssm_dtype": "float32", "rope_parameters": {"rope_type": "default", "rope_theta": 10000000,
                                                              "partial_rotary_factor": 0.25,
                                                              "mrope_section": [11, 11, 10], "mrope_interleaved": True},
            **mlp}


# config.json per conf/model name (the fields reference_impl/models.py reads from each public checkpoint).
CONFIGS: dict[str, dict[str, Any]] = {
    "qwen3.5-9b": {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
                   "tie_word_embeddings": False, "dtype": "bfloat16", "vision_config": {},
                   "text_config": {"model_type": "qwen3_5_text",
                                   **_qwen35_text(4096, 32, 16, 4, 32, intermediate_size=12288)}},
    "qwen3.5-122b-a10b": {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
                          "tie_word_embeddings": False, "dtype": "bfloat16", "vision_config": {},
                          "text_config": {"model_type": "qwen3_5_moe_text",
                                          **_qwen35_text(3072, 48, 32, 2, 64, num_experts=256, num_experts_per_tok=8,
                                                         moe_intermediate_size=1024,
                                                         shared_expert_intermediate_size=1024)}},
    "nemotron-h-8b": {"architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": 4096,
                      "num_hidden_layers": 52,
                      "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
                      "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                      "intermediate_size": 21504, "mlp_hidden_act": "relu2", "mamba_num_heads": 128,
                      "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4, "expand": 2,
                      "chunk_size": 128, "vocab_size": 131072, "max_position_embeddings": 8192, "dtype": "bfloat16"},
}
# conf/model names no TokenSpeed release serves (no such class, or no checkpoint config at all): the plan refuses them
NOT_SERVED = {"qwen3-next-80b-a3b", "jamba-1.5-mini", "marconi-7b", "reference-tiny"}


def conf_models() -> dict[str, tuple[ModelCfg, Path | None]]:
    """Every conf/model model: its ModelCfg and, where it has one, the dir of its config.json (none written yet)."""
    out: dict[str, tuple[ModelCfg, Path | None]] = {}
    for path in sorted((ROOT / "conf" / "model").glob("*.yaml")):
        raw = yaml.safe_load(path.read_text())
        model = ModelCfg(name=raw["name"], architecture=raw.get("architecture", ""), hybrid=raw.get("hybrid", True))
        local = HOME / "tiny-llama" if raw["name"] == "tiny-llama" else None  # the vllm-cpu tier's local checkpoint
        out[model.name] = (model, local)
    return out


def served(version: str, tmp_path: Path) -> list[tuple[ModelCfg, Path]]:
    """The conf/model models ``version`` serves, each with a dir holding its config.json."""
    out = []
    for name, (model, local) in conf_models().items():
        if model.architecture not in TOKENSPEED_VERSIONS[version].models:
            assert name in NOT_SERVED or name in CONFIGS, f"conf/model {name}: served by neither release?"
            continue
        folder = local or tmp_path / name
        if local is None:
            assert name in CONFIGS, f"conf/model {name} is served by TokenSpeed {version}: add its config.json here"
            folder.mkdir(exist_ok=True)
            (folder / "config.json").write_text(json.dumps(CONFIGS[name]))
        assert json.loads((folder / "config.json").read_text())["architectures"] == [model.architecture]
        out.append((model, folder))
    return out


def probe(version: str, cases: list[dict[str, Any]], flat: bool | None = None) -> list[dict[str, Any]]:
    path = pythonpath(release(version), *([SCHEDULER_010] if version == "0.1.0" else []))
    proc = subprocess.run([str(PYTHON), str(HERE / "probe_page.py")],
                          input=json.dumps({"version": version, "flat": flat, "cases": cases}),
                          env={**os.environ, "PYTHONPATH": path}, capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_the_page_planned_on_0_1_1_is_the_one_its_cache_recipe_gives(tmp_path: Path) -> None:
    models = served("0.1.1", tmp_path)
    cases = [(m, {"model": str(d), "tp": 1 if m.name == "tiny-llama" else TP, "page": p}) for m, d in models
             for p in PAGES]
    results = probe("0.1.1", [c for _, c in cases])
    families = {}
    for (model, case), got in zip(cases, results, strict=True):
        assert got["recipe_page"] == got["page"], got  # the packed plan keeps the recipe's page
        planned = tokenspeed_page(model, EngineCfg(name="tokenspeed", page_size=case["page"], tp=case["tp"]),
                                  TOKENSPEED_VERSIONS["0.1.1"])
        assert planned.tokens == got["page"], (model.name, case["page"], got, planned)
        families[model.name] = got["family"]
    # what was compared: both recipe kinds and the plain one, at a flag the hybrids ignore
    assert families == {"qwen3.5-9b": "qwen_gdn", "qwen3.5-122b-a10b": "qwen_gdn", "nemotron-h-8b": "mamba2",
                        "tiny-llama": "mha"}, families
    assert {g["page"] for (m, _), g in zip(cases, results, strict=True) if m.name != "tiny-llama"} == {128}


CHUNKS = (100, 128, 200, 256, 8000, 8192)  # below, on and between the 128-token grain, and the default 8192


def test_the_chunk_0_1_1_plans_is_the_one_its_cache_on_server_runs(tmp_path: Path) -> None:
    """Whether the plan takes a chunk (TokenSpeedEngine._check_chunk: a multiple of the state grain the page computed)
    against what 0.1.1's own aligned_max_scheduled_tokens does to it on the recipe's cache groups with prefix caching
    on: the plan takes exactly the chunks the server keeps, and its grain is the groups' LCM."""
    models = served("0.1.1", tmp_path)
    cases = [(m, {"model": str(d), "tp": 1 if m.name == "tiny-llama" else TP, "page": p, "chunks": list(CHUNKS)})
             for m, d in models for p in PAGES]
    floored = set()
    for (model, case), got in zip(cases, probe("0.1.1", [c for _, c in cases]), strict=True):
        planned = tokenspeed_page(model, EngineCfg(name="tokenspeed", page_size=case["page"], tp=case["tp"]),
                                  TOKENSPEED_VERSIONS["0.1.1"])
        assert planned.state_grain == (math.lcm(*got["state_grains"]) if got["state_grains"] else 0), (model, got)
        for chunk in CHUNKS:
            kept = got["floors"][str(chunk)] == chunk
            assert kept == (not planned.state_grain or chunk % planned.state_grain == 0), (model.name, chunk, got)
            if not kept:
                floored.add(model.name)
    assert floored == {"qwen3.5-9b", "qwen3.5-122b-a10b", "nemotron-h-8b"}, floored  # the hybrids; tiny-llama keeps


def _raise_line() -> int:
    """The line of 0.1.0's registry.py that sets the raised page (create_attn_components)."""
    source = (release("0.1.0") / "tokenspeed" / "runtime" / "layers" / "attention" / "registry.py").read_text()
    (line,) = [i for i, text in enumerate(source.splitlines(), 1)
               if text.strip() == "server_args.block_size = equalized_block_size_value"]
    return line


def test_the_page_planned_on_0_1_0_is_the_flags_or_unknown_where_the_scheduler_build_decides(tmp_path: Path) -> None:
    models = served("0.1.0", tmp_path)
    cases = [(m, {"model": str(d), "tp": 1 if m.name == "tiny-llama" else TP, "page": p}) for m, d in models
             for p in PAGES]
    radix = probe("0.1.0", [c for _, c in cases])  # the installed tokenspeed-scheduler 0.1.0 (no FLAT_KVCACHE)
    flat = probe("0.1.0", [c for _, c in cases], flat=True)
    line = _raise_line()
    unknown = set()
    for (model, case), on_radix, on_flat in zip(cases, radix, flat, strict=True):
        assert on_radix["stopped_at"] > line and on_flat["stopped_at"] > line, (on_radix, on_flat)  # past the raise
        assert on_radix["page"] == case["page"]  # a radix build keeps the flag's page
        planned = tokenspeed_page(model, EngineCfg(name="tokenspeed", page_size=case["page"], tp=case["tp"]),
                                  TOKENSPEED_VERSIONS["0.1.0"])
        if on_flat["page"] == on_radix["page"]:
            assert planned.tokens == on_radix["page"], (model.name, case, planned)
        else:  # the build decides, and the plan cannot see it
            assert planned.tokens == 0 and "tokenspeed-scheduler build" in planned.why, (model.name, planned)
            assert on_flat["page"] > case["page"] and on_flat["page"] % case["page"] == 0  # raised in its steps
            unknown.add(model.name)
    assert unknown == {"qwen3.5-9b", "qwen3.5-122b-a10b"}, unknown  # the GDN models, at every flag
