"""hybridbench's SGLang key rule (hybridbench/engines/server_auth.py) against each release's own auth code.

For 0.5.9, 0.5.16 and 0.5.23: every route hybridbench calls on an SGLang server gets its auth level from the release's
``entrypoints/http_server.py`` (the ``@auth_level`` under its ``@app`` route decorator, NORMAL without one: read from
the source, since the module needs uvicorn and a GPU build to import), and the release's own ``decide_request_auth``
(``utils/auth.py``, what its middleware calls per request; api_key_probe.py, in the release's venv) says whether the
request hybridbench sends is let through, for a server started with ``--api-key`` alone, ``--admin-api-key`` alone,
and both. Every request hybridbench sends must pass, and a header must go exactly where the route refuses a request
without it: no key is sent where none is asked for. Needs the venvs from ``tests/sglang_oracle/build_env.sh``.
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest
import warm_release
from oracle_client import env_home, env_python, env_ready

from hybridbench.engines.server_auth import sglang_auth

pytestmark = pytest.mark.sglang

HERE = Path(__file__).resolve().parent
RELEASES = ("0.5.9", "0.5.16", "0.5.23")
# Every path hybridbench sends to an SGLang server, with its method: the load (native and OpenAI), the accuracy probe
# (evalscope's chat API), the flush, /server_info (evictions, exact_hits), readiness and health, /metrics.
CALLS = (("POST", "/generate"), ("POST", "/v1/completions"), ("POST", "/v1/chat/completions"),
         ("POST", "/flush_cache"), ("GET", "/server_info"), ("GET", "/health_generate"), ("GET", "/health"),
         ("GET", "/metrics"))
SERVERS = {"api key": ["--api-key", "sk-API"], "admin key": ["--admin-api-key", "sk-ADMIN"],
           "both": ["--api-key", "sk-API", "--admin-api-key", "sk-ADMIN"]}


def route_levels(source: Path) -> dict[str, str]:
    """path -> the AuthLevel value of the route serving it, as the release's source decorates it."""
    levels: dict[str, str] = {}
    for node in ast.walk(ast.parse(source.read_text())):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        paths, level = [], "normal"
        for dec in node.decorator_list:
            if not isinstance(dec, ast.Call) or not isinstance(dec.func, ast.Attribute):
                if isinstance(dec, ast.Call) and isinstance(dec.func, ast.Name) and dec.func.id == "auth_level":
                    level = {"NORMAL": "normal", "ADMIN_OPTIONAL": "admin_optional",
                             "ADMIN_FORCE": "admin_force"}[ast.unparse(dec.args[0]).rsplit(".", 1)[-1]]
                continue
            if isinstance(dec.func.value, ast.Name) and dec.func.value.id == "app" and dec.args \
                    and isinstance(dec.args[0], ast.Constant):
                paths.append(dec.args[0].value)
        levels.update(dict.fromkeys(paths, level))
    return levels


@pytest.mark.parametrize("version", RELEASES)
def test_every_request_hybridbench_sends_passes_and_no_key_goes_where_none_is_asked(version: str) -> None:
    if not env_ready(version):
        (pytest.fail if os.environ.get("CI") or os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG") else pytest.skip)(
            f"SGLang {version} venv missing: run bash tests/sglang_oracle/build_env.sh {version}")
    [srt] = (env_home() / f"sglang-{version}").glob("lib/python*/site-packages/sglang/srt")
    levels = route_levels(srt / "entrypoints" / "http_server.py")
    assert levels["/flush_cache"] == "admin_optional" and levels["/generate"] == "normal", levels
    assert {p for _, p in CALLS} - {"/metrics"} <= set(levels)  # /metrics: prometheus' mount, no decorated route
    cases, asked = [], []
    for name, flags in SERVERS.items():
        auth = sglang_auth(["python", "-m", "sglang.launch_server", "--model-path", "m", *flags], {})
        api, admin = (flags[flags.index(f) + 1] if f in flags else "" for f in ("--api-key", "--admin-api-key"))
        for method, path in CALLS:
            for header in (auth.headers(path).get("Authorization"), None):  # what hybridbench sends, and no key
                cases.append({"method": method, "path": path, "authorization": header, "api_key": api,
                              "admin_api_key": admin, "level": levels.get(path, "normal")})
            asked.append((name, path, bool(auth.bearer(path))))
    proc = warm_release.run(env_python(version), [str(HERE / "api_key_probe.py")], input=json.dumps(cases),
                            timeout=300, env=warm_release.oracle_env(), cwd=HERE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answers = json.loads(proc.stdout.strip().splitlines()[-1])
    ours, bare = answers[0::2], answers[1::2]
    refused = [(name, path, status) for (name, path, _), (allowed, status) in zip(asked, ours, strict=True)
               if not allowed]
    assert not refused, refused  # every request hybridbench sends is let through
    wrong = [(name, path, keyed) for (name, path, keyed), (allowed, _) in zip(asked, bare, strict=True)
             if keyed == allowed]
    assert not wrong, wrong  # a key goes exactly where a request without one is refused
    # what the rule rests on: the admin key alone leaves the data plane open and locks the flush
    assert ("admin key", "/generate", False) in asked and ("admin key", "/flush_cache", True) in asked
