"""Streaming HTTP clients timed the way bench_serving times them (https://github.com/sgl-project/sglang).

SGLang native ``/generate`` with ``input_ids`` (SSE; each chunk's ``text`` is cumulative and
``meta_info.completion_tokens`` is the running count): TTFT is the first chunk with new tokens, ITL is the gap
between chunks divided by the tokens they added. OpenAI ``/v1/completions`` with a token-id prompt: TTFT at the
first chunk with a choice, one ITL per such chunk, whatever its text: SGLang and vLLM stream each token as a chunk
(several a chunk with vLLM's --stream-interval above 1 or speculative decoding, whose ITLs are then per chunk, where
the native client's are per token), and a special token (with ``ignore_eos``, the EOS a model decodes past) or the
first bytes of a character stream as empty text; timed by text, such a request's TTFT was its second token's, or it
had none and fell out of the TTFT mean. A chunk without a choice (the usage) is no token. Chunks are timed when
their bytes arrive (hybridbench.load.http), not when a task gets round to reading them.

A 200 stream is a success only when it finished: a finish reason arrived, and with ``ignore_eos`` every token
asked for (``_cut_short``). A stream that ends early is an answer the server never gave in full; counted as a
success it would make a build that stops decoding look faster.

A session's next turn carries the ids the server generated (hybridbench.load.driver): SGLang's native stream sends
them (``output_ids``); on ``/v1/completions`` a server sends them only when asked, and only vLLM is known to answer
the ask (``"return_token_ids": true``, per chunk ``choices[0].token_ids``, the ids that chunk added), so only a
client made with ``return_token_ids`` asks (``client_for``). Either way the driver gets the whole answer or none.

``CLIENTS`` is the one registry of client protocols: an engine's spec names the one its server speaks.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from hybridbench.load.http import DataHandler, StreamPool

__all__ = ["CLIENTS", "ClientResult", "Generate", "client_for", "generate_openai", "generate_sglang", "json_codec"]


@dataclass(slots=True)
class ClientResult:
    sent: float | None  # perf_counter() seconds; None: never sent (a turn after its session's failed turn)
    first_token: float | None = None
    end: float | None = None
    output_tokens: int = 0
    output_ids: list[int] = field(default_factory=list)
    cached_tokens: int | None = None
    itl_ms: list[float] = field(default_factory=list)
    error: str = ""
    status: str = "ok"  # ok | error | timeout | server_died | skipped (not sent)
    # The reference server's modelled clock (meta_info.modelled_*_s): received, first token, finished
    modelled: tuple[float, float, float] | None = None

    @property
    def server_finished(self) -> bool:
        """Whether the server finished the request: it answered in full, or its finished answer (the modelled finish
        stamps it sends with it) arrived before the client failed the request itself. A refusal, an abort or a
        timeout the server cut short is no finish."""
        return self.status == "ok" or self.modelled is not None


def _in_band_error(chunk: dict[str, Any], res: ClientResult, now: float) -> bool:
    """SGLang and vLLM report a failure inside a 200 stream: an ``error`` chunk or an ``abort`` finish."""
    err = chunk.get("error")
    finish = (chunk.get("meta_info") or {}).get("finish_reason")
    choices = chunk.get("choices") or []
    if choices and isinstance(choices[0], dict) and choices[0].get("finish_reason") == "abort":
        finish = {"type": "abort"}
    if err is None and not (isinstance(finish, dict) and finish.get("type") == "abort"):
        return False
    message = err.get("message", err) if isinstance(err, dict) else (err or (finish or {}).get("message", "aborted"))
    res.status, res.error = "error", f"server reported: {message}"
    res.end = now
    return True


def _cut_short(res: ClientResult, finished: bool, asked: int, given: int | None) -> None:
    """Fail an ``ok`` answer whose stream ended without a finish reason, or (``given`` known) finished with fewer
    tokens than ``asked``: with ``ignore_eos`` and no stop strings both SGLang and vLLM give every token asked for
    or refuse the request (a prompt that leaves no room is refused before any token)."""
    if res.status != "ok":
        return
    if not finished:
        res.status, res.error = "error", f"the stream ended without a finish reason ({given or 0} of {asked} tokens)"
    elif given is not None and given < asked:
        res.status, res.error = "error", f"cut short: {given} of the {asked} tokens asked for (ignore_eos)"


def _failure(exc: BaseException, timeout_s: float) -> tuple[str, str]:
    """(status, error) of a failed request, in the record's vocabulary."""
    if isinstance(exc, TimeoutError):  # before OSError: TimeoutError is one
        return "timeout", f"no complete response within {timeout_s:g} s"
    if isinstance(exc, OSError):
        return "server_died", f"connection failed: {exc}"
    return "error", f"{type(exc).__name__}: {exc}"


_decode = json.JSONDecoder().raw_decode  # the payload is stripped: json.loads' whitespace scans are wasted


def _json_loads(data: bytes) -> Any:
    text = data.decode("utf-8", "surrogatepass")
    value, end = _decode(text)
    if end != len(text):
        raise ValueError(f"trailing data after the JSON object: {data[:80]!r}")
    return value


def json_codec() -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    """(encode a request body, decode an SSE payload): orjson's when installed (the fast extra), json's otherwise.

    orjson encodes a prompt's token ids about ten times faster than json.dumps (a tenth of the client's CPU
    per request) and decodes a chunk about twice as fast. What orjson refuses (NaN, Infinity, invalid UTF-8)
    is decoded by json's rules, so a stream reads the same with or without it, except integers past 64 bits
    (no token id or count), which orjson reads as floats.
    """
    try:
        import orjson  # noqa: PLC0415  (optional)
    except ImportError:
        return (lambda obj: json.dumps(obj).encode()), _json_loads
    fast = orjson.loads

    def loads(data: bytes) -> Any:
        try:
            return fast(data)
        except ValueError:
            return _json_loads(data)

    return orjson.dumps, loads


_dumps, _loads = json_codec()


def _object(data: bytes) -> dict[str, Any]:
    chunk = _loads(data)
    if not isinstance(chunk, dict):
        raise ValueError(f"SSE data is not a JSON object: {data[:80]!r}")
    return chunk


async def _stream(pool: StreamPool, path: str, payload: dict[str, Any], res: ClientResult, on_data: DataHandler,
                  *, timeout_s: float) -> None:
    """POST, feed the stream to ``on_data``, and record how the request ended on ``res``."""
    try:
        resp = await pool.post_sse(path, _dumps(payload), on_data, timeout_s)
    except (TimeoutError, OSError, ValueError) as exc:
        res.status, res.error = _failure(exc, timeout_s)
        return
    if resp.status != 200:
        res.status, res.error = "error", f"HTTP {resp.status}: {resp.body.decode('utf-8', 'replace')[:200]}"
    elif res.status == "ok":
        res.end = resp.end


def _json_ids(ids: Sequence[int]) -> Sequence[int]:
    """json.dumps encodes a list or tuple as it is: copy anything else once."""
    return ids if isinstance(ids, list | tuple) else list(ids)


def _modelled(meta: dict[str, Any]) -> tuple[float, float, float] | None:
    """The reference server's modelled stamps, or None when any is missing or not a number."""
    try:
        stamps = tuple(float(meta[k]) for k in ("modelled_received_s", "modelled_first_token_s",
                                                "modelled_finished_s"))
    except (KeyError, TypeError, ValueError):
        return None
    return stamps[0], stamps[1], stamps[2]


async def generate_sglang(
    pool: StreamPool, input_ids: Sequence[int], max_new_tokens: int, timeout_s: float,
    *, model: str = "",  # the native API serves one model: the name is not sent
    answer_needed: bool = True,  # SGLang sends the generated ids unasked, at no cost worth saving
) -> ClientResult:
    payload = {
        "input_ids": _json_ids(input_ids),
        "sampling_params": {"temperature": 0.0, "max_new_tokens": max_new_tokens, "ignore_eos": True},
        "stream": True,
    }
    sent = time.perf_counter()
    res = ClientResult(sent=sent)
    last_t, last_n = sent, 0  # time and completion_tokens of the last chunk that added tokens
    # The last chunk's list, converted to ints once the stream has ended, not per chunk: SGLang resends the
    # whole list in every chunk, so converting each would cost time quadratic in the output length. With
    # --incremental-streaming-output each chunk sends only the ids it adds: those pieces are kept too.
    output_ids: list[Any] | None = None
    pieces: list[list[Any]] = []
    itl = res.itl_ms
    finished = False

    def on_data(data: bytes, now: float) -> bool:
        nonlocal last_t, last_n, output_ids, finished
        chunk = _object(data)
        meta = chunk.get("meta_info", {})
        # Only an error key, a finish dict (the last chunk) or OpenAI choices can carry an in-band failure.
        if ("error" in chunk or "choices" in chunk or isinstance(meta.get("finish_reason"), dict)) \
                and _in_band_error(chunk, res, now):
            return True
        finished = finished or isinstance(meta.get("finish_reason"), dict)
        n = int(meta.get("completion_tokens", last_n))
        if isinstance(ids := chunk.get("output_ids"), list):
            output_ids = ids
            if len(ids) == n - last_n:  # this chunk's new ids (a whole list only at the first token)
                pieces.append(ids)
        if n > last_n:
            if res.first_token is None:
                res.first_token = now
            elif n - last_n == 1:
                itl.append((now - last_t) * 1e3)
            else:
                itl.extend([(now - last_t) * 1e3 / (n - last_n)] * (n - last_n))
            last_t, last_n = now, n
        if "cached_tokens" in meta:
            res.cached_tokens = int(meta["cached_tokens"])
        if "modelled_finished_s" in meta:
            res.modelled = _modelled(meta)
        return False

    await _stream(pool, "/generate", payload, res, on_data, timeout_s=timeout_s)
    if output_ids is not None:  # the last chunk's whole list, else (incremental streaming) the chunks' pieces
        _whole_answer(res, [output_ids] if len(output_ids) == last_n else pieces, last_n)
    _cut_short(res, finished, max_new_tokens, last_n)
    if res.status == "ok":
        res.output_tokens = last_n
    return res


async def generate_openai(
    pool: StreamPool, input_ids: Sequence[int], max_tokens: int, timeout_s: float, *, model: str,
    return_token_ids: bool = False, answer_needed: bool = True,
) -> ClientResult:
    """``return_token_ids``: ask for the generated ids (vLLM since its PR #22587, August 2025; an older vLLM ignores
    a request field it lacks: its OpenAIBaseModel allows extras and logs them). A stream without them leaves
    ``output_ids`` empty: a session's next turn then carries the trace's answer, as before.

    ``answer_needed``: False when nothing will carry the answer (a session's last turn, a single-turn load); the ids
    are then not asked for, since vLLM answers the ask by encoding the whole prompt's ids into the first token's
    chunk (about 2.4 ms of the server's time at 128k tokens, inside the TTFT measured)."""
    payload: dict[str, Any] = {
        "model": model, "prompt": _json_ids(input_ids), "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
        "ignore_eos": True, "stream_options": {"include_usage": True}}
    return_token_ids = return_token_ids and answer_needed
    if return_token_ids:
        payload["return_token_ids"] = True
    sent = time.perf_counter()
    res = ClientResult(sent=sent)
    last_t, chunks = sent, 0  # time of the last token chunk, token chunks so far
    finished = False
    given: int | None = None  # usage.completion_tokens; a chunk may carry several tokens, or none
    # Each chunk's own ids (vLLM sends the ids the chunk added), converted once the stream has ended; read only when
    # asked. Whether they are the whole answer is decided then, against the count.
    pieces: list[list[Any]] | None = [] if return_token_ids else None

    def on_data(data: bytes, now: float) -> bool:
        nonlocal last_t, chunks, finished, given
        if pieces is not None and not chunks:
            data = _without_prompt_echo(data)
        chunk = _object(data)
        if _in_band_error(chunk, res, now):
            return True
        choices = chunk.get("choices") or []
        if choices:  # a token, its text possibly empty (a special token, part of a character)
            finished = finished or bool(choices[0].get("finish_reason"))
            chunks += 1
            if pieces is not None and isinstance(ids := choices[0].get("token_ids"), list):
                pieces.append(ids)
            if res.first_token is None:
                res.first_token = now
            else:
                res.itl_ms.append((now - last_t) * 1e3)
            last_t = now
        usage = chunk.get("usage") or {}
        if usage:
            res.output_tokens = int(usage.get("completion_tokens", chunks))
            if "completion_tokens" in usage:
                given = res.output_tokens
            details = usage.get("prompt_tokens_details") or {}
            if "cached_tokens" in details:
                res.cached_tokens = int(details["cached_tokens"])
        return False

    await _stream(pool, "/v1/completions", payload, res, on_data, timeout_s=timeout_s)
    _cut_short(res, finished, max_tokens, given)
    if res.status == "ok":
        res.output_tokens = res.output_tokens or chunks
        if pieces:
            _whole_answer(res, pieces, res.output_tokens)
    return res


_ECHO = b'"prompt_token_ids":['


def _without_prompt_echo(data: bytes) -> bytes:
    """The first chunk without the prompt's ids vLLM sends back with the generated ones (``return_token_ids``): a
    128k-token prompt is 0.8 MB of JSON, whose parse (5 ms with orjson) would hold up the timing of every other
    stream on this loop. Ids hold no ``]``, so the array ends at the first one; a chunk spelt otherwise is parsed
    whole, as before."""
    at = data.find(_ECHO)
    end = data.find(b"]", at) if at >= 0 else -1
    return data if end < 0 else data[:at] + b'"prompt_token_ids":null' + data[end + 1 :]


def _whole_answer(res: ClientResult, pieces: list[list[Any]], counted: int) -> None:
    """Hand on the ids read (``pieces`` one after another) when they are the ``counted`` tokens the server reported;
    none otherwise: a session's next turn carries them (hybridbench.load.driver), and a piece of the answer makes a
    conversation the server never had. Ids that are not integers are a malformed answer."""
    try:
        ids = [int(t) for piece in pieces for t in piece]
    except (TypeError, ValueError) as exc:
        res.status, res.error = "error", f"{type(exc).__name__}: {exc}"
        return
    res.output_ids = ids if len(ids) == counted else []


class Generate(Protocol):
    async def __call__(self, pool: StreamPool, input_ids: Sequence[int], max_new_tokens: int, timeout_s: float, /,
                       *, model: str, answer_needed: bool = True) -> ClientResult: ...


CLIENTS: dict[str, Generate] = {
    "sglang": generate_sglang,  # SGLang's native /generate with input_ids
    "openai": generate_openai,  # /v1/completions with a token-id prompt
}


def client_for(protocol: str, *, return_token_ids: bool = False) -> Generate:
    """The load client for a server speaking ``protocol`` (a CLIENTS name). ``return_token_ids``: the server is known
    to answer an OpenAI request's ``return_token_ids`` (an engine's ServerSpec says so), so the client asks for the
    generated ids. A ValueError for a protocol no client speaks, or an ask the protocol has no field for."""
    if protocol not in CLIENTS:
        raise ValueError(f"unknown client {protocol!r}; choose one of {', '.join(CLIENTS)}")
    if not return_token_ids:
        return CLIENTS[protocol]
    if CLIENTS[protocol] is not generate_openai:
        raise ValueError(f"the {protocol} client has no return_token_ids to ask for (only openai's has)")
    return partial(generate_openai, return_token_ids=True)
