"""Published vs this run compares like with like: the same GPU type, TP, quantization and arrivals as the source
states (SGLang PR #11214's radix run: 4 x H100, TP4, bf16, at most 5 requests in flight), else `not comparable`
with why."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from test_experiment_sizing import composed

from hybridbench.metrics.published import compare_published

RADIX = {"metric": "request_throughput", "workload": "gsp", "arm": "lru", "baseline_arm": "disabled",
         "value": 0.341, "engine": "sglang", "model": "qwen3-next-80b-a3b", "scale": 1,
         "gpu": "h100", "tp": 4, "quantization": "none", "arrival": "closed:5"}
AGG = {"gsp": {"disabled": {"request_throughput": 2.6}, "lru": {"request_throughput": 3.5}}}


def run_config(**changes: Any) -> dict[str, Any]:
    engine = {"name": "sglang", "gpu": "h100", "tp": 4, "workload_scale": 1, **changes.pop("engine", {})}
    return {"engine": engine, "model": {"name": "qwen3-next-80b-a3b", "quantization": changes.pop("quant", "")},
            "load": {"kind": "closed", "max_concurrency": 5, "request_rate": 0.0, **changes.pop("load", {})},
            "workloads": {"gsp": {"scale": 1, "request_rate": changes.pop("rate", 0.0),
                                  "keep_sessions": changes.pop("keep", 0)}}, "published": [RADIX]}


def test_the_seeds_own_setup_is_scored() -> None:
    (row,) = compare_published(run_config(), AGG)
    assert row["mark"] == "reproduced" and row["why"] == ""


@pytest.mark.parametrize(("changes", "why"), [
    ({"engine": {"tp": 1}}, "TP 1 vs 4"),
    ({"engine": {"gpu": "a100"}}, "GPU a100 vs h100"),
    ({"quant": "fp8"}, "quantization fp8 vs none"),  # the FP8 checkpoint keeps the bf16 model's name
    ({"load": {"max_concurrency": 16}}, "arrivals closed:16 vs closed:5"),
    ({"load": {"kind": "poisson", "request_rate": 8.0}}, "arrivals poisson:8 vs closed:5"),
    ({"keep": 2}, "only the first 2 sessions of the load (keep_sessions)"),
])
def test_another_setup_is_not_comparable_and_says_why(changes: dict[str, Any], why: str) -> None:
    (row,) = compare_published(run_config(**changes), AGG)
    assert row["mark"] == "not comparable" and why in row["why"], row["why"]
    assert row["observed"] == pytest.approx(3.5 / 2.6 - 1)  # still shown, never scored


def test_a_workloads_own_rate_is_its_arrival_rate() -> None:
    poisson = {**RADIX, "arrival": "poisson:10"}
    cfg = run_config(load={"kind": "poisson", "request_rate": 8.0, "max_concurrency": 0}, rate=10.0)
    (row,) = compare_published({**cfg, "published": [poisson]}, AGG)
    assert row["mark"] == "reproduced", row["why"]


def test_every_gpu_configuration_is_comparable_with_its_own_seed_where_the_seed_ran_it() -> None:
    """seglen and radix on sglang as composed (no override): every published row of the seed's own model and GPU
    is comparable by setup but seglen's SWE-bench one, whose load the GPU configuration cuts to its first sessions
    (keep_sessions); prefill_overhead's seed ran TP8, so the default TP4 is not, and says so."""
    for experiment in ("seglen", "radix"):
        cfg = composed(f"+experiment={experiment}", "engine=sglang")
        config = {"engine": {"name": "sglang", "gpu": cfg.engine.gpu, "tp": cfg.engine.tp, "workload_scale": 1},
                  "model": {"name": cfg.model.name, "quantization": cfg.model.quantization},
                  "load": {"kind": cfg.load.kind, "max_concurrency": cfg.load.max_concurrency,
                           "request_rate": cfg.load.request_rate},
                  "workloads": {n: {"scale": w.scale, "request_rate": w.request_rate,
                                    "keep_sessions": w.keep_sessions} for n, w in cfg.workloads.items()},
                  "published": [vars(p) for p in cfg.published if p.workload in cfg.workloads]}
        agg: dict[str, Any] = {}
        for p in cfg.published:
            for arm in (p.arm, p.baseline_arm):
                agg.setdefault(p.workload, {}).setdefault(arm, {})[p.metric] = 1.0
        rows = compare_published(config, agg)
        cut = [r for r in rows if cfg.workloads[r["workload"]].keep_sessions]
        assert [r["workload"] for r in cut] == (["swebench"] if experiment == "seglen" else [])
        assert all(r["mark"] == "not comparable" and "keep_sessions" in r["why"] for r in cut)
        rest = [r for r in rows if r not in cut]
        assert rest and all(r["why"] == "" and r["observed"] is not None for r in rest), [r["why"] for r in rest]
    cfg = composed("+experiment=prefill_overhead", "engine=sglang")
    config = {"engine": {"name": "sglang", "gpu": "h100", "tp": cfg.engine.tp}, "model": {"name": cfg.model.name},
              "load": {"kind": "closed", "max_concurrency": 1}, "workloads": {"random": {"scale": 1}},
              "published": [vars(p) for p in cfg.published]}
    (row,) = compare_published(config, {"random": {"disabled": {"input_throughput": 1.0},
                                                   "lru": {"input_throughput": 0.9}}})
    assert row["mark"] == "not comparable" and "TP 4 vs 8" in row["why"]


def test_an_arm_that_completed_nothing_reproduces_no_figure() -> None:
    # seglen's ShareGPT hit rate (0.01, within 0.04): an arm whose every request failed has a token_hit_rate of 0.0
    # in its aggregate (no input tokens), which "reproduced" it.
    from hybridbench.metrics.summary import aggregate

    hits = {"metric": "token_hit_rate", "workload": "gsp", "arm": "lru", "value": 0.01, "tolerance": 0.04,
            "engine": "sglang", "model": "qwen3-next-80b-a3b", "scale": 1}
    (row,) = compare_published({**run_config(), "published": [hits]}, {"gsp": {"lru": aggregate([], [])}})
    assert row["mark"] == "not comparable" and row["observed"] is None and "has no token_hit_rate" in row["why"]


@pytest.mark.parametrize(("gpus", "why"), [
    (["NVIDIA A100-SXM4-80GB"] * 4, "GPU NVIDIA A100-SXM4-80GB (nvidia-smi; engine.gpu=h100) vs h100"),
    (["NVIDIA H20"] * 4, "GPU NVIDIA H20 (nvidia-smi; engine.gpu=h100) vs h100"),  # a kind no key names
])
def test_gpus_that_are_not_the_sources_are_not_comparable_whatever_the_label(gpus: list[str], why: str) -> None:
    # engine.gpu is a label: a run re-scored from before the GPU-kind check (A100s under h100), or on GPUs the check
    # cannot name (an H20, only a warning), "reproduced" the H100 figure.
    (row,) = compare_published(run_config(), AGG, gpus)
    assert row["mark"] == "not comparable" and why in row["why"], row["why"]
    (same,) = compare_published(run_config(), AGG, ["NVIDIA H100 80GB HBM3"] * 4)
    assert same["mark"] == "reproduced"


def test_a_rescored_run_on_other_gpus_than_its_label_reproduces_nothing(tmp_path: Path) -> None:
    # End to end: a saved run labelled engine.gpu=h100 whose bundle names four A100s (recorded before the GPU-kind
    # check refused such a run) re-scored to "reproduced" against an H100 figure.
    from hybridbench.rescore.run import rescore_run

    run = Path(shutil.copytree(Path(__file__).parent / "fixtures" / "runs" / "fbde869-smoke-sim", tmp_path / "run"))
    plan = json.loads((run / "plan.json").read_text())
    agg = json.loads((run / "bundle.json").read_text())["aggregates"]["gsp"]
    value = agg["branching"]["request_throughput"] / agg["disabled"]["request_throughput"] - 1  # this run's own
    plan["config"]["published"] = [{"metric": "request_throughput", "workload": "gsp", "arm": "branching",
                                    "baseline_arm": "disabled", "value": value, "engine": "sim",
                                    "model": "qwen3-next-80b-a3b", "scale": 1, "gpu": "h100", "tp": 4,
                                    "source": "a seed on H100s", "hardware": "4xH100"}]
    (run / "plan.json").write_text(json.dumps(plan))
    bundle = json.loads((run / "bundle.json").read_text())
    bundle["provenance"]["engine"]["extra"]["gpus"] = ["NVIDIA A100-SXM4-80GB"] * 4
    (run / "bundle.json").write_text(json.dumps(bundle))
    (row,) = rescore_run(run)["published"]
    assert row["mark"] == "not comparable" and "GPU NVIDIA A100-SXM4-80GB (nvidia-smi" in row["why"], row["why"]
