"""The ``kl`` probe: after each trial of a cache-on arm, SGLang's cache-hit-vs-cache-free logprob method
(``kl_requests.KlProbe``) over a few of the trial's prompts, one request at a time; ``checks/correctness.kl``
scores the samples in kl.jsonl."""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace
from typing import Any

from hybridbench.config.schema import RunCfg
from hybridbench.engines.server_logs import scrape_metrics, vllm_state_block
from hybridbench.engines.traits import TOKENSPEED_STATES, EngineTraits
from hybridbench.plan.build import effective_vocab
from hybridbench.probes.base import ProbeContext, ProbeNeeds
from hybridbench.probes.exact_hits import served_chunk
from hybridbench.probes.kl_requests import KL_PROTOCOLS, KlProbe, probe_prompts
from hybridbench.records.kl import KlSample, kl_sample_from_json

__all__ = ["Kl", "cache_traits", "decode_track_grid"]

_NO_BUFFER_SKIP = "no_buffer keeps a state only at a request's end: no prefill or branch-point hit by design"
_NO_DECODE_STATES = "this engine keeps no state while a request decodes: no decode hit by design"
_NO_BRANCH_POINTS = ("this engine keeps no state where prompts diverge (a forward keeps one, page-aligned, at its "
                     "end): no branch-point hit by design")


def cache_traits(ctx: ProbeContext) -> EngineTraits:
    """The traits of the cache the server runs: the engine's, except where the reference server mirrors TokenSpeed's
    cache (engine.cache_semantics=tokenspeed), which keeps TokenSpeed's states."""
    if ctx.cfg.engine.cache_semantics == "tokenspeed":  # engine=reference only (config/validate.py)
        return replace(ctx.traits, **TOKENSPEED_STATES)
    return ctx.traits


def decode_track_grid(cfg: RunCfg) -> int:
    """Where SGLang's extra_buffer keeps a state while decoding, whatever the release: 0.5.23 tracks at multiples of
    lcm(the mamba cache chunk, the page, engine.track_interval) (``runtime_context.mamba_track_grid``; the reference
    server mirrors it, ``ExtraBufferStrategy.decode_track_interval``), 0.5.9 and 0.5.16 at multiples of the interval
    itself. A multiple of the lcm is a multiple of the interval, so the probe aims there on every release; it is the
    interval itself unless the interval is no multiple of the chunk (engine.track_interval=96 on a 64-token chunk:
    0.5.23 keeps states at 192, 384, ..., and a probe aimed at 96 missed a correct cache and failed the kl check)."""
    e = cfg.engine
    return math.lcm(max(1, e.track_interval), served_chunk(cfg), max(1, e.page_size))


def _decode_interval(ctx: ProbeContext) -> tuple[int, str, str]:
    """Where the server keeps a state while decoding (the decode variant decodes past one), or 0 and why none is kept
    (the variant is skipped), or 0 and why it is unknown (third: the variant is unmeasured, inconclusive)."""
    how = cache_traits(ctx).decode_states
    if not ctx.cfg.model.hybrid:  # a dense model's decoded KV is cached block by block
        return ctx.cfg.engine.track_interval, "", ""
    if how == "track_interval":
        return decode_track_grid(ctx.cfg), "", ""
    if how == "none":
        return 0, _NO_DECODE_STATES, ""
    if ctx.arm.strategy == "no_buffer":
        # Measured on vLLM 0.32.0 (docs/engines/vllm-cpu-notes.md): a request decoded past a 256-token block end
        # left no state there; the next turn hit only its prompt's block.
        return 0, ("vLLM's align cache mode (this arm's) keeps no state while a request decodes: no decode hit by "
                   "design"), ""
    # "block": the block the server aligned, as its /metrics says
    text = scrape_metrics(ctx.base_url, timeout=30, auth=ctx.auth)
    block = vllm_state_block(text) if text is not None else None
    if block is None:  # a hit is possible where the probe cannot aim: inconclusive, not skipped by design
        return 0, "", ("the server's /metrics name no block_size (vllm:cache_config_info): where it keeps decoded "
                       "states is unknown")
    return block, "", ""


class Kl:
    name = "kl"
    snapshot_key = "kl_probe"
    needs = ProbeNeeds(protocols=KL_PROTOCOLS, flushable=True, cache_on_arms=True)

    def wanted(self, cfg: RunCfg) -> str:
        return "checks.enabled has kl" if "kl" in cfg.checks.enabled else ""

    def sample_from_json(self, obj: dict[str, Any]) -> KlSample:
        return kl_sample_from_json(obj)

    def run(self, ctx: ProbeContext) -> str:
        cfg, c = ctx.cfg, ctx.cfg.checks
        prompts = probe_prompts([r.input_tokens for r in ctx.rows], c.kl_samples)
        # SGLang's no_buffer keeps no mid-prompt state; vLLM's modes are block-aligned and can hit there.
        no_buffer = ctx.traits.reference_semantics and ctx.arm.strategy == "no_buffer"
        interval, no_decode, unknown = (_decode_interval(ctx) if "decode" in c.kl_variants else
                                        (cfg.engine.track_interval, "", ""))
        branch_points = cache_traits(ctx).branch_points

        async def run() -> None:
            import aiohttp  # noqa: PLC0415 - here, not at import: a plan or a run without kl never pays for it

            async with aiohttp.ClientSession() as session:
                probe = KlProbe(session, ctx.base_url, c.kl_max_new_tokens, c.kl_temperature, effective_vocab(cfg),
                                ctx.trial.seed, interval or cfg.engine.track_interval, cfg.engine.request_timeout_s,
                                api=ctx.protocol, flush_path=ctx.flush_path, model=cfg.model.hf_id, auth=ctx.auth)
                for variant in c.kl_variants:
                    skip = no_decode if variant == "decode" else _NO_BUFFER_SKIP if no_buffer else \
                        _NO_BRANCH_POINTS if variant == "branch" and not branch_points else ""
                    why_not = unknown if variant == "decode" else ""
                    for i, prompt in enumerate(prompts):
                        ctx.emit(await probe.sample(variant, i, prompt, skip=skip,  # type: ignore[arg-type]
                                                    unmeasured=why_not, **ctx.identity))

        asyncio.run(run())
        return f"{len(prompts)} prompt(s) x {len(c.kl_variants)} variant(s)"
