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

from hybridbench.checks.correctness import _kl_verdict
from hybridbench.config.schema import RunCfg
from hybridbench.engines.registry import make_engine
from hybridbench.engines.server_auth import NO_AUTH
from hybridbench.engines.server_logs import vllm_state_block
from hybridbench.engines.traits import EngineTraits
from hybridbench.probes.kl import Kl, _decode_interval, cache_traits
from hybridbench.records.kl import KlSample

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
    return SimpleNamespace(traits=traits, cfg=cfg, base_url=url, arm=SimpleNamespace(strategy=strategy), auth=NO_AUTH)


def test_each_engine_says_where_it_keeps_decoded_states(metrics_server: tuple[str, list[str]]) -> None:
    url, body = metrics_server
    assert _decode_interval(_ctx(make_engine("sglang").traits)) == (256, "", "")
    assert _decode_interval(_ctx(make_engine("sglang").traits, strategy="no_buffer")) == (256, "", "")  # its end state
    vllm = make_engine("vllm").traits
    body.append(INFO % ("544", "16"))
    assert _decode_interval(_ctx(vllm, url)) == (544, "", "")  # not SGLang's 256: vLLM takes no tracking interval
    interval, why, unknown = _decode_interval(_ctx(vllm, url, strategy="no_buffer"))  # align mode: none kept
    assert interval == 0 and "align cache mode" in why and not unknown
    body.clear()
    interval, why, unknown = _decode_interval(_ctx(vllm, url))  # no block named: unmeasured, never guessed
    assert interval == 0 and not why and "no block_size" in unknown
    interval, why, unknown = _decode_interval(_ctx(make_engine("tokenspeed").traits))
    assert interval == 0 and "no state while a request decodes" in why and not unknown
    dense = _ctx(vllm, strategy="no_buffer")
    dense.cfg.model.hybrid = False
    assert _decode_interval(dense) == (256, "", "")  # no recurrent state: decoded KV blocks hit as any other


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


def test_an_unknown_block_leaves_the_decode_variant_inconclusive_not_skipped(
        metrics_server: tuple[str, list[str]]) -> None:
    """Review: a vLLM `all`-mode arm whose /metrics named no block_size (or could not be read) had its decode variant
    skipped "by design", so the kl check said skip and a run with kl enabled passed with no decode KL measured, where
    a decode hit was possible. It is unmeasured now: inconclusive."""
    url, _ = metrics_server  # /metrics answers 404
    ctx = _ctx(make_engine("vllm").traits, url)
    ctx.cfg.checks.kl_variants = ["decode"]
    ctx.cfg.checks.kl_samples = 2
    samples: list[KlSample] = []
    ctx.rows = [SimpleNamespace(input_tokens=list(range(i, i + 16))) for i in range(2)]
    ctx.trial = SimpleNamespace(seed=1)
    ctx.protocol, ctx.flush_path, ctx.emit = "openai", "/reset_prefix_cache", samples.append
    ctx.identity = {"trial_id": "t", "arm": "branching", "workload": "w", "repeat": 0}
    Kl().run(ctx)
    assert len(samples) == 2 and not any(s.hit for s in samples)
    status, value, detail = _kl_verdict(samples, 0.01, 0.5, (2, 1))  # 2 planned over 1 trial
    assert (status, value) == ("inconclusive", None) and "no block_size" in detail, detail
