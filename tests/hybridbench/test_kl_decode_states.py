"""The kl probe's decode variant decodes past the next point where the server keeps a state while decoding: SGLang's
tracking interval; vLLM's aligned block (read from its /metrics) in its `all` mode, none in `align` mode; none on
TokenSpeed. Where none is kept the variant is skipped: before, it ran and failed ("only 0 of 2 probe(s) hit") on a
correct cache (vLLM 0.32.0's align mode, measured in tests/vllm_cpu), and with SGLang's 256 on a 544-token block it
decoded to a point where no state can be."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from hybridbench.config.schema import RunCfg
from hybridbench.engines.registry import make_engine
from hybridbench.engines.server_logs import vllm_state_block
from hybridbench.engines.traits import EngineTraits
from hybridbench.probes.kl import _decode_interval, cache_traits

FIXTURES = Path(__file__).resolve().parent / "fixtures"
INFO = 'vllm:cache_config_info{block_size="%s",engine="0",mamba_block_size="%s",mamba_cache_mode="align"} 1.0\n'


def test_the_block_is_read_from_cache_config_info() -> None:
    assert vllm_state_block("# TYPE vllm:cache_config_info gauge\n" + INFO % ("544", "544")) == 544
    # vLLM 0.32.0 says mamba_block_size="16" (its replay-SSM buffer) while align mode hits whole 256-token blocks
    assert vllm_state_block(INFO % ("256", "16")) == 256
    assert vllm_state_block(INFO % ("x", "16")) is None
    assert vllm_state_block("vllm:num_requests_running 0.0\n") is None
    assert vllm_state_block((FIXTURES / "vllm_metrics.prom").read_text()) == 128


@pytest.fixture
def metrics_server() -> Iterator[tuple[str, list[str]]]:
    """A local HTTP server whose /metrics answers what the test puts in the list (404 when it is empty)."""
    body: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = "".join(body).encode()
            self.send_response(200 if self.path == "/metrics" and data else 404)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", body
    finally:
        server.shutdown()
        server.server_close()


def _ctx(traits: EngineTraits, url: str = "http://127.0.0.1:9", strategy: str = "extra_buffer") -> Any:
    cfg = RunCfg()
    cfg.engine.track_interval = 256
    return SimpleNamespace(traits=traits, cfg=cfg, base_url=url, arm=SimpleNamespace(strategy=strategy))


def test_each_engine_says_where_it_keeps_decoded_states(metrics_server: tuple[str, list[str]]) -> None:
    url, body = metrics_server
    assert _decode_interval(_ctx(make_engine("sglang").traits)) == (256, "")
    assert _decode_interval(_ctx(make_engine("sglang").traits, strategy="no_buffer")) == (256, "")  # its end state
    vllm = make_engine("vllm").traits
    body.append(INFO % ("544", "16"))
    assert _decode_interval(_ctx(vllm, url)) == (544, "")  # not SGLang's 256: vLLM takes no tracking interval
    interval, why = _decode_interval(_ctx(vllm, url, strategy="no_buffer"))  # align mode: none kept (measured)
    assert interval == 0 and "align cache mode" in why
    body.clear()
    interval, why = _decode_interval(_ctx(vllm, url))  # no block named: skipped as unknown, never guessed
    assert interval == 0 and "no block_size" in why
    interval, why = _decode_interval(_ctx(make_engine("tokenspeed").traits))
    assert interval == 0 and "no state while a request decodes" in why
    dense = _ctx(vllm, strategy="no_buffer")
    dense.cfg.model.hybrid = False
    assert _decode_interval(dense) == (256, "")  # no recurrent state: decoded KV blocks hit as any other


def test_a_cache_without_branch_points_skips_the_branch_variant() -> None:
    """TokenSpeed's forward keeps one checkpoint, page-aligned at its end: a fork finds no state at the branch point,
    and on the reference server mirroring TokenSpeed the branch and decode variants failed a correct cache."""
    ts = make_engine("tokenspeed").traits
    assert (cache_traits(_ctx(ts)).decode_states, cache_traits(_ctx(ts)).branch_points) == ("none", False)
    reference = _ctx(make_engine("reference").traits)
    assert cache_traits(reference).branch_points and cache_traits(reference).decode_states == "track_interval"
    reference.cfg.engine.name, reference.cfg.engine.cache_semantics = "reference", "tokenspeed"
    assert (cache_traits(reference).decode_states, cache_traits(reference).branch_points) == ("none", False)
    assert _decode_interval(reference)[0] == 0
    assert make_engine("sglang").traits.branch_points and make_engine("vllm").traits.branch_points
