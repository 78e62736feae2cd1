"""The KL probe: SGLang's cache-hit-vs-cache-free logprob method, over SGLang's /generate or vLLM's
OpenAI /v1/completions.

Per sample (https://github.com/sgl-project/sglang): flush, build the cache state the variant needs, run the probed
request with ``return_logprob`` (the logprob of every sampled token), flush again, replay prompt +
output with ``max_new_tokens=0`` and take the last ``len(output)`` input logprobs — a cache-free prefill
of the same tokens. The variants hit different paths of a hybrid cache:

* ``prefill`` — the prompt is sent once with ``max_new_tokens=0``, then again: a prefill hit;
* ``decode`` — turn 2 is turn 1's prompt + output + one separator token, so the hit reaches into
  tokens that were *decoded* (SGLang's gate: more than ``len(prompt) + 1`` cached tokens); turn 1
  decodes past the next ``--mamba-track-interval`` boundary, where extra_buffer tracks a state;
* ``branch`` — two requests diverge after a shared prefix, then a third diverges there too: it can
  only hit through the branch point's state (the "0, 0, 256" scenario of SGLang's branching test).

On SGLang a no_buffer arm keeps a state only at the end of a request, so it cannot hit a prefill or a branch
point by design (SGLang: "Branching point caching ... not implemented"); those variants are recorded
as skipped for it rather than as misses. The probe runs strictly one request at a time after a
trial's measured traffic, so its requests and flushes never mix with what the trial measured.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from hybridbench.engines.server_auth import NO_AUTH, ServerAuth
from hybridbench.records.kl import KlSample, KlVariant

if TYPE_CHECKING:  # imported where a probe runs: every plan and every run without kl imported it for nothing
    import aiohttp

__all__ = ["KL_PROTOCOLS", "KlProbe", "ProbeError", "output_logprobs_of_replay", "parse_generate_answer",
           "probe_prompts"]


class ProbeError(RuntimeError):
    """One probe request failed; the sample records the message and the probe goes on."""


def probe_prompts(prompts: Sequence[Sequence[int]], count: int, min_len: int = 8) -> list[list[int]]:
    """Up to ``count`` distinct prompts (first seen first), long enough to split into prefix + suffix."""
    out: list[list[int]] = []
    seen: set[tuple[int, ...]] = set()
    for p in prompts:
        key = tuple(p)
        if len(p) >= min_len and key not in seen:
            seen.add(key)
            out.append(list(p))
            if len(out) == count:
                break
    return out


def output_logprobs_of_replay(input_logprobs: Sequence[float | None], n: int) -> list[float]:
    """The last ``n`` input logprobs of a replay of prompt + output: the output tokens' cache-free values."""
    tail = list(input_logprobs[-n:]) if n else []
    values = [v for v in tail if v is not None]
    if len(values) != n:
        raise ProbeError(f"replay returned {len(input_logprobs)} input logprobs ({len(tail) - len(values)} null "
                         f"among the last {n}) for {n} output tokens")
    return values


@dataclass(frozen=True, slots=True)
class _Answer:
    cached: int | None
    output_ids: list[int]
    output_logprobs: list[float]
    input_logprobs: list[float | None]


def parse_generate_answer(out: Any) -> _Answer:
    """SGLang's /generate answer (one request, or a batch of one) as the probe reads it."""
    if isinstance(out, list):  # SGLang answers a batch with a list; one request is one element
        out = out[0]
    meta = out.get("meta_info") or {}
    out_lp = meta.get("output_token_logprobs") or []
    # Each entry is [logprob, token_id, text]: the ids come from there when output_ids is absent.
    ids_out = [int(e[1]) for e in out_lp] if out_lp else [int(t) for t in out.get("output_ids") or []]
    return _Answer(
        cached=None if meta.get("cached_tokens") is None else int(meta["cached_tokens"]),
        output_ids=ids_out,
        output_logprobs=[float(e[0]) for e in out_lp],
        input_logprobs=[None if e[0] is None else float(e[0]) for e in meta.get("input_token_logprobs") or []],
    )


@dataclass
class KlProbe:
    session: aiohttp.ClientSession
    base_url: str
    max_new_tokens: int
    temperature: float
    vocab: int  # branch suffixes draw token ids below this
    seed: int
    # where the server keeps a state while decoding: SGLang's --mamba-track-interval (extra_buffer), vLLM's block
    track_interval: int
    timeout_s: float = 600.0
    api: str = "sglang"  # "sglang" (/generate) or "openai" (vLLM's /v1/completions)
    flush_path: str = "/flush_cache"  # vLLM: /reset_prefix_cache
    model: str = ""  # the served model name (OpenAI API)
    auth: ServerAuth = NO_AUTH  # the server's key, sent where it wants it

    def __post_init__(self) -> None:
        if self.api not in _DIALECTS:
            raise ValueError(f"KlProbe api {self.api!r}: expected one of {sorted(_DIALECTS)}")

    # ------------------------------------------------------------------ HTTP
    async def _flush(self) -> None:
        for _ in range(300):  # SGLang refuses a flush while requests are in flight: retry briefly
            async with self.session.post(f"{self.base_url}{self.flush_path}",
                                         headers=self.auth.headers(self.flush_path)) as resp:
                if resp.status == 200:
                    return
            await asyncio.sleep(0.1)
        raise ProbeError(f"{self.flush_path} refused for 30 s")

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        import aiohttp  # noqa: PLC0415 - see the module's imports

        async with self.session.post(f"{self.base_url}{path}", json=body, headers=self.auth.headers(path),
                                     timeout=aiohttp.ClientTimeout(total=self.timeout_s)) as resp:
            if resp.status != 200:
                raise ProbeError(f"{path} answered HTTP {resp.status}: {(await resp.text())[:200]}")
            return await resp.json()

    async def _generate(self, ids: list[int], max_new: int, *, logprobs: bool = False, logprob_start: int = -1,
                        seed: int = 0) -> _Answer:
        return await _DIALECTS[self.api](self, ids, max_new, logprobs=logprobs, logprob_start=logprob_start,
                                           seed=seed)

    async def _reference(self, prompt: list[int], output: list[int]) -> list[float]:
        """The same tokens through a flushed server: a full, cache-free prefill."""
        await self._flush()
        # SGLang answers one entry per token from logprob_start_len on, the first with a null logprob
        # (recorded from 0.5.16 and 0.5.23): start one token early so every output token has its value.
        start = max(0, len(prompt) - 1)
        ans = await self._generate(prompt + output, 0, logprobs=True, logprob_start=start)
        return output_logprobs_of_replay(ans.input_logprobs, len(output))

    # ------------------------------------------------------------------ variants
    async def _prefill(self, prompt: list[int], seed: int) -> tuple[list[int], _Answer, int]:
        await self._generate(prompt, 0, seed=seed)
        return prompt, await self._generate(prompt, self.max_new_tokens, logprobs=True, seed=seed), 1

    async def _decode(self, prompt: list[int], seed: int) -> tuple[list[int], _Answer, int]:
        # Decode past the first tracked position beyond SGLang's gate (len(prompt) + 2).
        boundary = -(-(len(prompt) + 2) // self.track_interval) * self.track_interval
        # With logprobs, the output ids also come from output_token_logprobs (a build may omit output_ids).
        first = await self._generate(prompt, boundary - len(prompt) + self.max_new_tokens, logprobs=True, seed=seed)
        turn2 = [*prompt, *first.output_ids, prompt[0]]
        ans = await self._generate(turn2, self.max_new_tokens, logprobs=True, seed=seed + 1)
        return turn2, ans, len(prompt) + 2

    async def _branch(self, prompt: list[int], seed: int) -> tuple[list[int], _Answer, int]:
        rng = random.Random(seed)
        cut = len(prompt) // 2
        suffix_len = len(prompt) - cut

        def fork() -> list[int]:
            # A suffix whose first token differs from every other fork's: the requests really diverge at `cut`.
            first = rng.randrange(self.vocab)
            while first == prompt[cut]:
                first = rng.randrange(self.vocab)
            return [*prompt[:cut], first, *(rng.randrange(self.vocab) for _ in range(suffix_len - 1))]

        await self._generate(prompt, 1, seed=seed)
        await self._generate(fork(), 1, seed=seed)  # diverges at `cut`: SGLang tracks the branch point here
        probed = fork()
        return probed, await self._generate(probed, self.max_new_tokens, logprobs=True, seed=seed), 1

    # ------------------------------------------------------------------ one sample
    async def sample(self, variant: KlVariant, index: int, prompt: list[int], *, skip: str = "", unmeasured: str = "",
                     **identity: Any) -> KlSample:
        """Run one variant on one prompt; a failure becomes the sample's ``error``, never an exception."""
        if skip or unmeasured:
            return KlSample(variant=variant, sample=index, prompt_tokens=len(prompt), cached_tokens=None,
                            min_cached=0, skipped=skip, unmeasured=unmeasured, **identity)
        import aiohttp  # noqa: PLC0415 - see the module's imports

        seed = self.seed * 1_000_003 + index
        runs = {"prefill": self._prefill, "decode": self._decode, "branch": self._branch}
        probed: list[int] = prompt
        try:
            await self._flush()
            probed, ans, min_cached = await runs[variant](prompt, seed)
            ref = await self._reference(probed, ans.output_ids)
        except (ProbeError, aiohttp.ClientError, TimeoutError, ValueError, KeyError, IndexError, TypeError) as exc:
            return KlSample(variant=variant, sample=index, prompt_tokens=len(probed), cached_tokens=None,
                            min_cached=0, error=f"{type(exc).__name__}: {exc}", **identity)
        return KlSample(variant=variant, sample=index, prompt_tokens=len(probed), cached_tokens=ans.cached,
                        min_cached=min_cached, hit_logprobs=ans.output_logprobs, ref_logprobs=ref, **identity)


# ---------------------------------------------------------------------- one request per protocol
async def _generate_sglang(probe: KlProbe, ids: list[int], max_new: int, *, logprobs: bool, logprob_start: int,
                           seed: int) -> _Answer:
    body: dict[str, Any] = {
        "input_ids": ids,
        "sampling_params": {"temperature": probe.temperature, "max_new_tokens": max_new, "ignore_eos": True,
                            "sampling_seed": seed},
    }
    if logprobs:  # SGLang's default start (-1) returns output logprobs only; a start >= len aborts
        body.update(return_logprob=True, logprob_start_len=logprob_start)
    return parse_generate_answer(await probe._post("/generate", body))


async def _generate_openai(probe: KlProbe, ids: list[int], max_new: int, *, logprobs: bool, logprob_start: int,
                           seed: int) -> _Answer:
    """vLLM: ``logprobs: 0`` gives each sampled token's logprob; ``prompt_logprobs: 0`` each prompt token's
    (such requests never read vLLM's prefix cache, so the replay is cache-free twice over)."""
    body: dict[str, Any] = {"model": probe.model, "prompt": ids, "max_tokens": max(1, max_new), "seed": seed,
                            "temperature": probe.temperature, "ignore_eos": True, "return_token_ids": True}
    if logprobs:
        body["logprobs"] = 0
        if logprob_start >= 0:
            body["prompt_logprobs"] = 0
    out = await probe._post("/v1/completions", body)
    choice = out["choices"][0]
    details = (out.get("usage") or {}).get("prompt_tokens_details") or {}
    prompt_lp = choice.get("prompt_logprobs") or []
    return _Answer(
        cached=None if details.get("cached_tokens") is None else int(details["cached_tokens"]),
        output_ids=[int(t) for t in choice.get("token_ids") or []],
        output_logprobs=[float(v) for v in ((choice.get("logprobs") or {}).get("token_logprobs") or [])],
        input_logprobs=[None if e is None else float(e[str(ids[i])]["logprob"]) for i, e in enumerate(prompt_lp)],
    )


class _Dialect(Protocol):
    async def __call__(self, probe: KlProbe, ids: list[int], max_new: int, *, logprobs: bool, logprob_start: int,
                       seed: int) -> _Answer: ...


# Keyed by load-client protocol (load/client.py CLIENTS names): the probe speaks exactly these.
_DIALECTS: dict[str, _Dialect] = {"sglang": _generate_sglang, "openai": _generate_openai}
KL_PROTOCOLS = frozenset(_DIALECTS)
