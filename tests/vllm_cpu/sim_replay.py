"""A real vLLM run replayed through the simulator the forecast uses, so a test can hold the forecast's cache model
to what vLLM itself did, request by request.

Not a test module (no ``test_`` prefix). The replay reads the run's own trace (``traces/<workload>.jsonl``) and
load (plan.json), and runs it through ``SimEngine(block=...)`` as ``forecast_run`` does for a vLLM plan
(hybridbench/preview/forecast_page.py), at the block the run's server said it served. The simulator needs a model
it knows: a Mamba2 hybrid stands in for the tiny NemotronH, since at a given block the hits depend on the prompts'
tokens and the order they arrive in, not on the weights (its pools on an H100 hold the whole smoke load: no
eviction, as on the CPU server).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hybridbench.engines.base import TrialContext
from hybridbench.engines.sim import SimEngine
from hybridbench.plan.build import build_plan
from hybridbench.preview.compose import compose_run
from hybridbench.records.schema import Record
from workloads.arrival import arrival_schedule
from workloads.trace import read_trace

STAND_IN = "nemotron-h-8b"  # a Mamba2 + attention hybrid, as the tiny NemotronH is


def real_hits(run_dir: Path, arm: str) -> list[tuple[int, int]]:
    """(request index, cached tokens) of ``arm``'s requests in the order the run sent them."""
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    mine = sorted((r for r in records if r["arm"] == arm), key=lambda r: r["sent_s"])
    return [(r["request_index"], r["cached_tokens"]) for r in mine]


def simulated_hits(run_dir: Path, arm: str, block: int) -> list[tuple[int, int]]:
    """The same as :func:`real_hits`, from the simulator replaying the run's trace with the run's load (its arrival
    order and concurrency) on a cold cache. ``block`` > 0: the forecast's model of vLLM's align mode at that block;
    0: the forecast's model before it (SGLang's no_buffer at engine.page_size 1)."""
    plan: dict[str, Any] = json.loads((run_dir / "plan.json").read_text())
    [workload] = plan["workloads"]
    [trial_row] = [t for t in plan["trials"] if t["arm"] == arm and t["repeat"] == 0]
    load = plan["load"]
    rows = list(read_trace(run_dir / "traces" / f"{workload['name']}.jsonl").rows)
    composed = compose_run(["+experiment=smoke", "engine=sim", f"model={STAND_IN}", "engine.page_size=1",
                            f"arms=[{arm}]", "repeats=1", f"load.kind={load['kind']}",
                            f"load.max_concurrency={load['max_concurrency']}"])
    with tempfile.TemporaryDirectory(prefix="hybridbench-replay-") as tmp:
        sim_plan = build_plan(composed.cfg, Path(tmp), composed.resolved)
        engine = SimEngine(block=block)
        engine.validate(composed.cfg, sim_plan)
        [trial] = [t for t in sim_plan.trials if t.repeat == 0]
        schedule = arrival_schedule(rows, sim_plan.workload(trial.workload).load, trial_row["seed"])
        records: list[Record] = []
        engine.run_trial(composed.cfg, TrialContext(sim_plan, trial, rows, records.append, (), schedule=schedule))
    assert len(records) == len(rows) and all(r.status == "ok" for r in records), records
    return [(r.request_index, r.cached_tokens or 0) for r in sorted(records, key=lambda r: (r.sent_s, r.request_index))]
