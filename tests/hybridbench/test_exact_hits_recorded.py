"""The exact-hit predictor against real SGLang: the eviction runs recorded from SGLang 0.5.16 and 0.5.23.

Each run (tests/fixtures/sglang_cpu, extracted by make_fixtures.py from recordings kept outside the repo) served
274 requests one at a time after a flush per trial, with pools small enough to evict (16 states, 6000 KV
tokens). Replaying its traces in the order served (``recorded_runs.served``), with the server settings and
version it recorded, through ``predictor_config`` + ``CachePredictor`` must give every request's recorded
``cached_tokens``.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from hybridbench.plan.arms import plan_arm
from hybridbench.probes.exact_hits import CachePredictor, predictor_config, semantics_for
from reference_impl.engine.config import EngineConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "sglang_cpu"))
from recorded_runs import fixture, served


def replay(run: str, tmp: Path, semantics: str | None = None) -> tuple[str, list[tuple[int, int, int | None]]]:
    """(semantics used, [(request, recorded cached_tokens, predicted)]) for a recorded run, in served order."""
    fx = fixture(run)
    config = predictor_config(plan_arm(fx["arm"]), {**fx["server_info"], "version": fx["version"]})
    assert isinstance(config, EngineConfig), config
    if semantics is not None:
        config = dataclasses.replace(config, semantics=semantics)
    out: list[tuple[int, int, int | None]] = []
    trial, predictor = None, CachePredictor(config)
    for i, req in enumerate(served(run, tmp)):
        if req.trial_id != trial:  # every trial starts after a flush
            trial, predictor = req.trial_id, CachePredictor(config)
        out.append((i, req.cached_tokens, predictor.predict(req.prompt, req.output, len(req.output))))
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
    ("0.5.16", "0.5.16"), ("0.5.23", "0.5.23"), ("0.5.9", "0.5.9"), ("0.5.20", None),
    ("0.5.24.dev0+gabc123", "0.5.23"), ("v0.6.0", "0.5.23"), ("reference-0.1.0", "0.5.23"),
    ("0.5.8", None), ("", None), (None, None), ("main", None),
])
def test_semantics_follow_the_reported_version(version: object, semantics: str | None) -> None:
    assert semantics_for(version) == semantics
