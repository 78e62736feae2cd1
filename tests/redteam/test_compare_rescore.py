"""compare and rescore reading hostile runs: a candidate that did not complete is refused, ``latest:`` takes only
an unmodified, complete, passing main run, and a damaged file is one line with exit 2 (never 1, which CI reads as
a regression)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hostile import clean, cli, make_run

pytestmark = pytest.mark.redteam


@pytest.mark.parametrize("verdict", ["error", "interrupted"])
def test_compare_refuses_a_candidate_whose_own_run_did_not_complete(tmp_path: Path, verdict: str) -> None:
    base = make_run(tmp_path, "base", night=1)
    cand = make_run(tmp_path, "cand", night=2, bundle=lambda b: b.update(
        verdict=verdict, infrastructure_error="engine died: exit -9"))
    proc = cli("hybridbench.compare", base, cand)
    clean(proc)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: candidate {cand}: its own run ended {verdict} (engine died: exit -9); compare needs a run that "
        "completed (re-run it)"]


def _own_command(*overrides: str) -> Callable[[dict[str, Any]], None]:
    def edit(b: dict[str, Any]) -> None:
        b["provenance"]["command"] = " ".join(["python", "-m", "hybridbench", "+experiment=smoke", *overrides])
    return edit


def test_latest_takes_only_an_unmodified_complete_passing_main_run(tmp_path: Path) -> None:
    root = tmp_path / "store"
    good = make_run(root, "n1", night=1)
    rescored = make_run(root, "n2", night=2)
    assert cli("hybridbench.rescore", rescored, "checks.enabled=[survival]").returncode == 0
    make_run(root, "n3", night=3, bundle=lambda b: b.update(verdict="error"))
    make_run(root, "n4", night=4, bundle=lambda b: b.update(checks=[]))  # nothing checked: no baseline
    make_run(root, "n4b", night=4, bundle=_own_command("checks.ttft_regression=1e308"))  # loosened at run time
    cand = make_run(tmp_path, "pr", night=5)
    proc = cli("hybridbench.compare", f"latest:{root}", cand)
    clean(proc)
    assert f"baseline: {good}" in proc.stderr.splitlines()
    assert proc.returncode in (0, 1), proc.stderr


def test_compare_names_a_rescored_side(tmp_path: Path) -> None:
    base = make_run(tmp_path, "base", night=1)
    cand = make_run(tmp_path, "cand", night=2)
    # the fixture ran one repeat a side: its timing rows re-score inconclusive (exit 1), which is not the point here
    assert cli("hybridbench.rescore", base, "checks.ttft_regression=0.9").returncode in (0, 1)
    proc = cli("hybridbench.compare", base, cand)
    clean(proc)
    assert "note: the baseline's verdict is marked: re-scored, limits changed: checks.ttft_regression=0.9" in \
        proc.stderr
    data = json.loads((cand / "compare" / "compare.json").read_text())
    assert data["base_marks"] == ["re-scored, limits changed: checks.ttft_regression=0.9"]
    assert data["candidate_marks"] == []


def test_latest_on_an_empty_store_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    cand = make_run(tmp_path, "pr", night=1)
    proc = cli("hybridbench.compare", f"latest:{tmp_path / 'empty'}", cand)
    clean(proc)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith(f"error: latest:{tmp_path / 'empty'}: no passing main run")


def _deep(run: Path) -> None:
    (run / "bundle.json").write_text("[" * 200_000 + "]" * 200_000)


def _fifo(run: Path) -> None:
    (run / "bundle.json").unlink()
    os.mkfifo(run / "bundle.json")


def _zero(run: Path) -> None:
    (run / "records.jsonl").unlink()
    (run / "records.jsonl").symlink_to("/dev/zero")


def _record(edit: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        lines = (run / "records.jsonl").read_text().splitlines()
        first = json.loads(lines[0])
        edit(first)
        (run / "records.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    return damage


def _snapshot(key: str, value: object) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        bundle = json.loads((run / "bundle.json").read_text())
        bundle["trials"][1]["server"][key] = value
        (run / "bundle.json").write_text(json.dumps(bundle))
    return damage


def _foreign(run: Path) -> None:
    other = Path(__file__).resolve().parents[1] / "hybridbench" / "fixtures" / "runs" / "reference-smoke-kl"
    (run / "records.jsonl").write_bytes((other / "records.jsonl").read_bytes())


def _fewer_planned(run: Path) -> None:
    """A trial said to have planned 12 requests, its last 6 records gone: the trace on disk holds 18."""
    bundle = json.loads((run / "bundle.json").read_text())
    trial = bundle["trials"][1]
    trial["planned_requests"] = 12
    (run / "bundle.json").write_text(json.dumps(bundle))
    lines = (run / "records.jsonl").read_text().splitlines()
    kept = [line for line in lines if not (json.loads(line)["trial_id"] == trial["trial_id"]
                                           and json.loads(line)["request_index"] >= 12)]
    (run / "records.jsonl").write_text("\n".join(kept) + "\n")


# A bundle counting fewer planned requests than its trace hid the requests a trial lost (survival passed).
# Records of another run (another model, engine and plan) were scored as this run's: a pass, or a false fail.
# A NaN or a 1e308 in itl_ms ended both commands in a traceback and exit 1 (a regression, to CI); a null crash count
# crashed rescore; failures logged as one string, not a list, were not read at all: survival passed.
ITL_NAN = _record(lambda r: r.update(itl_ms=[float("nan")] * 3))
ITL_HUGE = _record(lambda r: r.update(itl_ms=[1e308, 1e308]))


@pytest.mark.parametrize("damage", [_deep, _fifo, _zero, _fewer_planned, _foreign,
                                    _record(lambda r: r.update(arm="branching")),
                                    ITL_NAN, ITL_HUGE, _snapshot("crashes", None),
                                    _snapshot("crashes", "x"), _snapshot("crashes", -1),
                                    _snapshot("server_failures", "mamba state sanity check failed")])
def test_compare_and_rescore_read_a_damaged_run_as_one_line_exit_2(tmp_path: Path, damage: object) -> None:
    base = make_run(tmp_path, "base", night=1)
    cand = make_run(tmp_path, "cand", night=2)
    damage(cand)  # type: ignore[operator]
    for module, args in (("hybridbench.compare", (base, cand)), ("hybridbench.rescore", (cand,))):
        proc = cli(module, *args, timeout=30)
        clean(proc)
        assert proc.returncode == 2, (module, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and str(cand) in proc.stderr, proc.stderr


def test_a_trace_linked_out_of_the_run_is_not_read(tmp_path: Path) -> None:
    from hybridbench.compare.runs import load_run

    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text('{"any": "file on the machine"}\n')
    run = make_run(tmp_path / "store", "r", night=1)
    (run / "traces").mkdir(exist_ok=True)
    (run / "traces" / "gsp.jsonl").unlink(missing_ok=True)  # the fixture's own trace, replaced by the link
    (run / "traces" / "gsp.jsonl").symlink_to(outside)
    assert load_run(run).workload_digests["gsp"].trace is None  # compared by its arguments, the file unread
    (run / "traces" / "gsp.jsonl").unlink()
    (run / "traces" / "gsp.jsonl").write_bytes(outside.read_bytes())
    assert load_run(run).workload_digests["gsp"].trace is not None  # the run's own trace is read


def test_a_candidate_server_that_crashed_fails_survival_in_compare_as_in_its_own_run(tmp_path: Path) -> None:
    """The run's survival check counts the snapshot's crashes; compare read only deaths and logged failures, and
    passed a candidate whose server had crashed twice ("0 lost")."""
    base = make_run(tmp_path, "base", night=1)
    cand = make_run(tmp_path, "cand", night=2)
    _snapshot("crashes", 2)(cand)
    proc = cli("hybridbench.compare", base, cand, "-o", tmp_path / "out", timeout=60)
    clean(proc)
    assert proc.returncode == 1, proc.stderr
    data = json.loads((tmp_path / "out" / "compare.json").read_text())
    survival = [d for d in data["deltas"] if d["metric"] == "survival" and d["status"] == "fail"]
    assert survival and "crashed 2 time(s)" in json.dumps(survival), data["deltas"]


def test_a_bundle_counting_its_traces_metadata_line_is_read_at_the_traces_count(tmp_path: Path) -> None:
    """rescore once wrote planned_requests as the trace's rows plus its metadata line (fb25310 to 2dd5731): such a
    bundle is read, at the trace's count; only a smaller count (which hides losses) is refused."""
    from hybridbench.results import read_run

    run = make_run(tmp_path, "old-rescore")
    bundle = json.loads((run / "bundle.json").read_text())
    for t in bundle["trials"]:
        t["planned_requests"] = 19
    (run / "bundle.json").write_text(json.dumps(bundle))
    assert {t.planned_requests for t in read_run(run).trials} == {18}
    proc = cli("hybridbench.rescore", run, timeout=60)
    clean(proc)
    assert proc.returncode == 1, proc.stderr  # one repeat: its timing rows are inconclusive, as the run's were
    survival = [c for c in json.loads((run / "bundle.json").read_text())["checks"] if c["check"] == "survival"]
    assert survival and all(c["status"] == "pass" for c in survival), survival  # 19 planned read 1 lost


KL_RUN = Path(__file__).resolve().parents[1] / "hybridbench" / "fixtures" / "runs" / "reference-smoke-kl"


@pytest.mark.parametrize(("logprob", "code"), [(-1000.0, 1), (float("nan"), 1), (1e308, 2), (float("inf"), 2)])
def test_a_kl_sample_with_an_absurd_logprob_fails_kl_or_is_refused_never_a_traceback(
        tmp_path: Path, logprob: float, code: int) -> None:
    """A logprob of -1000 against its twin near 0 overflowed k3 (OverflowError, exit 1 as a traceback): it is a
    divergence the kl check fails, as a NaN one (a server's numerics bug) is. One no server gives (1e308, +inf) is
    refused in one line."""
    import shutil

    run = tmp_path / "kl"
    shutil.copytree(KL_RUN, run)
    lines = (run / "kl.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["hit_logprobs"] = [logprob] * len(first["hit_logprobs"])
    (run / "kl.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    proc = cli("hybridbench.rescore", run, timeout=60)
    clean(proc)
    assert proc.returncode == code, proc.stderr
    if code == 1:
        kl = [c for c in json.loads((run / "bundle.json").read_text())["checks"] if c["check"] == "kl"]
        assert any(c["status"] == "fail" for c in kl), kl
    else:
        assert len(proc.stderr.strip().splitlines()) == 1 and "kl.jsonl:1" in proc.stderr, proc.stderr
