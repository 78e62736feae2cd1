"""Sequential mode: every request's cached_tokens must equal the reference cache's prediction (docs/guides/checks.md).

The end-to-end test is a real differential: the reference *server* (HTTP, scheduler thread, tensor
pools, tight pools that force eviction, multi-turn sessions that reuse decoded tokens) against the
reference *cache* replaying the prompts and outputs the server actually produced.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hybridbench.checks.base import CheckInput
from hybridbench.checks.builtin import cache_hits
from hybridbench.config.schema import ChecksCfg, EngineCfg, ModelCfg, RunCfg
from hybridbench.plan.arms import plan_arm
from hybridbench.probes.exact_hits import CachePredictor, predictor_config, served_chunk
from hybridbench.records.schema import Record
from hybridbench.rescore.__main__ import main as rescore

ROOT = Path(__file__).resolve().parents[2]


def rec(i: int, cached: int, expected: int | None, arm: str = "branching") -> Record:
    return Record("run", "t", arm, "w", 0, i, i, 0, 0.0, 0.0, 0.1, 0.2, 300, 4, cached, "ok",
                  expected_cached_tokens=expected)


def exact_rows(records: list[Record]) -> list[tuple[str, str, str]]:
    inp = CheckInput(ChecksCfg(), ("branching",), "branching", ("w",), {("w", "branching"): records}, {}, {}, 0,
                     cache_off=frozenset())
    return [(r.workload, r.status, r.detail) for r in cache_hits(inp) if r.workload.endswith("/exact")]


def test_exact_check_fails_on_any_request_that_differs_and_names_it() -> None:
    assert exact_rows([rec(0, 0, 0), rec(1, 256, 256)]) == [("w/exact", "pass", "all 2 predicted request(s) match")]
    ((workload, status, detail),) = exact_rows([rec(0, 0, 0), rec(1, 192, 256), rec(2, 0, None)])
    assert (workload, status) == ("w/exact", "fail") and detail.startswith("1 of 2 differ: request 1 (r0): 192 vs 256")
    assert exact_rows([rec(0, 5, None)]) == []  # nothing predicted (concurrent load): no exact verdict


def test_predictor_reads_sglangs_server_info_fields() -> None:
    info = {"version": "0.5.23",
            "page_size": 16, "chunked_prefill_size": 2048, "mamba_track_interval": 128, "max_mamba_cache_size": 300,
            "disable_overlap_schedule": True, "max_total_num_tokens": 500000, "internal_states": [{}]}
    config = predictor_config(plan_arm("branching"), info)
    assert not isinstance(config, str)
    assert (config.kv_tokens, config.state_slots, config.page_size, config.chunked_prefill_size,
            config.track_interval, config.overlap, config.cache) == (500000, 300, 16, 2048, 128, False, "extra_buffer")
    assert "host tier" in str(predictor_config(plan_arm("l2"), info))
    assert "max_total_num_tokens" in str(predictor_config(plan_arm("lru"), {"version": "0.5.23", "page_size": 1}))
    assert "no cache semantics proven" in str(predictor_config(plan_arm("lru"), {**info, "version": "0.4.0"}))


def test_predictor_mirrors_sglang_branch_point_semantics() -> None:
    # SGLang's branching test: "hi"*257 prefix, three suffixes, sent one after another -> 0, 0, 256 cached.
    config = predictor_config(plan_arm("branching"), {"version": "0.5.23", "max_total_num_tokens": 100000,
                                            "max_mamba_cache_size": 64,
                                            "chunked_prefill_size": 8192, "mamba_track_interval": 256})
    assert not isinstance(config, str)
    predictor = CachePredictor(config)
    prefix = [7] * 257
    got = [predictor.predict(prefix + [s] * 256, [1], 1) for s in (11, 12, 13)]
    assert got == [0, 0, 256]
    assert predictor.predict(prefix, [], 1) is None and "output token ids" in predictor.broken


def test_the_mirror_of_a_real_server_checkpoints_on_the_served_models_chunk() -> None:
    # Nemotron-H-8B's chunk is 128: SGLang's branch point for a 257-token shared prefix is 256 either way, but for
    # a 200-token one it is 128, not 192 (/server_info does not say the chunk; the model does).
    assert served_chunk(RunCfg(model=ModelCfg(name="nemotron-h-8b"), engine=EngineCfg(name="sglang"))) == 128
    assert served_chunk(RunCfg(model=ModelCfg(name="nemotron-h-8b"), engine=EngineCfg(name="reference"))) == 64
    assert served_chunk(RunCfg(model=ModelCfg(name="my-own-model"), engine=EngineCfg(name="sglang"))) == 64
    info = {"version": "0.5.23", "max_total_num_tokens": 100000, "max_mamba_cache_size": 64}
    got = {}
    for chunk in (64, 128):
        config = predictor_config(plan_arm("branching"), info, mamba_chunk_size=chunk)
        assert not isinstance(config, str)
        predictor = CachePredictor(config)
        prefix = [7] * 200
        got[chunk] = [predictor.predict(prefix + [s] * 300, [1], 1) for s in (11, 12, 13)]
    assert got == {64: [0, 0, 192], 128: [0, 0, 128]}


def test_reference_server_matches_the_reference_cache_request_by_request(tmp_path: Path) -> None:
    args = ["+experiment=branching", "model=reference-tiny", "repeats=1", "load.max_concurrency=1",
            "engine.max_mamba_cache_size=30", "engine.kv_tokens=2500", "arms=[lru,branching,l2]",
            "workloads.gsp.params.num_groups=3", f"hydra.run.dir={tmp_path}"]
    proc = subprocess.run([sys.executable, "-m", "hybridbench", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, check=False)
    bundle = json.loads((tmp_path / "bundle.json").read_text())
    exact = {c["arm"]: c for c in bundle["checks"] if c["workload"] == "gsp/exact"}
    assert {a: c["status"] for a, c in exact.items()} == {"lru": "pass", "branching": "pass", "l2": "skip"}, proc.stdout
    assert "host tier" in exact["l2"]["detail"]  # no prediction by design: said in its row, not left out
    records = {(r["trial_id"], r["request_index"]): r
               for r in map(json.loads, (tmp_path / "records.jsonl").read_text().splitlines())}
    predicted = [json.loads(line) for line in (tmp_path / "exact_hits.jsonl").read_text().splitlines()]
    assert predicted and sum(records[(p["trial_id"], p["request_index"])]["cached_tokens"]
                             for p in predicted) > 0  # non-trivial: real hits predicted
    assert {p["arm"] for p in predicted} == {"lru", "branching"}  # none for l2
    prediction = {t["arm"]: t["server"]["prediction"] for t in bundle["trials"]}
    assert prediction["lru"] == prediction["branching"] == "exact" and "host tier" in prediction["l2"]
    # Re-scoring from the saved files alone finds the probe's samples again: the same exact verdicts.
    assert rescore([str(tmp_path)]) == 1  # one repeat: its timing rows cannot decide (inconclusive, exit 1)
    again = json.loads((tmp_path / "bundle.json").read_text())
    assert [c for c in again["checks"] if c["workload"] == "gsp/exact"] == list(exact.values())


def test_a_request_the_mirror_cannot_take_stops_predictions_without_raising() -> None:
    config = predictor_config(plan_arm("branching"),
                              {"version": "0.5.23", "max_total_num_tokens": 64, "max_mamba_cache_size": 64})
    assert not isinstance(config, str)
    predictor = CachePredictor(config)
    assert predictor.predict([5] * 10, [1], 1) == 0
    assert predictor.predict([5] * 500, [1], 1) is None  # longer than the mirrored KV pool
    assert predictor.broken and predictor.predict([5] * 10, [1], 1) is None  # no guessing afterwards
