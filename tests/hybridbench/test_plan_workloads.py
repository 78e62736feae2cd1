"""Workload parameters are checked, typed, when the plan is built: before any trace is written or server starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybridbench.config.schema import RunCfg, WorkloadCfg
from hybridbench.errors import ConfigError
from hybridbench.plan.build import build_plan


@pytest.mark.parametrize(("workload", "message"), [
    (WorkloadCfg(params={"num_grups": 4}), "workloads.w: unknown parameter 'num_grups'"),
    (WorkloadCfg(params={"num_groups": "four"}), "workloads.w: num_groups: expected int, got 'four'"),
    (WorkloadCfg(params={"num_groups": -1}), "workloads.w: num_groups must be >= 1, got -1"),
    (WorkloadCfg(kind="random", preset="radix"), "workloads.w: preset: unknown preset 'radix' for random"),
])
def test_bad_workload_parameters_fail_the_plan(tmp_path: Path, workload: WorkloadCfg, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        build_plan(RunCfg(workloads={"w": workload}), tmp_path, {})
    assert e.value.exit_code == 2 and not (tmp_path / "traces").exists()
