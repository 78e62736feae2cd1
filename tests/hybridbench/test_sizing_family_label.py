"""sizing.family records which sizing file was composed; it is not a switch. `+experiment=survival engine=sglang
sizing=cpu sizing.family=gpu` composed the CPU sizing (20,000 KV tokens, 120 states, the crash load halved) and
relabelled it gpu, so the refusal of sizing=cpu on a serving engine, which reads the label, let it through: the plan put
--max-total-tokens 20000 --max-mamba-cache-size 120 on SGLang's command line with exit 0."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hybridbench.errors import ConfigError
from hybridbench.preview.compose import compose_run

ROOT = Path(__file__).resolve().parents[2]
WANT = r"^sizing\.family=gpu: the cpu sizing was composed \(sizing=cpu\)"


@pytest.mark.parametrize("label", ["sizing.family=gpu", "++sizing.family=gpu"])
def test_a_relabelled_sizing_is_refused(label: str) -> None:
    with pytest.raises(ConfigError, match=WANT):
        compose_run(["+experiment=survival", "engine=sglang", "sizing=cpu", label])


def test_the_run_refuses_it_before_anything_runs(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "hybridbench", "+experiment=survival", "engine=sim", "sizing=cpu",
                           "sizing.family=gpu", f"hydra.run.dir={tmp_path / 'run'}"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert proc.returncode == 2 and proc.stderr.startswith("error: sizing.family=gpu: the cpu sizing"), proc.stderr


def test_the_label_that_matches_is_fine() -> None:
    assert compose_run(["+experiment=survival", "engine=sglang", "sizing.family=gpu"]).cfg.sizing.family == "gpu"
    assert compose_run(["+experiment=survival", "engine=sim", "sizing=cpu"]).cfg.sizing.family == "cpu"


@pytest.mark.parametrize(("overrides", "want"), [
    # The survival experiment's CPU file (20,000 KV tokens, 120 states) composed on SGLang under the gpu label.
    (["+experiment=survival", "engine=sglang", "sizing@_global_=survival/cpu"],
     r"^sizing@_global_=survival/cpu: the cpu family's file was composed into a gpu run \(sizing=gpu\)"),
    # The CPU family's accuracy answers (48 tokens, 4 at a time) on SGLang.
    (["+experiment=radix", "engine=sglang", "sizing/all@_global_=cpu"],
     r"^sizing/all@_global_=cpu: the cpu family's file was composed into a gpu run \(sizing=gpu\)"),
    (["+experiment=survival", "engine=reference", "sizing@_global_=survival/gpu"],
     r"^sizing@_global_=survival/gpu: the gpu family's file was composed into a cpu run \(sizing=cpu\)"),
    (["+experiment=survival", "engine=sglang", "~sizing@_global_"],
     r"^~sizing@_global_: the gpu family's file for the experiment was removed"),
    # The same family's file of no experiment, or of another: seglen on SGLang ran a closed loop with no budget.
    (["+experiment=seglen", "engine=sglang", "sizing@_global_=none/gpu"],
     r"^sizing@_global_=none/gpu: the experiment's own sizing is seglen/gpu"),
    (["+experiment=seglen", "engine=sglang", "sizing@_global_=kl/gpu"],
     r"^sizing@_global_=kl/gpu: the experiment's own sizing is seglen/gpu"),
])
def test_the_familys_files_cannot_be_swapped_one_by_one(overrides: list[str], want: str) -> None:
    with pytest.raises(ConfigError, match=want):
        compose_run(overrides)


def test_the_run_refuses_a_swapped_file_before_anything_runs(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "hybridbench", "+experiment=survival", "engine=sim",
                           "sizing@_global_=survival/cpu", f"hydra.run.dir={tmp_path / 'run'}"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert proc.returncode == 2 and proc.stderr.startswith("error: sizing@_global_=survival/cpu: "), proc.stderr
    assert proc.stderr.count("\n") == 1 and not (tmp_path / "run").exists(), proc.stderr
