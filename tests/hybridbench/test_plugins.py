"""A new engine and a new probe are each a few lines: a throwaway of each runs through the whole harness.

The engine is a command builder for an echo server written here (SGLang's native /generate, streamed;
it reports as cached the longest prefix it has seen since its last flush, and echoes the prompt back as
its output). The probe asks the server once more, after the trial, for the trial's first prompt and
writes what it was told to its own JSONL; a throwaway check reads those samples. Both are registered the
way real ones are (one registry line each), and an engine that cannot serve a wanted probe is refused at
plan time, before any server starts.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from hybridbench.app import run
from hybridbench.checks import registry as checks
from hybridbench.checks.base import CheckInput, CheckResult
from hybridbench.config.schema import RunCfg
from hybridbench.config.store import register
from hybridbench.engines import registry as engines
from hybridbench.engines.server import ServerEngine, ServerSpec
from hybridbench.engines.traits import EngineTraits
from hybridbench.errors import ConfigError
from hybridbench.load.trial import ServerTrials
from hybridbench.probes import registry as probes
from hybridbench.probes.base import ProbeContext, ProbeNeeds

CONF = Path(__file__).resolve().parents[2] / "conf"

ECHO_SERVER = '''
import json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
seen, lock = [], threading.Lock()
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    def log_message(self, *a): pass
    def do_GET(self):
        self.send_response(200 if self.path in ("/health", "/health_generate") else 404); self.end_headers()
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path == "/flush_cache":
            with lock: seen.clear()
            self.send_response(200); self.end_headers(); return
        ids, n = body["input_ids"], body["sampling_params"]["max_new_tokens"]
        with lock:
            cached = max((next((i for i, (a, b) in enumerate(zip(p, ids)) if a != b), min(len(p), len(ids)))
                          for p in seen), default=0)
            seen.append(ids)
        out = [ids[i % len(ids)] for i in range(n)]
        self.send_response(200); self.send_header("Content-Type", "text/event-stream"); self.end_headers()
        for k in range(1, n + 1):
            chunk = {"output_ids": out[:k], "meta_info": {"completion_tokens": k, "cached_tokens": cached,
                     "finish_reason": {"type": "length", "length": n} if k == n else None}}
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\\n\\n")
        self.wfile.write(b"data: [DONE]\\n\\n")
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
'''


@dataclass(frozen=True)
class Asked:
    sample: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return self.sample


class AskAgain:
    """The throwaway probe: the trial's first prompt once more, after the trial; one sample per trial."""

    name = "ask_again"
    snapshot_key = "ask_again"
    needs = ProbeNeeds(protocols=frozenset({"sglang"}), flushable=True)

    def wanted(self, cfg: RunCfg) -> str:
        return "checks.enabled has ask_again" if "ask_again" in cfg.checks.enabled else ""

    def sample_from_json(self, obj: dict[str, Any]) -> dict[str, Any]:
        return obj

    def run(self, ctx: ProbeContext) -> str:
        prompt = list(ctx.exchanges[0].prompt)
        body = json.dumps({"input_ids": prompt, "sampling_params": {"max_new_tokens": 1}}).encode()
        with urllib.request.urlopen(urllib.request.Request(ctx.base_url + "/generate", data=body), timeout=10) as r:
            last = [json.loads(x[5:]) for x in r.read().decode().split("\n\n") if x.startswith("data: {")][-1]
        ctx.emit(Asked({**ctx.identity, "prompt_tokens": len(prompt), "cached": last["meta_info"]["cached_tokens"]}))
        return f"asked {len(prompt)} tokens again"


def ask_again_check(inp: CheckInput) -> list[CheckResult]:
    """The throwaway check: a prompt asked again right after the trial is served whole from the cache."""
    return [CheckResult("ask_again", s["workload"], s["arm"], "pass" if s["cached"] == s["prompt_tokens"] else "fail",
                        s["cached"], "the whole prompt cached", s["trial_id"]) for s in inp.samples["ask_again"]]


def echo_engine(script: Path, traits: EngineTraits) -> ServerTrials:
    build = lambda cfg, arm, port: [sys.executable, str(script), str(port)]  # noqa: E731 - the point: a few lines
    return ServerTrials(ServerEngine(ServerSpec("echo", build, client="sglang", traits=traits, gpus=False)))


def compose_cfg(checks_enabled: str) -> RunCfg:
    register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name="config", overrides=[
            "+experiment=smoke", "repeats=1", "model=reference-tiny", "arms=[lru,branching]",
            f"checks.enabled={checks_enabled}",
            "workloads.gsp.params.num_groups=2", "workloads.gsp.params.prompts_per_group=3"])
    run_cfg = OmegaConf.to_object(cfg)
    assert isinstance(run_cfg, RunCfg)
    run_cfg.engine.name = "echo"
    run_cfg.engine.timing = "wall"  # composed on the reference engine's defaults; a plugin engine has no modelled clock
    return run_cfg


@pytest.fixture
def plugged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script = tmp_path / "echo_server.py"
    script.write_text(ECHO_SERVER)
    monkeypatch.setitem(engines.ENGINES, "echo", lambda: echo_engine(
        script, EngineTraits(protocols=frozenset({"sglang"}), flushable=True)))
    monkeypatch.setitem(probes.PROBES, "ask_again", AskAgain())
    monkeypatch.setitem(checks.CHECKS, "ask_again", ask_again_check)
    return tmp_path / "run"


def test_a_throwaway_engine_and_probe_run_end_to_end(plugged: Path) -> None:
    assert run(compose_cfg("[survival,cache_hits,ask_again]"), plugged, {}) == 0
    records = [json.loads(line) for line in (plugged / "records.jsonl").read_text().splitlines()]
    assert len(records) == 2 * 6 and all(r["status"] == "ok" and r["cache_state"] == "cold-flushed" for r in records)
    # Each trial started on a flushed cache (its first request hit nothing), then shared prefixes hit.
    for trial in {r["trial_id"] for r in records}:
        mine = [r for r in records if r["trial_id"] == trial]
        assert min(r["cached_tokens"] for r in mine) == 0 and max(r["cached_tokens"] for r in mine) > 0
    samples = [json.loads(line) for line in (plugged / "ask_again.jsonl").read_text().splitlines()]
    assert sorted(s["arm"] for s in samples) == ["branching", "lru"] and all(s["cached"] > 0 for s in samples)
    bundle = json.loads((plugged / "bundle.json").read_text())
    verdicts = {(c["check"], c["arm"]): c["status"] for c in bundle["checks"]}
    assert verdicts[("ask_again", "lru")] == verdicts[("ask_again", "branching")] == "pass"
    assert all(t["server"]["ask_again"].startswith("asked ") for t in bundle["trials"])
    assert bundle["provenance"]["engine"]["name"] == "echo"


def test_a_probe_the_engine_cannot_serve_is_refused_before_anything_starts(
    plugged: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = plugged.parent / "echo_server.py"
    monkeypatch.setitem(engines.ENGINES, "echo", lambda: echo_engine(script, EngineTraits(
        protocols=frozenset({"sglang"}), flushable=False)))
    with pytest.raises(ConfigError, match=r"probe ask_again \(checks.enabled has ask_again\) needs a server that "
                                          r"flushes its cache on request; engine echo cannot serve it"):
        run(compose_cfg("[survival,ask_again]"), plugged, {})
    assert not (plugged / "logs").exists() and not (plugged / "records.jsonl").exists()


def test_sequential_hits_on_an_engine_without_sglangs_semantics_run_and_say_there_is_no_prediction(
    plugged: Path,
) -> None:
    """The exact-hit predictor mirrors SGLang's cache: on another engine (vLLM's, this echo server's) a sequential
    cache_hits run still runs and gates on its hit rate, and its verdicts say no prediction was made."""
    cfg = compose_cfg("[survival,cache_hits]")
    cfg.load.max_concurrency = 1
    assert run(cfg, plugged, {}) == 0
    bundle = json.loads((plugged / "bundle.json").read_text())
    assert all(t["server"]["prediction"].startswith("no prediction: this engine's cache") for t in bundle["trials"])
    exact = [c for c in bundle["checks"] if c["check"] == "cache_hits" and c["workload"].endswith("/exact")]
    assert {(c["arm"], c["status"]) for c in exact} == {("lru", "skip"), ("branching", "skip")}
    assert not (plugged / "exact_hits.jsonl").exists() or not (plugged / "exact_hits.jsonl").read_text().strip()
