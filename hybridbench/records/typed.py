"""A saved row's fields checked against its dataclass's annotations before the dataclass is built.

Records and probe samples are read back from JSONL that a user may have edited, truncated or produced with
another tool: a ``"cached_tokens": "x"`` or a ``"repeat": "0"`` must be refused at the reader (one line naming the
file:line and the field, exit 2), not crash a metric with a traceback or, worse, pass a check on a wrong value.
"""

from __future__ import annotations

import math
import types
import typing
from functools import cache
from typing import Any, Literal, Union

__all__ = ["FLOAT_BOUND", "checked_fields"]


# A saved number beyond this is damage, not a measurement (1e15 ms is 31,700 years): past it sums and spreads of
# finite values overflow (itl_ms [1e308, 1e308] ended rescore and compare in an OverflowError traceback).
FLOAT_BOUND = 1e15


def _ok(value: Any, hint: Any, logprobs: bool = False) -> bool:
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return any(_ok(value, h, logprobs) for h in typing.get_args(hint))
    if origin is Literal:
        return value in typing.get_args(hint)
    if origin is list:
        (item,) = typing.get_args(hint) or (Any,)
        if item is float and logprobs:
            # A server's logprob may be -inf or NaN (a numerics bug after a cache hit): the kl check must see it,
            # and fail on it; never a value no server gives (+inf, 1e308), which would only overflow the estimator.
            return isinstance(value, list) and all(
                _ok(v, float) or (isinstance(v, float) and (v == -math.inf or math.isnan(v))) for v in value)
        return isinstance(value, list) and all(_ok(v, item) for v in value)
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:  # JSON has no integer/float split; a saved time or logprob is never NaN or infinite
        return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                and abs(value) <= FLOAT_BOUND)
    if hint is str:
        return isinstance(value, str)
    return True  # a type this checker does not know: the dataclass decides


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def checked_fields(cls: type, obj: Any, names: typing.Iterable[str]) -> dict[str, Any]:
    """``obj``'s entries among ``names`` (the dataclass's fields), each of its annotated type; TypeError naming the
    first field that is not (the readers turn it into one line naming the file and line)."""
    if not isinstance(obj, dict):
        raise TypeError(f"expected a JSON object, got {type(obj).__name__}")
    hints = _hints(cls)
    out = {}
    for name in names:
        if name not in obj:
            continue
        value = obj[name]
        if not _ok(value, hints.get(name, Any), logprobs=name.endswith("logprobs")):
            raise TypeError(f"field {name!r} is {value!r:.60}, not {_shown(hints.get(name, Any))}")
        out[name] = value
    return out


def _shown(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")
