"""``hybridbench doctor``'s checks: is this machine ready for the run the overrides describe? One line each.

GPUs against engine.tp, engine.gpu and the model's weights (their count, kind and memory), the server build behind
engine.python and its version, which of the experiment's arms that build can express (each arm's command built
against its real ``--help``, as the run does), the model's weights on disk, free disk where the run writes, and the
optional extras.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil
import sys
from pathlib import Path

from hybridbench.config.schema import RunCfg
from hybridbench.doctor.machine import SERVES_WEIGHTS, Finding, gpu_findings, weights_finding
from hybridbench.engines.registry import make_engine
from hybridbench.engines.server import installed_version
from hybridbench.engines.vllm_cmd import vllm_build_refusal
from hybridbench.errors import ConfigError
from hybridbench.plan.build import build_plan
from hybridbench.preview.compose import Composed
from hybridbench.results.run_dir import run_dir_refusal

__all__ = ["EXTRAS", "MIN_FREE_BYTES", "PACKAGES", "doctor_findings"]

PACKAGES = {"sglang": "sglang", "vllm": "vllm", "tokenspeed": "tokenspeed"}  # engine -> its Python distribution
# pyproject.toml's optional extras -> the modules that tell whether each is installed
EXTRAS = {"results": ("duckdb", "pandas", "pyarrow", "plotly"), "fast": ("uvloop", "orjson"),
          "cluster": ("submitit",), "data": ("datasets", "transformers")}
MIN_FREE_BYTES = 5 * 2**30  # traces of the GPU loads run to hundreds of MB; logs and records beside them


def _server_build(cfg: RunCfg) -> Finding:
    name = cfg.engine.name
    if name not in PACKAGES:
        where = f"engine.python={cfg.engine.python}" if cfg.engine.python else "this checkout"
        return Finding("server", "ok", f"engine={name}: runs from {where} (no server build needed)")
    python = cfg.engine.python or sys.executable
    if not Path(python).exists() and shutil.which(python) is None:
        return Finding("server", "refuse", f"engine.python={python}: no such interpreter")
    version = installed_version(python, PACKAGES[name])
    if not version:
        return Finding("server", "refuse", f"engine.python={python}: no {PACKAGES[name]} installed in it; set "
                                           "engine.python to the server's venv")
    if name == "vllm" and (why := vllm_build_refusal(cfg.engine.gpu, version)):
        return Finding("server", "refuse", why)  # the run refuses it at plan time too (its build_refusal)
    return Finding("server", "ok", f"engine.python={python}: {PACKAGES[name]} {version}")


def _arms(composed: Composed) -> list[Finding]:
    cfg = composed.cfg
    try:
        plan = build_plan(cfg, composed.run_dir, composed.resolved)
    except ConfigError as exc:
        return [Finding("config", "refuse", str(exc))]
    engine = make_engine(cfg.engine.name)
    out = []
    try:
        for spec in plan.arm_specs:  # each on its own: one arm the build lacks does not hide the others
            try:
                engine.validate(cfg, dataclasses.replace(plan, arms=(spec.name,), arm_specs=(spec,)))
                out.append(Finding(f"arm {spec.name}", "ok", f"this {cfg.engine.name} build expresses it"))
            except ConfigError as exc:
                out.append(Finding(f"arm {spec.name}", "refuse", str(exc)))
    finally:
        engine.close()
    return out


def _run_dir(run_dir: Path, overwrite: bool) -> Finding:
    why = run_dir_refusal(run_dir, overwrite=overwrite)  # the run's own rule (hybridbench.results.run_dir)
    return Finding("run dir", "refuse" if why else "ok", why or f"{run_dir}: free for this run")


def _disk(run_dir: Path) -> Finding:
    where = run_dir.resolve()
    while not where.exists():
        where = where.parent
    free = shutil.disk_usage(where).free
    text = f"{free / 2**30:.1f} GiB free at {where} (results and traces; want {MIN_FREE_BYTES / 2**30:.0f} GiB)"
    return Finding("disk", "ok" if free >= MIN_FREE_BYTES else "refuse", text)


def _extras(cfg: RunCfg) -> list[Finding]:
    # Optional, so said, not refused; except the data extra when data.sharegpt names real text to tokenize.
    needs_data = bool(cfg.data.sharegpt) and any(w.kind == "sharegpt" for w in cfg.workloads.values())
    out = []
    for extra, modules in EXTRAS.items():
        missing = [m for m in modules if importlib.util.find_spec(m) is None]
        text = f"missing {', '.join(missing)} (pip install 'hybridbench[{extra}]')" if missing else "installed"
        needed = extra == "data" and needs_data
        out.append(Finding(f"extra {extra}", "refuse" if missing and needed else "ok",
                           f"{text}{'; data.sharegpt needs it' if needed else ''}"))
    return out


def doctor_findings(composed: Composed) -> list[Finding]:
    cfg = composed.cfg
    out: list[Finding] = []
    if cfg.engine.name in SERVES_WEIGHTS and cfg.engine.gpu != "cpu":
        out += gpu_findings(cfg)
    else:
        out.append(Finding("gpus", "ok", f"engine={cfg.engine.name}"
                                         f"{' engine.gpu=cpu' if cfg.engine.gpu == 'cpu' else ''}: no GPU needed"))
    server = _server_build(cfg)
    out.append(server)
    if server.ok:
        out += _arms(composed)
    if cfg.engine.name in SERVES_WEIGHTS:
        out.append(weights_finding(cfg))
    out.append(_run_dir(composed.run_dir, cfg.overwrite))
    out.append(_disk(composed.run_dir))
    out += _extras(cfg)
    return out
