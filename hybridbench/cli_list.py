"""``hybridbench list``: what this checkout offers, one line each, read from ``conf/`` and the code's registries
(nothing here is a hand-kept list): experiments (conf/experiment/*.yaml, with their arms and workloads),
workload configs (conf/workload/*.yaml) and generators (workloads.registry), arms (reference_impl's vocabulary)
with the launch options each engine's arm table gives them, and engines (hybridbench.engines.registry).

SGLang's flags are shown in their newest spelling (no ``--help`` is read here; ``hybridbench plan`` builds them
against the installed server's), TokenSpeed's per release it knows.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from hybridbench.config.schema import EngineCfg, RunCfg
from hybridbench.engines.reference_cmd import REFERENCE_ARMS
from hybridbench.engines.registry import ENGINES
from hybridbench.engines.replay import REPLAY_ARMS
from hybridbench.engines.sglang_cmd import sglang_arm_flags
from hybridbench.engines.sim import SIM_ARMS
from hybridbench.engines.tokenspeed_cmd import TOKENSPEED_ARMS, TOKENSPEED_VERSIONS, TokenSpeedVersion
from hybridbench.engines.tokenspeed_cmd import _Ctx as TokenSpeedCtx
from hybridbench.engines.vllm_cmd import vllm_arm_flags
from hybridbench.errors import ConfigError, OneLineParser
from hybridbench.plan.arms import plan_arm
from reference_impl.engine.arms import ARMS, ArmSpec
from workloads.closed_stdout import quiet_on_closed_stdout
from workloads.registry import WORKLOADS

__all__ = ["arm_lines", "engine_lines", "experiment_lines", "main", "workload_lines"]

CONF = Path(__file__).resolve().parent.parent / "conf"


def _first_comment(path: Path) -> str:
    for line in path.read_text().splitlines():
        text = line.lstrip("# ").strip()
        if line.startswith("#") and text and not text.startswith("@package") and not (
                text.startswith("python -m hybridbench") and "experiment" in path.parts[-2]):
            return text
    return ""


def _arms_and_workloads(data: Any) -> tuple[str, list[str]]:
    arms = ",".join(map(str, data.get("arms", [])))
    workloads = [str(next(iter(d))).split("@workloads.", 1)[-1] for d in data.get("defaults", [])
                 if isinstance(d, dict) and "@workloads." in str(next(iter(d)))]
    workloads += [str(k) for k in (data.get("workloads") or {}) if str(k) not in workloads]
    return arms, workloads


def experiment_lines(conf: Path = CONF) -> list[str]:
    """One line per experiment: its arms and workloads, with what its sizing per engine family adds
    (conf/sizing/<experiment>/{cpu,gpu}.yaml: seglen's arms and loads differ between the two)."""
    out = []
    for path in sorted((conf / "experiment").glob("*.yaml")):
        arms, workloads = _arms_and_workloads(OmegaConf.to_container(OmegaConf.load(path), resolve=False))
        family_arms: dict[str, str] = {}
        for family in ("cpu", "gpu"):
            sizing = conf / "sizing" / path.stem / f"{family}.yaml"
            if sizing.exists():
                f_arms, f_loads = _arms_and_workloads(OmegaConf.to_container(OmegaConf.load(sizing), resolve=False))
                workloads += [w for w in f_loads if w not in workloads]
                if f_arms:
                    family_arms[family] = f_arms
        if not arms and family_arms:
            arms = " / ".join(f"{a} ({family})" for family, a in family_arms.items())
        arms = arms or "(config.yaml's)"
        out.append(f"experiment {path.stem}: arms {arms}; "
                   f"workloads {','.join(workloads) or '-'}; {_first_comment(path)}")
    return out


def workload_lines(conf: Path = CONF) -> list[str]:
    out = [f"workload kind {name}: {w.summary}" for name, w in WORKLOADS.items()]
    for path in sorted((conf / "workload").glob("*.yaml")):
        data: Any = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        out.append(f"workload {path.stem} (kind {data.get('kind', 'gsp')}): {_first_comment(path)}")
    return out


def _flags(options: Sequence[Any]) -> str:
    parts: list[str] = []
    for o in options:
        if hasattr(o, "render"):
            parts.extend(o.render())
        elif isinstance(o, tuple):
            parts.append(f"{o[0]}={o[1]}")
        else:
            parts.append(str(o))
    return " ".join(parts) or "(default)"


def _tokenspeed(version: TokenSpeedVersion, spec: ArmSpec) -> list[Any]:
    return list(TOKENSPEED_ARMS.express(spec, TokenSpeedCtx(version, True)))


def _tables() -> dict[str, Callable[[ArmSpec], list[Any]]]:
    engine, run = EngineCfg(), RunCfg()
    tables: dict[str, Callable[[ArmSpec], list[Any]]] = {
        "sglang": lambda s: sglang_arm_flags(s, engine, None),
        "vllm": lambda s: vllm_arm_flags(s, (), hybrid=True),
    }
    for version, table in TOKENSPEED_VERSIONS.items():
        tables[f"tokenspeed {version}"] = functools.partial(_tokenspeed, table)
    tables |= {"reference": lambda s: ["--arm", s.name, *REFERENCE_ARMS.express(s, run)],
               "sim": lambda s: SIM_ARMS.express(s, None), "replay": lambda s: REPLAY_ARMS.express(s, None)}
    return tables


def arm_lines() -> list[str]:
    out = []
    tables = _tables()
    for name in ARMS:
        spec = plan_arm(name)
        cells = []
        for engine, express in tables.items():
            try:
                cells.append(f"{engine}: {_flags(express(spec))}")
            except ConfigError:
                cells.append(f"{engine}: cannot")
        out.append(f"arm {name} ({spec.strategy}, {spec.policy}{', host tier' if spec.host_tier else ''}): "
                   + "; ".join(cells))
    return out


def engine_lines(conf: Path = CONF) -> list[str]:
    out = []
    for name in ENGINES:
        path = conf / "engine" / f"{name}.yaml"
        out.append(f"engine {name}: {_first_comment(path) if path.is_file() else ''}".rstrip())
    return out



def parser(prog: str = "python -m hybridbench.cli_list") -> argparse.ArgumentParser:
    p = OneLineParser(prog=prog, description="The experiments, workloads, arms (with each engine's flags) and engines.")
    p.add_argument("what", nargs="?", choices=("experiments", "workloads", "arms", "engines"),
                   help="only this kind (default: all)")
    return p


def main(argv: Sequence[str] | None = None, prog: str = "python -m hybridbench.cli_list") -> int:
    args = parser(prog).parse_args(argv)
    sections = {"experiments": experiment_lines, "workloads": workload_lines, "arms": arm_lines,
                "engines": engine_lines}
    for what, lines in sections.items():
        if args.what in (None, what):
            print("\n".join(lines()))
    return 0


if __name__ == "__main__":
    sys.exit(quiet_on_closed_stdout(main))
