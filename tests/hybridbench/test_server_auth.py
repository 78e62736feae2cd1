"""A server given a key (engine.extra_args ``--api-key K``, SGLang's ``--admin-api-key``, vLLM's ``VLLM_API_KEY``) gets
it back from every request hybridbench sends, where the server's own rule wants it (hybridbench/engines/server_auth.py).

Every request used to go without it: the load, the flushes, the metrics and ``/server_info`` reads and the probes
were all refused (401) by a server started with ``--api-key``. The rules are proven against the releases' own code in
tests/sglang_oracle/test_sglang_api_key.py (SGLang's ``decide_request_auth`` and its routes' auth levels) and
tests/vllm_cpu/test_vllm_engine.py (the dense smoke run's real vLLM servers started with ``--api-key``, the key grepped
for in the run).
Here: what each engine's command line and environment give, the plan's refusals, and that every call site sends it.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from machine_fakes import FIXTURES, fake_sglang, fake_vllm

from hybridbench.engines.launchers import make_sglang_engine
from hybridbench.engines.process import ServerProcess
from hybridbench.engines.server_auth import ServerAuth, sglang_auth, vllm_auth
from hybridbench.errors import ConfigError
from hybridbench.load.client import generate_sglang
from hybridbench.load.http import StreamPool
from hybridbench.preview.build import build_preview
from hybridbench.preview.compose import compose_run

SGLANG_PATHS = ("/generate", "/v1/completions", "/v1/chat/completions", "/server_info", "/flush_cache",
                "/health_generate", "/health", "/metrics")


def test_sglang_wants_its_api_key_everywhere_but_health_and_metrics_and_the_admin_key_on_flush() -> None:
    cmd = ["python", "-m", "sglang.launch_server", "--model-path", "m"]
    auth = sglang_auth([*cmd, "--api-key", "old", "--api-key=sk-API"], {})  # argparse keeps the last one
    assert {p: auth.bearer(p) for p in SGLANG_PATHS} == {
        "/generate": "sk-API", "/v1/completions": "sk-API", "/v1/chat/completions": "sk-API", "/server_info": "sk-API",
        "/flush_cache": "sk-API", "/health_generate": "", "/health": "", "/metrics": ""}
    both = sglang_auth([*cmd, "--api-key", "sk-API", "--admin-api-key", "sk-ADMIN"], {})
    assert both.bearer("/flush_cache") == "sk-ADMIN" and both.bearer("/generate") == "sk-API"
    admin_only = sglang_auth([*cmd, "--admin-api-key", "sk-ADMIN"], {"VLLM_API_KEY": "not SGLang's"})
    assert {p: admin_only.bearer(p) for p in SGLANG_PATHS if admin_only.bearer(p)} == {"/flush_cache": "sk-ADMIN"}
    assert both.headers("/flush_cache") == {"Authorization": "Bearer sk-ADMIN"} and both.headers("/health") == {}
    assert "sk-" not in repr(both)  # a key in a repr ends up in a log or a traceback
    assert sglang_auth(cmd, {}).headers("/generate") == {}


def test_vllm_wants_a_key_on_v1_only_from_its_last_flag_or_else_the_environment() -> None:
    cmd = ["python", "-m", "vllm.entrypoints.cli.main", "serve", "m"]
    auth = vllm_auth([*cmd, "--api-key", "sk-A", "sk-B", "--port", "8000"], {"VLLM_API_KEY": "sk-ENV"})
    assert auth.bearer("/v1/completions") == "sk-A"  # any one of the keys opens the route
    assert [auth.bearer(p) for p in ("/reset_prefix_cache", "/health", "/metrics")] == ["", "", ""]
    assert vllm_auth([*cmd, "--api-key", "sk-A", "--api-key", "sk-B"], {}).bearer("/v1/completions") == "sk-B"
    assert vllm_auth(cmd, {"VLLM_API_KEY": "sk-ENV"}).bearer("/v1/chat/completions") == "sk-ENV"
    # --api-key given (even empty, which vLLM drops) wins over the environment: register.py's `args.api_key or [env]`
    assert vllm_auth([*cmd, "--api-key", ""], {"VLLM_API_KEY": "sk-ENV"}).bearer("/v1/completions") == ""
    assert vllm_auth(cmd, {}).headers("/v1/completions") == {}


SGLANG = ("+experiment=radix", "engine=sglang", "engine.tp=1", "repeats=1")


def sglang_python(tmp_path: Path) -> str:
    """The recorded SGLang help, with the two key flags every release since 0.5.9 has."""
    help_file = tmp_path / "help.txt"
    help_file.write_text((FIXTURES / "sglang_help_new.txt").read_text()
                         + "  --api-key API_KEY\n  --admin-api-key ADMIN_API_KEY\n")
    return f"engine.python={fake_sglang(tmp_path, str(help_file))}"


def refusal(*overrides: str) -> str:
    with pytest.raises(ConfigError) as err:
        build_preview(compose_run(list(overrides)), forecast=False)
    assert "\n" not in str(err.value)
    return str(err.value)


def test_the_plan_takes_a_key_and_refuses_one_no_header_can_carry(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    python = sglang_python(tmp_path)
    build_preview(compose_run([*SGLANG, python, "engine.extra_args=[--api-key,sk-OK,--admin-api-key,sk-ADMIN]"]),
                  forecast=False)
    for bad in ("sk-é", " sk-lead", "sk-tail "):
        why = refusal(*SGLANG, python, f"engine.extra_args=[--admin-api-key,'{bad}']")
        assert why.startswith("engine.extra_args --admin-api-key: the key must be printable ASCII"), why
        assert bad.strip() not in why
    vllm = ("+experiment=radix", "engine=vllm", "repeats=1", f"engine.python={fake_vllm(tmp_path)}")
    monkeypatch.setenv("VLLM_API_KEY", "sk-\x7f")
    assert refusal(*vllm).startswith("VLLM_API_KEY in the environment: the key must be printable ASCII")
    build_preview(compose_run([*vllm, "engine.extra_args=[--api-key,sk-OK]"]), forecast=False)  # the flag wins


class _Recorder(BaseHTTPRequestHandler):
    """Records each request's path and Authorization header; answers what each caller reads."""

    seen: list[tuple[str, str]]

    def _answer(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization", "")))
        if self.command == "POST" and (length := int(self.headers.get("Content-Length") or 0)):
            self.rfile.read(length)
        if self.path == "/generate":
            body = (b'data: {"output_ids": [1], "meta_info": {"completion_tokens": 1, "finish_reason": '
                    b'{"type": "length"}}}\n\ndata: [DONE]\n\n')
            kind = "text/event-stream"
        else:
            body, kind = (b"" if self.path == "/metrics" else json.dumps({"internal_states": [{}]}).encode()), \
                "application/json"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer  # noqa: N815 - http.server dispatches on these names

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[tuple[str, str]]]]:
    seen: list[tuple[str, str]] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("R", (_Recorder,), {"seen": seen}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_every_call_to_the_server_carries_the_key_it_wants(tmp_path: Path,
                                                           recorder: tuple[str, list[tuple[str, str]]]) -> None:
    """The harness's own calls (readiness, flush, the snapshot's /metrics and /server_info, the load) to a server
    started with both keys: each sends exactly what SGLang's rule asks of its path."""
    url, seen = recorder
    auth = sglang_auth(["--api-key", "sk-API", "--admin-api-key", "sk-ADMIN"], {})
    server = ServerProcess(["sglang"], tmp_path / "server.log", url, auth=auth)
    engine = make_sglang_engine()
    assert server.healthy() and engine._flush(server) == "flushed"
    engine.mark(server)

    async def load() -> None:
        async with StreamPool(url, server.auth.headers) as pool:
            assert (await generate_sglang(pool, [1, 2], 1, 10.0)).status == "ok"

    asyncio.run(load())
    assert {path for path, _ in seen} == {"/health_generate", "/flush_cache", "/metrics", "/server_info", "/generate"}
    assert all(sent == ("Bearer " + auth.bearer(path) if auth.bearer(path) else "") for path, sent in seen), seen
    assert ("/flush_cache", "Bearer sk-ADMIN") in seen and ("/generate", "Bearer sk-API") in seen
    assert server.secrets >= {"sk-API", "sk-ADMIN"}  # the server's log is scrubbed of both


def test_a_server_without_a_key_is_sent_none(recorder: tuple[str, list[tuple[str, str]]], tmp_path: Path) -> None:
    url, seen = recorder
    server = ServerProcess(["sglang"], tmp_path / "server.log", url, auth=ServerAuth("sglang"))
    assert server.healthy() and make_sglang_engine()._flush(server) == "flushed"
    assert seen and all(sent == "" for _, sent in seen)
