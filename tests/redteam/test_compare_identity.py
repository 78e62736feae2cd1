"""compare, rescore and the results store against runs that are not what they claim: a plan listing a trial
twice, a run compared with its own copy, a ``latest:`` baseline or a history point of another sizing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hostile import clean, cli, load, make_run, save, second_repeat

pytestmark = pytest.mark.redteam


def _twice(p: dict[str, Any]) -> None:
    p["trials"] = p["trials"] + p["trials"]


@pytest.mark.parametrize("edited", [("base", "cand"), ("cand",)])
def test_a_plan_listing_its_trials_twice_is_refused_not_read_as_two_repeats(tmp_path: Path,
                                                                           edited: tuple[str, ...]) -> None:
    # One repeat a side is inconclusive (no spread to measure); with both plans listing their trials twice, each
    # trial's summary counted as two identical repeats, the TTFT and throughput intervals had zero width, and the
    # comparison passed (exit 0).
    runs = {name: make_run(tmp_path, name, night=i, plan=_twice if name in edited else None)
            for i, name in enumerate(("base", "cand"), start=1)}
    proc = cli("hybridbench.compare", runs["base"], runs["cand"])
    clean(proc)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: {runs[edited[0]] / 'plan.json'}: trials[2]: trial 000-gsp-disabled-r0 repeats "
                           "000-gsp-disabled-r0"), line


def test_rescore_refuses_a_plan_listing_a_repeat_twice_under_another_index(tmp_path: Path) -> None:
    def again(p: dict[str, Any]) -> None:
        p["trials"].append({**p["trials"][0], "index": 2})

    run = make_run(tmp_path, "run", plan=again)
    proc = cli("hybridbench.rescore", run)
    clean(proc)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "trial 002-gsp-disabled-r0 repeats 000-gsp-disabled-r0" in proc.stderr
    assert load(run / "plan.json")["trials"][2]["index"] == 2  # nothing rewritten


def test_a_run_compared_with_its_own_copy_is_refused_whatever_the_copy_edited(tmp_path: Path) -> None:
    # The copy kept bundle.json (its run id and time) but its plan's checks were edited: "same time and same config"
    # no longer held, and the run passed against itself (exit 0) as if a candidate build had been measured.
    base = second_repeat(make_run(tmp_path, "base", night=1))
    copy = Path(shutil.copytree(base, tmp_path / "copy"))
    plan = load(copy / "plan.json")
    plan["config"]["checks"]["ttft_regression"] = 0.2
    save(copy / "plan.json", plan)
    proc = cli("hybridbench.compare", base, copy)
    clean(proc)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    run_id = load(base / "bundle.json")["run_id"]
    assert proc.stderr.strip().splitlines() == [
        f"error: not comparable: {base} and {copy} are one run (bundle.json's run id {run_id[:12]}); compare two runs"]


def test_two_runs_of_two_repeats_still_compare(tmp_path: Path) -> None:
    base = second_repeat(make_run(tmp_path, "base", night=1))
    cand = second_repeat(make_run(tmp_path, "cand", night=2), stretch=1.02)
    proc = cli("hybridbench.compare", base, cand)
    clean(proc)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(("key", "value"), [("engine.chunked_prefill_size", 64), ("model.hf_id", "Qwen/Other-FP8")])
def test_latest_passes_over_a_newer_main_run_compare_would_refuse(tmp_path: Path, key: str, value: object) -> None:
    # latest: matched experiment, load and GPUs only: a newer main run at another sizing or checkpoint was picked
    # and compare then refused it (exit 2) every night, where an older main run was a baseline.
    def other(p: dict[str, Any]) -> None:
        section, name = key.split(".")
        p["config"][section][name] = value

    store = tmp_path / "store"
    good = make_run(store, "n1", night=1)
    make_run(store, "n2", night=2, plan=other)
    cand = make_run(tmp_path, "pr", night=3)
    proc = cli("hybridbench.compare", f"latest:{store}", cand)
    clean(proc)
    assert f"baseline: {good}" in proc.stderr.splitlines(), proc.stderr
    assert proc.returncode in (0, 1), proc.stderr  # one repeat a side: its timing rows are inconclusive
    shutil.rmtree(good)
    proc = cli("hybridbench.compare", f"latest:{store}", cand)
    assert proc.returncode == 2 and "no passing main run" in proc.stderr and "sizing" in proc.stderr, proc.stderr


@pytest.mark.parametrize("override", ["checks.enabled=[ttft", "checks.enabled={survival", "checks.ttft_regression=]"])
def test_an_override_yaml_cannot_read_is_one_line_and_the_run_is_untouched(tmp_path: Path, override: str) -> None:
    # An unclosed bracket raised yaml's ParserError through OmegaConf: a 20-line traceback (exit 1, which CI reads
    # as a failed check) in place of one line and exit 2.
    run = make_run(tmp_path, "run")
    before = (run / "bundle.json").read_bytes()
    proc = cli("hybridbench.rescore", run, override)
    clean(proc)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: overrides: a value is not YAML (") and line.endswith(override), line
    assert (run / "bundle.json").read_bytes() == before


def test_the_dashboard_draws_no_run_that_replaced_the_one_compared(tmp_path: Path) -> None:
    # compare.json names its runs by directory; main's directory overwritten by the next night's run put that run's
    # TTFT distribution under the old verdict, as if it were the baseline that was judged.
    from hybridbench.dashboard.site import build_site, page_name

    root = tmp_path / "results"
    main, pr = make_run(root, "main", night=1), make_run(root, "pr", night=2)
    assert cli("hybridbench.compare", main, pr).returncode in (0, 1)
    ids = (load(main / "bundle.json")["run_id"], load(pr / "bundle.json")["run_id"])
    drawn = (build_site(root, tmp_path / "site").out / page_name("compare", "pr")).read_text()
    assert "no distributions" not in drawn and "baseline · disabled" in drawn
    shutil.rmtree(main)
    make_run(root, "main", night=3)  # the next night, into the same directory
    page = (build_site(root, tmp_path / "site2").out / page_name("compare", "pr")).read_text()
    assert "baseline · disabled" not in page
    assert "holding other runs than it compared: no distributions" in page
    cmp = load(pr / "compare" / "compare.json")
    assert (cmp["base_run_id"], cmp["candidate_run_id"]) == ids


def _drop_arm(run: Path, arm: str) -> Path:
    """``run`` with every trial and record of ``arm`` gone, the arm still named in plan.json's arms."""
    plan, bundle = load(run / "plan.json"), load(run / "bundle.json")
    plan["trials"] = [t for t in plan["trials"] if t["arm"] != arm]
    bundle["trials"] = [t for t in bundle["trials"] if t["arm"] != arm]
    save(run / "plan.json", plan)
    save(run / "bundle.json", bundle)
    kept = [line for line in (run / "records.jsonl").read_text().splitlines() if json.loads(line)["arm"] != arm]
    (run / "records.jsonl").write_text("".join(f"{line}\n" for line in kept))
    return run


def test_an_arm_the_candidate_names_but_never_planned_is_not_a_pass(tmp_path: Path) -> None:
    # The candidate's plan names the cache arm but holds no trial of it: the pair was compared with nothing on the
    # candidate's side, survival passed "all 0 requests completed", every other row skipped, and the comparison
    # passed (exit 0) without the arm under test ever running.
    base = second_repeat(make_run(tmp_path, "base", night=1))
    cand = _drop_arm(second_repeat(make_run(tmp_path, "cand", night=2), stretch=1.02), "branching")
    proc = cli("hybridbench.compare", base, cand)
    clean(proc)
    assert proc.returncode == 1, proc.stdout
    rows = [d for d in load(cand / "compare" / "compare.json")["deltas"] if d["arm"] == "branching"]
    assert [(d["metric"], d["status"]) for d in rows] == [("survival", "inconclusive")]
    assert "the candidate did not run it" in rows[0]["detail"]
    # The other way round: the candidate's extra pair is listed, not compared.
    proc = cli("hybridbench.compare", cand, base)
    clean(proc)
    assert proc.returncode == 0, proc.stdout
    data = load(base / "compare" / "compare.json")
    assert "(gsp, branching) planned only in the candidate run" in data["not_compared"]
    assert all(d["arm"] != "branching" for d in data["deltas"])


def test_latest_never_picks_the_candidates_own_copy_in_the_store(tmp_path: Path) -> None:
    # The nightly copies its run into the store; comparing that run with latest:STORE picked its own copy (newest,
    # main, passing) and compare refused the pair as one run (exit 2), where last night's run was the baseline.
    store = tmp_path / "store"
    last_night = make_run(store, "n1", night=1)
    tonight = make_run(tmp_path / "runs", "nightly", night=2)
    shutil.copytree(tonight, store / "n2")
    proc = cli("hybridbench.compare", f"latest:{store}", tonight)
    clean(proc)
    assert f"baseline: {last_night}" in proc.stderr.splitlines(), proc.stderr
    assert proc.returncode in (0, 1), proc.stderr  # one repeat a side: its timing rows are inconclusive
