"""The ``kl`` probe: after each trial of a cache-on arm, SGLang's cache-hit-vs-cache-free logprob method
(``kl_requests.KlProbe``) over a few of the trial's prompts, one request at a time; ``checks/correctness.kl``
scores the samples in kl.jsonl."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from hybridbench.config.schema import RunCfg
from hybridbench.plan.build import effective_vocab
from hybridbench.probes.base import ProbeContext, ProbeNeeds
from hybridbench.probes.kl_requests import KL_PROTOCOLS, KlProbe, probe_prompts
from hybridbench.records.kl import KlSample, kl_sample_from_json

__all__ = ["Kl"]

_NO_BUFFER_SKIP = "no_buffer keeps a state only at a request's end: no prefill or branch-point hit by design"


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

        async def run() -> None:
            async with aiohttp.ClientSession() as session:
                probe = KlProbe(session, ctx.base_url, c.kl_max_new_tokens, c.kl_temperature, effective_vocab(cfg),
                                ctx.trial.seed, cfg.engine.track_interval, cfg.engine.request_timeout_s,
                                api=ctx.protocol, flush_path=ctx.flush_path, model=cfg.model.hf_id)
                for variant in c.kl_variants:
                    skip = "" if variant == "decode" or not no_buffer else _NO_BUFFER_SKIP
                    for i, prompt in enumerate(prompts):
                        ctx.emit(await probe.sample(variant, i, prompt, skip=skip,  # type: ignore[arg-type]
                                                    **ctx.identity))

        asyncio.run(run())
        return f"{len(prompts)} prompt(s) x {len(c.kl_variants)} variant(s)"
