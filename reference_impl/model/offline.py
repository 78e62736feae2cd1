"""Drive an engine core and the model without a server: for tests, benchmarks and the logits contract."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from reference_impl.engine.config import EngineConfig
from reference_impl.engine.core import EngineCore, EngineRequest
from reference_impl.model.config import ModelConfig
from reference_impl.model.executor import Executor, RequestCtx
from reference_impl.model.model import HybridModel

__all__ = ["OfflineEngine", "OfflineResult", "cold_logits"]


@dataclass(frozen=True, slots=True)
class OfflineResult:
    rid: int
    output: list[int]
    cached_tokens: int
    logits: Tensor  # [num outputs, V]: the logits each output token was sampled from


class OfflineEngine:
    def __init__(
        self, engine: EngineConfig, model: HybridModel | ModelConfig | None = None, **faults: bool
    ) -> None:
        self.model = model if isinstance(model, HybridModel) else HybridModel(model or ModelConfig())
        self.core = EngineCore(engine)
        self.executor = Executor(self.core, self.model, **faults)
        self._rid = 0

    def submit(self, tokens: Sequence[int], max_new_tokens: int, *, temperature: float = 0.0) -> EngineRequest:
        req = self.core.add_request(self._rid, tokens, max_new_tokens)
        ctx = RequestCtx(temperature=temperature, seed=self._rid, keep_logits=True)
        self.executor.register(req, ctx)
        self._rid += 1
        return req

    def run(self) -> list[OfflineResult]:
        """Step until every submitted request finished; results in submission order."""
        reqs = [r for r, _ in self.executor.requests.values()]
        while self.executor.step() is not None:
            pass
        out = []
        for req in reqs:
            ctx = self.executor.requests[req.rid][1]
            if req.status != "finished":
                raise RuntimeError(f"request {req.rid} ended {req.status}: {req.error}")
            out.append(OfflineResult(req.rid, list(req.output), req.cached_tokens or 0, torch.stack(ctx.logits)))
            self.executor.forget(req.rid)
        return out

    def generate(self, tokens: Sequence[int], max_new_tokens: int) -> OfflineResult:
        self.submit(tokens, max_new_tokens)
        return self.run()[0]


def cold_logits(model: HybridModel, prompt: Sequence[int], output: Sequence[int]) -> Tensor:
    """Logits of a cache-free full prefill of ``prompt + output[:-1]`` at the positions that sampled ``output``."""
    seq = [*prompt, *output[:-1]]
    out = model.extend(seq, 0, model.empty_state(), torch.zeros(0, *model.kv_row_shape), all_logits=True)
    return out.logits[len(prompt) - 1 :]
