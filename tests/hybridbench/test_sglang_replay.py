"""The harness's HTTP side against a replay of the real SGLang 0.5.16 and 0.5.23 servers (the recorded
answers to the recorded requests, SSE included; tests/fixtures/sglang_cpu/replay_server.py): the load client,
the KL probe's requests, the cold-start flush, the /server_info mirror and the /metrics scraper."""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest

from hybridbench.engines.launchers import make_sglang_engine
from hybridbench.engines.server import ServerEngine
from hybridbench.engines.server_auth import NO_AUTH
from hybridbench.engines.server_logs import scrape_counters
from hybridbench.load.client import generate_sglang
from hybridbench.load.http import StreamPool
from hybridbench.plan.arms import plan_arm
from hybridbench.probes.exact_hits import predictor_config
from hybridbench.probes.kl_requests import KlProbe, output_logprobs_of_replay
from reference_impl.engine.config import EngineConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "sglang_cpu"))
from replay_server import exchanges, replay_server

VERSIONS = ("0.5.16", "0.5.23")


def recorded(version: str, path: str, **fields: Any) -> dict[str, Any]:
    """The first recorded exchange on ``path`` whose request has ``fields``."""
    for e in exchanges(version):
        req = e["request"] if isinstance(e["request"], dict) else {}
        if e["path"] == path and all(req.get(k) == v for k, v in fields.items()):
            return e
    raise LookupError(f"{version}: no recorded {path} with {fields}")


@pytest.mark.parametrize("version", VERSIONS)
def test_the_load_client_reads_sglangs_stream(version: str) -> None:
    e = recorded(version, "/generate", stream=True, return_logprob=None)
    final = json.loads(e["response"][-2].removeprefix("data: "))  # the last event before [DONE]

    async def run() -> Any:
        async with StreamPool(url) as pool:
            return await generate_sglang(pool, e["request"]["input_ids"], 4, timeout_s=30)

    with replay_server(version) as url:
        res = asyncio.run(run())
    assert res.status == "ok" and res.error == ""
    assert res.cached_tokens == final["meta_info"]["cached_tokens"] > 0
    assert res.output_ids == final["output_ids"] and res.output_tokens == 4 == len(res.itl_ms) + 1


@pytest.mark.parametrize("version", VERSIONS)
def test_the_kl_probe_requests_work_on_sglangs_answers(version: str) -> None:
    e = recorded(version, "/generate", logprob_start_len=10)
    ids = e["request"]["input_ids"]

    async def run() -> Any:
        async with aiohttp.ClientSession() as session:
            probe = KlProbe(session, url, 4, 0.0, 1000, 0, 256)
            await probe._flush()  # SGLang answers a flush 200 with a text body
            return await probe._generate(ids, 4, logprobs=True, logprob_start=10)

    with replay_server(version) as url:
        ans = asyncio.run(run())
    assert ans.cached == e["response"]["meta_info"]["cached_tokens"] and len(ans.output_ids) == 4
    assert len(output_logprobs_of_replay(ans.input_logprobs, len(ids) - 11)) == len(ids) - 11


def _engine_and_server(url: str) -> tuple[ServerEngine, Any]:
    return make_sglang_engine(), SimpleNamespace(base_url=url, auth=NO_AUTH)


@pytest.mark.parametrize("version", VERSIONS)
def test_cold_start_flush_server_info_mirror_and_metrics(version: str) -> None:
    with replay_server(version) as url:
        engine, server = _engine_and_server(url)
        assert engine._flush(server) == "flushed"
        with urllib.request.urlopen(url + "/server_info", timeout=10) as resp:
            info = json.loads(resp.read())
        counters = scrape_counters(url)
    config = predictor_config(plan_arm("lru"), info)
    assert isinstance(config, EngineConfig)
    # The launch of the recording: --max-mamba-cache-size 64 --chunked-prefill-size 128 --max-total-tokens 16384.
    assert (config.semantics, config.kv_tokens, config.state_slots, config.chunked_prefill_size, config.page_size,
            config.overlap) == (version, 16384, 64, 128, 1, False)
    # /metrics' cached-token counter equals the cached_tokens the recorded answers before it reported.
    assert counters is not None and counters.cached_tokens == 2560


@pytest.mark.parametrize("version", VERSIONS)
def test_sglangs_error_bodies_and_a_dead_server(version: str) -> None:
    def post(body: dict[str, Any]) -> Any:
        req = urllib.request.Request(url + "/generate", method="POST", data=json.dumps(body).encode())
        return urllib.request.urlopen(req, timeout=10)

    with replay_server(version) as url:
        with pytest.raises(urllib.error.HTTPError) as err:
            post({"input_ids": [], "sampling_params": {"max_new_tokens": 4}})
        assert err.value.code == 400
        assert json.loads(err.value.read()) == {"error": {"message": "input_ids cannot be empty."}}
        # An out-of-vocabulary id killed both recorded servers: the connection closes without an answer.
        with pytest.raises((ConnectionError, urllib.error.URLError)) as dead:
            post({"input_ids": [10**9], "sampling_params": {"max_new_tokens": 4}})
        assert not isinstance(dead.value, urllib.error.HTTPError)
