"""Whether each arm's server served the block (page) its plan computed, from the saved engine provenance.

vLLM sizes a hybrid model's block itself (hybridbench/engines/vllm_page.py computes it for the plan); a run records the
block the plan computed per arm (``planned_page``) beside the one each server reports on its /metrics (``served_page``);
a TokenSpeed run records the page the plan computed for its model (engines/tokenspeed_page.py) beside the one its
scheduler logs at start-up (hybridbench/engines/tokenspeed.py). Where both are known and differ, the plan's hit
granularity, its forecast and any expectation built on the page described a server that never ran: the verdict is marked
(results/marks.py) and report.md says so. An arm where either side is unknown (absent, or not a positive integer) says
nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["BlockMismatch", "block_mark", "block_mismatches"]


@dataclass(frozen=True, slots=True)
class BlockMismatch:
    arm: str
    planned: int  # tokens, as the plan computed
    served: int  # tokens, as the server reported


def _blocks(value: object) -> dict[str, int]:
    if not isinstance(value, Mapping):
        return {}
    # bool is an int: a hand-edited true is no block
    return {str(k): v for k, v in value.items() if isinstance(v, int) and not isinstance(v, bool) and v > 0}


def block_mismatches(engine_extra: Mapping[str, Any]) -> tuple[BlockMismatch, ...]:
    """The arms whose server reported another block than the plan computed, in the plan's arm order."""
    planned, served = _blocks(engine_extra.get("planned_page")), _blocks(engine_extra.get("served_page"))
    return tuple(BlockMismatch(arm, page, served[arm]) for arm, page in planned.items()
                 if arm in served and served[arm] != page)


def block_mark(mismatches: tuple[BlockMismatch, ...]) -> str:
    """The verdict mark for ``mismatches`` ("" for none)."""
    if not mismatches:
        return ""
    arms = ", ".join(f"{m.arm} {m.served} tokens (planned {m.planned})" for m in mismatches)
    return f"served another block than planned: {arms}"
