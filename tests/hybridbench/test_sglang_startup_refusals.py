"""Combinations SGLang refuses or rewrites at start-up, refused at plan time (hybridbench.engines.sglang_refusal).

Each case here is run through SGLang 0.5.16's and 0.5.23's own resolution in
tests/sglang_oracle/test_sglang_startup_departures.py; this tier checks the plan side without the release venvs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hybridbench.config.schema import ArmCfg, EngineCfg, L2ArmCfg, ModelCfg
from hybridbench.engines.gpus import cuda_major
from hybridbench.engines.sglang_cmd import sglang_command, sglang_refusal
from hybridbench.errors import ConfigError
from hybridbench.plan.arms import plan_arm

ROOT = Path(__file__).resolve().parents[2]
NEW_HELP = Path(__file__).parent / "fixtures" / "sglang_help_new.txt"


def command(arm: str, extra: list[str], *, gpu: str = "h100", track_interval: int = 256, page_size: int = 1,
            l2: L2ArmCfg | None = None, model: ModelCfg | None = None) -> list[str]:
    engine = EngineCfg(tp=4, gpu=gpu, track_interval=track_interval, page_size=page_size, extra_args=extra)
    spec = plan_arm(arm, ArmCfg(l2=l2 or L2ArmCfg()))
    return sglang_command(python="python", model=model or ModelCfg(), engine=engine, arm=spec, port=30000,
                          help_text=None)


# (arm, engine.extra_args, the start of the one-line refusal): what SGLang 0.5.16 and 0.5.23 both refuse or rewrite
REFUSED = [
    ("branching", ["--disaggregation-mode", "decode"], "arm branching: engine.extra_args has --disaggregation-mode de"),
    ("lru", ["--disaggregation-mode=decode"], "arm lru: engine.extra_args has --disaggregation-mode decode"),
    ("lazy", ["--enable-deterministic-inference", "--attention-backend", "flashinfer"],
     "arm lazy: engine.extra_args has --enable-deterministic-inference with the flashinfer attention backend"),
    ("branching", ["--enable-mis"], "arm branching: engine.extra_args has --enable-mis"),
    ("lazy", ["--linear-attn-backend", "cutedsl"], "arm lazy (extra_buffer_lazy): engine.extra_args has --linear-attn"),
    ("branching", ["--linear-attn-backend=flashinfer"], "arm branching (extra_buffer): engine.extra_args has --linear"),
    ("lazy", ["--enable-linear-replayssm"], "arm lazy (extra_buffer_lazy): engine.extra_args has --enable-linear-re"),
    ("branching", ["--speculative-num-draft-tokens", "257"], "engine.track_interval=256: arm branching (extra_buffer)"),
    ("lazy+l2", ["--enable-int8-mamba-checkpoint"], "arm lazy+l2: engine.extra_args has --enable-int8-mamba-check"),
    ("lazy+l2", ["--hicache-io-backend", "kernel"], "engine.extra_args has --hicache-io-backend kernel: arm lazy+l2"),
    ("l2", ["--hicache-size", "64"], "engine.extra_args has --hicache-size, which arm.l2.hicache_ratio sets"),
    ("branching", ["--enable-lmcache"], "arm branching: engine.extra_args has --enable-lmcache, which asks SGLang for"),
    ("lru", ["--enable-flexkv"], "arm lru: engine.extra_args has --enable-flexkv, which asks SGLang for another"),
    ("disabled", ["--radix-cache-backend=flexkv"], "arm disabled: engine.extra_args has --radix-cache-backend, which"),
    ("branching", ["--mamba-max-states-per-path", "4"], "arm branching: engine.extra_args has --mamba-max-states-per"),
    ("l2", ["--enable-unified-memory"], "arm l2: engine.extra_args has --enable-unified-memory, with which SGLang sw"),
    ("l2", ["--hicache-storage-backend", "mooncake", "--hicache-io-backend", "kernel", "--hicache-mem-layout",
            "layer_first"], "engine.extra_args has --hicache-mem-layout layer_first: with engine.extra_args' --hica"),
    ("lru", ["--attention-backend", "trtllm_mha"], "arm lru: engine.extra_args has --attention-backend trtllm_mha, "
     "which SGLang refuses with --mamba-radix-cache-strategy no_buffer"),
    ("branching", ["--decode-attention-backend=trtllm_mha"], "engine.page_size=1: engine.extra_args has "
     "--decode-attention-backend trtllm_mha, with which SGLang runs pages of 16, 32 or 64 (0.5.23: or 128) tokens "
     "only: it would run arm branching on pages of 64 while the plan, the forecast and the record say 1"),
    ("disabled", ["--attention-backend", "trtllm_mha"], "engine.page_size=1: engine.extra_args has --attention-back"),
    ("lru", ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "5"], "engine.extra_args has "
     "--speculative-algorithm EAGLE with --speculative-num-steps but no --speculative-eagle-topk"),
    ("l2", ["--hicache-storage-backend", "file", "--hicache-host-memory-mode", "buffer_only"], "arm l2: engine.extra_"
     "args has --hicache-host-memory-mode buffer_only, with which SGLang keeps no host tier"),
    ("lazy+l2", ["--hicache-host-memory-mode=buffer_only"], "arm lazy+l2: engine.extra_args has --hicache-host-memory"),
    ("branching", ["--speculative-algorithm", "nextn", "--speculative-eagle-topk", "1"], "engine.extra_args has "
     "--speculative-algorithm NEXTN with --speculative-eagle-topk but no --speculative-num-steps"),
    ("branching", ["--speculative-algorithm", "EAGLE", "--speculative-num-draft-tokens", "4"], "engine.extra_args "
     "has --speculative-algorithm EAGLE with --speculative-num-draft-tokens but no --speculative-num-steps"),
]
# Their neighbours SGLang runs as planned: each must still plan.
ACCEPTED = [
    ("disabled", ["--disaggregation-mode", "decode"]),  # no cache to lose
    ("branching", ["--disaggregation-mode", "decode", "--disaggregation-decode-enable-radix-cache"]),
    ("branching", ["--disaggregation-mode", "prefill"]),
    ("lazy", ["--enable-deterministic-inference"]),  # fa3 on an H100 keeps the cache
    ("lazy", ["--enable-deterministic-inference", "--attention-backend", "triton"]),
    ("lazy", ["--linear-attn-backend", "triton"]),
    ("lru", ["--linear-attn-backend", "cutedsl"]),  # the check is extra_buffer's
    ("branching", ["--speculative-num-draft-tokens", "256"]),
    ("branching", ["--enable-int8-mamba-checkpoint"]),  # without the host tier
    ("lazy+l2", ["--hicache-io-backend", "kernel", "--hicache-mem-layout", "layer_first"]),
    ("branching", ["--mamba-max-states-per-path", "-1"]),  # unlimited: SGLang's default
    ("disabled", ["--mamba-max-states-per-path", "4"]),  # no states to cap
    ("branching", ["--enable-unified-memory", "--attention-backend", "triton"]),  # no host tier to rewrite
    ("l2", ["--hicache-storage-backend", "mooncake", "--hicache-mem-layout", "page_first_direct"]),
    ("l2", ["--hicache-storage-backend", "file", "--hicache-io-backend", "kernel", "--hicache-mem-layout",
            "layer_first"]),  # only mooncake's (and npu_memcache's) layout is rewritten
    ("branching", ["--speculative-algorithm", "NGRAM"]),  # 12 draft tokens, interval 256
    ("lru", ["--attention-backend", "triton"]),
    ("lru", ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "5", "--speculative-eagle-topk", "1"]),
    ("lru", ["--speculative-algorithm", "NGRAM", "--speculative-num-steps", "5"]),  # NGRAM derives its own steps
    ("lru", ["--speculative-num-steps", "5"]),  # no speculative decoding
]


@pytest.mark.parametrize(("arm", "extra", "line"), REFUSED)
def test_a_combination_sglang_refuses_or_rewrites_at_start_up_is_refused_at_plan_time(
        arm: str, extra: list[str], line: str) -> None:
    with pytest.raises(ConfigError) as err:
        command(arm, extra)
    assert str(err.value).startswith(line), err.value
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("arm", "extra"), ACCEPTED)
def test_its_neighbours_that_sglang_runs_as_planned_still_plan(arm: str, extra: list[str]) -> None:
    assert command(arm, extra)[-len(extra):] == extra


@pytest.mark.parametrize("gpu", ["b200", "gb200", "b300"])
def test_deterministic_inference_loses_the_cache_on_blackwell_by_default(gpu: str) -> None:
    # With no --attention-backend SGLang picks flashinfer on SM100 (fa3 on Hopper), which keeps no radix cache.
    # gb200 was taken for Hopper (only names starting with "b" were Blackwell).
    with pytest.raises(ConfigError, match="with the flashinfer attention backend"):
        command("branching", ["--enable-deterministic-inference"], gpu=gpu)


def test_draft_tokens_are_held_against_the_planned_track_interval() -> None:
    with pytest.raises(ConfigError, match=r"^engine.track_interval=64: .*--speculative-num-draft-tokens 128"):
        command("lazy", ["--speculative-num-draft-tokens", "128"], track_interval=64)


@pytest.mark.parametrize(("extra", "interval", "line"), [
    (["--speculative-algorithm", "NGRAM"], 8, "--speculative-algorithm NGRAM (SGLang fills in 12 for NGRAM) needs a "
     "track interval of at least its 12 draft tokens"),
    (["--speculative-algorithm", "EAGLE"], 2, "EAGLE (SGLang gives EAGLE its automatic 3 steps + 1 with top-k 1)"),
    (["--speculative-algorithm", "nextn", "--speculative-num-steps", "9", "--speculative-eagle-topk", "1",
      "--speculative-num-draft-tokens", "4"], 8,
     "(SGLang gives NEXTN --speculative-num-steps 9 + 1 with top-k 1) needs a track interval of at least its 10"),
    (["--speculative-algorithm", "NGRAM"], 12, ""),
    (["--speculative-algorithm", "EAGLE"], 4, ""),
    (["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
      "--speculative-num-draft-tokens", "8"], 8, ""),  # top-k 4 keeps the draft tokens given
])
def test_the_draft_tokens_sglang_fills_in_are_held_against_the_track_interval(
        extra: list[str], interval: int, line: str) -> None:
    # SGLang's validator runs before it fills them in, so it starts the line and checkpoints off the interval.
    if not line:
        assert command("branching", extra, track_interval=interval)[-len(extra):] == extra
        return
    with pytest.raises(ConfigError) as err:
        command("branching", extra, track_interval=interval)
    assert str(err.value).startswith(f"engine.track_interval={interval}: arm branching (extra_buffer)"), err.value
    assert line in str(err.value), err.value
    command("lru", extra, track_interval=interval)  # no_buffer tracks nothing


def test_dp_attention_groups_each_run_the_planned_chunked_prefill_size() -> None:
    # SGLang divides --chunked-prefill-size among the DP attention groups (8192 -> 4096 with two): the plan gives it
    # times the groups, so each group runs engine.chunked_prefill_size, the value the forecast and the record carry.
    def chunk(extra: list[str]) -> str:
        argv = command("branching", extra)
        return argv[argv.index("--chunked-prefill-size") + 1]

    assert chunk([]) == "8192"
    assert chunk(["--enable-dp-attention", "--dp-size", "2"]) == "16384"
    assert chunk(["--enable-dp-attention", "--dp-size=4"]) == "32768"
    assert chunk(["--enable-dp-attention"]) == "8192"  # one group


@pytest.mark.parametrize(("io", "layout", "line"), [
    ("kernel", "page_first_direct", "arm.l2.hicache_io_backend=kernel: arm l2's page_first_direct layout"),
    ("", "page_first_direct", "arm.l2.hicache_io_backend='' (SGLang's default kernel): arm l2's"),
    ("direct", "page_first", "arm.l2.hicache_mem_layout=page_first: arm l2's direct io backend"),
    ("direct", "", "arm.l2.hicache_mem_layout='' (SGLang's default page_first): arm l2's direct io"),
])
def test_an_io_layout_pair_sglang_would_switch_is_refused_naming_the_knob(io: str, layout: str, line: str) -> None:
    with pytest.raises(ConfigError) as err:
        command("l2", [], l2=L2ArmCfg(hicache_io_backend=io, hicache_mem_layout=layout))
    assert str(err.value).startswith(line), err.value
    command("l2", [], l2=L2ArmCfg(hicache_io_backend="kernel", hicache_mem_layout="page_first"))  # a pair it keeps


@pytest.mark.parametrize(("version", "extra", "why"), [
    ("0.5.16", ["--speculative-algorithm", "EAGLE"], "engine.extra_args has --speculative-algorithm; SGLang 0.5.16"),
    ("0.5.16", ["--speculative-num-draft-tokens", "4"], "engine.extra_args has --speculative-num-draft-tokens;"),
    ("0.5.23", ["--speculative-algorithm", "EAGLE"], ""),  # PR #30437
    ("0.5.23", ["--disaggregation-mode", "prefill"], "engine.extra_args has --disaggregation-mode prefill; SGLang"),
    ("0.5.23", ["--disaggregation-mode=decode"], "engine.extra_args has --disaggregation-mode decode; SGLang"),
    ("0.5.23", ["--disaggregation-mode", "null"], ""),
    ("0.5.16", ["--disaggregation-mode", "prefill"], ""),  # 0.5.16 starts it
])
def test_lazy_combinations_one_release_refuses(version: str, extra: list[str], why: str) -> None:
    got = sglang_refusal(ModelCfg(), plan_arm("lazy", ArmCfg()), version, extra)
    assert got.startswith(f"arm lazy: {why}") if why else got == "", got
    assert sglang_refusal(ModelCfg(), plan_arm("branching", ArmCfg()), version, extra) == ""  # lazy's alone


@pytest.mark.parametrize(("version", "why"), [
    ("0.5.16", "arm l2: engine.extra_args has --enable-unified-memory, which SGLang 0.5.16 refuses with the host tier"),
    ("0.5.23", ""),  # it runs the pair, rewriting only a page_first_direct layout (startup_refusal)
])
def test_unified_memory_with_the_host_tier_is_refused_where_the_release_refuses_it(version: str, why: str) -> None:
    assert sglang_refusal(ModelCfg(), plan_arm("l2", ArmCfg()), version, ["--enable-unified-memory"]) == why
    assert sglang_refusal(ModelCfg(), plan_arm("branching", ArmCfg()), version, ["--enable-unified-memory"]) == ""


def _sglang_0_5_16(tmp_path: Path, more_help: str) -> Path:
    """An interpreter that says it has SGLang 0.5.16 installed, with a --help that has every flag asked for."""
    help_text = tmp_path / "help.txt"
    help_text.write_text(NEW_HELP.read_text() + more_help)
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\ncase "$*" in *--help*) cat {help_text};; *) echo 0.5.16;; esac\n')
    fake.chmod(0o755)
    return fake


def test_the_plan_refuses_lazy_with_speculative_decoding_on_0_5_16(tmp_path: Path) -> None:
    fake = _sglang_0_5_16(tmp_path, "  --speculative-algorithm SPECULATIVE_ALGORITHM\n"
                                    "                        Speculative algorithm.\n")
    proc = subprocess.run([sys.executable, "-m", "hybridbench.cli", "plan", "--no-forecast", "+experiment=branching",
                           "arms=[branching,lazy]", "checks.baseline_arm=branching", "engine=sglang",
                           f"engine.python={fake}",
                           "engine.extra_args=[--speculative-algorithm,EAGLE]"],
                          capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines == ["error: arm lazy: engine.extra_args has --speculative-algorithm; SGLang 0.5.16 does not support "
                     "extra_buffer_lazy with speculative decoding (PR #30437, in 0.5.23)"], proc.stderr


def test_buffer_only_host_memory_is_refused_for_host_tier_arms_only() -> None:
    # without the host tier SGLang 0.5.23 skips its host-memory validation: the flag changes nothing there
    extra = ["--hicache-storage-backend", "file", "--hicache-host-memory-mode", "buffer_only"]
    assert command("branching", extra)[-4:] == extra
    assert command("l2", ["--hicache-host-memory-mode", "cache"])[-2:] == ["--hicache-host-memory-mode", "cache"]


# (version, engine.gpu, engine.extra_args, the start of the refusal or ""): trtllm_mha on the planned GPU
TRTLLM_MHA_ON_GPU = [
    ("0.5.16", "h100", ["--attention-backend", "trtllm_mha"], "engine.gpu=h100: engine.extra_args has "
     "--attention-backend trtllm_mha, which SGLang 0.5.16 runs for prefill on Blackwell (SM100) GPUs only"),
    ("0.5.16", "h200", ["--prefill-attention-backend=trtllm_mha"], "engine.gpu=h200: engine.extra_args has --prefill"),
    ("0.5.16", "h100", ["--attention-backend", "trtllm_mha", "--prefill-attention-backend", "fa3"], ""),
    ("0.5.16", "h100", ["--decode-attention-backend", "trtllm_mha"], ""),
    ("0.5.16", "a100", ["--decode-attention-backend", "trtllm_mha"], "engine.gpu=a100: engine.extra_args has "
     "--decode-attention-backend trtllm_mha, which SGLang 0.5.16 runs for decode on Hopper (SM90)"),
    ("0.5.16", "b200", ["--attention-backend", "trtllm_mha"], ""),
    ("0.5.16", "gb200", ["--attention-backend", "trtllm_mha"], ""),
    ("0.5.16", "cpu", ["--attention-backend", "trtllm_mha"], ""),  # no SM to hold it against: the server decides
    ("0.5.23", "h100", ["--attention-backend", "trtllm_mha"], ""),  # SM90's fmha_v2 prefill
    ("0.5.23", "a100", ["--attention-backend", "trtllm_mha"], "engine.gpu=a100: engine.extra_args has --attention-"
     "backend trtllm_mha, which SGLang 0.5.23 runs for prefill on Hopper (SM90) and Blackwell (SM100, SM120) GPUs"),
    ("0.5.23", "h100", ["--attention-backend", "trtllm_mha", "--attention-context-parallel-size", "2"], "engine.gpu="
     "h100: engine.extra_args has --attention-backend trtllm_mha, which SGLang 0.5.23 runs for prefill on Blackwell "
     "(SM100) GPUs only with prefill context parallelism (--attention-context-parallel-size 2)"),
    ("0.5.23", "h100", ["--decode-attention-backend", "trtllm_mha", "--attn-cp-size", "2"], ""),
    ("0.5.23", "b200", ["--attention-backend", "trtllm_mha", "--attn-cp-size", "2"], ""),
    ("0.5.9", "h100", ["--decode-attention-backend", "trtllm_mha"], "engine.gpu=h100: engine.extra_args has --decode-"
     "attention-backend trtllm_mha, which SGLang 0.5.9 runs on Blackwell (SM100) GPUs only"),
    ("0.5.9", "h100", ["--attention-backend", "trtllm_mha", "--prefill-attention-backend", "triton",
                       "--decode-attention-backend", "triton"], ""),
]


@pytest.mark.parametrize(("gpu", "major"), [("h100", 9), ("gb200", 10), ("b300", 10), ("gb10", None), ("b40", None)])
def test_only_listed_gpus_have_a_cuda_major(gpu: str, major: int | None) -> None:
    # GB10 (SM121) and B40 (SM120) are no SM100 parts, whatever their "b<digit>" names: their rules (trtllm_mha
    # prefill, stochastic rounding with triton) are left to the server like every kind the plan does not list
    assert cuda_major(gpu) == major


@pytest.mark.parametrize(("version", "gpu", "extra", "why"), TRTLLM_MHA_ON_GPU)
def test_trtllm_mha_is_refused_where_the_release_refuses_it_on_the_planned_gpu(
        version: str, gpu: str, extra: list[str], why: str) -> None:
    for arm in ("branching", "disabled"):  # whatever the arm: the server refuses the backend
        got = sglang_refusal(ModelCfg(), plan_arm(arm, ArmCfg()), version, extra, gpu)
        assert got.startswith(why) if why else got == "", got


def test_the_plan_refuses_trtllm_mha_prefill_on_an_h100_with_0_5_16(tmp_path: Path) -> None:
    # The run's engine.gpu reaches the refusal
    fake = _sglang_0_5_16(tmp_path, "  --attention-backend {triton,fa3,trtllm_mha}\n"
                                    "                        The attention backend.\n")
    base = [sys.executable, "-m", "hybridbench.cli", "plan", "--no-forecast", "+experiment=branching",
            "arms=[branching]", "checks.baseline_arm=branching", "engine=sglang", f"engine.python={fake}",
            "engine.page_size=64", "engine.extra_args=[--attention-backend,trtllm_mha]"]
    proc = subprocess.run(base, capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: engine.gpu=h100: engine.extra_args has --attention-backend trtllm_mha, which SGLang 0.5.16 runs for "
        "prefill on Blackwell (SM100) GPUs only: the server would refuse it at start-up; give "
        "--prefill-attention-backend another backend (fa3, triton) to keep trtllm_mha for decode, or use SGLang "
        "0.5.23 (it runs trtllm_mha prefill on SM90)"], proc.stderr
    proc = subprocess.run([*base, "engine.gpu=b200"], capture_output=True, text=True, timeout=300, check=False,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr  # a B200 runs it


def test_trtllm_mha_plans_on_its_own_page_sizes() -> None:
    # SGLang switches any other page size to 64 (and no_buffer, page size 1 only, refuses it anyway)
    extra = ["--attention-backend", "trtllm_mha"]
    assert command("branching", extra, page_size=64)[-2:] == extra
    assert command("branching", extra, page_size=128)[-2:] == extra  # 0.5.23 runs 128: the release decides
    with pytest.raises(ConfigError, match=r"^engine.page_size=256: .*--attention-backend trtllm_mha"):
        command("branching", extra, page_size=256)


@pytest.mark.parametrize(("version", "extra", "page", "refused"), [
    ("0.5.16", ["--decode-attention-backend", "trtllm_mha"], 128, True),  # switched to 64
    ("0.5.23", ["--decode-attention-backend", "trtllm_mha"], 128, False),  # kept
    ("0.5.9", ["--attention-backend", "trtllm_mha"], 128, True),
    ("0.5.23", ["--speculative-draft-attention-backend", "trtllm_mha"], 256, True),  # 0.5.23 reads the draft's too
    ("0.5.23", ["--speculative-draft-attention-backend", "trtllm_mha"], 64, False),
    ("0.5.16", ["--speculative-draft-attention-backend", "trtllm_mha"], 256, False),  # 0.5.16 does not
])
def test_trtllm_mha_pages_by_release(version: str, extra: list[str], page: int, refused: bool) -> None:
    why = sglang_refusal(ModelCfg(), plan_arm("branching", ArmCfg()), version, extra, "b200", page)
    assert bool(why) == refused, why
    if refused:
        assert why.startswith(f"engine.page_size={page}: engine.extra_args has ") and f"SGLang {version}" in why


@pytest.mark.parametrize(("version", "arch", "arm", "extra", "why"), [
    # 0.5.23 runs the host tier with decode context parallelism for MLA models only
    ("0.5.23", "Qwen3NextForCausalLM", "l2", ["--dcp-size", "2"], "arm l2: engine.extra_args has --dcp-size 2, with "
     "which SGLang 0.5.23 runs the host tier only for MLA models (Qwen3NextForCausalLM is not one)"),
    ("0.5.23", "NemotronHForCausalLM", "lazy+l2", ["--decode-context-parallel-size=4"], "arm lazy+l2: engine.extra_"),
    ("0.5.23", "KimiLinearForCausalLM", "l2", ["--dcp-size", "2"], ""),
    ("0.5.23", "Qwen3NextForCausalLM", "branching", ["--dcp-size", "2"], ""),  # no host tier
    ("0.5.23", "Qwen3NextForCausalLM", "l2", ["--dcp-size", "1"], ""),
    ("0.5.16", "Qwen3NextForCausalLM", "l2", ["--dcp-size", "2"], ""),  # 0.5.16 starts it
    # with Mooncake, 0.5.16 switches layer_first whatever the DCP size; 0.5.23 keeps it with DCP (an MLA model)
    ("0.5.16", "KimiLinearForCausalLM", "l2", ["--dcp-size", "2", "--hicache-storage-backend", "mooncake",
                                              "--hicache-io-backend", "kernel", "--hicache-mem-layout", "layer_first"],
     "arm l2: with engine.extra_args' --hicache-storage-backend mooncake SGLang 0.5.16 switches the layer_first "
     "layout to page_first (0.5.23 keeps it with --dcp-size > 1); set page_first"),
    ("0.5.23", "KimiLinearForCausalLM", "l2", ["--dcp-size", "2", "--hicache-storage-backend", "mooncake",
                                              "--hicache-io-backend", "kernel", "--hicache-mem-layout", "layer_first"],
     ""),
])
def test_decode_context_parallelism_with_the_host_tier_is_refused_where_the_release_refuses_it(
        version: str, arch: str, arm: str, extra: list[str], why: str) -> None:
    model = ModelCfg(architecture=arch)
    got = sglang_refusal(model, plan_arm(arm, ArmCfg()), version, extra)
    assert got.startswith(why) if why else got == "", got


def test_mooncake_keeps_layer_first_with_decode_context_parallelism_on_an_mla_model_only() -> None:
    # 0.5.23 hicache_hook.resolve_storage_layout_compatibility returns early for mooncake with --dcp-size > 1; it runs
    # that host tier for MLA models only, so for any other model the plan still refuses (the layout, or sglang_refusal)
    extra = ["--dcp-size", "2", "--hicache-storage-backend", "mooncake", "--hicache-io-backend", "kernel",
             "--hicache-mem-layout", "layer_first"]
    assert command("l2", extra, model=ModelCfg(architecture="KimiLinearForCausalLM"))[-len(extra):] == extra
    with pytest.raises(ConfigError, match=r"--hicache-mem-layout layer_first: with engine\.extra_args' --hicache-sto"):
        command("l2", extra)


_NGRAM = ["--speculative-algorithm", "NGRAM"]


@pytest.mark.parametrize(("version", "arch", "arm", "extra", "gpu", "why"), [
    # 0.5.23: DCP with the host tier of an MLA model takes no speculative algorithm but DSPARK, and no HiSparse
    ("0.5.23", "KimiLinearForCausalLM", "l2", ["--dcp-size", "2", *_NGRAM], "h100", "arm l2: engine.extra_args has "
     "--speculative-algorithm NGRAM with --dcp-size 2, which SGLang 0.5.23 refuses with the host tier"),
    ("0.5.23", "KimiLinearForCausalLM", "l2", ["--dcp-size", "2", "--speculative-algorithm", "DSPARK"], "h100", ""),
    ("0.5.23", "KimiLinearForCausalLM", "l2", ["--decode-context-parallel-size=2", "--enable-hisparse"], "h100",
     "arm l2: engine.extra_args has --enable-hisparse with --decode-context-parallel-size 2, which SGLang 0.5.23"),
    ("0.5.23", "KimiLinearForCausalLM", "branching", ["--dcp-size", "2", *_NGRAM], "h100", ""),  # no host tier
    # 0.5.16: DCP with any speculative algorithm on CUDA, whatever the arm; a GPU the plan does not know is left to it
    ("0.5.16", "Qwen3NextForCausalLM", "branching", ["--dcp-size", "2", *_NGRAM], "h100", "engine.gpu=h100: engine."
     "extra_args has --speculative-algorithm NGRAM with --dcp-size 2, which SGLang 0.5.16 refuses on CUDA GPUs"),
    ("0.5.16", "Qwen3NextForCausalLM", "branching", ["--dcp-size", "2", *_NGRAM], "mi300x", ""),
    ("0.5.16", "Qwen3NextForCausalLM", "branching", ["--dcp-size", "1", *_NGRAM], "h100", ""),
    # 0.5.9 turns the radix cache off for no_buffer with speculative decoding
    ("0.5.9", "Qwen3NextForCausalLM", "lru", _NGRAM, "h100", "arm lru: engine.extra_args has --speculative-algorithm "
     "NGRAM, with which SGLang 0.5.9 turns the radix cache off for a hybrid model's no_buffer strategy"),
    ("0.5.9", "Qwen3NextForCausalLM", "branching", _NGRAM, "h100", ""),
    ("0.5.9", "Qwen3NextForCausalLM", "lru", ["--speculative-num-draft-tokens", "8"], "h100", ""),
    ("0.5.16", "Qwen3NextForCausalLM", "lru", _NGRAM, "h100", ""),
])
def test_speculative_decoding_is_refused_where_the_release_refuses_it_or_turns_the_cache_off(
        version: str, arch: str, arm: str, extra: list[str], *, gpu: str, why: str) -> None:
    got = sglang_refusal(ModelCfg(architecture=arch), plan_arm(arm, ArmCfg()), version, extra, gpu)
    assert got.startswith(why) if why else got == "", got


@pytest.mark.parametrize(("gpu", "dtype", "extra", "why"), [
    ("h100", "float16", [], "engine.gpu=h100: engine.extra_args has --enable-mamba-cache-stochastic-rounding, which "
     "SGLang runs with the triton mamba backend (its default) on Blackwell (SM100) GPUs only"),
    ("a100", "float16", ["--mamba-backend", "triton"], "engine.gpu=a100: "),
    ("b200", "", [], "model.mamba_ssm_dtype='' (the checkpoint's): engine.extra_args has --enable-mamba-cache-stoch"),
    ("h100", "bfloat16", ["--mamba-backend", "flashinfer"], "model.mamba_ssm_dtype=bfloat16: "),
    ("b200", "float16", [], ""),
    ("h100", "float16", ["--mamba-backend", "flashinfer"], ""),
    ("l40s", "float16", [], ""),  # a GPU the plan does not know: left to the server
])
def test_stochastic_rounding_takes_float16_states_and_sm100_with_triton(gpu: str, dtype: str, extra: list[str],
                                                                          why: str) -> None:
    args = ["--enable-mamba-cache-stochastic-rounding", *extra]
    if not why:
        assert command("lru", args, gpu=gpu, model=ModelCfg(mamba_ssm_dtype=dtype))[-len(args):] == args
        return
    with pytest.raises(ConfigError) as err:
        command("lru", args, gpu=gpu, model=ModelCfg(mamba_ssm_dtype=dtype))
    assert str(err.value).startswith(why) and "\n" not in str(err.value), err.value
