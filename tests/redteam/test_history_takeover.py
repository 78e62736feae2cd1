"""``python -m hybridbench.results history`` where main's series changed under it: a series that took over from one
of another GPU, model or engine is held as one of another load is (the nights after the change are judged by
nothing: exit 1, not "ok"), and a run whose time is unknown is never read as the latest night."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hostile import clean, cli, make_run, set_metric

pytestmark = pytest.mark.redteam


def results(*args: object) -> tuple[int, str, str]:
    proc = cli("hybridbench.results", *args)
    clean(proc)
    return proc.returncode, proc.stdout, proc.stderr


def _gpu(p: dict[str, Any]) -> None:
    p["config"]["engine"]["gpu"] = "a100"  # the sim's label: "4x a100 (modelled)" (a real run's: nvidia-smi's names)


def _model(p: dict[str, Any]) -> None:
    p["config"]["model"] = {**p["config"]["model"], "name": "qwen3.5-9b", "hf_id": "Qwen/Qwen3.5-9B"}


@pytest.mark.parametrize(("change", "says"), [(_gpu, "gpu 4x h100 (modelled) -> 4x a100 (modelled)"),
                                              (_model, "model qwen3-next-80b-a3b -> qwen3.5-9b")])
def test_a_gpu_or_model_changed_on_main_leaves_its_first_nights_unjudged_not_passed(
        tmp_path: Path, change: Any, says: str) -> None:
    # Four nights on one GPU (or model), then main's runner (or the experiment's model) changed and the code slowed by
    # half with it: the new series had no baseline ("insufficient data"), the old one still read "ok" of nights
    # before the change, and history exited 0 -- the nights since judged by nothing, the slower code their baseline.
    for i in range(4):
        make_run(tmp_path, f"n{i}", night=i, bundle=set_metric(100.0))
    for i in (4, 5):
        make_run(tmp_path, f"n{i}", night=i, bundle=set_metric(150.0), plan=change)
    rc, out, err = results("history", tmp_path, "--json", tmp_path / "h.json")
    ttft = [ln for ln in out.splitlines() if " mean_ttft_ms " in ln]
    new = [ln for ln in ttft if ln.startswith("insufficient data")]
    assert len(new) == 2 and all(f"changed on main at n4: {says}" in ln for ln in new), ttft
    assert all("ended at n3: later nights ran " in ln for ln in ttft if ln.startswith("ok")), ttft
    assert rc == 1, out + err
    # Four nights at the new setting judge themselves again (two of baseline, two judged).
    for i in (6, 7):
        make_run(tmp_path, f"n{i}", night=i, bundle=set_metric(150.0), plan=change)
    rc, out, err = results("history", tmp_path)
    assert rc == 0 and "insufficient data" not in out, out + err


def test_a_gpu_series_beside_one_still_running_is_no_change(tmp_path: Path) -> None:
    # Two runners (two GPUs) each running the nightly: neither series ended, so neither replaced the other.
    for i in range(4):
        make_run(tmp_path, f"h{i}", night=i, bundle=set_metric(100.0))
    for i in (2, 3):
        make_run(tmp_path, f"a{i}", night=i, bundle=set_metric(150.0), plan=_gpu)
    rc, out, err = results("history", tmp_path)
    assert rc == 0 and "changed on main" not in out, out + err


def _gpu_as(name: str) -> Any:
    return lambda p: p["config"]["engine"].update(gpu=name)


def test_a_runner_added_long_after_a_change_is_no_change(tmp_path: Path) -> None:
    # a100 nights, then main moved to h100 (a change, judged again after four nights), then a b200 runner added beside
    # the h100 one still running: the a100 series ended long before and h100 took over from it, so b200 replaced
    # nothing. Grouped across GPUs without that rule, b200 read as "the GPU changed on main" and held history at
    # exit 1 for four nights.
    for i in range(3):
        make_run(tmp_path, f"a{i}", night=i, bundle=set_metric(100.0), plan=_gpu_as("a100"))
    for i in range(3, 9):
        make_run(tmp_path, f"h{i}", night=i, bundle=set_metric(100.0))
    for i in (7, 8):
        make_run(tmp_path, f"b{i}", night=i, bundle=set_metric(100.0), plan=_gpu_as("b200"))
    rc, out, err = results("history", tmp_path)
    ttft = [ln for ln in out.splitlines() if " mean_ttft_ms " in ln]
    assert not any("changed on main at b7" in ln for ln in ttft), ttft
    assert any("changed on main at h3" in ln for ln in ttft), ttft  # the real change is still named
    assert rc == 0, out + err


def _undated(b: dict[str, Any]) -> None:
    set_metric(100.0)(b)
    b["created"] = ""  # a bundle without its time (the reader takes one: "written before created existed")


def test_a_run_without_a_time_is_never_the_latest_night(tmp_path: Path) -> None:
    # Four nights at 100, then four at 150: a regression. A run without a time sorted after every dated night (pandas
    # puts NaT last), so it was judged as tonight: the baseline median became the slow nights' and history said "ok".
    for i, ttft in enumerate((100.0,) * 4 + (150.0,) * 4):
        make_run(tmp_path, f"n{i}", night=i, bundle=set_metric(ttft))
    make_run(tmp_path, "undated", bundle=_undated)
    rc, out, err = results("history", tmp_path, "--arm", "branching")
    ttft = [ln for ln in out.splitlines() if " mean_ttft_ms " in ln]
    assert len(ttft) == 1 and ttft[0].startswith("regression"), ttft
    assert rc == 1, out + err


def test_latest_takes_the_newest_dated_main_run_not_one_without_a_time(tmp_path: Path) -> None:
    from hybridbench.results import read_run
    from hybridbench.results.store import latest_passing_main

    root = tmp_path / "store"
    make_run(root, "undated", bundle=_undated)
    make_run(root, "n1", night=1)
    newest = make_run(root, "n2", night=2)
    candidate = make_run(tmp_path, "pr", night=3, bundle=lambda b: b["provenance"].update(pr_number=7))
    assert latest_passing_main(root, read_run(candidate)) == newest
