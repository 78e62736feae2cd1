"""The bodies of SGLang's answers: /generate's ``{text, output_ids, meta_info}`` and the OpenAI completion chunks.

Key for key, in SGLang's order and chunk by chunk, as the recorded 0.5.16 and 0.5.23 servers answer
(tests/hybridbench/test_sglang_recorded.py), timing fields included: measured here, placed by timing.py.
"""

from __future__ import annotations

import time
from typing import Any

from reference_impl.server.engine_loop import Submission, Update
from reference_impl.server.openai_logprobs import chat_logprobs, choice_logprobs
from reference_impl.server.requests import GenerateParams
from reference_impl.server.timing import finish_meta, modelled_meta, scheduler_meta
from reference_impl.server.tokenizer import decode

__all__ = ["OpenAiChunks", "generate_body"]


def _meta(sub: Submission, params: GenerateParams, u: Update, metrics: bool) -> dict[str, Any]:
    """Key for key in SGLang's order (tokenizer_manager.py ``_handle_batch_output``, 0.5.16:1925-2162,
    0.5.23:2506-2770): the scheduler's stamps, logprobs, counts, 0.5.23's weight spans at the end, the API
    server's stamps on the last answer; the first byte's stamp last (``_wait_one_response``)."""
    times = sub.times
    meta: dict[str, Any] = {
        "id": str(sub.rid), "finish_reason": u.finish_reason, "prompt_tokens": len(sub.input_ids),
        "weight_version": "default", "num_retractions": u.num_retractions,
    }
    if metrics:
        meta.update(scheduler_meta(times))
    if params.return_logprob:
        _logprobs(meta, sub, params, u)
    meta.update({"reasoning_tokens": 0, "completion_tokens": len(u.output_ids), "cached_tokens": u.cached_tokens})
    if u.finished and times.version != "0.5.16":
        # the scheduler sends its weight-version spans with a finished request only (output_streamer.py
        # 0.5.23:541-554); one version, never updated: one span over the whole output (weight_versions.py:66-106)
        meta["weight_versions"] = [{"version": "default", "start": 0, "end": len(u.output_ids)}]
    # SGLang (0.5.16, 0.5.23) always sends the key; null without a hit
    meta["cached_tokens_details"] = {"device": u.cached_tokens, "host": 0} if u.cached_tokens else None
    meta["dp_rank"] = None  # dp_ranks is always sent, None per request without DP (0.5.16:2024, 0.5.23:2616)
    if u.finished:
        meta.update(finish_meta(times, len(u.output_ids), metrics=metrics))
        meta.update(modelled_meta(times))
    # The first byte sent: stamped before a stream's first chunk or the last answer (0.5.16:1537-1575,
    # 0.5.23:2023-2060); a stream's last chunk repeats its first chunk's stamp (finish_meta above).
    if (u.finished or params.stream) and times.mark_sent():
        meta["response_sent_to_client_ts"] = times.wall(times.response_sent)
    return meta


def _logprobs(meta: dict[str, Any], sub: Submission, params: GenerateParams, u: Update) -> None:
    ctx = sub.ctx
    outs = ctx.output_logprobs[: len(u.output_ids)]

    def text(token: int) -> str | None:  # return_text_in_logprobs: each entry's token as text
        return decode([token]) if params.return_text_in_logprobs else None

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
    meta["output_token_logprobs"] = [[lp, t, text(t)] for (lp, _), t in zip(outs, u.output_ids, strict=False)]
    meta["output_token_logprobs_length"] = len(meta["output_token_logprobs"])
    if params.top_logprobs_num:
        meta["input_top_logprobs"] = [
            [[v, i, text(i)] for v, i in computed[p][1]] if p in computed else None
            for p in range(start, len(sub.input_ids))
        ] if start is not None else []
        meta["output_top_logprobs"] = [[[v, i, text(i)] for v, i in top] for _, top in outs]


def generate_body(sub: Submission, params: GenerateParams, u: Update, *, metrics: bool) -> dict[str, Any]:
    """One /generate answer (or stream chunk). An engine abort keeps this shape: its finish_reason says
    ``abort`` with SGLang's 400 status_code (tokenizer_manager.py ``_handle_abort_finish_reason``)."""
    meta = _meta(sub, params, u, metrics)
    if u.error is not None:
        meta["finish_reason"] = {"type": "abort", "message": u.error, "status_code": 400}
    return {"text": decode(u.output_ids), "output_ids": u.output_ids, "meta_info": meta}


class OpenAiChunks:
    """/v1/completions and /v1/chat/completions bodies for one request: text vs message/delta, whole vs chunk;
    a batch of completion prompts is one answer with a choice per prompt (``index``), usage summed over them
    (serving_completions.py ``_build_completion_response`` 0.5.23:532-646, usage_processor.py:17-90).

    /v1/completions as recorded from SGLang 0.5.16 and 0.5.23: each choice has ``matched_stop``, usage has
    ``reasoning_tokens`` (and 0.5.23's ``completion_tokens_details`` without a stream), the answer a ``metadata``
    (0.5.23 adds ``weight_versions``); a stream's chunks carry ``usage: null``, and the usage comes after the last
    one in a chunk of its own with no choices, only when ``stream_options.include_usage`` asks
    (serving_completions.py 0.5.23:478-496); ``sglext`` likewise in its own chunk (:464-476). The chat shapes
    are not recorded: a chat stream's last chunk carries the usage. ``logprobs`` (and completions' ``echo``):
    openai_logprobs.py.
    """

    def __init__(self, subs: list[Submission], params: GenerateParams, *, chat: bool, model: str,
                 version: str) -> None:
        self.subs, self.params, self.chat, self.model, self.version = subs, params, chat, model, version
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{subs[0].rid}"
        self.created = int(time.time())
        self._sent = [""] * len(subs)  # the text already streamed, per prompt
        self._final: dict[int, Update] = {}  # prompts finished so far (stream)
        self._lp_sent = [0] * len(subs)  # output tokens whose logprobs were streamed, per prompt
        self._started: set[int] = set()  # prompts whose first chunk went out (echo, the prompt's logprobs)

    def _usage(self, finals: list[Update]) -> dict[str, Any]:
        n_in = sum(len(s.input_ids) for s in self.subs)
        n_out = sum(len(u.output_ids) for u in finals)
        usage = {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out,
                 "prompt_tokens_details": {"cached_tokens": sum(u.cached_tokens for u in finals)}}
        if not self.chat:
            usage["reasoning_tokens"] = 0
        return usage

    def _sglext(self, u: Update) -> dict[str, Any]:  # SGLang's extension, read by bench_serving's cache report
        return {"cached_tokens_details": {"device": u.cached_tokens, "host": 0}}

    def _logprobs(self, i: int, u: Update, start: int, *, first: bool, whole: bool) -> dict[str, Any] | None:
        n = self.params.logprobs
        if n is None:
            return None
        sub = self.subs[i]
        if self.chat:
            return chat_logprobs(sub.ctx, u.output_ids, start, top_n=n, stream=not whole, version=self.version)
        return choice_logprobs(sub.ctx, sub.input_ids, u.output_ids, start, top_n=n,
                               prompt=first and self.params.echo and n > 0, version=self.version)

    def _echo(self, i: int) -> str:  # the prompt decoded, as SGLang's _prepare_echo_prompts / _get_echo_text
        return decode(self.subs[i].input_ids) if self.params.echo and not self.chat else ""

    def _choice(self, i: int, text: str, reason: str | None, *, whole: bool,
                logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": i, "logprobs": logprobs, "finish_reason": reason}
        if not self.chat:
            choice["text"] = text
            choice["matched_stop"] = None
        elif whole:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["delta"] = {"role": "assistant", "content": text}
        return choice

    def _frame(self, choices: list[dict[str, Any]], finals: list[Update] | None) -> dict[str, Any]:
        kind = "chat.completion.chunk" if self.chat else "text_completion"  # whole() renames a whole chat answer
        body: dict[str, Any] = {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                                "choices": choices}
        if finals is not None:
            body["usage"] = self._usage(finals)
            if self.params.return_cached_tokens_details:  # the first prompt's, as SGLang
                body["sglext"] = self._sglext(finals[0])
        elif not self.chat:
            body["usage"] = None
        return body

    @staticmethod
    def _reason(u: Update) -> str:
        return str((u.finish_reason or {}).get("type", "length"))

    def whole(self, finals: list[Update]) -> dict[str, Any]:
        choices = [self._choice(i, self._echo(i) + decode(u.output_ids), self._reason(u), whole=True,
                                logprobs=self._logprobs(i, u, 0, first=True, whole=True)) for i, u in enumerate(finals)]
        body = self._frame(choices, finals)
        if self.chat:
            body["object"] = "chat.completion"
            return body
        body["metadata"] = {"weight_version": "default"}
        if self.version != "0.5.16":
            body["usage"]["completion_tokens_details"] = None
            body["metadata"]["weight_versions"] = [{"version": "default", "start": 0,
                                                    "end": len(finals[0].output_ids)}]
        return body

    def deltas(self, i: int, u: Update) -> list[dict[str, Any]]:
        """The stream chunks for prompt ``i``'s next update: the text not sent yet; the reason on its last; the
        usage with it (chat) or after every prompt's last (completions, when asked)."""
        text = decode(u.output_ids)
        delta, self._sent[i] = text[len(self._sent[i]):], text
        first = i not in self._started
        self._started.add(i)
        logprobs = self._logprobs(i, u, self._lp_sent[i], first=first, whole=False)
        self._lp_sent[i] = len(u.output_ids)
        delta = self._echo(i) + delta if first else delta
        reason = self._reason(u) if u.finished else None
        if u.finished:
            self._final[i] = u
        done = [self._final[k] for k in range(len(self.subs))] if len(self._final) == len(self.subs) else None
        if self.chat:
            return [self._frame([self._choice(i, delta, reason, whole=False, logprobs=logprobs)], done)]
        out = [self._frame([self._choice(i, delta, reason, whole=False, logprobs=logprobs)], None)]
        if done is not None and self.params.return_cached_tokens_details:
            out.append({**self._frame([], None), "sglext": self._sglext(done[0])})
        if done is not None and self.params.include_usage:
            out.append({**self._frame([], None), "usage": self._usage(done)})
        return out
