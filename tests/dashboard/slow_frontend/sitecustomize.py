"""A planted code regression for the dashboard's results root: on ``PYTHONPATH``, the simulated server's frontend
(HTTP, tokenization, IPC before a request is scheduled: most of a short prompt's TTFT) takes 25% longer. The runs
made with it are configured exactly as the others, so the history must find the slowdown like for like (no sizing
change behind it), as it would a slower commit on main."""

from __future__ import annotations

from reference_impl.engine.cost_model import CostModel

_frontend_seconds = CostModel.frontend_seconds


def _slower(self: CostModel, prompt_tokens: int) -> float:
    return 1.25 * _frontend_seconds(self, prompt_tokens)


CostModel.frontend_seconds = _slower  # type: ignore[method-assign]
