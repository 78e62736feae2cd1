"""The bodies of SGLang's answers: /generate's ``{text, output_ids, meta_info}`` and the OpenAI completion chunks.

Key for key as the recorded 0.5.16 and 0.5.23 servers answer (tests/hybridbench/test_sglang_recorded.py), less
SGLang's own timing and placement fields.
"""

from __future__ import annotations

import time
from typing import Any

from reference_impl.server.engine_loop import Submission, Update
from reference_impl.server.requests import GenerateParams
from reference_impl.server.tokenizer import decode

__all__ = ["OpenAiChunks", "generate_body"]


def _meta(sub: Submission, params: GenerateParams, u: Update) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "id": str(sub.rid), "finish_reason": u.finish_reason, "prompt_tokens": len(sub.input_ids),
        "weight_version": "default", "num_retractions": u.num_retractions, "reasoning_tokens": 0,
        "completion_tokens": len(u.output_ids), "cached_tokens": u.cached_tokens,
    }
    # SGLang (0.5.16, 0.5.23) always sends the key; null without a hit
    meta["cached_tokens_details"] = {"device": u.cached_tokens, "host": 0} if u.cached_tokens else None
    if u.finished:
        meta["e2e_latency"] = time.perf_counter() - sub.created
    if params.return_logprob:
        ctx = sub.ctx
        outs = ctx.output_logprobs[: len(u.output_ids)]

        def text(token: int) -> str | None:  # return_text_in_logprobs: each entry's token as text
            return decode([token]) if params.return_text_in_logprobs else None

        meta["output_token_logprobs"] = [[lp, t, text(t)] for (lp, _), t in zip(outs, u.output_ids, strict=False)]
        meta["output_token_logprobs_length"] = len(meta["output_token_logprobs"])
        inputs: list[list[Any]] = []
        start = params.logprob_start_len
        # SGLang: one entry per prompt token from logprob_start_len on, the first with a null logprob
        # (and null top logprobs) whatever the start (recorded from 0.5.16 and 0.5.23).
        computed = {p: e for p, e in ctx.input_logprobs.items() if start is not None and p > start}
        if start is not None:
            for pos in range(start, len(sub.input_ids)):
                entry = computed.get(pos)
                inputs.append([entry[0] if entry else None, sub.input_ids[pos], text(sub.input_ids[pos])])
        meta["input_token_logprobs"] = inputs
        if params.top_logprobs_num:
            meta["output_top_logprobs"] = [[[v, i, text(i)] for v, i in top] for _, top in outs]
            meta["input_top_logprobs"] = [
                [[v, i, text(i)] for v, i in computed[p][1]] if p in computed else None
                for p in range(start, len(sub.input_ids))
            ] if start is not None else []
    return meta


def generate_body(sub: Submission, params: GenerateParams, u: Update) -> dict[str, Any]:
    """One /generate answer (or stream chunk). An engine abort keeps this shape: its finish_reason says
    ``abort`` with SGLang's 400 status_code (tokenizer_manager.py ``_handle_abort_finish_reason``)."""
    meta = _meta(sub, params, u)
    if u.error is not None:
        meta["finish_reason"] = {"type": "abort", "message": u.error, "status_code": 400}
    return {"text": decode(u.output_ids), "output_ids": u.output_ids, "meta_info": meta}


class OpenAiChunks:
    """/v1/completions and /v1/chat/completions bodies for one request: text vs message/delta, whole vs chunk."""

    def __init__(self, sub: Submission, params: GenerateParams, *, chat: bool, model: str) -> None:
        self.sub, self.params, self.chat, self.model = sub, params, chat, model
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{sub.rid}"
        self.created = int(time.time())
        self._sent = ""  # the text already streamed

    def _usage(self, u: Update) -> dict[str, Any]:
        n_in, n_out = len(self.sub.input_ids), len(u.output_ids)
        return {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out,
                "prompt_tokens_details": {"cached_tokens": u.cached_tokens}}

    def _chunk(self, text: str, reason: str | None, u: Update | None, *, whole: bool) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": reason}
        if not self.chat:
            choice["text"] = text
        elif whole:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["delta"] = {"role": "assistant", "content": text}
        kind = ("chat.completion" if whole else "chat.completion.chunk") if self.chat else "text_completion"
        body: dict[str, Any] = {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                                "choices": [choice]}
        if u is not None:
            body["usage"] = self._usage(u)
            if self.params.return_cached_tokens_details:  # SGLang's extension, read by bench_serving's cache report
                body["sglext"] = {"cached_tokens_details": {"device": u.cached_tokens, "host": 0}}
        return body

    @staticmethod
    def _reason(u: Update) -> str:
        return str((u.finish_reason or {}).get("type", "length"))

    def whole(self, u: Update) -> dict[str, Any]:
        return self._chunk(decode(u.output_ids), self._reason(u), u, whole=True)

    def delta(self, u: Update) -> dict[str, Any]:
        """The next stream chunk: the text not sent yet; usage and the reason only on the last."""
        text = decode(u.output_ids)
        delta, self._sent = text[len(self._sent):], text
        return self._chunk(delta, self._reason(u) if u.finished else None, u if u.finished else None, whole=False)
