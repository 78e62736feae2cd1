"""SGLang's scheduler batch log lines ("Prefill batch" / "Decode batch"), parsed: the one parser shared by the
engines (live snapshots of a trial, ``hybridbench.engines.server_logs``) and the results (a run's saved
``logs/``, ``hybridbench.results.usage``), so a field is named once.

Sources: https://github.com/sgl-project/sglang (fields; "usage" excludes evictable cached tokens and states), the
log excerpt in SGLang PR #11214 (``[2025-10-05 18:37:30 TP0 EP0] Decode batch. ...``) and the real-server
recordings (tests/fixtures/sglang_cpu) (``[2026-11-24 20:47:59] Prefill batch, ...``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["BatchKind", "LogSample", "parse_sglang_log_line"]

BatchKind = Literal["prefill", "decode"]
FieldValue = float | bool | str

# TokenSpeed logs a round that extends and decodes at once as "Mix batch." with the prefill fields: a prefill line.
_BATCH = re.compile(r"\b(Prefill|Mix|Decode) batch[.,:]?\s*")
# Seconds may carry a fraction: Python logging's default asctime ("00:36:18,365", the reference server)
_TIMESTAMP = re.compile(r"(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)(?:[.,](\d+))?")
_RANK = re.compile(r"\b(TP|DP|EP|PP)(\d+)\b")
_FIELD = re.compile(r"^\s*([^:]+?)\s*:\s*(.*?)\s*$")
_INT_FIELDS = {
    "#new-seq": "new_seq",
    "#new-token": "new_token",
    "#cached-token": "cached_token",
    "#running-req": "running_req",
    "#queue-req": "queue_req",
    "#full token": "full_token",
    "#token": "full_token",  # older builds (dense models) log "#token: N"
    "mamba num": "mamba_num",
    "#pending-token": "pending_token",
}
_FLOAT_FIELDS = {
    "full token usage": "token_usage",
    "token usage": "token_usage",  # older builds / non-hybrid models
    "mamba usage": "mamba_usage",
    "gen throughput (token/s)": "gen_throughput",
    "input throughput (token/s)": "input_throughput",
}


@dataclass(frozen=True, slots=True)
class LogSample:
    """One "Prefill batch" or "Decode batch" line. Fields a build does not log are None.

    ``token_usage`` is "full token usage" (hybrid builds) or "token usage" (older or non-hybrid builds);
    ``mamba_usage`` is "mamba usage". Both exclude evictable cached entries (SGLang's source). ``fields`` keeps
    every ``key: value`` pair as logged (numbers as float, True/False as bool), for fields not mapped here.
    """

    kind: BatchKind
    timestamp: str | None = None  # "2025-10-05 18:37:30" (server local time; ".365" when logged)
    ranks: Mapping[str, int] = field(default_factory=dict)  # {"TP": 0, "EP": 0} from the line prefix
    new_seq: int | None = None
    new_token: int | None = None
    cached_token: int | None = None
    running_req: int | None = None
    queue_req: int | None = None
    full_token: int | None = None
    mamba_num: int | None = None
    pending_token: int | None = None
    token_usage: float | None = None
    mamba_usage: float | None = None
    gen_throughput: float | None = None
    input_throughput: float | None = None
    cuda_graph: bool | None = None
    fields: Mapping[str, FieldValue] = field(default_factory=dict)


def _value(text: str) -> FieldValue:
    if text in ("True", "False"):
        return text == "True"
    try:
        return float(text)
    except ValueError:
        return text


def parse_sglang_log_line(line: str) -> LogSample | None:
    """Parse one scheduler log line; None unless it is a Prefill/Decode batch line.

    Tolerant of the ``[timestamp TPn EPn]`` prefix (or none, or a mangled one), of ``Prefill batch.`` vs
    ``Prefill batch,``, of field order, of missing or unknown fields, and of a trailing comma.
    """
    m = _BATCH.search(line)
    if m is None:
        return None
    prefix, body = line[: m.start()], line[m.end():]
    ts = _TIMESTAMP.search(prefix)
    raw: dict[str, FieldValue] = {}
    for part in body.split(","):
        fm = _FIELD.match(part)
        if fm and fm.group(2):
            raw[fm.group(1)] = _value(fm.group(2))
    ints: dict[str, int] = {}
    floats: dict[str, float] = {}
    cuda_graph: bool | None = None
    for key, value in raw.items():
        if key in _INT_FIELDS and isinstance(value, float) and math.isfinite(value):
            ints.setdefault(_INT_FIELDS[key], int(value))
        elif key in _FLOAT_FIELDS and isinstance(value, float):
            floats.setdefault(_FLOAT_FIELDS[key], value)
        elif key == "cuda graph" and isinstance(value, bool):
            cuda_graph = value
    return LogSample(
        kind="decode" if m.group(1) == "Decode" else "prefill",
        timestamp=(f"{ts.group(1)} {ts.group(2)}" + (f".{ts.group(3)}" if ts.group(3) else "")) if ts else None,
        ranks={k: int(v) for k, v in _RANK.findall(prefix)},
        new_seq=ints.get("new_seq"),
        new_token=ints.get("new_token"),
        cached_token=ints.get("cached_token"),
        running_req=ints.get("running_req"),
        queue_req=ints.get("queue_req"),
        full_token=ints.get("full_token"),
        mamba_num=ints.get("mamba_num"),
        pending_token=ints.get("pending_token"),
        token_usage=floats.get("token_usage"),
        mamba_usage=floats.get("mamba_usage"),
        gen_throughput=floats.get("gen_throughput"),
        input_throughput=floats.get("input_throughput"),
        cuda_graph=cuda_graph,
        fields=raw,
    )
