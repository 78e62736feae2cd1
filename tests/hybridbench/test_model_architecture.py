"""A GPU engine (sglang, vllm, tokenspeed) serves a checkpoint by the class its config.json names: a model with no
``model.architecture`` is refused at plan time, before the engine's interpreter is run, in one line naming the key
and the model (exit 2). marconi-7b is one: its hf_id is a Megatron-LM checkpoint with no config.json
(https://huggingface.co/nvidia/mamba2-hybrid-8b-3t-4k), which the plan used to pass on every GPU engine, leaving the
server to die at model load after downloading the weights. The CPU engines load no checkpoint and keep taking it.

The engines' interpreters are stand-ins answering with recorded help texts (machine_fakes.fake_server), so a plan
that is not refused builds every arm's real command line, as on a GPU machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from machine_fakes import fake_server

from hybridbench.errors import ConfigError
from hybridbench.prepare import prepare_run
from hybridbench.preview.compose import compose_run

ROOT = Path(__file__).resolve().parents[2]
# engine -> (its recorded help, a version the plan accepts)
BUILDS = {"sglang": ("sglang_help_new.txt", "0.5.23"), "vllm": ("vllm_help_main.txt", "0.32.0"),
          "tokenspeed": ("tokenspeed_help_0_1_1.txt", "0.1.1")}
REFUSAL = "model.architecture is empty for model {model}: engine={engine} serves only a checkpoint whose config.json "
MARCONI = "marconi-7b (nvidia/mamba2-hybrid-8b-3t-4k)"


def plan(tmp_path: Path, engine: str, *overrides: str) -> tuple[str, list[str]]:
    """The plan's outcome on ``engine`` ("planned" or its refusal) and the calls it made to the engine's interpreter."""
    calls = tmp_path / "calls.log"
    calls.write_text("")
    python = fake_server(tmp_path, *BUILDS[engine], calls)
    composed = compose_run([*overrides, f"engine={engine}", "engine.tp=1", f"engine.python={python}",
                            f"hydra.run.dir={tmp_path / 'run'}"])
    try:
        prepared = prepare_run(composed.cfg, composed.run_dir, composed.resolved)
    except ConfigError as exc:
        return str(exc), calls.read_text().splitlines()
    prepared.engine.close()
    return "planned", calls.read_text().splitlines()


@pytest.mark.parametrize("engine", sorted(BUILDS))
def test_marconi_7b_is_refused_on_every_gpu_engine_before_its_interpreter_runs(tmp_path: Path, engine: str) -> None:
    got, calls = plan(tmp_path, engine, "+experiment=smoke", "model=marconi-7b")
    assert got.startswith(REFUSAL.format(model=MARCONI, engine=engine)) and "\n" not in got, got
    assert calls == []  # neither the version query nor the help: nothing the installed build has could change it
    # The same run with a model the build serves plans: what was refused is the model, not the engine or the arms.
    served = "model=qwen3.5-9b" if engine == "tokenspeed" else "model=nemotron-h-8b"
    assert plan(tmp_path, engine, "+experiment=smoke", served)[0] == "planned"


@pytest.mark.parametrize("overrides", [
    ("+experiment=marconi", "arms=[lru]", "checks.baseline_arm=lru"),  # marconi's one arm a GPU build expresses
    ("+experiment=marconi",),  # as written: the model is refused before its replayer-only arms are looked at
    ("+experiment=radix", "model=marconi-7b"),
])
def test_marconi_7b_is_refused_whichever_experiment_names_it(tmp_path: Path, overrides: tuple[str, ...]) -> None:
    got, calls = plan(tmp_path, "sglang", *overrides)
    assert got.startswith(REFUSAL.format(model=MARCONI, engine="sglang")), got
    assert calls == []


def test_a_model_file_without_an_architecture_is_refused_until_it_names_one(tmp_path: Path) -> None:
    # A user's own conf/model file, found through Hydra's search path, that leaves the key out.
    models = tmp_path / "conf" / "model"
    models.mkdir(parents=True)
    (models / "my-hybrid.yaml").write_text("defaults:\n  - model_schema\nname: my-hybrid\nhf_id: /models/my-hybrid\n"
                                           "vocab_size: 32000\n")
    mine = ("+experiment=smoke", "model=my-hybrid", f"hydra.searchpath=[file://{tmp_path / 'conf'}]")
    got, _ = plan(tmp_path, "vllm", *mine)
    assert got.startswith(REFUSAL.format(model="my-hybrid (/models/my-hybrid)", engine="vllm")), got
    assert "set model.architecture to that class" in got
    assert plan(tmp_path, "vllm", *mine, "model.architecture=NemotronHForCausalLM")[0] == "planned"
    # The reference server's own model has no checkpoint either.
    got, _ = plan(tmp_path, "sglang", "+experiment=smoke", "model=reference-tiny")
    assert got.startswith(REFUSAL.format(model="reference-tiny (reference-tiny)", engine="sglang")), got


@pytest.mark.parametrize("overrides", [
    ("+experiment=marconi",),  # Marconi's comparison on the replay engine, with marconi-7b's byte facts
    ("+experiment=smoke", "engine=sim", "model=marconi-7b"),
    ("+experiment=smoke", "engine=reference", "model=reference-tiny"),
])
def test_the_cpu_engines_take_a_model_without_an_architecture(tmp_path: Path, overrides: tuple[str, ...]) -> None:
    composed = compose_run([*overrides, f"hydra.run.dir={tmp_path / 'run'}"])
    assert composed.cfg.model.architecture == ""
    prepared = prepare_run(composed.cfg, composed.run_dir, composed.resolved)
    prepared.engine.close()
    assert prepared.plan.trials


def test_the_run_refuses_in_one_line_with_exit_2_and_writes_nothing(tmp_path: Path) -> None:
    python = fake_server(tmp_path, *BUILDS["sglang"], tmp_path / "calls.log")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    proc = subprocess.run([sys.executable, "-m", "hybridbench", "+experiment=smoke", "engine=sglang",
                           "model=marconi-7b", f"engine.python={python}", f"hydra.run.dir={tmp_path / 'run'}"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, check=False,
                          env={**env, "HF_HOME": str(tmp_path / "hf")})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip() == (
        f"error: {REFUSAL.format(model=MARCONI, engine='sglang')}names its class (\"architectures\"); set "
        "model.architecture to that class, or choose a model that has one, e.g. model=nemotron-h-8b (engine=replay "
        "and engine=sim load no checkpoint)")
    assert not (tmp_path / "run").exists() and not (tmp_path / "calls.log").exists()  # no trace, no download
