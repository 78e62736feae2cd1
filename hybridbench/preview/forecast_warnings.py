"""What a forecast warns of, said the same by ``hybridbench plan`` and by a GPU run as it starts: requests the
modelled server refused, requests that would wait past engine.request_timeout_s, accuracy passes past
checks.accuracy_timeout_s, a vLLM block not known before the server starts (hits simulated at a finer page). Each
would leave verdicts failed or inconclusive, or a forecast off, for a reason the run could have named before its
first GPU hour."""

from __future__ import annotations

from typing import Any

from hybridbench.config.schema import RunCfg
from hybridbench.preview.accuracy_forecast import pass_timeout_warnings
from hybridbench.preview.forecast import timeout_warnings

__all__ = ["forecast_warnings"]


def forecast_warnings(fc: dict[str, Any], cfg: RunCfg) -> list[str]:
    """``fc``: a forecast's JSON (the plan's, or the run's forecast.json); none when there is no forecast."""
    if "none" in fc or "trials" not in fc:
        return []
    out = [f"forecast: {t['failed']} of {t['simulated']} simulated requests of {t['workload']} failed on "
           f"arm {t['arm']} (longer than the pools this config fixes?)" for t in fc["trials"] if t["failed"]]
    out += timeout_warnings(fc["trials"], cfg.engine.request_timeout_s)
    if why := fc.get("page_unknown"):  # hits come in whole served pages: a finer page overstates them
        page = fc.get("page_size", cfg.engine.page_size)
        if cfg.engine.name == "vllm":
            out.append(f"forecast: its hits are at engine.page_size's {page}-token granularity, not at the block vLLM "
                       f"serves, which is not known before it starts ({why}); vLLM hits whole blocks only, so the "
                       "forecast hit rate may be above the run's")
        else:  # TokenSpeed: a page it raises is a multiple of the one passed
            out.append(f"forecast: its hits are at engine.page_size's {page}-token granularity, and the page "
                       f"engine={cfg.engine.name} serves is not known before it starts ({why}); a larger page hits "
                       "whole pages of it only, so the forecast hit rate may be above the run's")
    if (acc := fc.get("accuracy")) is not None:
        out += [f"forecast: accuracy passes none ({acc['none']})"] if "none" in acc else pass_timeout_warnings(acc)
    return out
