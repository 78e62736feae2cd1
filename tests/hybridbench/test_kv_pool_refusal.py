"""A workload with a request that cannot fit the KV pool alone is refused at plan time on the engines whose pools
the plan fixes (the simulator, the reference server): one line naming the workload, the request, the pool and
the key that sets it, exit 2, no run directory, no server started. Plan time and run time use one comparison
(``reference_impl.engine.config.fits_kv_pool``), so a request exactly the pool's size runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from machine_fakes import fake_sglang
from omegaconf import OmegaConf

from hybridbench.config.schema import RunCfg
from hybridbench.config.store import register
from hybridbench.engines.gpu_pool import MARGIN, fixed_gpu_kv_pool
from hybridbench.engines.kv_pool import KVPool, refuse_unfit_requests
from hybridbench.engines.reference_cmd import reference_command, reference_kv_pool
from hybridbench.errors import ConfigError
from hybridbench.plan.arms import plan_arm
from reference_impl.engine.config import EngineConfig
from reference_impl.engine.core import EngineCore
from reference_impl.engine.cost_model import CostModel
from reference_impl.engine.hardware import get_gpu
from reference_impl.models import get_model
from reference_impl.server.args import UsageError, build_parser, parse_config
from reference_impl.server.requests import BadRequest, parse_generate
from workloads.trace import TraceRow

ROOT = Path(__file__).resolve().parents[2]
SMOKE_LONGEST = 356  # the smoke experiment's gsp requests: 340 input + 16 new tokens


def composed(*overrides: str) -> RunCfg:
    register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        run = OmegaConf.to_object(compose(config_name="config", overrides=list(overrides)))
    assert isinstance(run, RunCfg)
    return run


def cli(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hybridbench", *overrides, f"hydra.run.dir={run_dir}"],
                          check=False, cwd=ROOT, capture_output=True, text=True, timeout=300)


def refusal(done: subprocess.CompletedProcess[str], run_dir: Path) -> str:
    """The one line a refused run prints; it leaves no run directory and never starts a trial."""
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert not run_dir.exists(), sorted(p.name for p in run_dir.rglob("*"))
    return lines[0]


@pytest.mark.parametrize("engine", ["sim", "reference"])
def test_a_pool_smaller_than_a_request_is_refused_before_any_trial(tmp_path: Path, engine: str) -> None:
    run_dir = tmp_path / "run"
    line = refusal(cli(run_dir, "+experiment=smoke", f"engine={engine}",
                       f"engine.kv_tokens={SMOKE_LONGEST - 1}"), run_dir)
    assert line.startswith("error: workloads.gsp: 18 of 18 requests cannot fit the KV pool alone"), line
    assert f"needs {SMOKE_LONGEST} KV tokens (340 input + 16 new)" in line, line
    assert f"engine {engine}'s KV pool holds {SMOKE_LONGEST - 1} (engine.kv_tokens)" in line, line


@pytest.mark.parametrize(("kv_tokens", "refused"),
                         [(SMOKE_LONGEST + MARGIN - 1, True), (SMOKE_LONGEST + MARGIN, False)])
def test_a_gpu_pool_the_config_fixes_is_held_to_sglangs_own_limits(tmp_path: Path, kv_tokens: int,
                                                                    refused: bool) -> None:
    """engine.kv_tokens on a GPU engine is --max-total-tokens: SGLang takes an input only below max_req_len - 5 and
    clamps what it generates to max_req_len - 1 with max_req_len = kv_tokens - 1 (so a clamped answer failed every
    request at run time); the plan refuses it instead, and a pool that holds the request with that margin plans."""
    python = fake_sglang(tmp_path)  # SGLang 0.5.23's recorded --help
    done = subprocess.run([sys.executable, "-m", "hybridbench.preview", "--no-forecast", "+experiment=smoke",
                           "engine=sglang", "model=qwen3.5-9b", "engine.tp=1", f"engine.python={python}",
                           f"engine.kv_tokens={kv_tokens}"], check=False, cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    if not refused:
        assert done.returncode == 0, done.stderr
        return
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert (f"needs {SMOKE_LONGEST} KV tokens (340 input + 16 new) but engine sglang's KV pool holds "
            f"{SMOKE_LONGEST - 1} (engine.kv_tokens={kv_tokens}, less the server's {MARGIN}-token margin)"
            ) in done.stderr


def test_a_gpu_pool_is_whole_pages_and_only_what_the_config_fixes() -> None:
    assert fixed_gpu_kv_pool(composed("+experiment=smoke", "engine=sglang")) is None  # sized from memory at launch
    pool = fixed_gpu_kv_pool(composed("+experiment=smoke", "engine=tokenspeed", "engine.kv_tokens=1000",
                                      "engine.page_size=64"))
    assert pool is not None and pool.tokens == 960 - MARGIN


def reference_pool(*overrides: str) -> KVPool | None:
    return reference_kv_pool(composed("+experiment=smoke", "engine=reference", *overrides))


def reference_command_of(*overrides: str) -> list[str]:
    return reference_command(composed("+experiment=smoke", "engine=reference", *overrides), plan_arm("disabled"), 0)


def test_the_reference_pool_is_the_one_its_command_line_gives() -> None:
    # engine.extra_args come last on the server's command line, so their --max-total-tokens is the pool.
    given = KVPool(5000, "--max-total-tokens in engine.extra_args", *DEFAULT_CONTEXT)
    assert reference_pool("engine.kv_tokens=100", "engine.extra_args=[--max-total-tokens,5000]") == given
    assert reference_pool("engine.extra_args=['--max-total-tokens=70']") == KVPool(70, given.key, *DEFAULT_CONTEXT)
    assert reference_pool("engine.kv_tokens=100") == KVPool(100, "engine.kv_tokens", *DEFAULT_CONTEXT)
    default = reference_pool()
    assert default is not None and default.tokens == build_parser().get_default("max_total_tokens")


DEFAULT_CONTEXT = (32768, "the reference server's default; set --context-length in engine.extra_args")


def test_the_reference_context_length_is_the_one_its_server_derives() -> None:
    # The server's context is --context-length, else the tiny model's 32,768, never above the pool (args.py).
    for extra in ([], ["--context-length", "40000"], ["--context-length=1000"]):
        pool = reference_pool("engine.kv_tokens=70000", f"engine.extra_args=[{','.join(map(repr, extra))}]")
        server = parse_config(["--max-total-tokens", "70000", *extra])
        assert pool is not None and min(pool.context, pool.tokens) == server.context_length, extra
    # 0 was the server's "not given"; now it refuses it, and so does the plan (it runs the server's parser)
    with pytest.raises(UsageError, match="--context-length must be at least 2, got 0"):
        parse_config(["--max-total-tokens", "70000", "--context-length", "0"])


@pytest.mark.parametrize("extra", [
    # argparse takes int()'s spellings; the pool and context the server runs with are what its parser reads, not the
    # flag's exact text
    ["--max-total-tokens", "1_000"], ["--max-total-tokens", " 900"], ["--context-length", "1_500"],
    ["--max-total-tokens=4000", "--context-length", "3000"],
])
def test_the_reference_pool_and_context_are_what_the_servers_parser_reads(extra: list[str]) -> None:
    pool = reference_pool("engine.kv_tokens=70000", f"engine.extra_args=[{','.join(map(repr, extra))}]")
    server = parse_config(["--max-total-tokens", "70000", *extra])
    assert pool is not None and pool.tokens == server.engine.kv_tokens, extra
    assert min(pool.context, pool.tokens) == server.context_length, extra


@pytest.mark.parametrize("extra", [["--context-len", "1000"], ["--context=2000"], ["--max-total", "5000"]])
def test_an_abbreviated_flag_is_refused_at_plan_time(extra: list[str]) -> None:
    """The server's parser takes no abbreviation (the refusals of the flags hybridbench sets go by their names), so
    the server would stop at launch on one: the plan stops first, naming it."""
    with pytest.raises(ConfigError, match=r"^engine\.extra_args has --[a-z-]+, an abbreviation of --"):
        reference_command_of("engine.kv_tokens=70000", f"engine.extra_args=[{','.join(map(repr, extra))}]")


def test_a_request_longer_than_the_servers_context_is_refused_though_the_pool_holds_it(tmp_path: Path) -> None:
    # A 70K-token pool holds a 34K-token prompt, but the reference server caps its context at 32,768 and would
    # answer every such request 400 mid-run: a survival failure for what is a configuration error.
    run_dir = tmp_path / "run"
    line = refusal(cli(run_dir, "+experiment=prefill_overhead", "engine=reference", "engine.kv_tokens=70000",
                       "engine.workload_scale=1", "+workloads.random.params.input_len=34000",
                       "+workloads.random.params.num_prompts=2"), run_dir)
    assert line.startswith("error: workloads.random: 2 of 2 requests are longer than the context length"), line
    assert "(34000 input + 1 new) but engine reference's context length is 32768" in line, line
    assert "set --context-length in engine.extra_args" in line, line


@pytest.mark.parametrize(("inp", "new", "context"), [(99, 1, 100), (100, 1, 100), (100, 0, 100), (99, 0, 100),
                                                     (90, 10, 100), (90, 11, 100), (32767, 1, 32768)])
def test_plan_time_refuses_exactly_what_the_servers_context_check_rejects(inp: int, new: int, context: int) -> None:
    body = {"input_ids": [300] * inp, "sampling_params": {"max_new_tokens": max(1, new)}}
    try:
        parse_generate(body, 4096, context)
        rejected = False
    except BadRequest:
        rejected = True
    row = TraceRow(session_id=0, turn_id=0, ts=0.0, input_tokens=tuple(range(inp)), output_tokens=tuple(range(new)))
    try:
        refuse_unfit_requests("reference", KVPool(10 * context, "engine.kv_tokens", context, "x"), {"w": [row]})
        refused = False
    except ConfigError:
        refused = True
    assert refused == rejected


def test_a_pool_from_the_memory_model_names_the_memory_fraction(tmp_path: Path) -> None:
    # The smallest pool the memory model gives this model (a few state slots' worth of memory) is ~22K tokens:
    # 30K-token prompts cannot fit it.
    timer = CostModel(get_model("qwen3-next-80b-a3b"), get_gpu("h100"), tp=4)
    fraction = (timer.total_weight_bytes() + 1.0e9) / (timer.gpu.hbm_bytes * 4)
    run_dir = tmp_path / "run"
    line = refusal(cli(run_dir, "+experiment=prefill_overhead", "engine=sim", f"engine.mem_fraction_static={fraction}",
                       "+workloads.random.params.input_len=30000", "+workloads.random.params.num_prompts=2"), run_dir)
    assert "workloads.random: 2 of 2 requests" in line and "(30000 input + 1 new)" in line, line
    assert f"engine.mem_fraction_static={fraction} of 4 x h100" in line, line


@pytest.mark.parametrize("engine", ["sim", "reference"])
def test_a_request_exactly_the_pool_size_is_accepted_and_served(tmp_path: Path, engine: str) -> None:
    # The reference server also checks the prompt against its context length (the pool): 340 < 356 and
    # 340 + 16 <= 356 pass there too, so plan time, the HTTP layer and the engine agree at the boundary.
    done = cli(tmp_path / "run", "+experiment=smoke", f"engine={engine}", f"engine.kv_tokens={SMOKE_LONGEST}",
               "checks.enabled=[survival]", "repeats=1")
    assert done.returncode == 0, done.stderr
    assert "all 18 requests completed" in done.stdout


@pytest.mark.parametrize(("inp", "new", "pool"), [(99, 1, 100), (100, 0, 100), (99, 0, 100), (100, 1, 100),
                                                  (90, 10, 100), (90, 11, 100), (1, 1, 2), (1, 1, 1)])
def test_plan_time_refuses_exactly_what_the_engine_rejects_on_arrival(inp: int, new: int, pool: int) -> None:
    core = EngineCore(EngineConfig(kv_tokens=pool, state_slots=8))
    rejected = core.add_request(0, list(range(inp)), new).status == "aborted"
    row = TraceRow(session_id=0, turn_id=0, ts=0.0, input_tokens=tuple(range(inp)), output_tokens=tuple(range(new)))
    try:
        refuse_unfit_requests("sim", KVPool(pool, "engine.kv_tokens"), {"w": [row]})
        refused = False
    except ConfigError:
        refused = True
    assert refused == rejected
    assert refused == (inp + max(1, new) > pool)
