"""The KV pool a GPU server runs with when the config fixes it (``engine.kv_tokens > 0``: ``--max-total-tokens``),
so a request that cannot fit it alone is refused at plan time, as on the CPU engines, instead of failing every
trial at run time and reading as a survival failure.

Without ``engine.kv_tokens`` the server sizes its pool from GPU memory at launch and nothing is fixed here.
SGLang (and TokenSpeed, its fork) serves a request whole only if ``input < max_req_len - 5`` and
``input + max_new_tokens <= max_req_len - 1``, with ``max_req_len = min(context_len - 1, kv_capacity - 1)``
(sglang 0.5.23 srt/managers/tp_worker.py ``get_worker_info``, srt/managers/utils.py ``validate_input_length``,
srt/managers/scheduler.py, which clamps ``max_new_tokens``: the harness asks every request for all its tokens,
so a clamped answer fails it). A pool of whole pages less ``MARGIN`` tokens meets both for any request.
"""

from __future__ import annotations

from hybridbench.config.schema import RunCfg
from hybridbench.engines.kv_pool import KVPool

__all__ = ["MARGIN", "fixed_gpu_kv_pool"]

MARGIN = 8  # max_req_len = kv - 1, input below max_req_len - 5: 7 tokens, and one more for the first new token


def fixed_gpu_kv_pool(cfg: RunCfg, page: int = 0, page_by: str = "") -> KVPool | None:
    """The pool ``engine.kv_tokens`` fixes for an SGLang-lineage server, in tokens a request may use; None when the
    server sizes its pool from memory. ``page``: the page the server serves when it is not ``engine.page_size``
    (TokenSpeed's cache recipe), ``page_by`` what says so."""
    kv = cfg.engine.kv_tokens
    if kv <= 0:
        return None
    page = page or max(cfg.engine.page_size, 1)
    usable = kv // page * page - MARGIN  # the pool is allocated in whole pages
    whole = f", in whole {page}-token pages ({page_by})" if page_by else ""
    return KVPool(max(usable, 0), f"engine.kv_tokens={kv}{whole}, less the server's {MARGIN}-token margin")
