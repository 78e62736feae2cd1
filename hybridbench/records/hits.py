"""What a record's hit count may be: one rule for the run's cache_hits check and for compare."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

from hybridbench.records.schema import Record

__all__ = ["hit_rate_by_repeat", "hits_alike_across_repeats", "impossible_hit_detail", "impossible_hits",
           "token_hit_rate", "unknown_hit_records", "unknown_hits"]


def impossible_hits(records: Iterable[Record]) -> list[Record]:
    """Records whose server reported a hit longer than the prompt, or a negative one: a build miscounting its hits."""
    return [r for r in records if r.cached_tokens is not None and not 0 <= r.cached_tokens <= r.prompt_tokens]


def unknown_hits(records: Iterable[Record]) -> int:
    """Completed requests whose server sent no hit count: their hits are unknown, never 0 (read as 0, a baseline's
    missing counts lift whatever it is compared with)."""
    return len(unknown_hit_records(records))


def unknown_hit_records(records: Iterable[Record]) -> list[Record]:
    """The completed requests :func:`unknown_hits` counts."""
    return [r for r in records if r.status == "ok" and r.cached_tokens is None]


def impossible_hit_detail(bad: list[Record], *, who: str = "", note: str = "") -> str:
    """``N [who ]request(s) report an impossible hit (the first one[, note])``."""
    r = bad[0]
    return (f"{len(bad)} {who + ' ' if who else ''}request(s) report an impossible hit (request {r.request_index} "
            f"r{r.repeat}: {r.cached_tokens} cached of a {r.prompt_tokens}-token prompt{note})")


def hits_alike_across_repeats(records: Iterable[Record]) -> bool:
    """Whether every repeat completed the same requests with the same hit counts, request by request: the repeats of
    a deterministic replay do; a server under concurrency's need not, even where their totals happen to agree (then
    a spread of 0 between repeats is chance, not a measurement of none)."""
    by_repeat: dict[int, dict[int, int | None]] = defaultdict(dict)
    for r in records:
        if r.status == "ok":
            by_repeat[r.repeat][r.request_index] = r.cached_tokens
    first, *rest = by_repeat.values() if by_repeat else ({},)
    return all(hits == first for hits in rest)


def token_hit_rate(records: Iterable[Record]) -> float:
    """Cached over prompt tokens of the completed requests; NaN when they hold no prompt token."""
    ok = [r for r in records if r.status == "ok"]
    prompt = sum(r.prompt_tokens for r in ok)
    return sum(r.cached_tokens or 0 for r in ok) / prompt if prompt else math.nan


def hit_rate_by_repeat(records: Iterable[Record]) -> dict[int, float]:
    """:func:`token_hit_rate` of each repeat that has one."""
    by: dict[int, list[Record]] = defaultdict(list)
    for r in records:
        by[r.repeat].append(r)
    return {rep: rate for rep, rs in sorted(by.items()) if math.isfinite(rate := token_hit_rate(rs))}
