"""`hybridbench plan` (python -m hybridbench.preview): the run's own composition and plan-time path, nothing launched.

SGLang command lines are built against recorded real ``--help`` texts (tests/hybridbench/fixtures) served by a
stand-in interpreter that answers exactly the two calls the launcher makes (``-m sglang.launch_server --help`` and
the version query); test_sglang_real_help_plans.py does the same against the installed SGLang builds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hb_in_process import call_main
from machine_fakes import fake_sglang

from hybridbench.errors import ConfigError
from hybridbench.preview.__main__ import main
from hybridbench.preview.build import build_preview
from hybridbench.preview.compose import compose_run
from hybridbench.report.markdown import render_report

ROOT = Path(__file__).resolve().parents[2]


def plan_process(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hybridbench.preview", *args], capture_output=True, text=True,
                          timeout=300, check=False, cwd=ROOT, env={**os.environ, **(env or {})})


def plan(*args: str) -> subprocess.CompletedProcess[str]:
    """``hybridbench plan`` in this process (its ``main``: exit code, stdout, stderr), where a test is about what it
    prints, not about its process (an interpreter start and imports cost two thirds of a plan's CPU);
    :func:`plan_process` runs the real process."""
    return call_main(main, args)


def test_plan_json_lists_every_trial_with_its_size_and_the_reference_servers_command() -> None:
    proc = plan_process("--json", "+experiment=smoke")  # the real process, once
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out["arms"]) == {"disabled", "branching"}
    assert out["arms"]["branching"]["argv"][1:3] == ["-m", "reference_impl.server"]
    assert out["arms"]["branching"]["argv"][out["arms"]["branching"]["argv"].index("--arm") + 1] == "branching"
    # smoke runs two repeats on the reference engine (conf/sizing/smoke/cpu.yaml), arms interleaved within each
    assert [(t["arm"], t["workload"], t["repeat"]) for t in out["trials"]] == [
        (arm, "gsp", r) for r in range(2) for arm in ("disabled", "branching")]
    w = out["workloads"]["gsp"]
    assert all(t["requests"] == w["requests"] > 0 and t["input_tokens"] == w["input_tokens"] > 0
               for t in out["trials"])
    assert out["forecast"] is None and any("no GPU forecast" in x for x in out["warnings"])
    assert not (ROOT / out["run_dir"]).exists()  # nothing written where the run would write


def test_the_forecast_on_sim_is_what_a_sim_run_measures(tmp_path: Path) -> None:
    """Unsampled, the forecast is the sim engine's own run: the same hit rate and TTFT per arm and workload."""
    composed = compose_run(["+experiment=smoke", "engine=sim"])
    fc = build_preview(composed).forecast
    assert fc is not None and not fc["sampled"] and fc["total_s"] > 0
    run = subprocess.run([sys.executable, "-m", "hybridbench", "+experiment=smoke", "engine=sim",
                          f"hydra.run.dir={tmp_path}"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                         check=False)
    assert run.returncode == 0, run.stderr
    measured = json.loads((tmp_path / "bundle.json").read_text())["aggregates"]
    for t in fc["trials"]:
        m = measured[t["workload"]][t["arm"]]
        assert t["token_hit_rate"] == pytest.approx(m["token_hit_rate"])
        assert t["mean_ttft_ms"] == pytest.approx(m["mean_ttft_ms"])
    hits = {t["arm"]: t["token_hit_rate"] for t in fc["trials"]}
    assert hits["disabled"] == 0 and hits["branching"] > 0
    # The report sets a kept forecast beside what was measured, per workload and arm.
    bundle = json.loads((tmp_path / "bundle.json").read_text())
    report = render_report({**bundle, "forecast": fc})
    assert "## forecast vs measured" in report and "forecast vs measured" not in render_report(bundle)
    b = measured["gsp"]["branching"]
    assert (f"| gsp | branching | {hits['branching']:.1%} / {b['token_hit_rate']:.1%} | "
            f"{fc['trials'][1]['mean_ttft_ms']:,.0f} / {b['mean_ttft_ms']:,.0f} |") in report


@pytest.mark.parametrize(("args", "needle"), [
    (["arms=[disabled,nosuch]"], "unknown arm 'nosuch'"),
    (["+engine.nosuch_key=1"], "engine.nosuch_key"),
])
def test_plan_refuses_what_the_run_refuses_in_the_same_one_line(tmp_path: Path, args: list[str],
                                                                 needle: str) -> None:
    proc = plan("+experiment=smoke", *args)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and needle in proc.stderr, proc.stderr
    run = subprocess.run([sys.executable, "-m", "hybridbench", "+experiment=smoke", "engine=sim", *args,
                          f"hydra.run.dir={tmp_path / 'run'}"], capture_output=True, text=True, timeout=300,
                         cwd=ROOT, check=False)
    assert run.returncode == 2 and needle in run.stderr


def test_sglang_arms_are_built_from_the_interpreters_real_help_and_forecast_on_the_target_gpu(tmp_path: Path) -> None:
    python = fake_sglang(tmp_path, "sglang_help_seglen.txt")  # the seglen PR's build
    # its own process: the weights' warning reads HF_HOME and HF_HUB_OFFLINE from the environment it starts with
    proc = plan_process("--json", "--forecast-requests", "30", "+experiment=seglen", "engine=sglang",
                        "model=qwen3.5-9b", "engine.tp=1", f"engine.python={python}",
                        env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    seglen = out["arms"]["seglen"]["argv"]
    assert seglen[:3] == [str(python), "-m", "sglang.launch_server"]
    assert seglen[seglen.index("--model-path") + 1] == "Qwen/Qwen3.5-9B"
    assert seglen[seglen.index("--radix-eviction-policy") + 1] == "seglen"
    assert set(out["arms"]) == {"branching", "seglen"}  # the PR's comparison: cache off does not fit the budget
    assert "--disable-radix-cache" not in out["arms"]["branching"]["argv"]
    assert out["arms"]["seglen"]["env"] == {}
    fc = out["forecast"]
    assert (fc["gpu"], fc["model"], fc["tp"]) == ("h100", "qwen3.5-9b", 1)
    assert fc["total_s"] == pytest.approx(fc["repeats"] * sum(t["wall_s"] for t in fc["trials"]))
    assert {(t["arm"], t["workload"]) for t in fc["trials"]} == {(t["arm"], t["workload"]) for t in out["trials"]}
    # Capped where a sample stands for the load (Poisson arrivals of single requests), and said so; the SWE-bench
    # sessions' later turns wait for their earlier ones, so that load is simulated whole, and says why
    # (tests/hybridbench/test_preview_sampling.py).
    sampled = {t["workload"] for t in fc["trials"] if t["simulated"] < t["requests"]}
    assert sampled == set(out["workloads"]) - {"swebench"} and len(fc["sampled"]) == len(sampled)
    assert [line.split(":")[0] for line in fc["simulated_whole"]] == ["swebench"]
    # the GPU configuration: the server sizes its pools from memory, SGLang's own tracking interval
    for flag in ("--max-total-tokens", "--max-mamba-cache-size"):
        assert flag not in seglen, flag
    assert seglen[seglen.index("--mamba-track-interval") + 1] == "256"
    assert "SGLang PR #11214" in fc["known_error"]
    # Machine facts are warnings here (the run refuses them): no weights in the empty cache, downloads off.
    assert any(w.startswith("weights:") and "HF_HUB_OFFLINE" in w for w in out["warnings"])


def test_an_arm_the_installed_build_cannot_express_is_exit_2_naming_the_flag(tmp_path: Path) -> None:
    python = fake_sglang(tmp_path, "sglang_help_new.txt")  # a released build: no seglen policy
    proc = plan("--no-forecast", "+experiment=seglen", "engine=sglang", "engine.tp=1", f"engine.python={python}")
    assert proc.returncode == 2
    assert "--radix-eviction-policy seglen" in proc.stderr and proc.stderr.count("\n") == 1


def test_multirun_is_refused_in_one_line() -> None:
    proc = plan("-m", "+experiment=smoke")
    assert proc.returncode == 2 and "drop -m" in proc.stderr


@pytest.mark.parametrize(("args", "needle"), [
    (["+experiment=nosuch"], "nosuch"),
    (["+experiment=smoke", "load.kind=closed", "load.max_concurrency=0"], "max_concurrency"),
    (["+experiment=smoke", "checks.baseline_arm=lru"], "checks.baseline_arm"),
])
def test_composition_and_plan_errors_are_config_errors(args: list[str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        build_preview(compose_run(args), forecast=False)


def test_a_load_cut_to_its_first_sessions_says_so_in_the_plan_and_the_report(tmp_path: Path) -> None:
    """workloads.<name>.keep_sessions: the plan counts the kept sessions of how many, the generator's argv carries
    the cut, the run sends exactly those requests and its report says the load is not the full one."""
    proc = plan("--json", "+experiment=smoke", "engine=sim", "workloads.gsp.keep_sessions=3")
    assert proc.returncode == 0, proc.stderr
    w = json.loads(proc.stdout)["workloads"]["gsp"]
    assert w["sessions"] == 3 and w["sessions_kept_of"]["kept"] == 3 and w["sessions_kept_of"]["of"] > 3
    assert w["argv"][w["argv"].index("--keep-sessions") + 1] == "3"
    text = plan("+experiment=smoke", "engine=sim", "workloads.gsp.keep_sessions=3", "--no-forecast").stdout
    assert f"in the first 3 of {w['sessions_kept_of']['of']} sessions (workloads.gsp.keep_sessions)" in text
    run = subprocess.run([sys.executable, "-m", "hybridbench", "+experiment=smoke", "engine=sim", "repeats=1",
                          "workloads.gsp.keep_sessions=3", f"hydra.run.dir={tmp_path}"], capture_output=True,
                         text=True, timeout=300, cwd=ROOT, check=False)
    assert run.returncode in (0, 1), run.stderr
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert len({r["session_id"] for r in records}) == 3 and len(records) == 2 * w["requests"]  # two arms
    assert "Sessions after the first 3 of this load are not sent" in (tmp_path / "report.md").read_text()
    bad = plan("+experiment=smoke", "workloads.gsp.keep_sessions=-2")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "workloads.gsp.keep_sessions must be >= 0" in bad.stderr, bad.stderr


def test_the_plan_warns_of_a_check_the_engine_has_no_counter_for(tmp_path: Path) -> None:
    """vLLM exports neither sglang:evicted_tokens_total nor a load-back count: evictions and host_hits cannot
    decide there, and the plan says so before the run; SGLang has both counters, so nothing is said."""
    # vLLM main (its branching arm needs --mamba-cache-mode all) as far as the launcher can tell: --help, version
    vllm = tmp_path / "vllm-venv" / "python"
    vllm.parent.mkdir()
    vllm.write_text(f'#!/bin/sh\nif [ "$4" = "--help=all" ]; then cat {ROOT}/tests/hybridbench/fixtures/'
                    f'vllm_help_main.txt; exit 0; fi\nif [ "$1" = "-c" ]; then echo 0.33.0; exit 0; fi\nexit 1\n')
    vllm.chmod(0o755)
    l2 = ["--no-forecast", "--json", "+experiment=l2", "engine.tp=1"]
    out = json.loads(plan(*l2, "engine=vllm", f"engine.python={vllm}").stdout)["warnings"]
    assert [w.split(":")[0] for w in out if "it will be inconclusive" in w] == ["evictions", "host_hits"]
    assert any(w.startswith("host_hits: engine vllm reports none") and "sglang:load_back_tokens_total" in w
               for w in out)
    python = fake_sglang(tmp_path)
    out = json.loads(plan(*l2, "engine=sglang", f"engine.python={python}").stdout)["warnings"]
    assert not [w for w in out if "it will be inconclusive" in w]
    # host_hits without an arm with a host tier would judge nothing: refused (hybridbench.checks.subjects), not warned
    done = plan("--no-forecast", "--json", "+experiment=smoke", "engine=vllm", "engine.tp=1", f"engine.python={vllm}",
                "checks.enabled=[survival,host_hits]")
    assert done.returncode == 2 and "checks.enabled: host_hits judges the arms with a host tier" in done.stderr


def test_the_pools_line_says_where_a_kv_pool_size_came_from_once(tmp_path: Path) -> None:
    """The text plan printed "kv_tokens sized by the server from memory, kv_tokens_set_by the server": the JSON key
    leaked into the line. A size from a key says the key beside the number; one the server sizes says so once."""
    def pools(*args: str) -> str:
        proc = plan("--no-forecast", "+experiment=smoke", *args)
        assert proc.returncode == 0, proc.stderr
        (line,) = [x for x in proc.stdout.splitlines() if x.startswith("pools: ")]
        return line

    fixed = pools("engine=sim", "engine.kv_tokens=50000")
    assert fixed.startswith("pools: kv_tokens 50000 (set by engine.kv_tokens), ") and "set_by" not in fixed
    python = fake_sglang(tmp_path)
    served = pools("engine=sglang", f"engine.python={python}", "engine.tp=1")
    assert served.startswith("pools: kv_tokens sized by the server from memory, max_mamba_cache_size ")
    assert "set_by" not in served and "set by" not in served


def test_a_load_group_the_experiment_replaces_is_refused_by_plan_and_run(tmp_path: Path) -> None:
    # l2's sizing sets load.kind=trace as a value, after the group: load=closed ran a trace replay, without a word.
    needle = "load=closed: load.kind is trace once the experiment's values"
    proc = plan("+experiment=l2", "load=closed")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and needle in proc.stderr, proc.stderr
    run = subprocess.run([sys.executable, "-m", "hybridbench", "+experiment=l2", "engine=sim", "load=closed",
                          f"hydra.run.dir={tmp_path / 'run'}"], capture_output=True, text=True, timeout=300,
                         cwd=ROOT, check=False)
    assert run.returncode == 2 and needle in run.stderr and not (tmp_path / "run").exists()
    assert compose_run(["+experiment=l2", "engine=sim", "load=trace"]).cfg.load.kind == "trace"  # the same kind
    assert compose_run(["+experiment=l2", "engine=sim", "load='trace'"]).cfg.load.kind == "trace"  # quoted
