"""SGLang 0.5.23's JSON contract gate for /generate's ``sampling_params``, text for text.

0.5.23 checks every /generate body against its generated schema before serving it
(srt/entrypoints/api_contract.py; http_server.py:937-939) and refuses a violation with serde's error text as a
400 ``{"error": "<text>"}``. The gate walks the body's keys in order and stops at the first problem: a key
SamplingParams does not define, or a value of the wrong JSON type (null always means the default). This module
is that walk for ``sampling_params`` (api/v1/api_types.py: ``decode_SamplingParams`` :1259-1321,
``_unexpected`` :30, ``_unknown_field`` :97). Only ``sampling_params``: the request's own fields pass FastAPI's
pydantic parse first, whose coercions decide which of the two refuses them; inside ``sampling_params`` (a plain
dict to pydantic) the gate alone decides. Proven against the real decoder: tests/sglang_oracle/test_sglang_contract.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

__all__ = ["API_VERSIONS", "DEFAULT_API_VERSION", "SAMPLING_FIELDS", "sampling_contract_problem", "unknown_field"]

# The SGLang releases whose recorded answers this server reproduces (--sglang-api-version).
API_VERSIONS: Final = ("0.5.16", "0.5.23")
DEFAULT_API_VERSION: Final = "0.5.23"

# sglang.api.v1.SamplingParams in declaration order, as serde lists them (api_types.py:1256).
SAMPLING_FIELDS: Final = (
    "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k", "min_p",
    "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "n", "json_schema", "regex",
    "ebnf", "structural_tag", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim",
    "stream_interval", "logit_bias", "sampling_seed", "custom_params", "beam_width", "watermark", "choice",
)
WATERMARK_FIELDS: Final = ("enabled", "key", "context_window")  # api_types.py:1384


class _Violation(Exception):
    pass


def _unexpected(v: Any) -> str:
    """serde's ``Unexpected`` display."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"boolean `{'true' if v else 'false'}`"
    if isinstance(v, int):
        return f"integer `{v}`"
    if isinstance(v, float):
        return f"floating point `{v}`"
    if isinstance(v, str):
        return f'string "{v}"'
    return "sequence" if isinstance(v, list) else "map" if isinstance(v, dict) else type(v).__name__


def _expect(ok: bool, v: Any, expected: str) -> None:
    if not ok:
        raise _Violation(f"invalid type: {_unexpected(v)}, expected {expected}")


def _i64(v: Any) -> None:
    _expect(isinstance(v, int) and not isinstance(v, bool), v, "i64")


def _f64(v: Any) -> None:
    _expect(isinstance(v, int | float) and not isinstance(v, bool), v, "f64")


def _bool(v: Any) -> None:
    _expect(isinstance(v, bool), v, "a boolean")


def _str(v: Any) -> None:
    _expect(isinstance(v, str), v, "a string")


def _seq(v: Any, each: Callable[[Any], None]) -> None:
    _expect(isinstance(v, list), v, "a sequence")
    for e in v:
        each(e)


def _str_or_list(v: Any) -> None:
    if isinstance(v, list):
        _seq(v, _str)
    else:
        _expect(isinstance(v, str), v, "a value or an array of values for StringOrList")


def _logit_bias(v: Any) -> None:
    _expect(isinstance(v, dict), v, "a map")
    for e in v.values():
        _f64(e)


def unknown_field(key: str, fields: tuple[str, ...]) -> str:
    """serde's ``unknown_field`` text."""
    if not fields:
        return f"unknown field `{key}`, there are no fields"
    if len(fields) == 1:
        return f"unknown field `{key}`, expected `{fields[0]}`"
    if len(fields) == 2:
        return f"unknown field `{key}`, expected `{fields[0]}` or `{fields[1]}`"
    return f"unknown field `{key}`, expected one of {', '.join(f'`{f}`' for f in fields)}"


def _watermark(v: Any) -> None:
    _expect(isinstance(v, dict), v, "struct WatermarkRequestConfig")
    checks = {"enabled": _bool, "key": _str, "context_window": _i64}
    for key, x in v.items():
        if key not in checks:
            raise _Violation(unknown_field(key, WATERMARK_FIELDS))
        if x is not None:
            checks[key](x)


def _anything(v: Any) -> None:
    pass


_CHECKS: Final[Mapping[str, Callable[[Any], None]]] = {
    "max_new_tokens": _i64, "stop": _str_or_list, "stop_token_ids": lambda v: _seq(v, _i64),
    "stop_regex": _str_or_list, "temperature": _f64, "top_p": _f64, "top_k": _i64, "min_p": _f64,
    "frequency_penalty": _f64, "presence_penalty": _f64, "repetition_penalty": _f64, "min_new_tokens": _i64,
    "n": _i64, "json_schema": _str, "regex": _str, "ebnf": _str, "structural_tag": _str, "ignore_eos": _bool,
    "skip_special_tokens": _bool, "spaces_between_special_tokens": _bool, "no_stop_trim": _bool,
    "stream_interval": _i64, "logit_bias": _logit_bias, "sampling_seed": _i64, "custom_params": _anything,
    "beam_width": _i64, "watermark": _watermark, "choice": lambda v: _seq(v, _str),
}
assert tuple(_CHECKS) == SAMPLING_FIELDS


def sampling_contract_problem(sp: Any) -> str | None:
    """The gate's text for one ``sampling_params`` object or a list of them; None when it passes. A value that is
    neither is FastAPI's to refuse (pydantic types the field ``Dict | List[Dict]``) and passes here."""
    for params in sp if isinstance(sp, list) else [sp]:
        if not isinstance(params, dict):
            continue
        try:
            for key, x in params.items():
                check = _CHECKS.get(key)
                if check is None:
                    raise _Violation(unknown_field(key, SAMPLING_FIELDS))
                if x is not None:
                    check(x)
        except _Violation as exc:
            return str(exc)
    return None
