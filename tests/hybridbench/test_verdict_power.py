"""benchmarks/verdict_power.py's counting: which saved runs are false fails and false passes.

The bundles are a real one (the smoke experiment on the sim engine, written by the harness) with its verdict and
ttft rows set to each outcome the script must tell apart; the script then re-counts them from a ledger as it would
the runs it launched.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from hybridbench.app import run
from hybridbench.config.schema import RunCfg
from hybridbench.config.store import register

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    if str(ROOT / "benchmarks") not in sys.path:  # its siblings (whole_command), as when run as a script
        sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("verdict_power", ROOT / "benchmarks" / "verdict_power.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["verdict_power"] = module  # dataclasses resolve their module's annotations through sys.modules
    spec.loader.exec_module(module)
    return module


vp = _script()


@pytest.fixture(scope="module")
def real_bundle(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose(config_name="config", overrides=[
            "+experiment=smoke", "engine=sim", "checks.enabled=[survival,ttft]",
            "workloads.gsp.params.num_groups=2", "workloads.gsp.params.prompts_per_group=2"])
    run_cfg = OmegaConf.to_object(cfg)
    assert isinstance(run_cfg, RunCfg)
    run_dir = tmp_path_factory.mktemp("smoke")
    run(run_cfg, run_dir, {})
    bundle: dict[str, Any] = json.loads((run_dir / "bundle.json").read_text())
    assert any(c["check"] == "ttft" for c in bundle["checks"])
    return bundle


def _as(bundle: dict[str, Any], verdict: str, ttft: str) -> dict[str, Any]:
    out = copy.deepcopy(bundle)
    out["verdict"] = verdict
    for c in out["checks"]:
        if c["check"] == "ttft":
            c["status"] = ttft
    return out


def test_classify_tells_each_outcome_apart(real_bundle: dict[str, Any]) -> None:
    cases = [
        ("aa", _as(real_bundle, "pass", "pass"), 0, "pass"),
        ("aa", _as(real_bundle, "inconclusive", "inconclusive"), 1, "inconclusive"),
        ("aa", _as(real_bundle, "fail", "fail"), 1, "fail"),
        ("aa", _as(real_bundle, "fail", "pass"), 1, "fail"),  # another check failed: still not a passing A/A
        ("planted", _as(real_bundle, "fail", "fail"), 1, "fail"),
        ("planted", _as(real_bundle, "inconclusive", "inconclusive"), 1, "inconclusive"),
        ("planted", _as(real_bundle, "pass", "pass"), 0, "pass"),
        ("planted", _as(real_bundle, "fail", "pass"), 1, "pass"),  # failed elsewhere, but ttft missed the slowdown
        ("planted", _as(real_bundle, "error", "fail"), 3, "error"),  # the engine died: neither rate
        ("aa", _as(real_bundle, "fail", "fail"), 0, "error"),  # exit 0 with a failing verdict: a broken run
        ("aa", None, 2, "error"),
    ]
    for kind, bundle, code, want in cases:
        assert vp.classify(kind, bundle, code)[0] == want, (kind, code, want)


def test_recount_gives_the_rates_of_the_saved_runs(real_bundle: dict[str, Any], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    runs = [("aa", "pass", "pass", 0), ("aa", "inconclusive", "inconclusive", 1), ("aa", "pass", "pass", 0),
            ("aa", "fail", "fail", 3),  # an error: excluded from the A/A count
            ("planted", "fail", "fail", 1), ("planted", "fail", "fail", 1), ("planted", "pass", "pass", 0),
            ("planted", "inconclusive", "inconclusive", 1)]
    with (tmp_path / "ledger.jsonl").open("w") as ledger:
        for i, (kind, verdict, ttft, code) in enumerate(runs):
            (tmp_path / f"{kind}-{i:03d}").mkdir()
            (tmp_path / f"{kind}-{i:03d}" / "bundle.json").write_text(json.dumps(_as(real_bundle, verdict, ttft)))
            ledger.write(json.dumps({"kind": kind, "index": i, "exit_code": code}) + "\n")
    results = vp.recount(tmp_path)
    aa, planted = vp.tally("aa", results), vp.tally("planted", results)
    assert (aa.runs, aa.passed, aa.inconclusive, aa.errors, aa.wrong) == (3, 2, 1, 1, 1)
    assert aa.rate == pytest.approx(1 / 3)  # false fail: the inconclusive A/A
    assert (planted.runs, planted.failed, planted.passed, planted.inconclusive) == (4, 2, 1, 1)
    assert planted.rate == pytest.approx(2 / 4)  # false pass: the pass and the inconclusive
    assert vp.main(["--recount", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "33.3% (1/3)" in out and "50.0% (2/4)" in out and "strict false pass): 1/4 = 25.0%" in out


def test_the_commands_are_the_documented_interface(tmp_path: Path) -> None:
    aa = vp.command("aa", 7, 0.25, tmp_path / "r", ["engine=reference"])
    planted = vp.command("planted", 7, 0.25, tmp_path / "r", [])
    assert aa[1:] == ["-m", "hybridbench", "+experiment=noise", "seed=7", "engine=reference",
                      f"hydra.run.dir={tmp_path / 'r'}"]
    assert "noise.planted_slowdown=0.25" in planted and "noise.planted_slowdown=0.25" not in aa
    with pytest.raises(SystemExit) as exited:  # argparse's one line naming --recount
        vp.main(["--recount", str(tmp_path / "nowhere")])
    assert exited.value.code == 2
