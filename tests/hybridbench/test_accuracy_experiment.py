"""+experiment=accuracy end to end on the reference engine with evalscope (envs/evalscope/build.sh): cache on and
off agree answer by answer, evalscope's own files are kept, and each fault that corrupts a restored state fails."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hybridbench.probes.accuracy import default_python
from hybridbench.results import read_run

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.accuracy


def hb(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    assert default_python().is_file(), "the evalscope env is missing: bash envs/evalscope/build.sh"
    return subprocess.run([sys.executable, "-m", "hybridbench", "+experiment=accuracy", *overrides,
                           f"hydra.run.dir={run_dir}"], capture_output=True, text=True, timeout=1500, check=False,
                          cwd=ROOT)


def test_cache_on_and_off_answer_alike_and_evalscope_files_are_kept(tmp_path: Path) -> None:
    proc = hb(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    run = read_run(tmp_path)
    samples = run.probe_samples["accuracy"]
    questions = [s for s in samples if s.index >= 0]
    passes = {(s.arm, s.pass_) for s in questions}
    assert passes == {("disabled", "cold"), *((a, p) for a in ("lru", "branching", "l2") for p in ("cold", "warm"))}
    per_pass = {p: sum(1 for s in questions if (s.arm, s.pass_) == p) for p in passes}
    assert set(per_pass.values()) == {16 + 6}  # every shipped gsm8k and aime25 question, in every pass
    assert all(s.mode == "exact" for s in questions)
    summaries = [s for s in samples if s.index < 0]
    assert all(s.cached_tokens is not None and s.cached_tokens > 0 for s in summaries if s.arm != "disabled")
    assert len(summaries) == 7 and all(s.wall_s is not None and s.wall_s > 0 for s in summaries)  # evalscope's time
    # evalscope's own predictions and reviews stay in the run dir, per arm and pass
    for arm, pass_ in passes:
        work = tmp_path / "accuracy" / arm / pass_
        assert list((work / "evalscope").rglob("predictions/**/gsm8k_*.jsonl")), work
        assert (work / "answers.jsonl").read_text().count("\n") == 22
    bundle = json.loads((tmp_path / "bundle.json").read_text())
    assert [c["status"] for c in bundle["checks"] if c["check"] == "accuracy"] == ["pass"] * 6
    report = (tmp_path / "report.md").read_text()
    assert "## accuracy" in report and "| branching | warm | " in report


@pytest.mark.parametrize("fault", ["stale_cow_source", "branch_off_by_one"])
def test_a_fault_that_corrupts_a_restored_state_fails_and_names_the_question(tmp_path: Path, fault: str) -> None:
    proc = hb(tmp_path, "arms=[disabled,branching]", f"engine.extra_args=[--inject-bug,{fault}]")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    bundle = json.loads((tmp_path / "bundle.json").read_text())
    failed = [c for c in bundle["checks"] if c["check"] == "accuracy" and c["status"] == "fail"]
    assert failed and all("first differing answer: " in c["detail"] for c in failed)
    rows = {(r["arm"], r["pass"]): r for r in bundle["accuracy"]}
    assert any(rows[("branching", p)]["first_difference"] for p in ("cold", "warm"))
    assert "first differing answer" in proc.stdout
