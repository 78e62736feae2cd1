"""`python -m hybridbench.compare` judges everything the baseline ran: nothing the candidate left out or never sent
reads as "no regression" (red-team findings; each test failed on the code before its fix)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_compare import A100, H100, finished, verdicts, write_run

from hybridbench.compare.__main__ import main


def _without_arm(run: Path, arm: str) -> Path:
    """The run as if its plan never had ``arm`` (a pull request that dropped it)."""
    plan = json.loads((run / "plan.json").read_text())
    plan["arms"] = [a for a in plan["arms"] if a != arm]
    plan["trials"] = [t for t in plan["trials"] if t["arm"] != arm]
    (run / "plan.json").write_text(json.dumps(plan))
    kept = [line for line in (run / "records.jsonl").read_text().splitlines() if json.loads(line)["arm"] != arm]
    (run / "records.jsonl").write_text("".join(line + "\n" for line in kept))
    return run


def test_a_candidate_that_dropped_an_arm_of_the_baseline_is_inconclusive(tmp_path: Path) -> None:
    # The PR's run lacked main's seglen arm: the comparison judged lru alone, said "Not compared: arm 'seglen' only
    # in the baseline run" in a note, and passed (exit 0) though seglen's regression could be the one dropped.
    a, b = write_run(tmp_path / "a"), _without_arm(write_run(tmp_path / "b"), "seglen")
    assert main([str(a), str(b)]) == 1
    row = verdicts(b)[("seglen", "survival")]
    assert row["status"] == "inconclusive" and "the candidate did not run it" in str(row["detail"])
    assert json.loads((b / "compare" / "compare.json").read_text())["verdict"] == "inconclusive"


def test_an_arm_only_the_candidate_ran_is_a_note_not_a_verdict(tmp_path: Path) -> None:
    # The other way round nothing of main's goes unjudged: the PR added an arm.
    a, b = _without_arm(write_run(tmp_path / "a"), "seglen"), write_run(tmp_path / "b")
    assert main([str(a), str(b)]) == 0
    assert {arm for arm, _ in verdicts(b)} == {"lru"}


def test_turns_not_sent_without_a_failure_are_losses(tmp_path: Path) -> None:
    # Records saying "skipped" with no failed request beside them (a driver that stopped sending): three of each
    # seglen trial's twenty requests were never sent, yet survival said "all 60 requests completed" and passed.
    a, b = write_run(tmp_path / "a"), write_run(tmp_path / "b", skip=3)
    assert main([str(a), str(b)]) == 1
    row = verdicts(b)[("seglen", "survival")]
    assert row["status"] == "fail" and row["candidate"] == 9
    # Beside the failed turn they follow, they are that failure's, not losses of their own (as before).
    c = write_run(tmp_path / "c", lose=1, skip=3)
    main([str(a), str(c)])
    assert verdicts(c)[("seglen", "survival")]["candidate"] == 3


def test_a_gpu_run_that_names_no_gpus_beside_one_that_does_is_inconclusive(tmp_path: Path) -> None:
    # Main ran on four A100s (bundle.json names them); the PR's bundle names none, so compare could not see that it
    # ran on faster GPUs: a slower build on faster hardware passed (exit 0), as it did before runs on other GPUs
    # were refused.
    a = finished(write_run(tmp_path / "a", engine="sglang", ttft_ms=150.0, duration_s=20.0), A100)
    b = finished(write_run(tmp_path / "b", engine="sglang", ttft_ms=145.0, duration_s=19.5), [],
                 created="2026-11-25T10:00:00+00:00")
    assert main([str(a), str(b)]) == 1
    row = verdicts(b)[("-", "survival")]
    assert row["status"] == "inconclusive" and "the candidate names no GPUs" in str(row["detail"])
    # A CPU engine names no GPUs on either side: nothing to tell.
    c, d = write_run(tmp_path / "c"), write_run(tmp_path / "d")
    assert main([str(c), str(d)]) == 0


def _served_on(run: Path, gpu: str) -> Path:
    plan = json.loads((run / "plan.json").read_text())
    plan["config"]["engine"]["gpu"] = gpu
    (run / "plan.json").write_text(json.dumps(plan))
    return run


def test_gpu_runs_that_both_name_no_gpus_are_inconclusive(tmp_path: Path) -> None:
    # Neither bundle names its GPUs (nvidia-smi missing on both hosts): the h100 label alone vouched for the hardware,
    # and a slower build on faster GPUs passed (exit 0).
    def run(name: str, gpu: str, machine: dict[str, object] | None, **kw: float) -> Path:
        return finished(_served_on(write_run(tmp_path / name, engine="sglang", **kw), gpu), [],
                        created=f"2026-11-2{len(name)}T10:00:00+00:00", machine=machine)

    a, b = run("a", "h100", XEON, ttft_ms=150.0), run("bb", "h100", XEON, ttft_ms=145.0)
    assert main([str(a), str(b)]) == 1
    row = verdicts(b)[("-", "survival")]
    assert row["status"] == "inconclusive" and "neither run names its GPUs" in str(row["detail"])
    # Served on the CPU (a vLLM CPU build, engine.gpu=cpu) the CPU is the hardware: the same one decides.
    c, d = run("ccc", "cpu", XEON, ttft_ms=150.0), run("dddd", "cpu", XEON, ttft_ms=145.0)
    assert main([str(c), str(d)]) == 0
    e = run("eeeee", "cpu", EPYC, ttft_ms=145.0)
    assert main([str(c), str(e)]) == 1
    assert "whether both ran on the same CPU is unknown" in str(verdicts(e)[("-", "survival")]["detail"])
    # A baseline saved before engine.gpu was normalised holds "CPU": the same label, read case-blind (it was "not
    # comparable: engine.gpu is 'CPU' in the baseline and 'cpu' in the candidate", and no CPU run)
    f = run("ffffff", "CPU", XEON, ttft_ms=150.0)
    assert main([str(f), str(d)]) == 0


def test_a_hit_count_missing_from_some_requests_is_unknown_not_zero(tmp_path: Path) -> None:
    # The candidate's hit rate fell from 0.25 to 0.15; the baseline's build left cached_tokens out of half its
    # responses, read as 0 hits, so its rate looked like 0.125 and the drop passed as +0.025.
    a, b = write_run(tmp_path / "a", cached=50), write_run(tmp_path / "b", cached=30)
    lines = [json.loads(line) for line in (a / "records.jsonl").read_text().splitlines()]
    for r in lines:
        r["cached_tokens"] = None if r["request_index"] % 2 else r["cached_tokens"]
    (a / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert main([str(a), str(b)]) == 1
    row = verdicts(b)[("seglen", "token_hit_rate")]
    assert row["status"] == "inconclusive" and "baseline 30 of 60" in str(row["detail"])


def test_completed_requests_without_a_ttft_leave_the_ttft_row_undecided(tmp_path: Path) -> None:
    # The candidate's requests all completed, none with a first token seen: its TTFT row skipped, and throughput's
    # and the hit rate's passes passed the comparison (exit 0) with its TTFT never measured.
    a, b = write_run(tmp_path / "a"), write_run(tmp_path / "b")
    lines = [json.loads(line) for line in (b / "records.jsonl").read_text().splitlines()]
    for r in lines:
        r["first_token_s"] = None if r["arm"] == "seglen" else r["first_token_s"]
    (b / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert main([str(a), str(b)]) == 1
    assert verdicts(b)[("seglen", "ttft")]["status"] == "inconclusive"


def test_a_failure_the_candidates_server_logged_is_a_loss(tmp_path: Path) -> None:
    # The PR's server logged "idle sanity check failed" during a seglen trial and still answered every request:
    # survival passed ("all 60 requests completed") and so did the comparison.
    a = finished(write_run(tmp_path / "a"), H100)
    b = finished(write_run(tmp_path / "b"), H100, created="2026-11-25T10:00:00+00:00")
    bundle = json.loads((b / "bundle.json").read_text())
    seglen = next(t for t in bundle["trials"] if t["arm"] == "seglen")
    seglen["server"] = {"server_failures": ["idle sanity check failed (#12007)"]}
    (b / "bundle.json").write_text(json.dumps(bundle))
    assert main([str(a), str(b)]) == 1
    row = verdicts(b)[("seglen", "survival")]
    assert row["status"] == "fail" and "the server logged: idle sanity check failed" in str(row["detail"])


XEON = {"cpu": "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", "cores": 8}
EPYC = {"cpu": "AMD EPYC 7B13", "cores": 8}


def test_wall_clock_timings_of_the_reference_server_compare_only_on_the_same_recorded_cpu(tmp_path: Path) -> None:
    # engine=reference timed on the wall clock: a PR's run on a faster CPU hid a 10% slower build (pass, exit 0).
    def run(name: str, machine: dict[str, object] | None, **kw: float) -> Path:
        return finished(write_run(tmp_path / name, engine="reference", **kw), [],
                        created=f"2026-11-2{len(name)}T10:00:00+00:00", machine=machine)

    base = run("a", XEON)
    for name, machine in (("bb", EPYC), ("ccc", {**XEON, "cores": 4}), ("dddd", None)):  # None: an older bundle
        cand = run(name, machine, ttft_ms=104.0)
        assert main([str(base), str(cand)]) == 1, name
        v = verdicts(cand)
        for metric in ("ttft", "throughput"):
            row = v[("seglen", metric)]
            assert row["status"] == "inconclusive", (name, row)
            assert "CPU" in str(row["detail"])
        assert v[("seglen", "token_hit_rate")]["status"] == "pass"  # hits do not depend on the host
    same = run("eeeee", dict(XEON), ttft_ms=104.0)
    assert main([str(base), str(same)]) == 0
    assert verdicts(same)[("seglen", "ttft")]["status"] == "pass"


def test_compare_does_not_pass_timings_over_ok_records_without_an_end_time(tmp_path: Path) -> None:
    # An ok record without an end time counted as completed inside a duration that never saw it (red team).
    base, cand = write_run(tmp_path / "a"), write_run(tmp_path / "b")
    lines = [json.loads(x) for x in (cand / "records.jsonl").read_text().splitlines()]
    for r in lines:
        if r["arm"] == "seglen" and r["request_index"] == 19:  # the last request of each trial: its end unseen
            r["end_s"] = None
    (cand / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert main([str(base), str(cand)]) == 1
    v = verdicts(cand)
    for metric in ("ttft", "throughput", "survival"):
        assert v[("seglen", metric)]["status"] == "inconclusive", v[("seglen", metric)]
        assert "end time" in str(v[("seglen", metric)]["detail"])
    assert v[("lru", "throughput")]["status"] == "pass"


def test_a_candidate_beside_another_runs_bundle_is_refused_not_compared(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    # The PR's run was killed after its last request, before bundle.json; the directory still held the bundle of an
    # earlier PR run on the baseline's GPUs. Without a bundle the comparison is inconclusive (no GPUs named); with
    # the other run's, it compared on that run's GPUs and passed, exit 0.
    a = finished(write_run(tmp_path / "a", engine="sglang"), H100)
    b = write_run(tmp_path / "b", engine="sglang")
    assert main([str(a), str(b)]) == 1
    earlier = finished(write_run(tmp_path / "earlier", engine="sglang"), H100, created="2026-11-25T10:00:00+00:00")
    bundle = json.loads((earlier / "bundle.json").read_text())
    bundle["provenance"]["plan_fingerprint"] = "0123456789abcdef"  # the earlier run's plan, not b's
    (b / "bundle.json").write_text(json.dumps(bundle))
    capsys.readouterr()
    assert main([str(a), str(b)]) == 2
    assert "another run's bundle" in capsys.readouterr().err


def test_a_pair_the_baseline_completed_nothing_of_compares_nothing_and_never_passes(tmp_path: Path) -> None:
    # Main's seglen lost every request; the PR's completed them all. Survival passed and seglen's TTFT, throughput and
    # hit-rate rows skipped (nothing to pair): beside lru's passes the comparison passed, exit 0, with seglen's timing
    # and hits compared with nothing.
    a, b = write_run(tmp_path / "a", lose=20), write_run(tmp_path / "b")
    assert main([str(a), str(b)]) == 1
    v = verdicts(b)
    assert v[("seglen", "survival")]["status"] == "pass"
    for metric in ("ttft", "throughput", "token_hit_rate"):
        row = v[("seglen", metric)]
        assert row["status"] == "inconclusive" and "compared nothing but survival" in str(row["detail"]), row
    assert {d["status"] for (arm, _), d in v.items() if arm == "lru"} == {"pass"}
    assert json.loads((b / "compare" / "compare.json").read_text())["verdict"] == "inconclusive"
    # The PR lost a quarter of seglen's requests, each one main lost too: survival skips ("the baseline lost them
    # too"), and with every other seglen row skipped the comparison passed, exit 0, all the same.
    c = write_run(tmp_path / "c", lose=5)
    assert main([str(a), str(c)]) == 1
    v = verdicts(c)
    assert v[("seglen", "survival")]["status"] == "skip"
    assert {v[("seglen", m)]["status"] for m in ("ttft", "throughput", "token_hit_rate")} == {"inconclusive"}
