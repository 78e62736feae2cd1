"""SGLang's error answers, by the path that produces each, and by version where 0.5.16 and 0.5.23 differ.

A refusal is raised as one of the ``BadRequest`` kinds below (requests.py) and rendered here in the shape the
real server gives the same kind of failure. Sources (installed packages, site-packages/sglang/...):

* ``ValueError`` from the tokenizer manager (empty input, too long, bad values): non-streaming /generate answers
  400 ``{"error": {"message"}}`` (srt/entrypoints/http_server.py ``_create_error_response``: 0.5.16:2006,
  0.5.23:2246); a streaming one has already sent 200 and its headers, so the error is an event,
  ``{"error": {"message", "type": "invalid_request_error", "code": 400, "retryable": false}}``, then
  ``[DONE]`` (``stream_results``: 0.5.16:839-863, 0.5.23:951-975). Recorded: ``input_ids: []`` (both versions).
* A body FastAPI cannot parse (``RequestValidationError``): 400 ``ErrorResponse``,
  ``{"object": "error", "message", "type": "Bad Request", "param": null, "code": 400}``
  (http_server.py 0.5.16:551-594, 0.5.23:635-692; ErrorResponse: srt/entrypoints/openai/protocol.py 0.5.16:88).
* 0.5.23's JSON contract gate (contract.py), checked before the stream starts: 400 ``{"error": "<serde's
  text>"}`` — a string, not an object (http_server.py:937-939).
  0.5.16 has no gate: an unknown sampling field is a ``TypeError`` from ``SamplingParams(**kwargs)``
  (srt/managers/tokenizer_manager.py:1167; a msgspec Struct), which no handler catches: Starlette's 500
  ``Internal Server Error`` (text/plain), or, once a stream's 200 headers are out (starlette/responses.py:254),
  a connection closed mid-stream. Recorded: ``sampling_params: {"bogus": 1}`` (0.5.16 500, 0.5.23 400).
* OpenAI endpoints (srt/entrypoints/openai/serving_base.py ``create_error_response`` 0.5.16:209,
  ``create_streaming_error_response`` 0.5.16:227): 400 ``ErrorResponse`` with ``type: "BadRequestError"``;
  an engine abort in a stream, ``data: {"error": ErrorResponse}`` with ``type: "BAD_REQUEST"``, then ``[DONE]``.
* An engine abort (a request the pools can never hold) in a /generate stream is not an error event: the chunk
  itself, its ``finish_reason`` ``{"type": "abort", "message", "status_code": 400}`` (tokenizer_manager.py
  ``_handle_abort_finish_reason``: 0.5.16:1438-1458, 0.5.23:1891); without a stream, the ValueError answer above.

Not modelled: the messages (the reference's own, except the empty input's and the contract gate's); the gate's
checks of the request's own fields (only ``sampling_params``: contract.py); 0.5.16's answers to sampling values
of the wrong type (TypeErrors deep in its checks); unknown top-level fields, which SGLang ignores and this server
refuses (a typo would otherwise change nothing, silently) in the ValueError shape; on the OpenAI endpoints,
which checks SGLang makes before its stream starts and which inside it (every refusal here comes before).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from reference_impl.server.contract import API_VERSIONS, DEFAULT_API_VERSION

__all__ = ["API_VERSIONS", "DEFAULT_API_VERSION", "contract_refusal", "dropped_stream", "dumps_event", "error_response",
           "openai_error", "openai_stream_error", "stream_error", "validation_error", "value_error"]


def error_response(body: Any, status: int) -> web.Response:
    """JSON as SGLang's ORJSONResponse sends it: ``application/json``, no charset parameter (recorded)."""
    return web.Response(body=json.dumps(body).encode(), status=status, content_type="application/json")


def value_error(message: str, status: int = 400) -> web.Response:
    """A non-streaming /generate request refused by a tokenizer-manager check."""
    return error_response({"error": {"message": message}}, status)


def stream_error(message: str) -> dict[str, Any]:
    """The event a streaming /generate request gets for the same refusal (its 200 is already sent)."""
    return {"error": {"message": message, "type": "invalid_request_error", "code": 400, "retryable": False}}


def _error_body(message: str, kind: str, status: int) -> dict[str, Any]:
    return {"object": "error", "message": message, "type": kind, "param": None, "code": status}


def validation_error(message: str) -> web.Response:
    """A body that does not parse as the endpoint's request type."""
    return error_response(_error_body(message, "Bad Request", 400), 400)


def openai_error(message: str, status: int = 400) -> web.Response:
    kind = "BadRequestError" if status == 400 else "InternalServerError"
    return error_response(_error_body(message, kind, status), status)


def openai_stream_error(message: str) -> dict[str, Any]:
    """An engine abort inside an OpenAI stream: its status's name as the type (serving_completions.py
    0.5.16:328-338, 0.5.23:362-372)."""
    return {"error": _error_body(message, "BAD_REQUEST", 400)}


async def contract_refusal(request: web.Request, message: str, version: str, stream: bool) -> web.StreamResponse:
    """A /generate body SGLang's request schema refuses: 0.5.23's contract gate, 0.5.16's uncaught error."""
    if version != "0.5.16":
        return error_response({"error": message}, 400)
    if not stream:
        return web.Response(status=500, text="Internal Server Error")
    return await dropped_stream(request)


async def dropped_stream(request: web.Request) -> web.StreamResponse:
    """A stream whose handler raised after its 200 headers went out: uvicorn drops the connection."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    if request.transport is not None:
        request.transport.abort()
    return resp


def dumps_event(body: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(body)}\n\n".encode()
