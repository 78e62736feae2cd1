"""What SGLang's kernels run on, read from the planned line: trtllm_mha attention only on some page sizes and some
GPUs (engine.page_size, engine.gpu), the mamba cache's stochastic rounding only on float16 states and, with the triton
mamba backend, on SM100 GPUs. A line off them is refused at plan time with one line naming the key, not left to a
server that refuses it at start-up or silently switches the page size the plan, the forecast and the record carry.
"""

from __future__ import annotations

from collections.abc import Sequence

from hybridbench.config.schema import EngineCfg
from hybridbench.engines.gpus import cuda_major
from hybridbench.engines.owned_flags import last_flag
from hybridbench.engines.planned_line import flag_value, has_flag, int_value
from reference_impl.engine.arms import ArmSpec

__all__ = ["mamba_rounding_refusal", "trtllm_mha_gpu_refusal", "trtllm_mha_page_refusal", "trtllm_mha_refusal"]

# The attention-backend flags whose trtllm_mha SGLang runs only on pages of these sizes, switching any other page size
# to 64 (0.5.9 server_args.py:1894-1909, 0.5.16 arg_groups/overrides.py:1732-1742, 0.5.23 overrides.py:1174-1187,
# which also takes 128 and reads the draft's backend: trtllm_mha_page_refusal, which knows the release).
_TRTLLM_MHA_FLAGS = ("--attention-backend", "--prefill-attention-backend", "--decode-attention-backend")
_TRTLLM_MHA_PAGES = (16, 32, 64)  # said so in the refusals
_DRAFT_BACKEND = "--speculative-draft-attention-backend"
# The CUDA majors trtllm_mha runs on (engine.gpu's, by gpus.cuda_major); a GPU the plan does not know is left to the
# server.
_BLACKWELL_ONLY: tuple[int, ...] = (10,)
_SM90_ON: tuple[int, ...] = (9, 10, 12)
_SMS_SAID = {_BLACKWELL_ONLY: "Blackwell (SM100) GPUs", _SM90_ON: "Hopper (SM90) and Blackwell (SM100, SM120) GPUs"}
_ATTN_CP_FLAGS = ("--attn-cp-size", "--attention-context-parallel-size")  # 0.5.23 prefill context parallelism
_ROUNDING = "--enable-mamba-cache-stochastic-rounding"  # 0.5.16 and 0.5.23 (0.5.9 has no such flag)


def mamba_rounding_refusal(args: Sequence[str], engine: EngineCfg) -> str:
    """Why SGLang refuses the mamba cache's stochastic rounding in ``args`` at start-up ("" when it runs it, or when
    the plan does not know engine.gpu). 0.5.16 ServerArgs._handle_mamba_backend and 0.5.23 mamba_hook.py
    handle_mamba_backend: float16 SSM states (--mamba-ssm-dtype, which model.mamba_ssm_dtype gives), and with the
    triton mamba backend (the default) an SM100 GPU (its cvt.rs.f16x2.f32 PTX instruction)."""
    if not has_flag(args, _ROUNDING):
        return ""
    if (dtype := flag_value(args, "--mamba-ssm-dtype")) != "float16":
        said = dtype or "'' (the checkpoint's)"
        return (f"model.mamba_ssm_dtype={said}: engine.extra_args has {_ROUNDING}, which SGLang runs on float16 "
                "SSM states only and refuses at start-up otherwise; set model.mamba_ssm_dtype=float16, or leave the "
                "flag out")
    major = cuda_major(engine.gpu)
    if (flag_value(args, "--mamba-backend") or "triton") == "triton" and major is not None and major != 10:
        return (f"engine.gpu={engine.gpu}: engine.extra_args has {_ROUNDING}, which SGLang runs with the triton mamba "
                "backend (its default) on Blackwell (SM100) GPUs only: the server would refuse it at start-up; give "
                "--mamba-backend flashinfer (FlashInfer with its mamba module), or leave the flag out")
    return ""


def trtllm_mha_refusal(args: Sequence[str], arm: ArmSpec, engine: EngineCfg) -> str:
    """Why every SGLang release does not run ``arm`` as planned with a trtllm_mha attention backend ("" when it
    does)."""
    flag = next((f for f in _TRTLLM_MHA_FLAGS if flag_value(args, f) == "trtllm_mha"), "")
    if not flag:
        return ""
    if arm.strategy == "no_buffer" and flag == "--attention-backend":
        # 0.5.16 ServerArgs._validate_mamba_no_buffer (server_args.py:4827-4829), 0.5.23 mamba_hook.py:161-163
        # validate_mamba_no_buffer; 0.5.9 turns the radix cache off instead (server_args.py:1752-1758)
        return (f"arm {arm.name}: engine.extra_args has --attention-backend trtllm_mha, which SGLang refuses with "
                "--mamba-radix-cache-strategy no_buffer (0.5.9 turns the radix cache off instead); use another "
                "attention backend (triton, fa3)")
    if max(engine.page_size, 1) not in (*_TRTLLM_MHA_PAGES, 128):  # 128: a release's own rule
        return _trtllm_mha_page_said(engine.page_size, flag, "SGLang", "16, 32 or 64 (0.5.23: or 128)", arm)
    return ""


def _trtllm_mha_page_said(page: int, flag: str, who: str, pages: str, arm: ArmSpec) -> str:
    return (f"engine.page_size={page}: engine.extra_args has {flag} trtllm_mha, with which {who} runs pages of "
            f"{pages} tokens only: it would run arm {arm.name} on pages of 64 while the plan, the forecast and the "
            f"record say {page}; set engine.page_size to one of them"
            + (" (a no_buffer arm needs 1: use another attention backend)" if arm.strategy == "no_buffer" else ""))


def trtllm_mha_page_refusal(extra: Sequence[str], release: tuple[int, ...], version: str, arm: ArmSpec,
                            page_size: int) -> str:
    """The page rule's release-dependent half: 0.5.9 and 0.5.16 switch 128 to 64; 0.5.23 keeps 128 and also reads
    the draft model's backend (overrides.py:1174-1187), which the rule for every release does not."""
    newest = release >= (0, 5, 23)
    flags = (*_TRTLLM_MHA_FLAGS, _DRAFT_BACKEND) if newest else _TRTLLM_MHA_FLAGS
    flag = next((f for f in flags if flag_value(extra, f) == "trtllm_mha"), "")
    page = max(page_size, 1)
    if not flag or page in _TRTLLM_MHA_PAGES or (newest and page == 128):
        return ""
    if page != 128 and flag != _DRAFT_BACKEND:
        return ""  # trtllm_mha_refusal says it, for every release
    return _trtllm_mha_page_said(page_size, flag, f"SGLang {version}",
                                 "16, 32, 64 or 128" if newest else "16, 32 or 64 (0.5.23: or 128)", arm)


def trtllm_mha_gpu_refusal(extra: Sequence[str], release: tuple[int, ...], version: str, gpu: str) -> str:
    """Why SGLang ``version`` refuses ``extra``'s trtllm_mha attention backend on engine.gpu at start-up ("" when it
    runs it, or when the plan does not know the GPU). A stage's backend is its own flag's, else --attention-backend's.
    0.5.9 (server_args.py:1894-1902) takes any of the three flags it reads naming it on Blackwell only; 0.5.16
    (server_args.py:5022-5032) prefill on Blackwell only and decode on SM90 too; 0.5.23 (attention_hook.py:197-233)
    both on SM90 too, prefill with context parallelism on Blackwell only (its SM90 kernel cannot mask CP shards)."""
    major = cuda_major(gpu)
    if major is None:
        return ""
    given = {f: flag_value(extra, f) for f in _TRTLLM_MHA_FLAGS}
    if release < (0, 5, 16):  # equal prefill and decode backends replace --attention-backend first (:1776-1779)
        prefill, decode = given["--prefill-attention-backend"], given["--decode-attention-backend"]
        named = {**given, "--attention-backend": prefill} if prefill and prefill == decode else given
        stages = [("any", f) for f in _TRTLLM_MHA_FLAGS if named[f] == "trtllm_mha"][:1]
    else:
        own = {stage: f"--{stage}-attention-backend" for stage in ("prefill", "decode")}
        deciding = {stage: flag if given[flag] else "--attention-backend" for stage, flag in own.items()}
        stages = [(stage, flag) for stage, flag in deciding.items() if given[flag] == "trtllm_mha"]
    cp = last_flag(extra, *_ATTN_CP_FLAGS)
    for stage, flag in stages:
        runs_on, why, fix = _SM90_ON, "", "use another attention backend (triton, flashinfer)"
        if release < (0, 5, 16) or (stage == "prefill" and release < (0, 5, 23)):
            runs_on = _BLACKWELL_ONLY
            if major in _SM90_ON and stage == "prefill":  # 0.5.16 on an H100: decode may keep it
                fix = ("give --prefill-attention-backend another backend (fa3, triton) to keep trtllm_mha for decode, "
                       "or use SGLang 0.5.23 (it runs trtllm_mha prefill on SM90)")
        elif stage == "prefill" and cp and (int_value(cp[1]) or 1) > 1 and major in _SM90_ON:
            runs_on, why = _BLACKWELL_ONLY, f" with prefill context parallelism ({cp[0]} {cp[1]})"
            fix = f"leave {cp[0]} out, or give --prefill-attention-backend another backend (fa3, triton)"
        if major not in runs_on:
            used = "" if stage == "any" else f" for {stage}"
            return (f"engine.gpu={gpu}: engine.extra_args has {flag} trtllm_mha, which SGLang {version} runs{used} "
                    f"on {_SMS_SAID[runs_on]} only{why}: the server would refuse it at start-up; {fix}")
    return ""
