"""The one definition of what counts as a secret and how it is hidden, for launch commands and configs.

Everything hybridbench writes to disk (plan.json, bundle.json, the launch commands in provenance) goes
through here first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["MASK", "is_secret_name", "redact", "redact_config"]

MASK = "***"
_SECRET_FLAGS = frozenset({"--api-key", "--token", "--hf-token", "--admin-api-key"})
# A name is secret when its last word is one of these (HF_TOKEN, --openai-api-key, db_password). Only the
# last word counts, so counts and rates named after tokens (kv_tokens, min_token_hit_rate) stay visible.
# Plural "tokens" is left out on purpose: LLM configs name counts that way (--max-num-batched-tokens).
_SECRET_WORD = re.compile(r"(?:^|[^a-z0-9])(?:api_?key|keys?|token|secrets?|passw(?:or)?d|credentials?)$")
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")


def is_secret_name(name: str) -> bool:
    """Whether a flag, env variable or config key names a secret (``--hf-token``, ``HF_TOKEN``, ``apiKey``)."""
    if name in _SECRET_FLAGS:
        return True
    return bool(_SECRET_WORD.search(_CAMEL.sub(r"\1_\2", name.strip()).lower()))


def _is_secret_flag(arg: object) -> bool:
    return isinstance(arg, str) and arg.startswith("-") and "=" not in arg and is_secret_name(arg)


def _redact_args(args: Sequence[Any]) -> list[Any]:
    """The argv rule on any list: values after a secret flag, up to the next ``-``-argument, and ``NAME=value``."""
    out: list[Any] = []
    hiding = False  # after a secret flag: vLLM's --api-key takes several values (--api-key K1 K2)
    for arg in args:
        text = arg if isinstance(arg, str) else None
        if hiding and not (text or "").startswith("-"):
            out.append(MASK)
            continue
        hiding = _is_secret_flag(arg)
        if text is not None and "=" in text and is_secret_name(text.split("=", 1)[0]):
            out.append(text.split("=", 1)[0] + "=" + MASK)
        else:
            out.append(arg)
    return out


def redact(command: Sequence[str]) -> list[str]:
    """Hide the values of secret flags (``--api-key X [Y ...]``, ``--api-key=X``) and secret env assignments."""
    return [str(a) for a in _redact_args(command)]


def redact_config(value: Any) -> Any:
    """A copy of a resolved config with secrets hidden: secret-named keys get ``***``, every list gets the argv
    rule (engine.extra_args is a command line), and a lone ``NAME=value`` string is treated as one argument."""
    if isinstance(value, Mapping):
        return {k: MASK if isinstance(k, str) and is_secret_name(k) and v is not None else redact_config(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_config(v) for v in _redact_args(value)]
    if isinstance(value, str):
        return _redact_args([value])[0]
    return value
