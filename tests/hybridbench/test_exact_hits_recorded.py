"""The exact-hit predictor against real SGLang: the eviction runs recorded from SGLang 0.5.16 and 0.5.23.

Each run (tests/fixtures/sglang_cpu, extracted from ../shared/fixtures/sglang-cpu by make_fixtures.py) served
274 requests one at a time after a flush per trial, with pools small enough to evict (16 states, 6000 KV
tokens). Replaying its traces in the order served, with the server settings and version it recorded,
through ``predictor_config`` + ``CachePredictor`` must give every request's recorded ``cached_tokens``.

The records keep output lengths, not the ids the server sampled. A cache only compares token sequences, so
each output is replaced by ids that occur nowhere else; the next turn of a session carries them exactly as
the driver carries the real ones (``_next_prompt``), and every prompt length is checked against the record.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from itertools import count
from pathlib import Path
from typing import Any

import pytest

from hybridbench.load.driver import _next_prompt
from hybridbench.plan.arms import plan_arm
from hybridbench.probes.exact_hits import CachePredictor, predictor_config, semantics_for
from reference_impl.engine.core import EngineConfig
from workloads.trace import TraceRow, read_trace

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang_cpu"


def _traces(tmp: Path) -> dict[str, dict[tuple[Any, int], TraceRow]]:
    out = {}
    for gz in sorted((FIXTURES / "traces").glob("*.jsonl.gz")):
        path = tmp / gz.name.removesuffix(".gz")
        path.write_bytes(gzip.decompress(gz.read_bytes()))
        out[path.stem] = {(r.session_id, r.turn_id): r for r in read_trace(path).rows}
    return out


def replay(run: str, tmp: Path, semantics: str | None = None) -> tuple[str, list[tuple[int, int, int | None]]]:
    """(semantics used, [(request, recorded cached_tokens, predicted)]) for a recorded run, in served order."""
    fx = json.loads((FIXTURES / f"{run}.json").read_text())
    config = predictor_config(plan_arm(fx["arm"]), {**fx["server_info"], "version": fx["version"]})
    assert isinstance(config, EngineConfig), config
    if semantics is not None:
        config = dataclasses.replace(config, semantics=semantics)
    traces = _traces(tmp)
    fresh = count(10**6)  # ids beyond any vocabulary: an output equals nothing but itself
    out: list[tuple[int, int, int | None]] = []
    trial, predictor, sessions = None, CachePredictor(config), {}
    for i, (trial_id, workload, session, turn, prompt_tokens, output_tokens, cached) in enumerate(fx["requests"]):
        if trial_id != trial:  # every trial starts after a flush
            trial, predictor, sessions = trial_id, CachePredictor(config), {}
        row = traces[workload][(session, turn)]
        prev = sessions.get(session)
        prompt = list(row.input_tokens) if prev is None else _next_prompt(*prev, row)
        assert len(prompt) == prompt_tokens, f"request {i}: composed {len(prompt)} tokens, served {prompt_tokens}"
        output = [next(fresh) for _ in range(output_tokens)]
        out.append((i, cached, predictor.predict(prompt, output, output_tokens)))
        sessions[session] = (prompt, row, output)
    return config.semantics, out


@pytest.mark.parametrize("run", ["evict-0.5.16", "evict-0.5.23"])
def test_every_recorded_cached_tokens_is_predicted(run: str, tmp_path: Path) -> None:
    semantics, rows = replay(run, tmp_path)
    assert semantics == run.removeprefix("evict-")  # chosen by the version the server reported
    assert len(rows) == 274 and sum(cached for _, cached, _ in rows) > 0
    assert [r for r in rows if r[1] != r[2]] == []


def test_each_versions_run_needs_its_own_semantics(tmp_path: Path) -> None:
    # The runs differ under eviction: the other version's semantics miss requests of each run.
    _, on_16 = replay("evict-0.5.16", tmp_path, semantics="0.5.23")
    _, on_23 = replay("evict-0.5.23", tmp_path, semantics="0.5.16")
    assert sum(cached != got for _, cached, got in on_16) == 16  # the 16 the 0.5.16 run reported as 0
    assert sum(cached != got for _, cached, got in on_23) > 0


@pytest.mark.parametrize(("version", "semantics"), [
    ("0.5.16", "0.5.16"), ("0.5.23", "0.5.23"), ("0.5.9", "0.5.9"), ("0.5.20", "0.5.16"),
    ("0.5.24.dev0+gabc123", "0.5.23"), ("v0.6.0", "0.5.23"), ("reference-0.1.0", "0.5.23"),
    ("0.5.8", None), ("", None), (None, None), ("main", None),
])
def test_semantics_follow_the_reported_version(version: object, semantics: str | None) -> None:
    assert semantics_for(version) == semantics
