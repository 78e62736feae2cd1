"""The kl check end to end on the reference server: passes a correct cache, catches each state fault.

docs/reference/checks.md: a check is only worth having if it fails on the bug it targets. ``branch_off_by_one``
(the branch point's state taken one token early) must fail the branch-point probe and nothing else;
``stale_cow_source`` (a hit copies another node's state) must fail the probes whose tree holds other
nodes (decode and branch); the prefill probe's tree holds one path, with no other state to copy by mistake.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["+experiment=kl", "model=reference-tiny", "arms=[lru,branching]", "checks.kl_samples=2",
         "workloads.gsp.params.num_groups=2", "workloads.gsp.params.prompts_per_group=2"]


def run(tmp_path: Path, *extra: str) -> tuple[int, dict[tuple[str, str], str], list[dict[str, object]]]:
    proc = subprocess.run([sys.executable, "-m", "hybridbench", *SMALL, f"hydra.run.dir={tmp_path}", *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode in (0, 1), proc.stderr
    bundle = json.loads((tmp_path / "bundle.json").read_text())
    verdicts = {(c["arm"], c["workload"]): c["status"] for c in bundle["checks"] if c["check"] == "kl"}
    samples = [json.loads(line) for line in (tmp_path / "kl.jsonl").read_text().splitlines()]
    return proc.returncode, verdicts, samples


def test_a_correct_cache_passes_every_probe_it_can_hit(tmp_path: Path) -> None:
    code, verdicts, samples = run(tmp_path)
    assert code == 0
    assert verdicts == {
        ("branching", "gsp/prefill"): "pass", ("branching", "gsp/decode"): "pass",
        ("branching", "gsp/branch"): "pass", ("lru", "gsp/decode"): "pass",
        ("lru", "gsp/prefill"): "skip", ("lru", "gsp/branch"): "skip",  # no_buffer: no such hit by design
    }
    probed = [s for s in samples if not s["skipped"]]
    assert probed and all(s["hit"] and s["kl"] < 1e-9 for s in probed)
    decode = [s for s in probed if s["variant"] == "decode"]
    assert all(s["cached_tokens"] >= s["min_cached"] > 2 for s in decode)  # the hit reaches decoded tokens


@pytest.mark.parametrize(("fault", "caught"), [("branch_off_by_one", {"gsp/branch"}),
                                               ("stale_cow_source", {"gsp/branch", "gsp/decode"})])
def test_each_state_fault_fails_the_probe_that_reaches_it(tmp_path: Path, fault: str, caught: set[str]) -> None:
    code, verdicts, _ = run(tmp_path, f"engine.extra_args=[--inject-bug,{fault}]", "arms=[branching]",
                            "checks.baseline_arm=branching")
    assert code == 1
    assert {w for (_arm, w), status in verdicts.items() if status == "fail"} == caught
