"""The key a server engine was started with, and which of its endpoints want it as ``Authorization: Bearer K``.

A user who gives the server a key (engine.extra_args ``--api-key K``, SGLang's ``--admin-api-key K``, vLLM's
``VLLM_API_KEY`` in the environment the server inherits) gets a server that refuses what comes without it. Every HTTP
call hybridbench makes to the server (load, flush, health, metrics, probes) takes its headers from
:meth:`ServerAuth.headers`, which follows each engine's own rule, read from the installed releases:

* SGLang 0.5.9 to 0.5.23 (``sglang/srt/utils/auth.py`` ``decide_request_auth``): ``/health*`` and ``/metrics*`` are
  always open; an ``ADMIN_OPTIONAL`` route (``/flush_cache``: ``@auth_level`` in ``entrypoints/http_server.py``) wants
  ``--admin-api-key`` when it is set, else ``--api-key``; every other route (``/generate``, ``/v1/completions``,
  ``/server_info``) wants ``--api-key`` when it is set and is open when only ``--admin-api-key`` is. Each flag takes
  one value, the last one given counting.
* vLLM 0.32.0 (``entrypoints/serve/middleware/authenticate.py``): only paths under ``/v1``, ``/v2``, ``/inference``,
  ``/cohere`` are guarded (not ``/reset_prefix_cache``, ``/health``, ``/metrics``), by any one of ``--api-key K1
  [K2 ...]`` (the last flag given counting), or by ``VLLM_API_KEY`` when no ``--api-key`` is given (``register.py``).
* TokenSpeed (``ts serve``) takes no key of its own: 0.1.0 routes ``--api-key`` to its engine, whose HTTP middleware
  (``runtime/utils/common.py`` ``add_api_key_middleware``) nothing calls, so the smg gateway in front guards nothing;
  on 0.1.1 the flag is its gateway's, refused at plan time like every gateway flag (tokenspeed_cmd.py).

The key lives in memory only: it is in no repr, file or message, and the server's log is scrubbed of it.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from hybridbench.errors import ConfigError

__all__ = ["NO_AUTH", "ServerAuth", "sglang_auth", "vllm_auth"]

Rule = Literal["none", "sglang", "vllm"]

_SGLANG_OPEN = ("/health", "/metrics")  # decide_request_auth: allowed whatever keys are set
_SGLANG_ADMIN_OPTIONAL = frozenset({"/flush_cache"})  # the ADMIN_OPTIONAL routes hybridbench calls
_VLLM_GUARDED = ("/v1", "/v2", "/inference", "/cohere")  # authenticate.py GUARDED_PREFIX
# What an HTTP header carries to the server as typed: printable ASCII, no space at either end (a parser strips it).
_HEADER_SAFE = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?")


@dataclass(frozen=True, slots=True)
class ServerAuth:
    rule: Rule = "none"
    api_key: str = field(default="", repr=False)
    admin_key: str = field(default="", repr=False)  # SGLang's --admin-api-key

    def bearer(self, path: str) -> str:
        """The key ``path`` wants ("" for none)."""
        path = path.split("?", 1)[0]
        if self.rule == "sglang":
            if path.startswith(_SGLANG_OPEN):
                return ""
            return (self.admin_key or self.api_key) if path in _SGLANG_ADMIN_OPTIONAL else self.api_key
        if self.rule == "vllm":
            return self.api_key if path.startswith(_VLLM_GUARDED) else ""
        return ""

    def headers(self, path: str) -> dict[str, str]:
        key = self.bearer(path)
        return {"Authorization": f"Bearer {key}"} if key else {}

    @property
    def secrets(self) -> frozenset[str]:
        return frozenset(k for k in (self.api_key, self.admin_key) if k)

    def request(self, base_url: str, path: str, *, method: str | None = None,
                data: bytes | None = None) -> urllib.request.Request:
        """A urllib request for ``path`` of the server at ``base_url``, with the key it wants."""
        return urllib.request.Request(base_url + path, data=data, headers=self.headers(path), method=method)


NO_AUTH = ServerAuth()


def _values(argv: Sequence[str], flag: str, *, many: bool) -> list[str] | None:
    """What argparse keeps of ``flag`` in ``argv``: the last occurrence's value(s) (``flag V``, ``flag=V``; with
    ``many``, ``flag V1 V2 ...`` up to the next ``-`` argument), or None when it is not given."""
    kept: list[str] | None = None
    args = [str(a) for a in argv]
    for i, arg in enumerate(args):
        if arg.startswith(flag + "="):
            kept = [arg[len(flag) + 1:]]
        elif arg == flag:
            kept = []
            for value in args[i + 1:]:
                if value.startswith("-"):  # argparse takes no such value after a flag
                    break
                kept.append(value)
                if not many:
                    break
    return kept


def _checked(where: str, value: str) -> str:
    """``value``, or ConfigError naming ``where`` it came from (never the value: it is a secret)."""
    if value and not _HEADER_SAFE.fullmatch(value):
        raise ConfigError(f"{where}: the key must be printable ASCII without a space at either end: hybridbench sends "
                          "it to the server in an HTTP header, which cannot carry it as typed")
    return value


def sglang_auth(command: Sequence[str], env: Mapping[str, str]) -> ServerAuth:
    """The keys of an SGLang server started with ``command`` (it reads none from its environment)."""
    api = (_values(command, "--api-key", many=False) or [""])[-1]
    admin = (_values(command, "--admin-api-key", many=False) or [""])[-1]
    return ServerAuth("sglang", _checked("engine.extra_args --api-key", api),
                      _checked("engine.extra_args --admin-api-key", admin))


def vllm_auth(command: Sequence[str], env: Mapping[str, str]) -> ServerAuth:
    """The key of a vLLM server started with ``command`` in ``env`` (the whole environment it inherits)."""
    keys = _values(command, "--api-key", many=True)
    given = [k for k in keys if k] if keys is not None else [env.get("VLLM_API_KEY", "")]
    key = next((k for k in given if k), "")
    where = "VLLM_API_KEY in the environment" if keys is None else "engine.extra_args --api-key"
    return ServerAuth("vllm", _checked(where, key))
