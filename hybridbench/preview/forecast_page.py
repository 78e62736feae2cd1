"""The page a forecast simulates at: the one the run's server really serves, where the plan knows it.

SGLang and the reference server serve ``engine.page_size``. vLLM sizes a hybrid model's block itself
(hybridbench.engines.vllm_page: 272 tokens for Qwen3-Next on 4 x H100) and its align mode keeps mamba states at the
ends of blocks only, so its prefix cache hits whole blocks only: a forecast at ``engine.page_size`` (1) would
overstate its hits. The simulator then runs every cache-on arm as SGLang's extra_buffer with its page, checkpoint
grid and decode tracking all on that block (``SimEngine(block=...)``): SGLang's radix-cache semantics at vLLM's
block, which the forecast says in one line. Where the block cannot be said from the config the forecast keeps
``engine.page_size`` and warns. TokenSpeed is given ``engine.page_size`` (``--block-size`` /
``--prefix-granularity``; a page <= 1, which passed no flag, is refused: tokenspeed_cmd.py) but serves its cache
recipe's page where the model's recipe fixes one (hybridbench.engines.tokenspeed_page: 128 tokens for Qwen3.5 and
Nemotron-H on 0.1.1), its pages and hits whole pages of it as SGLang's are: the simulator runs at that page. On
0.1.0 a Qwen3.5 model's page depends on the scheduler build: the forecast keeps ``engine.page_size`` and warns.
"""

from __future__ import annotations

from dataclasses import dataclass

from hybridbench.config.schema import RunCfg
from hybridbench.engines.tokenspeed_page import planned_tokenspeed_page
from hybridbench.engines.vllm_page import vllm_page

__all__ = ["ForecastPage", "forecast_page"]


@dataclass(frozen=True, slots=True)
class ForecastPage:
    tokens: int  # the page (hit granularity) the simulator runs at
    set_by: str  # where that page comes from
    block: int = 0  # > 0: states and hits on whole blocks of this many tokens only (vLLM's align mode)
    cache_model: str = ""  # one line: what the simulator models of the server's cache ("" nothing to add)
    unknown: str = ""  # why the server's own page is not known, so the forecast's is engine.page_size's


def forecast_page(cfg: RunCfg) -> ForecastPage:
    e = cfg.engine
    asked = max(e.page_size, 1)
    if e.name == "tokenspeed":
        served = planned_tokenspeed_page(cfg)
        if not served.tokens:
            return ForecastPage(asked, f"engine.page_size={e.page_size}", unknown=served.why)
        return ForecastPage(served.tokens, served.why if served.tokens != asked else f"engine.page_size={asked}")
    if e.name != "vllm":
        return ForecastPage(asked, f"engine.page_size={e.page_size}")
    page = vllm_page(cfg.model, e)
    if not page.tokens:
        return ForecastPage(asked, f"engine.page_size={e.page_size}",
                            cache_model=f"SGLang's radix-cache semantics at engine.page_size's {asked}-token page, not "
                                        "at the block vLLM serves (not known before it starts)",
                            unknown=page.why)
    return ForecastPage(page.tokens, page.why, block=page.tokens,
                        cache_model=f"SGLang's radix-cache semantics at the {page.tokens}-token block vLLM serves: "
                                    "each cache-on arm keeps mamba states and hits on whole blocks only, as vLLM's "
                                    "align mode does (vLLM's scheduler and pools are not modelled)")
