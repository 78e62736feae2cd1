"""A request longer than the context length the GPU server takes is refused at plan time.

SGLang, vLLM and TokenSpeed take config.json's context length unless their flag gives another, and refuse a longer
request whatever their pools hold (hybridbench/engines/context_length.py). ``model=nemotron-h-8b``
(Nemotron-H-8B-Base-8K, 8,192 tokens) planned radix's 10,624-token requests with exit 0; every one would have failed
on the GPUs. The releases' own parsers and derivations of these numbers: tests/sglang_oracle/
test_sglang_context_length.py, tests/vllm_cpu/test_vllm_config_resolution.py, tests/tokenspeed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_experiment_sizing import composed

from hybridbench.engines.context_length import served_context
from hybridbench.errors import ConfigError
from hybridbench.preview.build import build_preview
from hybridbench.preview.compose import compose_run

ROOT = Path(__file__).resolve().parents[2]


def test_the_8k_model_refuses_the_loads_past_8k_before_anything_runs() -> None:
    want = (r"^workloads\.gsp: 500 of 500 requests are longer than the context length engine sim serves "
            r"nemotron-h-8b with; the longest needs 10624 tokens .* serves 8185 input and 8190 input \+ new at most "
            r"\(model\.context_length=8192: 8192 less the server's own reserve\)")
    with pytest.raises(ConfigError, match=want):
        build_preview(compose_run(["+experiment=radix", "engine=sim", "model=nemotron-h-8b"]), forecast=False)
    build_preview(compose_run(["+experiment=survival", "engine=sim", "model=nemotron-h-8b"]), forecast=False)
    build_preview(compose_run(["+experiment=radix", "engine=sim"]), forecast=False)  # Qwen3-Next: 262,144


def test_the_run_refuses_it_too(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "hybridbench", "+experiment=prefill_overhead", "engine=sim",
                           "model=nemotron-h-8b", f"hydra.run.dir={tmp_path / 'run'}"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith("error: workloads.random: 50 of 50 requests are longer than the context length"), (
        proc.stderr)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("engine", "extra", "want"), [
    ("sglang", [], (8192, "model.context_length=8192", 8192 - 7, 8192 - 2)),
    ("sglang", ["--context-length", "4096"], (4096, "--context-length 4096 in engine.extra_args", 4096 - 7, 4096 - 2)),
    ("sglang", ["--max-model-len", "4096"], (8192, "model.context_length=8192", 8192 - 7, 8192 - 2)),
    ("sglang", ["--context-length", "4k"], (8192, "model.context_length=8192", 8192 - 7, 8192 - 2)),  # type=int
    ("tokenspeed", ["--max-model-len=4096"], (4096, "--max-model-len 4096 in engine.extra_args", 4096 - 7,
                                              4096 - 2)),
    ("vllm", ["--max-model-len", "4096"], (4096, "--max-model-len 4096 in engine.extra_args", 4095, 4096)),
    ("vllm", ["--max_model_len=2048"], (2048, "--max_model_len 2048 in engine.extra_args", 2047, 2048)),
    ("vllm", ["--max-model-len", "4k"], (4000, "--max-model-len 4k in engine.extra_args", 3999, 4000)),
    ("vllm", ["--max-model-len", "auto"], (8192, "model.context_length=8192", 8191, 8192)),  # never past the model's
    ("vllm", [], (8192, "model.context_length=8192", 8191, 8192)),
])
def test_the_context_each_server_takes(engine: str, extra: list[str], want: tuple[int, str, int, int]) -> None:
    cfg = composed(f"engine={engine}", "model=nemotron-h-8b")
    cfg.engine.extra_args = extra
    got = served_context(cfg)
    assert got is not None and (got.context, got.key, got.max_input, got.max_total) == want


def test_no_check_where_the_context_is_unknown_or_not_a_checkpoints() -> None:
    assert served_context(composed("engine=sglang", "model=nemotron-h-8b", "model.context_length=0")) is None
    assert served_context(composed("engine=reference", "model=nemotron-h-8b")) is None  # its own (kv_pool.py)
    assert served_context(composed("engine=replay", "model=marconi-7b")) is None
