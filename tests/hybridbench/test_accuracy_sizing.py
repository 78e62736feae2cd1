"""The accuracy probe's answer length and questions in flight per engine family, for every experiment.

48 tokens and 4 questions at a time are what the reference engine's tiny model can carry on two CPU cores; on a GPU
engine a gsm8k answer (a chain of thought of a few hundred tokens) is cut at 48 tokens on both arms, so neither arm
answers and the paired check finds no flipped question: a pass that compared nothing. They were the schema's defaults
and only `+experiment=accuracy`'s GPU sizing replaced them: `+experiment=radix engine=sglang
'checks.enabled=[...,accuracy]'` planned a GPU run at 48 tokens and 4 in flight. The GPU values are now the defaults
and the CPU family (conf/sizing/all/cpu.yaml) sets the CPU ones for every experiment.
"""

from __future__ import annotations

import pytest
from test_experiment_sizing import EXPERIMENTS, composed

GPU = (1024, 64)  # SGLang's gsm8k harness: --parallel 64; answers long enough to be right or wrong
CPU = (48, 4)


def _accuracy(*overrides: str) -> tuple[int, int]:
    c = composed(*overrides).checks
    return c.accuracy_max_tokens, c.accuracy_batch_size


# The values follow the family alone, and every GPU engine takes the gpu family (test_experiment_sizing asserts it
# per engine): one serving engine and the simulator stand for them.
@pytest.mark.parametrize("engine", ["sglang", "sim"])
@pytest.mark.parametrize("experiment", [*EXPERIMENTS, ""])
def test_a_gpu_engine_gets_the_gpu_accuracy_settings_in_every_experiment(experiment: str, engine: str) -> None:
    exp = [f"+experiment={experiment}"] if experiment else []
    assert _accuracy(*exp, f"engine={engine}") == GPU
    assert _accuracy(*exp, f"engine={engine}", "checks=strict") == GPU  # a checks profile does not bring them back


@pytest.mark.parametrize("experiment", [*EXPERIMENTS, ""])
def test_the_reference_engine_keeps_the_cpu_accuracy_settings(experiment: str) -> None:
    exp = [f"+experiment={experiment}"] if experiment else []
    assert _accuracy(*exp) == CPU
    assert _accuracy(*exp, "engine=sim", "sizing=cpu") == CPU  # a forecast of the CPU configuration
    assert _accuracy(*exp, "sizing=gpu") == GPU  # the reference engine given the GPU configuration


def test_a_value_given_on_the_command_line_still_wins() -> None:
    assert _accuracy("+experiment=radix", "engine=sglang", "checks.accuracy_max_tokens=256",
                     "checks.accuracy_batch_size=8") == (256, 8)
    assert _accuracy("+experiment=accuracy", "checks.accuracy_max_tokens=96") == (96, 4)
