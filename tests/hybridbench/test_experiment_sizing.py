"""Sizing per engine family (conf/sizing/): every experiment composed on every engine, and what reaches each.

The CPU setup (small pools, a short tracking interval, shrunk loads, longer CPU outputs) must reach the reference
engine only; sglang, vllm, tokenspeed and sim get each experiment's GPU configuration with no override: no pool
flag, SGLang's tracking interval, the seeds' loads at their size. The figures asserted below are the seeds'
(SGLang PR #22172 for seglen, PR #11214 for radix, survival and prefill_overhead), not read back from conf/.
"""

from __future__ import annotations

import functools
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from hybridbench.config.schema import RunCfg
from hybridbench.config.store import register
from hybridbench.config.strict import reject_unknown_keys
from hybridbench.config.validate import validate_config
from hybridbench.engines.sglang_cmd import sglang_command
from hybridbench.errors import ConfigError
from hybridbench.plan.build import build_plan
from hybridbench.plan.repeats import TIMING_CHECKS

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
GPU_ENGINES = ("sim", "sglang", "vllm", "tokenspeed")
# Experiments that pick their own engine (marconi: the replay engine) are not sized per family.
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml") if "override /engine" not in p.read_text())
POOL_FLAGS = ("--max-total-tokens", "--max-mamba-cache-size")


@functools.cache  # the same command line composed once per process (~0.3 s each); the tests only read it
def composed(*overrides: str) -> RunCfg:
    register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name="config", overrides=list(overrides))
    reject_unknown_keys(cfg, RunCfg)
    run = OmegaConf.to_object(cfg)
    assert isinstance(run, RunCfg)
    return run


def test_the_sized_experiments_are_all_there() -> None:
    assert {"seglen", "survival", "l2", "radix", "prefill_overhead", "branching", "kl", "smoke"} <= set(EXPERIMENTS)


@pytest.mark.parametrize("engine", GPU_ENGINES)
@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_no_cpu_sizing_reaches_a_gpu_engine(experiment: str, engine: str, tmp_path: Path) -> None:
    cfg = composed(f"+experiment={experiment}", f"engine={engine}")
    assert cfg.sizing.family == "gpu"
    e = cfg.engine
    assert (e.kv_tokens, e.max_mamba_cache_size) == (0, 0), "pools are the server's, from memory"
    assert (e.track_interval, e.workload_scale, e.max_vocab) == (256, 1, 0)  # SGLang's default; nothing shrunk
    plan = build_plan(cfg, tmp_path, {})
    for w in plan.workloads:
        assert "--scale" not in w.argv, (w.name, w.argv)  # every load at its size
    # SGLang's command stands in for every engine's pool flags; at SGLang's page (TokenSpeed's 64-token page is the
    # one it runs, tests/tokenspeed; SGLang refuses it for no_buffer arms, which TokenSpeed refuses anyway).
    stand_in = replace(e, page_size=1)
    for spec in plan.arm_specs:
        cmd = sglang_command(python="python", model=cfg.model, engine=stand_in, arm=spec, port=30000, help_text=None)
        assert not set(POOL_FLAGS) & set(cmd), (spec.name, cmd)
        if "--mamba-track-interval" in cmd:
            assert cmd[cmd.index("--mamba-track-interval") + 1] == "256"
    if cfg.sizing.budget_min <= 0:
        pytest.fail(f"{experiment}: its GPU configuration states no wall-time budget (sizing.budget_min)")


@pytest.mark.parametrize("engine", ["sglang", "vllm", "tokenspeed"])
@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_the_cpu_sizing_never_reaches_a_serving_engine_even_when_asked_for(experiment: str, engine: str) -> None:
    # sizing=cpu put 1,800-token pools and 60 states on SGLang, with a plan that exited 0.
    with pytest.raises(ConfigError, match=rf"^sizing=cpu: .* engine {engine} takes the GPU sizing \(drop sizing"):
        validate_config(composed(f"+experiment={experiment}", f"engine={engine}", "sizing=cpu"))
    validate_config(composed(f"+experiment={experiment}", "engine=sim", "sizing=cpu"))  # a forecast of it: allowed


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_the_reference_engine_gets_the_cpu_sizing_and_a_user_value_still_wins(experiment: str) -> None:
    cfg = composed(f"+experiment={experiment}")
    assert cfg.sizing.family == "cpu" and cfg.engine.name == "reference"
    assert composed(f"+experiment={experiment}", "engine=sglang", "engine.kv_tokens=5000").engine.kv_tokens == 5000
    # sizing=cpu on a GPU engine is the reference's sizing: the family, not the engine's name, decides it.
    cpu_on_sim = composed(f"+experiment={experiment}", "engine=sim", "sizing=cpu")
    assert (cpu_on_sim.workloads, cpu_on_sim.load) == (cfg.workloads, cfg.load)
    assert (cpu_on_sim.engine.kv_tokens, cpu_on_sim.engine.track_interval) == (cfg.engine.kv_tokens,
                                                                                cfg.engine.track_interval)


# What the reference engine ran on main before sizing moved into conf/sizing/ (373bf01, `--cfg job --resolve`):
# the keys that decide what it sends and how its server is sized. Identical, so the main job is unchanged.
REFERENCE_ON_MAIN = {
    "seglen": {"pools": (1800, 60, 64), "concurrency": ("closed", 16),
               "workloads": {"gsp_prefix_heavy": 4, "swebench": 8, "sharegpt": 1}, "sharegpt_output": 512},
    "survival": {"pools": (20000, 120, 256), "concurrency": ("closed", 1024), "workloads": {"high_token_usage": 2}},
    "l2": {"pools": (60000, 40, 256), "concurrency": ("trace", 5), "workloads": {"swebench": 1}, "sessions": 24},
    "radix": {"pools": (0, 0, 256), "concurrency": ("closed", 5), "workloads": {"gsp": 1}},
    "prefill_overhead": {"pools": (0, 0, 256), "concurrency": ("closed", 1), "workloads": {"random": 1}},
}


@pytest.mark.parametrize("experiment", sorted(REFERENCE_ON_MAIN))
def test_the_reference_engines_main_job_is_unchanged(experiment: str) -> None:
    want = REFERENCE_ON_MAIN[experiment]
    cfg = composed(f"+experiment={experiment}")
    assert (cfg.engine.kv_tokens, cfg.engine.max_mamba_cache_size, cfg.engine.track_interval) == want["pools"]
    assert (cfg.load.kind, cfg.load.max_concurrency) == want["concurrency"]
    assert {n: w.scale for n, w in cfg.workloads.items()} == want["workloads"]  # names, order and shrink
    assert list(cfg.workloads) == list(want["workloads"])  # trial order
    assert cfg.engine.workload_scale == 4
    if "sharegpt_output" in want:
        assert cfg.workloads["sharegpt"].params["output_len"] == want["sharegpt_output"]
    if "sessions" in want:
        assert cfg.workloads["swebench"].params["num_sessions"] == want["sessions"]
    # Every check judges every CPU load, but timing checks where they could never be decided, and the load says why
    # in its note: a one-repeat run (test_no_default_engine_run_is_inconclusive_by_design), or seglen's ShareGPT
    # first turns, whose arms hit alike request for request on a clock that charges a policy nothing.
    undecidable = {("seglen", "sharegpt")}
    for name, w in cfg.workloads.items():
        left_out = set(cfg.checks.enabled) - set(w.judged_by or cfg.checks.enabled) - {"survival"}
        if cfg.repeats >= 2 and (experiment, name) not in undecidable:
            assert not (w.judged_by or w.note)
        else:
            assert left_out <= TIMING_CHECKS and bool(w.note) == bool(left_out)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_no_default_engine_run_is_inconclusive_by_design(experiment: str) -> None:
    """A timing verdict needs two repeats at least: an experiment that judges ttft, throughput or prefill_overhead
    on some load with one repeat could never decide it, and `python -m hybridbench +experiment=E` on the default
    engine would end inconclusive (exit 1) every time (l2 did, until its CPU sizing left timing out)."""
    cfg = composed(f"+experiment={experiment}")
    if cfg.repeats >= 2 or len(cfg.arms) < 2:
        return
    for name, w in cfg.workloads.items():
        judged = set(w.judged_by or cfg.checks.enabled) & set(cfg.checks.enabled) & TIMING_CHECKS
        assert not judged, f"{experiment}: {name} is judged on {judged} with {cfg.repeats} repeat"


@pytest.mark.parametrize("engine", GPU_ENGINES)
def test_seglen_runs_the_prs_own_benchmark(engine: str, tmp_path: Path) -> None:
    """SGLang PR #22172: its multi-group and mixed-prefix datasets and ShareGPT first turns (128 output tokens) at
    --request-rate 8, its SWE-bench traces (sps 10, art 5, 100 sessions) at 10, full size; Qwen3.5-9B on one H100
    at --mem-fraction-static 0.70."""
    cfg = composed("+experiment=seglen", f"engine={engine}")
    assert (cfg.model.name, cfg.engine.tp, cfg.engine.mem_fraction_static) == ("qwen3.5-9b", 1, 0.70)
    plan = build_plan(cfg, tmp_path, {})
    loads = {w.name: (w.argv, w.load) for w in plan.workloads}
    assert set(loads) == {"multi_group", "mixed_prefix", "swebench", "sharegpt"}
    assert loads["multi_group"][0][:3] == ("prefix_groups", "--preset", "multi-group")
    assert loads["mixed_prefix"][0][:3] == ("prefix_groups", "--preset", "mixed-7k-10k-noise")
    assert loads["swebench"][0][:3] == ("swebench", "--preset", "seglen")
    sharegpt = loads["sharegpt"][0]
    assert sharegpt[sharegpt.index("--output-len") + 1] == "128"
    assert sharegpt[sharegpt.index("--num-sessions") + 1] == "200"
    for name, (_, load) in loads.items():
        assert (load.kind, load.max_concurrency) == ("poisson", None), name
        assert load.request_rate == (10.0 if name == "swebench" else 8.0), name
    # The ShareGPT load is the PR's TTFT regression check: never judged on evictions or the hit floor. Nor is the
    # SWE-bench load cut to its first two sessions to fit the budget: they fit the pools whole, nothing is evicted.
    assert set(cfg.workloads["sharegpt"].judged_by) == {"ttft", "throughput"}
    assert set(cfg.workloads["swebench"].judged_by) == {"ttft", "throughput", "cache_hits"}
    assert cfg.workloads["swebench"].keep_sessions == 2 and "--keep-sessions" in loads["swebench"][0]
    assert not any(cfg.workloads[w].judged_by for w in ("multi_group", "mixed_prefix"))
    assert not any(cfg.workloads[w].keep_sessions for w in ("multi_group", "mixed_prefix", "sharegpt"))


@pytest.mark.parametrize("engine", GPU_ENGINES)
def test_survival_l2_radix_and_prefill_overhead_run_as_the_seeds_ran_them(engine: str, tmp_path: Path) -> None:
    def plan(experiment: str) -> tuple[RunCfg, dict[str, tuple[str, ...]]]:
        cfg = composed(f"+experiment={experiment}", f"engine={engine}")
        return cfg, {w.name: w.argv for w in build_plan(cfg, tmp_path / experiment, {}).workloads}

    # SGLang PR #11214's crash load: 8 x 128 (sys 1000, q 2744, out 820), all 1024 at once.
    cfg, argv = plan("survival")
    assert argv["high_token_usage"][:3] == ("gsp", "--preset", "high-token-usage")
    assert (cfg.load.kind, cfg.load.max_concurrency) == ("closed", 1024)
    # l2: 200 sessions of up to 16K tokens, replayed on their timestamps with no in-flight cap.
    cfg, argv = plan("l2")
    assert argv["swebench"][argv["swebench"].index("--num-sessions") + 1] == "200"
    assert (cfg.load.kind, cfg.load.max_concurrency) == ("trace", 0)
    # SGLang PR #11214's radix run: gsp 50 x 10 (sys 10240, q 256, out 128) at max concurrency 5.
    cfg, argv = plan("radix")
    assert argv["gsp"][:3] == ("gsp", "--preset", "radix") and cfg.load.max_concurrency == 5
    # SGLang PR #11214's prefill-overhead run: 50 random 20480-token prompts, one output token, one at a time.
    cfg, argv = plan("prefill_overhead")
    assert argv["random"][:3] == ("random", "--preset", "prefill-overhead") and cfg.load.max_concurrency == 1


def test_a_workload_names_only_known_checks_as_its_judges() -> None:
    from hybridbench.checks.registry import validate_judged_by
    from hybridbench.errors import ConfigError

    cfg = composed("+experiment=seglen", "engine=sim", "workloads.sharegpt.judged_by=[ttft,evictons]")
    with pytest.raises(ConfigError, match=r"workloads.sharegpt.judged_by: unknown check\(s\) evictons"):
        validate_judged_by(cfg.workloads)
    validate_judged_by(composed("+experiment=seglen", "engine=sim").workloads)


def test_a_check_a_workload_does_not_declare_is_a_skip_that_says_why_but_survival_always_judges() -> None:
    from hybridbench.checks.base import CheckResult
    from hybridbench.results.score import judged_by_of, only_where_judged

    cfg = composed("+experiment=seglen", "engine=sim")
    judged = judged_by_of(cfg.workloads)
    assert judged == {"sharegpt": frozenset({"ttft", "throughput"}),
                      "swebench": frozenset({"ttft", "throughput", "cache_hits"})}
    rows = [CheckResult(check, w, "seglen", "inconclusive" if check == "evictions" else "fail", 1.0, "x", "d")
            for check in ("evictions", "cache_hits", "ttft", "survival") for w in ("sharegpt", "multi_group")]
    out = {(r.check, r.workload): r for r in only_where_judged(rows, judged)}
    for check in ("evictions", "cache_hits"):
        skipped = out[check, "sharegpt"]
        assert skipped.status == "skip" and "workloads.sharegpt.judged_by" in skipped.detail
        assert out[check, "multi_group"].status != "skip"  # a load that declares nothing is judged by every check
    assert out["ttft", "sharegpt"].status == "fail" and out["survival", "sharegpt"].status == "fail"
    # Saved plans (plan.json's config) give the same mapping: a re-scoring judges as the run did.
    assert judged_by_of(OmegaConf.to_container(OmegaConf.structured(cfg).workloads)) == judged  # type: ignore[arg-type]


_GSP_SOURCE = re.compile(r"GSP (\d+)x(\d+), sys (\d+), q (\d+)")


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_a_published_gsp_figure_is_set_beside_its_own_load_on_gpus(experiment: str) -> None:
    # branching's GPU run kept the CPU's 8 x 8 prompts (system 1000, 4 in flight) beside SGLang issue #37834's figure,
    # measured on GSP 8 x 32, system 2048: a gap from another load, on the GPU run the report compares it with.
    cfg = composed(f"+experiment={experiment}", "engine=sglang")
    for pub in cfg.published:
        m = _GSP_SOURCE.search(pub.source)
        if m is None:
            continue
        params = cfg.workloads[pub.workload].params
        got = (params["num_groups"], params["prompts_per_group"], params["system_prompt_len"], params["question_len"])
        assert got == tuple(int(x) for x in m.groups()), (pub.source, got)
