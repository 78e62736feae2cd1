"""The one definition of what counts as a secret and how it is hidden, for launch commands and configs.

Everything hybridbench writes to disk (plan.json, bundle.json, the launch commands in provenance) goes
through here first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["MASK", "is_secret_name", "redact", "redact_config", "redact_overrides", "scrub", "scrub_obj",
           "secret_values"]

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
    """The argv rule on any list: the value after a secret flag (even one starting with ``-``) and any further
    values up to the next ``-``-argument; ``NAME=value``; a flag and its value given as one element."""
    out: list[Any] = []
    hiding = ""  # "first": the next argument is a secret's value, whatever it looks like; "more": vLLM's K1 K2
    for arg in args:
        text = arg if isinstance(arg, str) else None
        if hiding == "first" or (hiding == "more" and not (text or "").startswith("-")):
            out.append(MASK)
            hiding = "more"
            continue
        hiding = "first" if _is_secret_flag(arg) else ""
        words = text.split(None, 1) if text is not None and text.startswith("-") else []
        if len(words) == 2 and _is_secret_flag(words[0]):  # "--api-key X" passed as one list element
            out.append(f"{words[0]} {MASK}")
            hiding = "more"
        elif text is not None and "=" in text and is_secret_name(text.split("=", 1)[0]):
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


# Shorter "secrets" (a test's "x") would mask every such substring of a report; no real key is this short.
MIN_SECRET_CHARS = 4


def _hidden(orig: Any, red: Any, out: set[str]) -> None:
    if isinstance(orig, Mapping) and isinstance(red, Mapping):
        for k, v in orig.items():
            _hidden(v, red.get(k), out)
    elif isinstance(orig, (list, tuple)) and isinstance(red, (list, tuple)) and len(orig) == len(red):
        for o, r in zip(orig, red, strict=True):
            _hidden(o, r, out)
    elif red == MASK or (isinstance(red, str) and red.endswith(MASK) and red != orig):
        if isinstance(orig, (Mapping, list, tuple)):  # a secret-named key holding a structure: all of it
            _hidden(orig, redact_config(_masked_all(orig)), out)
            return
        prefix = red[: -len(MASK)] if isinstance(red, str) else ""
        text = str(orig)
        value = text[len(prefix):] if text.startswith(prefix) else text
        out.update(w for w in [value, *value.split()] if len(w) >= MIN_SECRET_CHARS)


def _masked_all(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _masked_all(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_masked_all(v) for v in value]
    return MASK


def secret_values(config: Any) -> frozenset[str]:
    """The values ``redact_config`` hides in ``config``: what must appear in no file, whatever writes it (a
    server's last words quote its command line; a workload's argv carries its parameters)."""
    out: set[str] = set()
    _hidden(config, redact_config(config), out)
    return frozenset(out)


def scrub(text: str, secrets: frozenset[str]) -> str:
    """``text`` with every occurrence of a secret value replaced by the mask (longest first)."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def scrub_obj(value: Any, secrets: frozenset[str]) -> Any:
    """``scrub`` on every string (and key) of a JSON-like value."""
    if not secrets:
        return value
    if isinstance(value, str):
        return scrub(value, secrets)
    if isinstance(value, Mapping):
        return {scrub_obj(k, secrets): scrub_obj(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub_obj(v, secrets) for v in value]
    return value


def redact_overrides(overrides: Sequence[str]) -> list[str]:
    """Hydra overrides as typed on the command line (``+checks.x=1``, ``engine.extra_args=[--api-key,K]``):
    a secret-named key's value is masked, and a list value gets the argv rule."""
    out = []
    for o in overrides:
        key, sep, value = o.partition("=")
        if not sep:
            out.append(o)
        elif is_secret_name(key.lstrip("+~").rsplit(".", 1)[-1]):
            out.append(f"{key}={MASK}")
        elif value.startswith("[") and value.endswith("]"):
            items = [v.strip() for v in value[1:-1].split(",")]
            out.append(f"{key}=[{','.join(str(v) for v in redact_config(items))}]")
        else:
            out.append(f"{key}={redact_config(value)}")
    return out
