"""The SGLang launch command per arm, against hand-written --help excerpts of old, new and PR builds."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from hybridbench.config.redact import redact
from hybridbench.config.schema import (
    ArmCfg,
    EngineCfg,
    L2ArmCfg,
    MarconiArmCfg,
    ModelCfg,
    RunCfg,
    SeglenArmCfg,
    WorkloadCfg,
)
from hybridbench.engines.sglang_cmd import (
    parse_help,
    sglang_command,
    sglang_env,
    sglang_help_argv,
    sglang_metrics_ranks,
    sglang_refusal,
)
from hybridbench.errors import ConfigError
from hybridbench.plan.arms import plan_arm
from hybridbench.plan.build import build_plan

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures"
OLD = (FIXTURES / "sglang_help_old.txt").read_text()
NEW = (FIXTURES / "sglang_help_new.txt").read_text()
SEGLEN = (FIXTURES / "sglang_help_seglen.txt").read_text()
MARCONI = (FIXTURES / "sglang_help_marconi.txt").read_text()

PY = "/venvs/sglang-pr/bin/python"
MODEL = ModelCfg()  # Qwen/Qwen3-Next-80B-A3B-Instruct
HEAD = [
    PY, "-m", "sglang.launch_server",
    "--model-path", "Qwen/Qwen3-Next-80B-A3B-Instruct",
    "--host", "127.0.0.1", "--port", "30000", "--tp-size", "4",
    "--page-size", "1", "--chunked-prefill-size", "8192", "--mem-fraction-static", "0.85",
    "--enable-metrics", "--enable-cache-report",
]  # fmt: skip
HICACHE = ["--enable-hierarchical-cache", "--hicache-ratio", "2.0", "--hicache-write-policy", "write_through",
           "--hicache-io-backend", "direct", "--hicache-mem-layout", "page_first_direct"]


def cmd(arm: str, help_text: str | None, engine: EngineCfg | None = None, knobs: ArmCfg | None = None,
        **kw: object) -> list[str]:
    return sglang_command(
        python=PY, model=MODEL, engine=engine or EngineCfg(tp=4), arm=plan_arm(arm, knobs), port=30000,
        help_text=help_text, **kw,  # type: ignore[arg-type]
    )


def arm_part(arm: str, help_text: str | None, engine: EngineCfg | None = None) -> list[str]:
    full = cmd(arm, help_text, engine)
    assert full[: len(HEAD)] == HEAD
    return full[len(HEAD):]


# ---------------------------------------------------------------------------------------------- exact commands


@pytest.mark.parametrize("help_text", [NEW, None], ids=["new-help", "no-help"])
def test_new_build_uses_the_renamed_strategy_flag(help_text: str | None) -> None:
    s = "--mamba-radix-cache-strategy"
    assert arm_part("disabled", help_text) == ["--disable-radix-cache"]
    assert arm_part("lru", help_text) == [s, "no_buffer", "--disable-overlap-schedule"]
    assert arm_part("branching", help_text) == [s, "extra_buffer", "--mamba-track-interval", "256"]
    assert arm_part("l2", help_text) == [s, "extra_buffer", "--mamba-track-interval", "256", *HICACHE]
    assert arm_part("branching+l2", help_text) == arm_part("l2", help_text)


def test_old_build_uses_the_scheduler_strategy_spelling() -> None:
    s = "--mamba-scheduler-strategy"
    assert arm_part("disabled", OLD) == ["--disable-radix-cache"]
    assert arm_part("lru", OLD) == [s, "no_buffer", "--disable-overlap-schedule"]
    assert arm_part("branching", OLD) == [s, "extra_buffer", "--mamba-track-interval", "256"]
    assert arm_part("l2", OLD) == [s, "extra_buffer", "--mamba-track-interval", "256", *HICACHE]


def test_full_command_for_seglen_on_the_pr_build() -> None:
    assert cmd("seglen", SEGLEN) == [
        *HEAD,
        "--mamba-scheduler-strategy", "extra_buffer", "--mamba-track-interval", "256",
        "--radix-eviction-policy", "seglen", "--seglen-eff-weight", "0.85",
    ]  # fmt: skip
    assert arm_part("branching+seglen", SEGLEN) == arm_part("seglen", SEGLEN)
    assert arm_part("seglen+l2", SEGLEN) == [
        "--mamba-scheduler-strategy", "extra_buffer", "--mamba-track-interval", "256",
        "--radix-eviction-policy", "seglen", "--seglen-eff-weight", "0.85", *HICACHE,
    ]  # fmt: skip


def test_seglen_without_help_uses_newest_spellings() -> None:
    assert arm_part("seglen", None) == [
        "--mamba-radix-cache-strategy", "extra_buffer", "--mamba-track-interval", "256",
        "--radix-eviction-policy", "seglen", "--seglen-eff-weight", "0.85",
    ]  # fmt: skip


def test_seglen_on_the_fork_that_spells_the_weight_marconi() -> None:
    fork = SEGLEN.replace("--seglen-eff-weight SEGLEN_EFF_WEIGHT", "--marconi-eff-weight MARCONI_EFF_WEIGHT")
    assert arm_part("seglen", fork)[-4:] == ["--radix-eviction-policy", "seglen", "--marconi-eff-weight", "0.85"]


def test_marconi_on_its_pr_build() -> None:
    base = ["--mamba-scheduler-strategy", "extra_buffer", "--mamba-track-interval", "256",
            "--radix-eviction-policy", "marconi"]  # fmt: skip
    assert arm_part("marconi", MARCONI) == base
    weighted = cmd("marconi", MARCONI, knobs=ArmCfg(marconi=MarconiArmCfg(eff_weight=0.3)))
    assert weighted[len(HEAD):] == [*base, "--marconi-eff-weight", "0.3"]


def test_engine_options_and_extra_args_last() -> None:
    engine = EngineCfg(
        tp=2, host="0.0.0.0", page_size=64, chunked_prefill_size=2048, mem_fraction_static=0.7,
        max_mamba_cache_size=100, kv_tokens=60000, track_interval=128,
        extra_args=["--schedule-policy", "lpm", "--api-key", "s3cret"],
    )  # fmt: skip
    branching = plan_arm("branching")
    assert sglang_command(python=PY, model=MODEL, engine=engine, arm=branching, port=31000, help_text=NEW) == [
        PY, "-m", "sglang.launch_server",
        "--model-path", "Qwen/Qwen3-Next-80B-A3B-Instruct",
        "--host", "0.0.0.0", "--port", "31000", "--tp-size", "2",
        "--page-size", "64", "--chunked-prefill-size", "2048", "--mem-fraction-static", "0.7",
        "--max-mamba-cache-size", "100", "--max-total-tokens", "60000",
        "--enable-metrics", "--enable-cache-report",
        "--mamba-radix-cache-strategy", "extra_buffer", "--mamba-track-interval", "128",
        "--schedule-policy", "lpm", "--api-key", "s3cret",
    ]  # fmt: skip


def test_numeric_extra_args_from_yaml_become_strings() -> None:
    assert cmd("lru", NEW, EngineCfg(tp=4, extra_args=["--max-running-requests", 16]))[-2:] == [  # type: ignore[list-item]
        "--max-running-requests", "16"]  # fmt: skip


def test_metrics_and_cache_report_can_be_left_out() -> None:
    full = cmd("lru", NEW, metrics=False, cache_report=False)
    assert "--enable-metrics" not in full
    assert "--enable-cache-report" not in full


def test_extra_args_replace_a_built_flag() -> None:
    # Tuning flags no config key feeds the plan with: the host tier's write policy, I/O backend and layout (a pair
    # SGLang keeps: kernel with page_first_direct it would switch to direct, as
    # tests/sglang_oracle/test_sglang_startup_departures.py shows).
    engine = EngineCfg(tp=4, extra_args=["--hicache-write-policy", "write_back", "--hicache-io-backend=kernel",
                                         "--hicache-mem-layout", "layer_first"])
    part = cmd("l2", NEW, engine)[len(HEAD):]
    assert part == [
        "--mamba-radix-cache-strategy", "extra_buffer", "--mamba-track-interval", "256",
        "--enable-hierarchical-cache", "--hicache-ratio", "2.0",
        "--hicache-write-policy", "write_back", "--hicache-io-backend=kernel", "--hicache-mem-layout", "layer_first",
    ]  # fmt: skip


def test_arm_knobs_reach_the_command_and_bad_ones_fail_at_plan_time(tmp_path: Path) -> None:
    knobs = ArmCfg(seglen=SeglenArmCfg(eff_weight=0.6), l2=L2ArmCfg(hicache_ratio=4))
    part = cmd("seglen+l2", SEGLEN, EngineCfg(tp=4), knobs=knobs)[len(HEAD):]
    assert part[part.index("--seglen-eff-weight") + 1] == "0.6"
    assert part[part.index("--hicache-ratio") + 1] == "4"
    for bad, key in ((ArmCfg(seglen=SeglenArmCfg(eff_weight=float("nan"))), r"arm\.seglen\.eff_weight"),
                     (ArmCfg(l2=L2ArmCfg(hicache_ratio=0.0)), r"arm\.l2\.hicache_ratio must be > 0"),
                     (ArmCfg(marconi=MarconiArmCfg(eff_weight=-1.0)), r"arm\.marconi\.eff_weight"),
                     # planned, then trial 1's server died of a torch overflow (exit 3)
                     (ArmCfg(l2=L2ArmCfg(hicache_ratio=1e300)), r"arm\.l2\.hicache_ratio must be at most 100 "),
                     (ArmCfg(l2=L2ArmCfg(host_tier_gb=1e9)), r"arm\.l2\.host_tier_gb must be at most 16384 "),
                     (ArmCfg(seglen=SeglenArmCfg(eff_weight=1.5)), r"arm\.seglen\.eff_weight must be in \[0, 1\]")):
        with pytest.raises(ConfigError, match=key):
            build_plan(RunCfg(arm=bad, workloads={"w": WorkloadCfg()}), tmp_path, {})


def test_default_python_is_this_interpreter() -> None:
    import sys

    full = sglang_command(python="", model=MODEL, engine=EngineCfg(), arm=plan_arm("lru"), port=1, help_text=None)
    assert full[0] == sys.executable
    assert sglang_help_argv("/x/python") == ["/x/python", "-m", "sglang.launch_server", "--help"]


# ---------------------------------------------------------------------------------------------- plan-time errors


@pytest.mark.parametrize(
    ("arm", "help_text", "message"),
    [
        ("seglen", OLD, "arm seglen needs --radix-eviction-policy seglen, which this SGLang build does not offer"),
        ("seglen", NEW, "arm seglen needs --radix-eviction-policy seglen, which this SGLang build does not offer"),
        ("seglen+l2", OLD, "arm seglen+l2 needs --radix-eviction-policy seglen"),
        ("marconi", NEW, "arm marconi needs --radix-eviction-policy marconi, which this SGLang build does not"),
        ("marconi", SEGLEN, "arm marconi needs --radix-eviction-policy marconi"),
    ],
)
def test_missing_policy_is_a_config_error_naming_flag_and_arm(arm: str, help_text: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        cmd(arm, help_text)
    assert message in str(e.value)
    assert e.value.exit_code == 2


def test_missing_flags_are_named() -> None:
    no_weight = SEGLEN.replace("--seglen-eff-weight SEGLEN_EFF_WEIGHT", "")
    with pytest.raises(ConfigError, match=r"^arm seglen needs --seglen-eff-weight \(or --marconi-eff-weight"):
        cmd("seglen", no_weight)
    with pytest.raises(ConfigError, match=r"^arm marconi needs --marconi-eff-weight, which"):
        cmd("marconi", MARCONI.replace("--marconi-eff-weight MARCONI", "--x MARCONI"),
            knobs=ArmCfg(marconi=MarconiArmCfg(eff_weight=0.3)))
    no_track = OLD.replace("--mamba-track-interval MAMBA_TRACK_INTERVAL", "")
    with pytest.raises(ConfigError, match=r"^arm branching needs --mamba-track-interval, which"):
        cmd("branching", no_track)
    with pytest.raises(ConfigError, match=r"^arm l2 needs --enable-hierarchical-cache \(or --enable-hicache"):
        cmd("l2", OLD.replace("--enable-hierarchical-cache", "--enable-something-else"))


def test_a_build_without_any_strategy_flag() -> None:
    ancient = OLD.replace("--mamba-scheduler-strategy {auto,no_buffer,extra_buffer}", "--mamba-other X")
    with pytest.raises(ConfigError, match=r"^arm lru needs --mamba-radix-cache-strategy no_buffer "
                                          r"\(or --mamba-scheduler-strategy on other builds\)"):
        cmd("lru", ancient)
    assert arm_part("disabled", ancient) == ["--disable-radix-cache"]  # needs no strategy


def test_a_build_without_extra_buffer() -> None:
    pre_v2 = OLD.replace("{auto,no_buffer,extra_buffer}", "{auto,no_buffer}")
    with pytest.raises(ConfigError, match=r"^arm branching needs --mamba-scheduler-strategy extra_buffer, which "
                                          r"this SGLang build does not offer \(it lists auto, no_buffer\)"):
        cmd("branching", pre_v2)
    assert arm_part("lru", pre_v2) == ["--mamba-scheduler-strategy", "no_buffer", "--disable-overlap-schedule"]


def test_engine_options_and_extra_args_are_checked_too() -> None:
    with pytest.raises(ConfigError, match=r"^engine\.max_mamba_cache_size needs --max-mamba-cache-size"):
        cmd("lru", OLD.replace("--max-mamba-cache-size", "--max-something"), EngineCfg(max_mamba_cache_size=8))
    with pytest.raises(ConfigError, match=r"^engine\.extra_args has --mamba-max-states-per-path, which this"):
        cmd("lru", OLD, EngineCfg(extra_args=["--mamba-max-states-per-path", "4"]))
    # offered by the new --help; on a cache-on arm it thins the arm's states (sglang_refusal.startup_refusal)
    assert cmd("disabled", NEW, EngineCfg(extra_args=["--mamba-max-states-per-path", "4"]))[-2:] == [
        "--mamba-max-states-per-path", "4"]  # fmt: skip
    with pytest.raises(ConfigError, match=r"write_policy|--hicache-write-policy bogus"):
        cmd("l2", NEW, knobs=ArmCfg(l2=L2ArmCfg(hicache_write_policy="bogus")))


def test_strategy_preconditions() -> None:
    with pytest.raises(ConfigError, match=r"no_buffer, which needs page size 1; engine\.page_size is 64"):
        cmd("lru", NEW, EngineCfg(page_size=64))
    with pytest.raises(ConfigError, match=r"track_interval \(100\) must be a multiple of engine\.page_size \(64\)"):
        cmd("branching", NEW, EngineCfg(page_size=64, track_interval=100))


@pytest.mark.parametrize(
    ("arm", "message"),
    [
        ("nope", "unknown arm 'nope'"),
        ("disabled+lru", "does not compose"),
        ("marconi+disabled", "does not compose"),
        ("marconi+seglen", "marconi and seglen are both eviction policies"),
        ("", "empty arm name"),
    ],
)
def test_bad_arm_names(arm: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        cmd(arm, None)
    with pytest.raises(ConfigError, match=message):
        sglang_env(plan_arm(arm))


def test_the_plan_knows_marconi_and_keeps_the_reference_vocabulary() -> None:
    assert plan_arm("marconi").strategy == "extra_buffer"
    assert plan_arm("marconi+l2").host_tier
    assert plan_arm("branching+seglen").policy == "seglen"
    assert sglang_env(plan_arm("seglen")) == {}


# ---------------------------------------------------------------------------------------------- help parsing


def test_parse_help_reads_definitions_not_mentions() -> None:
    h = parse_help(NEW)
    assert h.offers("--mamba-radix-cache-strategy")
    assert h.offers("--mamba-scheduler-strategy")  # the deprecated alias is listed too; the new one is preferred
    assert h.offers("--tp-size") and h.offers("--enable-hicache") and h.offers("--model")
    assert h.choices["--radix-eviction-policy"] == frozenset({"lru", "lfu", "slru", "priority", "tlru"})
    assert h.accepts("--mamba-radix-cache-strategy", "extra_buffer_lazy")
    assert not h.accepts("--radix-eviction-policy", "seglen")
    mention = "  --foo FOO             Like --bar-baz but\n                        --qux-quux too.\n"
    assert parse_help(mention).flags == frozenset({"--foo"})
    assert parse_help("usage: x [--only-in-usage]\n").flags == frozenset({"--only-in-usage"})  # fallback


# ---------------------------------------------------------------------------------------------- provenance


def test_secrets_in_the_command_are_redacted() -> None:
    engine = EngineCfg(tp=4, extra_args=["--api-key", "sk-live-123", "--hf-token=hf_abc", "--admin-api-key", "adm"])
    full = cmd("seglen", None, engine)
    shown = redact(full)
    assert "sk-live-123" not in shown and "adm" not in shown
    assert "--hf-token=***" in shown
    assert shown[shown.index("--api-key") + 1] == "***"
    assert shown[:-5] == full[:-5]  # nothing else touched
    env = [f"{k}={v}" for k, v in {**sglang_env(plan_arm("seglen")), "HF_TOKEN": "hf_xyz"}.items()]
    assert redact(env) == ["HF_TOKEN=***"]


@pytest.mark.parametrize(("extra", "owner"), [
    (["--mamba-radix-cache-strategy", "extra_buffer"], "the arm"),  # lru run as branching, still called lru
    (["--disable-radix-cache"], "the arm"),  # every arm with the cache off
    (["--radix-eviction-policy=lru"], "the arm"),
    (["--enable-hierarchical-cache"], "the arm"),
    (["--tp-size", "8"], "engine.tp"),  # TP 8 served, TP 4 planned, GPU-checked and recorded
    (["--tp", "8"], "engine.tp"),
    (["--port", "30000"], "the harness"),  # the harness would poll its own port, never answered
    (["--model-path", "Qwen/Qwen3.5-9B"], "model.hf_id"),
    # A pool or memory share the plan, the forecast, the pool check and the record never saw.
    (["--max-total-tokens", "200"], "engine.kv_tokens"),
    (["--mem-fraction-static=0.3"], "engine.mem_fraction_static"),
    (["--max-mamba-cache-size", "60"], "engine.max_mamba_cache_size"),
    (["--page-size", "64"], "engine.page_size"),
    (["--chunked-prefill-size", "512"], "engine.chunked_prefill_size"),
    # What the plan's pools, the forecast and the kl probe read from the key, while the server ran another value.
    (["--mamba-track-interval", "64"], "engine.track_interval"),
    (["--seglen-eff-weight=0.5"], "arm.seglen.eff_weight"),
    (["--hicache-ratio", "1.5"], "arm.l2.hicache_ratio"),
    # More GPUs than engine.tp, which the doctor and the run count.
    (["--pp-size", "2"], "the harness"),
    (["--nnodes", "2"], "the harness"),
    (["--dp-size", "2"], "serves several copies"),
    (["--data-parallel-size=2"], "serves several copies"),
])
def test_extra_args_may_not_say_which_cache_or_which_server(extra: list[str], owner: str) -> None:
    with pytest.raises(ConfigError, match=rf"^engine\.extra_args has {extra[0].split('=')[0]}, which {owner}"):
        cmd("lru", NEW, EngineCfg(tp=4, extra_args=extra))


def test_data_parallel_attention_stays_on_engine_tp_gpus() -> None:
    extra = ["--enable-dp-attention", "--dp-size", "4"]  # DP groups inside the TP-4 GPUs (SGLang's DP attention)
    assert cmd("lru", None, EngineCfg(tp=4, extra_args=extra))[-3:] == extra


@pytest.mark.parametrize("extra", [
    ["--attn-dp-size", "2"],  # SGLang 0.5.23's spelling of attention DP (--enable-dp-attention is deprecated there)
    ["--attention-data-parallel-size=2"],  # its alias
    ["--enable-dp-attention", "--dp-size", "2"],
])
def test_each_attention_dp_group_runs_engine_chunked_prefill_size(extra: list[str]) -> None:
    # SGLang divides --chunked-prefill-size among the attention DP groups (0.5.23 parallel_hook.py): given twice
    # 8192, each group's scheduler runs the 8192 the plan, the forecast and the record carry
    argv = cmd("lru", None, EngineCfg(tp=4, chunked_prefill_size=8192, extra_args=extra))
    assert argv[argv.index("--chunked-prefill-size") + 1] == "16384"
    assert sglang_metrics_ranks(EngineCfg(tp=4, extra_args=extra)) == 2


@pytest.mark.parametrize(("extra", "why"), [
    (["--attn-dp-size", "3"], "3 data-parallel attention groups, which do not divide engine.tp=4"),
    (["--enable-dp-attention", "--dp-size", "3"], "3 data-parallel attention groups, which do not divide engine.tp=4"),
    (["--enable-dp-attention", "--dp-size=two"], "engine.extra_args has --dp-size 'two'; give a positive integer"),
    (["--enable-dp-attention", "--dp-size", "0"], "engine.extra_args has --dp-size '0'; give a positive integer"),
    (["--enable-dp-attention", "--dp-size", "\u00b2"],  # a digit to str.isdigit, not to int()
     "engine.extra_args has --dp-size '\u00b2'; give a positive integer"),
    (["--dp-size", "2", "--enable-dp-attention", "--dp"], "engine.extra_args has --dp ''; give a positive integer"),
])
def test_data_parallel_attention_groups_must_split_engine_tp(extra: list[str], why: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(why)):
        cmd("lru", None, EngineCfg(tp=4, extra_args=extra))


@pytest.mark.parametrize(("model", "arm", "version", "why"), [
    # 0.5.9's HiRadixCache refuses a hybrid pool (the server dies after loading weights); 0.5.16 has HiMambaRadixCache
    ("qwen3-next-80b-a3b", "l2", "0.5.9", "arm l2: SGLang 0.5.9 has no host tier for hybrid models"),
    ("qwen3-next-80b-a3b", "l2", "0.5.16.post1", ""),
    ("qwen3-next-80b-a3b", "l2", "", ""),  # unknown version: nothing to decide on (doctor says so)
    ("nemotron-h-8b", "branching", "0.5.9", "arm branching: SGLang 0.5.9 refuses extra_buffer for NemotronH"),
    ("nemotron-h-8b", "lru", "0.5.9", ""),
    ("nemotron-h-8b", "branching", "0.5.23", ""),
    ("jamba-1.5-mini", "lru", "0.5.23", "SGLang 0.5.23 has no Jamba model"),
])
def test_a_release_that_would_die_at_start_up_is_refused_at_plan_time(model: str, arm: str, version: str,
                                                                     why: str) -> None:
    got = sglang_refusal(ModelCfg(name=model), plan_arm(arm, ArmCfg()), version)
    assert got.startswith(why) and bool(got) == bool(why), got
    assert sglang_refusal(ModelCfg(name=model, hybrid=False), plan_arm(arm, ArmCfg()), version) == ""


@pytest.mark.parametrize(("architecture", "arm", "version", "why"), [
    ("NemotronHForCausalLM", "branching", "0.5.9", "arm branching: SGLang 0.5.9 refuses extra_buffer for NemotronH"),
    ("JambaForCausalLM", "lru", "0.5.23", "SGLang 0.5.23 has no Jamba model"),
    ("Qwen3NextForCausalLM", "branching", "0.5.9", ""),
])
def test_a_renamed_model_is_refused_by_its_architecture(architecture: str, arm: str, version: str, why: str) -> None:
    # model.name is the user's label (a fine-tune, a local copy); the architecture is the class the server loads.
    got = sglang_refusal(ModelCfg(name="our-finetune", architecture=architecture), plan_arm(arm, ArmCfg()), version)
    assert got.startswith(why) and bool(got) == bool(why), got
    # A name that sounds like another model does not override the architecture the config gives.
    named = ModelCfg(name="nemotron-h-8b", architecture="Qwen3NextForCausalLM")
    assert sglang_refusal(named, plan_arm("branching", ArmCfg()), "0.5.9") == ""


def test_the_plan_refuses_l2_on_a_release_without_a_hybrid_host_tier(tmp_path: Path) -> None:
    # An interpreter that says it has SGLang 0.5.9 installed, with 0.5.9's --help: every flag is there.
    fake = tmp_path / "python"
    old_help = FIXTURES / "sglang_help_old.txt"
    fake.write_text(f'#!/bin/sh\ncase "$*" in *--help*) cat {old_help};; *) echo 0.5.9;; esac\n')
    fake.chmod(0o755)
    proc = subprocess.run([sys.executable, "-m", "hybridbench.cli", "plan", "--no-forecast", "+experiment=l2",
                           "engine=sglang", f"engine.python={fake}"], capture_output=True, text=True, timeout=300,
                          check=False, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: arm l2: SGLang 0.5.9 has no host tier"), proc.stderr


@pytest.mark.parametrize("extra", [["--device", "cpu"], ["--device=cpu"], ["--device", "npu"], ["--device", ""]])
def test_another_device_than_the_gpu_recorded_is_refused(extra: list[str]) -> None:
    # The CPU fixtures' recipe (--device cpu) without engine.gpu=cpu: a CPU server recorded as a 4 x H100 run.
    with pytest.raises(ConfigError, match=r"^engine\.extra_args has --device .*, but engine\.gpu=h100"):
        cmd("lru", None, EngineCfg(tp=4, extra_args=extra))  # no help check: this file's fixtures predate --device
    assert cmd("lru", None, EngineCfg(tp=4, extra_args=["--device", "cuda"]))[-2:] == ["--device", "cuda"]
    assert cmd("lru", None, EngineCfg(tp=1, gpu="cpu", extra_args=extra))[-len(extra):] == extra
