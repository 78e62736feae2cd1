"""The vLLM serve command per arm, against hand-written `vllm serve --help=all` excerpts (0.32.0 wheel, main)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybridbench.config.redact import redact
from hybridbench.config.schema import ArmCfg, EngineCfg, L2ArmCfg, ModelCfg
from hybridbench.engines.vllm_cmd import vllm_command, vllm_env, vllm_help_argv
from hybridbench.errors import ConfigError
from hybridbench.plan.arms import plan_arm

FIXTURES = Path(__file__).parent / "fixtures"
V032 = (FIXTURES / "vllm_help_0_32.txt").read_text()
MAIN = (FIXTURES / "vllm_help_main.txt").read_text()

PY = "/venvs/vllm/bin/python"
MODEL = ModelCfg(name="nemotron-h-8b", hf_id="nvidia/Nemotron-H-8B-Base-8K")
HEAD = [
    PY, "-m", "vllm.entrypoints.cli.main", "serve", "nvidia/Nemotron-H-8B-Base-8K",
    "--host", "127.0.0.1", "--port", "8000", "--tensor-parallel-size", "4",
    "--max-num-batched-tokens", "8192", "--gpu-memory-utilization", "0.85", "--enable-prompt-tokens-details",
]  # fmt: skip


def cmd(arm: str, help_text: str | None, engine: EngineCfg | None = None, knobs: ArmCfg | None = None,
        **kw: object) -> list[str]:
    return vllm_command(
        python=PY, model=MODEL, engine=engine or EngineCfg(tp=4), arm=plan_arm(arm, knobs), port=8000,
        help_text=help_text, **kw,  # type: ignore[arg-type]
    )


def arm_part(arm: str, help_text: str | None, engine: EngineCfg | None = None) -> list[str]:
    full = cmd(arm, help_text, engine)
    assert full[: len(HEAD)] == HEAD
    return full[len(HEAD):]


@pytest.mark.parametrize("help_text", [V032, MAIN, None], ids=["0.32", "main", "no-help"])
def test_disabled_and_lru_on_every_build(help_text: str | None) -> None:
    assert arm_part("disabled", help_text) == ["--no-enable-prefix-caching"]
    assert arm_part("lru", help_text) == ["--enable-prefix-caching", "--mamba-cache-mode", "align"]


@pytest.mark.parametrize("help_text", [MAIN, None], ids=["main", "no-help"])
def test_branching_is_mode_all_where_offered(help_text: str | None) -> None:
    assert arm_part("branching", help_text) == ["--enable-prefix-caching", "--mamba-cache-mode", "all"]


def test_branching_on_0_32_names_the_missing_mode() -> None:
    with pytest.raises(ConfigError, match=r"^arm branching needs --mamba-cache-mode all, which this vLLM build "
                                          r"does not offer \(it lists align, none\)"):
        cmd("branching", V032)


def test_a_build_without_mamba_cache_mode() -> None:
    old = V032.replace("--mamba-cache-mode {align,none}", "--other-mode {a,b}")
    with pytest.raises(ConfigError, match=r"^arm lru needs --mamba-cache-mode align, which this vLLM build"):
        cmd("lru", old)
    assert arm_part("disabled", old) == ["--no-enable-prefix-caching"]


@pytest.mark.parametrize("arm", ["seglen", "marconi", "branching+seglen", "marconi+l2"])
def test_policy_arms_cannot_run_on_vllm(arm: str) -> None:
    policy = "marconi" if "marconi" in arm else "seglen"
    with pytest.raises(ConfigError) as e:
        cmd(arm, None)
    assert str(e.value).startswith(f"arm {arm} needs the {policy} eviction policy, which vLLM does not offer")


def test_l2_needs_a_host_tier_size() -> None:
    with pytest.raises(ConfigError, match=r"^arm l2 on vLLM needs a host tier size for --kv-offloading-size"):
        cmd("l2", MAIN)
    tier = ["--enable-prefix-caching", "--mamba-cache-mode", "all",
            "--kv-offloading-size", "64.0", "--kv-offloading-backend", "native"]  # fmt: skip
    assert cmd("l2", MAIN, knobs=ArmCfg(l2=L2ArmCfg(host_tier_gb=64.0)))[len(HEAD):] == tier
    via_extra = arm_part("l2", MAIN, EngineCfg(tp=4, extra_args=["--kv-offloading-size", "32"]))
    assert via_extra == [*tier[:3], "--kv-offloading-backend", "native", "--kv-offloading-size", "32"]


@pytest.mark.parametrize("extra", [
    ["--kv-offloading-size", "32"], ["--kv-offloading-size=32"],
    ["--kv-transfer-config", '{"kv_connector":"OffloadingConnector","kv_role":"kv_both"}'],
])
@pytest.mark.parametrize("arm", ["disabled", "lru", "branching"])
def test_a_kv_connector_is_refused_for_an_arm_without_a_host_tier(extra: list[str], arm: str) -> None:
    """engine.extra_args reach every arm: a host-tier size there gave the cache-off and device-only arms vLLM's
    offloading connector too, which it asks for hits whatever the arm's prefix caching (tests/vllm_cpu resolves it)."""
    with pytest.raises(ConfigError, match=rf"^engine\.extra_args has {extra[0].split('=')[0]}, which gives arm {arm} "
                                          r"\(no host tier\) vLLM's KV connector"):
        cmd(arm, MAIN, EngineCfg(tp=4, extra_args=extra))
    assert "--kv-offloading-size" not in cmd(arm, MAIN)


def test_engine_options() -> None:
    engine = EngineCfg(tp=1, page_size=2048, chunked_prefill_size=0, mem_fraction_static=0.5,
                       extra_args=["--max-model-len", "2048"])  # fmt: skip
    assert vllm_command(python=PY, model=MODEL, engine=engine, arm=plan_arm("lru"), port=8011, help_text=V032,
                        cache_report=False) == [
        PY, "-m", "vllm.entrypoints.cli.main", "serve", "nvidia/Nemotron-H-8B-Base-8K",
        "--host", "127.0.0.1", "--port", "8011", "--tensor-parallel-size", "1",
        "--gpu-memory-utilization", "0.5", "--block-size", "2048",
        "--enable-prefix-caching", "--mamba-cache-mode", "align", "--max-model-len", "2048",
    ]  # fmt: skip


@pytest.mark.parametrize("option", ["max_mamba_cache_size", "kv_tokens"])
def test_sglang_only_sizes_are_refused(option: str) -> None:
    engine = EngineCfg(tp=4)
    setattr(engine, option, 40)
    with pytest.raises(ConfigError, match=rf"^engine\.{option}=40 has no vLLM flag; set engine\.{option}=0"):
        cmd("lru", None, engine)


def test_extra_args_are_checked_against_help() -> None:
    with pytest.raises(ConfigError, match=r"^engine\.extra_args has --mamba-track-interval, which this vLLM"):
        cmd("lru", V032, EngineCfg(tp=4, extra_args=["--mamba-track-interval", "64"]))
    # The mode is the arm: given here it ran branching as align (lru) under branching's name on 0.32.0
    with pytest.raises(ConfigError, match=r"^engine\.extra_args has --mamba-cache-mode, which the arm"):
        cmd("branching", V032, EngineCfg(tp=4, extra_args=["--mamba-cache-mode", "align"]))


def test_env_and_help_argv() -> None:
    assert vllm_env(plan_arm("lru")) == {"VLLM_SERVER_DEV_MODE": "1"}
    assert vllm_help_argv("/v/python") == ["/v/python", "-m", "vllm.entrypoints.cli.main", "serve", "--help=all"]
    with pytest.raises(ConfigError, match="unknown arm"):
        vllm_env(plan_arm("lfu"))


def test_secrets_in_the_command_are_redacted() -> None:
    engine = EngineCfg(tp=4, extra_args=["--api-key", "k1", "--hf-token", "hf_x"])
    full = cmd("lru", V032.replace("  --port PORT", "  --hf-token HF_TOKEN\n  --port PORT"), engine)
    shown = redact(full)
    assert shown[-4:] == ["--api-key", "***", "--hf-token", "***"]
    assert shown[:-4] == full[:-4]


def test_a_dense_model_gets_no_mamba_cache_mode() -> None:
    # vLLM 0.32.0 (CPU build, tests/vllm_cpu) accepted --mamba-cache-mode align for a dense Llama and its
    # worker then died on the first request: "AssertionError: no mamba layers in the model".
    dense = ModelCfg(name="tiny-llama", hf_id="/models/tiny-llama", vocab_size=1024, hybrid=False)
    for arm in ("lru", "branching"):
        full = vllm_command(python=PY, model=dense, engine=EngineCfg(tp=1), arm=plan_arm(arm), port=8000,
                            help_text=V032)
        assert full[full.index("--enable-prompt-tokens-details") + 1:] == ["--enable-prefix-caching"]


def test_mamba_ssm_dtype_is_vllms_ssm_cache_dtype() -> None:
    model = ModelCfg(name="nemotron-h-8b", hf_id="nvidia/Nemotron-H-8B-Base-8K", mamba_ssm_dtype="bfloat16")
    got = vllm_command(python=PY, model=model, engine=EngineCfg(tp=4), arm=plan_arm("lru"), port=8000, help_text=V032)
    assert got[got.index("--mamba-ssm-cache-dtype") + 1] == "bfloat16"
    assert "--mamba-ssm-cache-dtype" not in cmd("lru", V032)  # unset: vLLM's own default
    with pytest.raises(ConfigError, match=r"^model\.mamba_ssm_dtype needs --mamba-ssm-cache-dtype bfloat16, which"):
        vllm_command(python=PY, model=model, engine=EngineCfg(tp=4), arm=plan_arm("lru"), port=8000, help_text=MAIN)


@pytest.mark.parametrize(("extra", "owner"), [
    (["--enable-prefix-caching"], "the arm"),  # the disabled arm with the cache on: vLLM takes the last flag
    (["--no-enable-prefix-caching"], "the arm"),
    (["--tensor-parallel-size", "8"], "engine.tp"), (["-tp", "8"], "engine.tp"), (["--port", "1"], "the harness"),
    # What the plan's pools, the forecast and the record would not have seen; GPUs the run's check would not count.
    (["--gpu-memory-utilization", "0.3"], "engine.mem_fraction_static"),
    (["--max-num-batched-tokens", "512"], "engine.chunked_prefill_size"), (["--block-size", "32"], "engine.page_size"),
    (["-pp", "2"], "the harness"), (["--data-parallel-size", "2"], "serves several copies"),
    (["-dp", "2"], "serves several copies"),
    # The arm's mode: lru is align, branching all (a dense model's worker died of it on 0.32.0)
    (["--mamba-cache-mode", "all"], "the arm"), (["--mamba-cache-mode=none"], "the arm"),
    # An align arm dies at start-up without chunked prefill, and the record calls the prefill chunked
    (["--no-enable-chunked-prefill"], "engine.chunked_prefill_size"),
    (["--mamba-block-size", "256"], "engine.page_size"),  # the disabled arm refuses it at start-up
    (["-q", "fp8"], "model.quantization"), (["--quantization", "fp8"], "model.quantization"),
    # More GPUs than engine.tp: world size is PP x TP x PCP; -n is --nnodes
    (["-pcp", "2"], "the harness"), (["--prefill-context-parallel-size", "2"], "the harness"),
    (["-n", "2"], "the harness"),
])
def test_extra_args_may_not_say_which_cache_or_which_server(extra: list[str], owner: str) -> None:
    with pytest.raises(ConfigError, match=rf"^engine\.extra_args has {extra[0].split('=')[0]}, which {owner}"):
        cmd("disabled", V032, EngineCfg(tp=4, extra_args=extra))


@pytest.mark.parametrize(("extra", "needle"), [
    (["-dp=2"], "-dp, which serves several copies"), (["-pp=2"], "-pp, which the harness"),
    (["-tp=8"], "-tp, which engine.tp sets"),  # argparse reads -tp=8 as -tp 8: TP 8 served, TP 4 recorded
])
def test_short_flags_with_their_value_attached_are_refused_too(extra: list[str], needle: str) -> None:
    with pytest.raises(ConfigError, match=rf"^engine\.extra_args has {needle}"):
        cmd("disabled", V032, EngineCfg(tp=4, extra_args=extra))


@pytest.mark.parametrize("extra", [
    ["-qfp8"],  # argparse reads it as -q fp8: fp8 served, the checkpoint's dtype recorded
    ["-t", "8"],  # a prefix of -tp, the only short flag it begins: TP 8 served, TP 4 recorded
    ["-n2"],  # -n 2 (--nnodes)
    ["-x"],  # no such flag: vLLM's parser would stop at start-up, after the plan had passed
])
def test_short_flags_argparse_would_read_as_another_are_refused(extra: list[str]) -> None:
    """The owned-flag table and the build's flag list know whole names: a short flag with its value run in, or a
    prefix of one, is another spelling argparse accepts (tests/vllm_cpu resolves each with vLLM's own parser)."""
    with pytest.raises(ConfigError, match=rf"^engine\.extra_args has {extra[0]}, which this vLLM build does not "
                                          r"offer as written"):
        cmd("disabled", V032, EngineCfg(tp=4, extra_args=extra))
    assert cmd("disabled", V032, EngineCfg(tp=4, extra_args=["--max-model-len", "-1"]))[-2:] == [
        "--max-model-len", "-1"]  # a negative number is a value, not a flag


def test_vllms_o_shorthand_is_refused_naming_the_flag_and_an_exponent_is_no_negative_number() -> None:
    with pytest.raises(ConfigError, match=r"^engine\.extra_args has -O3, .*vLLM's -O<n> is --optimization-level <n>"):
        cmd("disabled", V032, EngineCfg(tp=4, extra_args=["-O3"]))
    # argparse takes "-1" and "-.5" as numbers, "-1e5" as an option: the server would stop on it at start-up
    with pytest.raises(ConfigError, match=r"^engine\.extra_args has -1e5"):
        cmd("disabled", V032, EngineCfg(tp=4, extra_args=["--max-model-len", "-1e5"]))


def test_disable_log_stats_is_refused_as_it_empties_the_metrics_the_run_reads() -> None:
    for extra in (["--disable-log-stats"], ["--enable-log-requests", "--disable-log-stats"]):
        for help_text in (V032, MAIN, None):
            with pytest.raises(ConfigError, match=r"^engine\.extra_args has --disable-log-stats, which empties vLLM's "
                                                  r"/metrics, where hybridbench reads the block each arm served"):
                cmd("lru", help_text, EngineCfg(tp=4, extra_args=extra))
    assert "--disable-log-stats" not in cmd("lru", V032)  # never the harness's own choice either
    for config in (["--config", "serve.yaml"], ["--config=serve.yaml"]):  # its YAML can say the same, or any flag
        with pytest.raises(ConfigError, match=r"^engine\.extra_args has --config, whose YAML can give any flag"):
            cmd("lru", V032, EngineCfg(tp=4, extra_args=config))


def test_model_quantization_reaches_vllm() -> None:
    """SGLang got --quantization from model.quantization and vLLM did not: a bf16 checkpoint served in bf16 while the
    plan, the forecast (one-byte weights) and the record said fp8."""
    fp8 = ModelCfg(name="qwen3.5-9b", hf_id="Qwen/Qwen3.5-9B", quantization="fp8")
    for help_text in (V032, MAIN):
        full = vllm_command(python=PY, model=fp8, engine=EngineCfg(tp=1), arm=plan_arm("lru"), port=8000,
                            help_text=help_text)
        assert full[full.index("--quantization") + 1] == "fp8"
    assert "--quantization" not in cmd("lru", V032)  # unset: the checkpoint's own dtype


def test_enable_chunked_prefill_in_extra_args_is_passed() -> None:
    """vLLM's default for a generative model, which the plan relies on: given, it resolves to the planned server
    (tests/vllm_cpu/test_vllm_config_resolution.py), so it is not refused as its --no- form is."""
    full = cmd("lru", V032, EngineCfg(tp=4, extra_args=["--enable-chunked-prefill"]))
    assert full[-1] == "--enable-chunked-prefill" and full.count("--enable-chunked-prefill") == 1
    for valued in (["--enable-chunked-prefill=false"], ["--enable-chunked-prefill", "False"]):  # vLLM: exit 2
        with pytest.raises(ConfigError, match=r"^engine\.extra_args gives --enable-chunked-prefill a value, which"):
            cmd("lru", V032, EngineCfg(tp=4, extra_args=valued))
