"""The kl probe's decode variant aimed at multiples of engine.track_interval, but SGLang 0.5.23 (and the reference
server, which mirrors it) keeps a decode state only at multiples of lcm(mamba cache chunk, page, track_interval)
(``runtime_context.mamba_track_grid``). With an interval that is no multiple of the 64-token chunk
(``engine.track_interval=96``) half the decode probes decoded to a point where no state can be, missed, and the kl
check FAILED on a correct cache: ``only 2 of 4 probe(s) hit the cache``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from hybridbench.config.schema import RunCfg
from hybridbench.engines.registry import make_engine
from hybridbench.probes.kl import _decode_interval

pytestmark = pytest.mark.redteam


def _ctx(engine: str, interval: int, *, model: str = "qwen3-next-80b-a3b", page: int = 1) -> Any:
    cfg = RunCfg()
    cfg.engine.name = engine
    cfg.engine.track_interval = interval
    cfg.engine.page_size = page
    cfg.model.name = model
    return SimpleNamespace(traits=make_engine(engine).traits, cfg=cfg, base_url="http://127.0.0.1:9",
                           arm=SimpleNamespace(strategy="extra_buffer"))


def test_the_decode_probe_aims_where_a_state_is_kept() -> None:
    # Defaults are unchanged: 256 is a multiple of every chunk here.
    assert _decode_interval(_ctx("sglang", 256))[0] == 256
    assert _decode_interval(_ctx("reference", 256))[0] == 256
    # An interval off the 64-token chunk: 0.5.23 keeps decode states at lcm(64, 96) = 192 only.
    assert _decode_interval(_ctx("sglang", 96))[0] == 192
    assert _decode_interval(_ctx("reference", 96))[0] == 192
    # Nemotron-H's mamba chunk is 128 on SGLang 0.5.16+: lcm(128, 192) = 384.
    assert _decode_interval(_ctx("sglang", 192, model="nemotron-h-8b"))[0] == 384


def test_kl_passes_on_a_correct_cache_with_an_interval_off_the_chunk(tmp_path: Path) -> None:
    """End to end on the default engine (the reference server, SGLang 0.5.23's cache): a correct cache passes."""
    import subprocess

    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "hybridbench", "+experiment=kl", "arms=[branching]", "checks.baseline_arm=branching",
         "engine.track_interval=96", "checks.kl_variants=[decode]", f"hydra.run.dir={run}"],
        capture_output=True, text=True, timeout=120, check=False)
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    rows = [c for c in json.loads((run / "bundle.json").read_text())["checks"] if c["check"] == "kl"]
    assert rows and all(c["status"] == "pass" for c in rows), rows
    assert proc.returncode == 0, proc.stdout[-2000:]
