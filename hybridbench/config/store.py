"""The only ConfigStore registrations: the schemas YAML files extend."""

from __future__ import annotations

import functools

from hydra.core.config_store import ConfigStore

from hybridbench.config.schema import ArmCfg, ChecksCfg, EngineCfg, LoadCfg, ModelCfg, RunCfg, WorkloadCfg

__all__ = ["register"]


@functools.cache
def register() -> None:
    """Once a process: ConfigStore keeps the schemas (each load hands out a deep copy), and converting them costs
    ~20 ms each time again: a plan, a doctor or a test composes many configs in one process."""
    cs = ConfigStore.instance()
    cs.store(name="run_schema", node=RunCfg)
    cs.store(group="engine", name="engine_schema", node=EngineCfg)
    cs.store(group="model", name="model_schema", node=ModelCfg)
    cs.store(group="load", name="load_schema", node=LoadCfg)
    cs.store(group="arm", name="arm_schema", node=ArmCfg)
    cs.store(group="workload", name="workload_schema", node=WorkloadCfg)
    cs.store(group="checks", name="checks_schema", node=ChecksCfg)
