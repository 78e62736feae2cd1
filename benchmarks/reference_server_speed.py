"""Speed of the reference server's tiny model on this machine: prefill tokens/s and decode steps/s.

Runs the engine core + model executor in process (what the server's model thread does, without
HTTP), so the figures are the model loop's ceiling. Usage:

    python benchmarks/reference_server_speed.py [--prompt-len 2048] [--prompts 4] [--decode-steps 64]
"""

from __future__ import annotations

import random
import time
import warnings
from collections.abc import Sequence

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

from whole_command import count  # noqa: E402 - a sibling: run as a script

from hybridbench.errors import OneLineParser  # noqa: E402
from reference_impl.engine.config import EngineConfig  # noqa: E402
from reference_impl.model.config import ModelConfig  # noqa: E402
from reference_impl.model.model import HybridModel  # noqa: E402
from reference_impl.model.offline import OfflineEngine  # noqa: E402


def config(cache: str) -> EngineConfig:
    return EngineConfig(kv_tokens=65536, state_slots=256, cache=cache, chunked_prefill_size=2048)  # type: ignore[arg-type]


def prefill_rate(model: HybridModel, cache: str, prompt_len: int, prompts: int, **faults: bool) -> float:
    rng = random.Random(0)
    eng = OfflineEngine(config(cache), model, **faults)
    eng.generate([rng.randrange(300, 4096) for _ in range(64)], 1)  # warm-up
    t = time.perf_counter()
    for _ in range(prompts):
        eng.generate([rng.randrange(300, 4096) for _ in range(prompt_len)], 1)
    return prompts * prompt_len / (time.perf_counter() - t)


def decode_rate(model: HybridModel, batch: int, steps: int) -> float:
    rng = random.Random(1)
    eng = OfflineEngine(config("extra_buffer"), model)
    for _ in range(batch):
        eng.submit([rng.randrange(300, 4096) for _ in range(128)], steps)
    while eng.core.counters.decode_steps == 0:
        eng.executor.step()  # prefill first: only decode steps are timed
    t = time.perf_counter()
    n0 = eng.core.counters.decode_steps
    while eng.executor.step() is not None:
        pass
    return (eng.core.counters.decode_steps - n0) / (time.perf_counter() - t)


def main(argv: Sequence[str] | None = None) -> None:
    p = OneLineParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompt-len", type=count(1), default=2048)
    p.add_argument("--prompts", type=count(1), default=4)
    p.add_argument("--decode-steps", type=count(1), default=64)
    args = p.parse_args(argv)
    model = HybridModel(ModelConfig())
    print(f"model: layers {model.config.layers}, hidden {model.config.hidden}, vocab {model.config.vocab_size}")
    for cache in ("disabled", "no_buffer", "extra_buffer"):
        rate = prefill_rate(model, cache, args.prompt_len, args.prompts)
        print(f"prefill {cache:>12}: {rate:8.0f} tokens/s ({args.prompts} x {args.prompt_len}-token prompts)")
    fault = prefill_rate(model, "extra_buffer", args.prompt_len, args.prompts, copy_every_chunk=True)
    print(f"prefill extra_buffer + copy_every_chunk: {fault:8.0f} tokens/s")
    for batch in (1, 8, 32):
        rate = decode_rate(model, batch, args.decode_steps)
        print(f"decode batch {batch:>3}: {rate:7.1f} steps/s = {rate * batch:8.0f} tokens/s")


if __name__ == "__main__":
    main()
