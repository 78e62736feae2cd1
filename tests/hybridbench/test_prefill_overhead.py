"""The prefill_overhead check end to end on the reference server: it catches ``copy_every_chunk``.

SGLang PR #11214's measurement (random prompts, one output token, nothing reused): input throughput with the
radix cache on over off. A healthy cache costs little; #27220-style per-chunk state copies cost a
multiple of the forward they interrupt, and the check must fail on them (docs/reference/checks.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The check reads the reference server's modelled clock: every repeat gives the same ratio (a zero-spread interval),
# so two paired repeats decide (four did before), and 512-token prompts (1024 before) already pay seven state copies
# each: the fault's ratio is 0.305 at two repeats as at four, far below the 0.85 floor, a healthy cache's 1.000.
SMALL = ["+experiment=prefill_overhead", "model=reference-tiny", "arms=[disabled,branching]", "repeats=2",
         "engine.workload_scale=1", "+workloads.random.params.num_prompts=6", "+workloads.random.params.input_len=512"]


def verdict(tmp_path: Path, *extra: str) -> tuple[int, dict[str, object], dict[str, object]]:
    proc = subprocess.run([sys.executable, "-m", "hybridbench", *SMALL, f"hydra.run.dir={tmp_path}", *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode in (0, 1), proc.stderr
    bundle = json.loads((tmp_path / "bundle.json").read_text())
    (check,) = [c for c in bundle["checks"] if c["check"] == "prefill_overhead"]
    server = next(t["server"] for t in bundle["trials"] if t["arm"] == "branching")
    return proc.returncode, check, server


@pytest.mark.parametrize("fault", [None, "copy_every_chunk"])
def test_prefill_overhead_passes_a_healthy_cache_and_fails_per_chunk_copies(tmp_path: Path, fault: str | None) -> None:
    extra = [f"engine.extra_args=[--inject-bug,{fault}]"] if fault else []
    code, check, server = verdict(tmp_path, *extra)
    assert server["log_cached_tokens"] == 0  # nothing was reused: what is measured is pure overhead
    if fault is None:
        assert code == 0 and check["status"] == "pass"
    else:
        assert code == 1 and check["status"] == "fail"
        assert isinstance(check["observed"], float) and check["observed"] < 0.85


def test_a_floor_of_zero_judges_nothing_rather_than_passing_everything() -> None:
    # checks.min_prefill_throughput_ratio=0: a ratio is never below it, so a cache-on arm at a thousandth of the
    # cache-off arm's input throughput passed. Like cache_hits' floor at 0, it is now a skip that says so.
    from hybridbench.checks.base import CheckInput
    from hybridbench.checks.correctness import prefill_overhead
    from hybridbench.config.schema import ChecksCfg

    sums = {("w", "disabled"): [{"input_throughput": v} for v in (1000.0, 1010.0, 990.0)],
            ("w", "lru"): [{"input_throughput": v} for v in (1.0, 1.1, 0.9)]}

    def rows(floor: float) -> list[tuple[str, str]]:
        inp = CheckInput(ChecksCfg(min_prefill_throughput_ratio=floor), ("disabled", "lru"), "disabled", ("w",), {},
                         sums, {}, 0, cache_off=frozenset({"disabled"}))
        return [(r.status, r.detail) for r in prefill_overhead(inp)]

    assert rows(0.0) == [("skip", "no floor set (checks.min_prefill_throughput_ratio=0), so not judged")]
    assert [s for s, _ in rows(0.85)] == ["fail"]
