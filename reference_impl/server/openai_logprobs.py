"""OpenAI logprobs over the model's own: /v1/completions' ``logprobs: N`` and ``echo`` (SGLang's
``to_openai_style_logprobs``), /v1/chat/completions' ``logprobs: true, top_logprobs: N`` (``chat_logprobs``).

Sources (site-packages/sglang/srt/entrypoints/openai/ of the installed 0.5.16 and 0.5.23; the recorded
``logprobs: 2`` answers of both in tests/fixtures/sglang_cpu/recorded agree):

* The request becomes ``return_logprob``, ``top_logprobs_num=N``, ``return_text_in_logprobs``, and
  ``logprob_start_len=0`` only for ``echo`` with a truthy N (serving_completions.py 0.5.16:82-116, 0.5.23:88-122).
  SGLang checks no range for N (a negative N returns no top logprobs; one beyond the vocabulary fails its
  scheduler's ``topk``); the reference server refuses N outside [0, 20], as it does ``top_logprobs_num``.
* A choice's ``logprobs``: ``text_offset`` all -1, ``token_logprobs`` and ``tokens`` the prompt's entries (echo)
  then the output's, ``top_logprobs`` likewise, one dict per token of ``{token string: logprob}`` built by a dict
  comprehension, so two candidates with the same string keep the first's place and the second's value
  (utils.py 0.5.16:17-51, 0.5.23:126-174). The prompt's first entry has a null logprob and null top logprobs.
  With N = 0 no top logprobs are produced at all: ``top_logprobs`` is ``[]``.
* A token's string: its own decode (``batch_decode([[id]])``, tokenizer_manager.py 0.5.16:2362, 0.5.23:3113), so a
  lone byte of a multi-byte character is U+FFFD. 0.5.23 (utils.py:146, 158, 177-213 ``_lossless_token_text``)
  renders such a fragment losslessly instead: when the decode holds U+FFFD and the token's raw bytes are not
  valid UTF-8, the bytes as latin-1, one character per byte (recorded: 'Ó' for byte 0xD3 where 0.5.16 says
  U+FFFD). The reference tokenizer's bytes 0-255 are exactly such tokens; its ``<id>`` tokens never decode to
  U+FFFD, so they read the same under both versions.
* A stream's chunk carries the logprobs of the tokens new since the last chunk (null when none are), the first
  chunk also the prompt's under echo (serving_completions.py 0.5.16:272-314, 0.5.23:291-334).
* 0.5.16 reads ``input_top_logprobs`` whenever ``echo`` is set (serving_completions.py 0.5.16:276-280, 516-518),
  which N = 0 does not produce: a KeyError, answered 500 without a stream (serving_base.py 0.5.16:127-133) and as a
  connection dropped after the 200 with one. 0.5.23 asks for a truthy N there (:295, :585).
"""

from __future__ import annotations

from typing import Any

from reference_impl.model.executor import RequestCtx, TopLogprobs
from reference_impl.server.tokenizer import decode, token_bytes

__all__ = ["ECHO_KEYERROR_0516", "chat_logprobs", "choice_logprobs", "echo_crashes", "token_string"]

ECHO_KEYERROR_0516 = "Internal server error: 'input_top_logprobs'"  # str(KeyError) in serving_base's wrapper


def echo_crashes(version: str, echo: bool, logprobs: int | None) -> bool:
    """0.5.16's KeyError: ``echo`` with ``logprobs: 0``."""
    return version == "0.5.16" and echo and logprobs == 0


def token_string(token: int, version: str) -> str:
    """The string SGLang's OpenAI logprobs give a token, per version (module docstring)."""
    text = decode([token])
    raw = token_bytes(token)
    if version == "0.5.16" or "\ufffd" not in text or raw is None:
        return text
    try:
        raw.decode("utf-8")  # a whole character that really is U+FFFD keeps its text
    except UnicodeDecodeError:
        return raw.decode("latin-1")
    return text


def _top(entries: TopLogprobs, version: str) -> dict[str, float]:
    return {token_string(t, version): lp for lp, t in entries}


def choice_logprobs(ctx: RequestCtx, input_ids: list[int], output_ids: list[int], start: int, *, top_n: int,
                    prompt: bool, version: str) -> dict[str, Any] | None:
    """The ``logprobs`` of one choice (or stream chunk): the output tokens from ``start`` on, after the prompt's
    when ``prompt``; None for a chunk with neither (SGLang's null)."""
    outs = ctx.output_logprobs[start: len(output_ids)]
    if not outs and not prompt:
        return None
    tokens: list[int] = []
    values: list[float | None] = []
    tops: list[dict[str, float] | None] = []
    if prompt:
        for pos, token in enumerate(input_ids):
            entry = ctx.input_logprobs.get(pos) if pos > 0 else None  # the first has no logprob
            tokens.append(token)
            values.append(entry[0] if entry else None)
            tops.append(_top(entry[1], version) if entry else None)
    for (lp, top), token in zip(outs, output_ids[start:], strict=False):
        tokens.append(token)
        values.append(lp)
        tops.append(_top(top, version))
    return {"text_offset": [-1] * len(tokens), "token_logprobs": values,
            "tokens": [token_string(t, version) for t in tokens], "top_logprobs": tops if top_n else []}


def _chat_entry(text: str, lp: float, raw: bytes | None = None) -> dict[str, Any]:
    return {"token": text, "bytes": list(raw if raw is not None else text.encode()), "logprob": lp}


def _chat_entry_0523(token: int, lp: float) -> dict[str, Any]:
    """0.5.23: the decode (U+FFFD kept) with the token's raw bytes, or its decode's UTF-8 for a token without them
    (``token_id_to_bytes``: utils.py 0.5.23:96-122)."""
    return _chat_entry(decode([token]), lp, token_bytes(token))


def chat_logprobs(ctx: RequestCtx, output_ids: list[int], start: int, *, top_n: int, stream: bool,
                  version: str) -> dict[str, Any] | None:
    """A chat choice's (or chunk's) ``logprobs``: ``{"content": [{token, bytes, logprob, top_logprobs}]}`` for the
    output tokens from ``start`` on; a chunk without new tokens has none (null). Not recorded; from the source:
    0.5.16 builds it from the completions' ``LogProbs`` (serving_chat.py 0.5.16:1608-1658): strings and their
    UTF-8, a top list the collapsed dict's and, streamed, every token of a chunk the chunk's first top list
    (``use_token_index=False``, :1769-1791); 0.5.23 builds it from the raw triples, every candidate kept, each token
    its own (serving_chat.py 0.5.23:3053-3127, 3281-3299). A chunk carries only new tokens' (0.5.16:1257-1268,
    0.5.23:2547-2558). With ``top_logprobs`` 0 every token's ``top_logprobs`` is ``[]``."""
    outs = ctx.output_logprobs[start: len(output_ids)]
    if stream and not outs:
        return None
    tokens = output_ids[start: start + len(outs)]
    if version == "0.5.16":
        entries = [_chat_entry(token_string(t, version), lp) for (lp, _), t in zip(outs, tokens, strict=True)]
        tops = [[_chat_entry(k, v) for k, v in _top(top, version).items()] for _, top in outs]
        if stream:
            tops = [tops[0]] * len(tops)
    else:
        entries = [_chat_entry_0523(t, lp) for (lp, _), t in zip(outs, tokens, strict=True)]
        tops = [[_chat_entry_0523(t, v) for v, t in top] for _, top in outs]
    return {"content": [{**e, "top_logprobs": top if top_n else []} for e, top in zip(entries, tops, strict=True)]}
