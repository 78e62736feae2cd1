"""What SGLang refuses, or quietly rewrites, for speculative decoding in the planned line: the EAGLE family's steps,
top-k and draft tokens given in part, the draft tokens it fills in (held against engine.track_interval by the
caller), and the releases that do not run it with an arm's cache.
"""

from __future__ import annotations

from collections.abc import Sequence

from hybridbench.engines.gpus import cuda_major
from hybridbench.engines.planned_line import flag_value, has_flag, int_value, speculative_algorithm
from hybridbench.engines.sglang_host_tier import dcp_flag, dcp_size
from reference_impl.engine.arms import ArmSpec

__all__ = ["dcp_speculative_refusal", "draft_tokens", "lazy_speculative_refusal", "no_buffer_speculative_refusal",
           "speculative_refusal"]

# The draft tokens SGLang fills in when only --speculative-algorithm is given (speculative_hook.py, 0.5.16 and 0.5.23):
# NGRAM's _handle_ngram sets 12; the EAGLE family takes _auto_choose_speculative_params' (steps 3, top-k 1) for every
# architecture but Llama's and Grok's (no hybrid model), and with top-k 1 the draft tokens are always steps + 1.
_EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
_NGRAM_DRAFTS, _AUTO_STEPS = 12, 3


def draft_tokens(args: Sequence[str]) -> tuple[int | None, str]:
    """The draft tokens SGLang verifies per step with ``args``, and how they came ("" when given): None where the plan
    cannot know them (DFLASH's and DSPARK's come from the draft model's config; --speculative-adaptive picks steps)."""
    given = int_value(flag_value(args, "--speculative-num-draft-tokens"))
    algorithm = (speculative_algorithm(args) or "").upper()
    if algorithm == "NGRAM" and given is None:
        return _NGRAM_DRAFTS, "SGLang fills in 12 for NGRAM"
    if algorithm in _EAGLE_FAMILY and not has_flag(args, "--speculative-adaptive"):
        steps = int_value(flag_value(args, "--speculative-num-steps"))
        topk = int_value(flag_value(args, "--speculative-eagle-topk"))
        auto = steps is None
        if auto:  # _auto_choose_speculative_params (SGLang asserts top-k and draft tokens are unset then)
            steps, topk = _AUTO_STEPS, 1
        if topk == 1 and steps is not None and steps + 1 != given:
            how = f"its automatic {steps} steps" if auto else f"--speculative-num-steps {steps}"
            return steps + 1, f"SGLang gives {algorithm} {how} + 1 with top-k 1"
    return given, ""


def speculative_refusal(args: Sequence[str]) -> str:
    """Why SGLang stops at start-up on ``args``' EAGLE-family settings ("" when it does not). With no
    --speculative-num-steps it picks steps, top-k and draft tokens itself and asserts the other two were not given;
    with steps but no --speculative-eagle-topk it fills in neither and compares the missing top-k with 1, a TypeError
    (0.5.9 server_args.py:2422-2452; 0.5.16 arg_groups/speculative_hook.py:555-571 and :639-641; 0.5.23
    speculative_hook.py:1159-1163 and :1273-1275). --speculative-adaptive picks them its own way (not checked)."""
    algorithm = (speculative_algorithm(args) or "").upper()
    if algorithm not in _EAGLE_FAMILY or has_flag(args, "--speculative-adaptive"):
        return ""
    steps, topk = has_flag(args, "--speculative-num-steps"), has_flag(args, "--speculative-eagle-topk")
    if not steps and (given := [f for f in ("--speculative-eagle-topk", "--speculative-num-draft-tokens")
                                if has_flag(args, f)]):
        return (f"engine.extra_args has --speculative-algorithm {algorithm} with {' and '.join(given)} but no "
                "--speculative-num-steps: SGLang then picks all three itself and asserts at start-up that none was "
                "given; give --speculative-num-steps and --speculative-eagle-topk too, or none of them")
    if steps and not topk:
        return (f"engine.extra_args has --speculative-algorithm {algorithm} with --speculative-num-steps but no "
                "--speculative-eagle-topk: SGLang fills in no top-k then and stops at start-up comparing the missing "
                "one; give --speculative-eagle-topk too (1 for a chain)")
    return ""


def lazy_speculative_refusal(extra: Sequence[str], release: tuple[int, ...], version: str, arm: ArmSpec) -> str:
    """Why SGLang ``version`` does not run the extra_buffer_lazy ``arm`` with speculative decoding ("" when it does)."""
    spec = next((f for f in ("--speculative-algorithm", "--speculative-num-draft-tokens") if has_flag(extra, f)), "")
    if arm.strategy != "extra_buffer_lazy" or not spec or release >= (0, 5, 23):
        return ""
    # 0.5.16 ServerArgs._validate_mamba_extra_buffer asserts "extra_buffer_lazy unsupported with spec." once the draft
    # tokens are known, and runs before they are filled in from the algorithm's defaults, so --speculative-algorithm
    # alone starts a combination it does not support (its verify has no lazy track plan). Lazy with speculative
    # decoding came with PR #30437 (0.5.23 has it).
    return (f"arm {arm.name}: engine.extra_args has {spec}; SGLang {version} does not support extra_buffer_lazy with "
            "speculative decoding (PR #30437, in 0.5.23)")


def no_buffer_speculative_refusal(extra: Sequence[str], release: tuple[int, ...], version: str, arm: ArmSpec) -> str:
    """Why SGLang ``version`` serves the no_buffer ``arm`` of a hybrid model with the radix cache off ("" when not)."""
    spec = speculative_algorithm(extra)
    if arm.strategy != "no_buffer" or spec is None or release >= (0, 5, 16):
        return ""
    # 0.5.9 server_args.py:1760-1764 (_handle_mamba_radix_cache, which reads the algorithm as given, before
    # _handle_speculative_decoding): "Disabling radix cache since speculative decoding for <arch> is not supported
    # with radix cache yet". 0.5.16 runs no_buffer with speculative decoding.
    return (f"arm {arm.name}: engine.extra_args has --speculative-algorithm {spec}, with which SGLang {version} turns "
            "the radix cache off for a hybrid model's no_buffer strategy: the run would measure a cache-off server "
            f"under the arm's name; leave speculative decoding out, use an extra_buffer arm (branching), or use "
            "SGLang 0.5.16 or later")


def dcp_speculative_refusal(extra: Sequence[str], release: tuple[int, ...], version: str, gpu: str) -> str:
    """Why SGLang ``version`` refuses decode context parallelism with speculative decoding on engine.gpu ("" when it
    runs them, or when the plan does not know the GPU: 0.5.16 runs them on AMD's HIP)."""
    spec = speculative_algorithm(extra)
    if spec is None or (dcp := dcp_size(extra)) <= 1 or release >= (0, 5, 23) or cuda_major(gpu) is None:
        return ""
    # 0.5.16 ServerArgs._handle_dcp: on CUDA "does not support any speculative algorithm", whatever the model or arm
    # (0.5.23 refuses the pair only with the host tier: sglang_host_tier)
    return (f"engine.gpu={gpu}: engine.extra_args has --speculative-algorithm {spec} with {dcp_flag(extra)} {dcp}, "
            f"which SGLang {version} refuses on CUDA GPUs at start-up; leave decode context parallelism or "
            "speculative decoding out (0.5.23 runs the pair on arms without the host tier)")
