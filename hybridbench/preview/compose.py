"""The run's Hydra composition, without running: ``conf/`` and the same overrides ``python -m hybridbench`` takes.

Hydra's compose API (https://hydra.cc/docs/advanced/compose_api/) composes the same primary config with the same
ConfigStore schemas; the run directory is what ``hydra.run.dir`` resolves to (a run started now would get a
later timestamp). A composition error is one line (ConfigError), as the run prints it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import DictConfig, open_dict
from omegaconf.errors import OmegaConfBaseException

from hybridbench.config.group_choices import refuse_relabelled_sizing, refuse_replaced_load, refuse_unread_rate
from hybridbench.config.schema import RunCfg
from hybridbench.config.store import register
from hybridbench.errors import ConfigError
from hybridbench.prepare import typed_config

__all__ = ["CONF_DIR", "Composed", "compose_run"]

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


@dataclass(frozen=True, slots=True)
class Composed:
    cfg: RunCfg
    resolved: dict[str, Any]
    run_dir: Path


def _one_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip() and not ln.strip().startswith(
        ("full_key:", "object_type=", "reference_type="))]
    return "; ".join(lines).split("Config search path", 1)[0].rstrip("; ") or type(exc).__name__


def _refuse_name(overrides: list[str]) -> None:
    from hybridbench.__main__ import _name_refusal  # noqa: PLC0415 - the run's own rule, one place

    if why := _name_refusal(overrides):
        raise ConfigError(why)


def compose_run(overrides: list[str]) -> Composed:
    """ConfigError (one line) for anything Hydra or the schema refuses."""
    _refuse_name(overrides)
    register()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="hybridbench"):
            raw: DictConfig = compose("config", overrides=overrides, return_hydra_config=True)
            run_dir = Path(str(raw.hydra.run.dir))
            choices = dict(raw.hydra.runtime.choices)
            with open_dict(raw):
                del raw["hydra"]
            cfg, resolved = typed_config(raw)
            refuse_replaced_load(overrides, cfg.load.kind)
            refuse_relabelled_sizing(choices, cfg.sizing.family)
            refuse_unread_rate(overrides, cfg.load.kind)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(_one_line(exc)) from None
    finally:
        GlobalHydra.instance().clear()
    return Composed(cfg, resolved, run_dir)
