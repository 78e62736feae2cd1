"""The load is checked and fixed at plan time: a bad ``load.*`` is exit 2 before any server starts, and every
trial's arrivals come from the one schedule (``workloads.arrival``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybridbench.config.schema import LoadCfg, RunCfg, WorkloadCfg
from hybridbench.errors import ConfigError
from hybridbench.plan.build import build_plan
from workloads.arrival import LoadSpec


@pytest.mark.parametrize(("load", "message"), [
    (LoadCfg(kind="burst"), "load.kind: unknown load 'burst'"),
    (LoadCfg(kind="closed", max_concurrency=0), "load.max_concurrency must be >= 1 for a closed loop"),
    (LoadCfg(kind="poisson", request_rate=0.0), "load.request_rate must be > 0 for Poisson arrivals"),
    (LoadCfg(kind="trace", slowdown=-1.0), "load.slowdown must be a finite number >= 0"),
    (LoadCfg(kind="poisson", request_rate=2.0, max_concurrency=-3), "load.max_concurrency must be >= 1"),
])
def test_bad_load_is_a_plan_error_naming_the_key(tmp_path: Path, load: LoadCfg, message: str) -> None:
    # engine=sglang: nothing is launched or even asked for --help before the plan refuses the load.
    cfg = RunCfg(load=load, workloads={"w": WorkloadCfg()})
    cfg.engine.name = "sglang"
    with pytest.raises(ConfigError, match=message) as e:
        build_plan(cfg, tmp_path, {})
    assert e.value.exit_code == 2


def test_the_plan_carries_the_load_spec(tmp_path: Path) -> None:
    plan = build_plan(RunCfg(load=LoadCfg(kind="poisson", request_rate=3.0, max_concurrency=0),
                             workloads={"w": WorkloadCfg()}), tmp_path, {})
    assert plan.load == LoadSpec("poisson", max_concurrency=None, request_rate=3.0)  # 0: no cap on an open loop
    closed = build_plan(RunCfg(workloads={"w": WorkloadCfg()}), tmp_path, {})
    assert closed.load == LoadSpec("closed", max_concurrency=5)
    assert closed.to_json()["load"]["kind"] == "closed"


def test_a_workload_may_have_its_own_poisson_rate(tmp_path: Path) -> None:
    """bench_serving's --request-rate is per dataset (the seglen PR: SWE-bench at 10, the rest at 8)."""
    load = LoadCfg(kind="poisson", request_rate=8.0, max_concurrency=0)
    plan = build_plan(RunCfg(load=load, workloads={"w": WorkloadCfg(), "swe": WorkloadCfg(request_rate=10.0)}),
                      tmp_path, {})
    assert plan.workload("w").load == plan.load == LoadSpec("poisson", max_concurrency=None, request_rate=8.0)
    assert plan.workload("swe").load == LoadSpec("poisson", max_concurrency=None, request_rate=10.0)
    # A closed loop has no rate: every workload keeps the closed loop.
    closed = build_plan(RunCfg(workloads={"swe": WorkloadCfg(request_rate=10.0)}), tmp_path, {})
    assert closed.workload("swe").load == LoadSpec("closed", max_concurrency=5)
    with pytest.raises(ConfigError, match=r"workloads\.swe\.request_rate must be > 0") as e:
        build_plan(RunCfg(load=load, workloads={"swe": WorkloadCfg(request_rate=-1.0)}), tmp_path, {})
    assert e.value.exit_code == 2


def test_a_workloads_own_rate_is_part_of_the_results_stores_load_key(tmp_path: Path) -> None:
    """Runs of a history series must have sent the same load: a per-workload rate changes the key, and a run
    without one keeps the key it had before per-workload rates existed."""
    import json
    import shutil

    from hybridbench.results import read_run
    from hybridbench.results.store import load_fingerprint

    fixture = Path(__file__).parent / "fixtures" / "runs" / "fbde869-smoke-sim"
    keys = {}
    for rate in (None, 0.0, 10.0):
        run_dir = Path(shutil.copytree(fixture, tmp_path / str(rate)))
        plan = json.loads((run_dir / "plan.json").read_text())
        if rate is not None:
            plan["config"]["workloads"]["gsp"]["request_rate"] = rate
        (run_dir / "plan.json").write_text(json.dumps(plan))
        keys[rate] = load_fingerprint(read_run(run_dir))
    assert keys[None] == keys[0.0] != keys[10.0]
