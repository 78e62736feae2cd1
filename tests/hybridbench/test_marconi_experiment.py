"""+experiment=marconi end to end on the replay engine: Marconi's trees and baselines replayed from a
Marconi-format trace, its published direction checked on the records, and what no other engine can run
refused at plan time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from hb_in_process import HbHere, hb_here_fixture  # noqa: F401 - the hb_here fixture

from hybridbench.checks.base import CheckInput
from hybridbench.checks.marconi import marconi_trends
from hybridbench.config.schema import ChecksCfg
from hybridbench.engines.replay import marconi_ttft_ms
from hybridbench.records.schema import DETERMINISTIC_HITS, Record

ROOT = Path(__file__).resolve().parents[2]


def hb(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hybridbench", "+experiment=marconi", *args], capture_output=True,
                          text=True, timeout=300, check=False, cwd=ROOT)


def trends(run: Path) -> dict[str, dict[str, Any]]:
    bundle = json.loads((run / "bundle.json").read_text())
    return {c["arm"]: c for c in bundle["checks"] if c["check"] == "marconi_trends"}


def hit_rates(run: Path) -> dict[str, float]:
    hit: dict[str, list[int]] = {}
    for line in (run / "records.jsonl").read_text().splitlines():
        r = json.loads(line)
        assert r["modelled"] is True
        got = hit.setdefault(r["arm"], [0, 0])
        got[0] += r["cached_tokens"]
        got[1] += r["prompt_tokens"]
    return {arm: c / p for arm, (c, p) in hit.items()}


def test_marconi_above_both_baselines_at_a_marconi_capacity_and_the_check_reads_the_records(tmp_path: Path) -> None:
    run = tmp_path / "ok"
    proc = hb("workloads.swebench.params.num_sessions=10", "engine.capacity_bytes=1e10", f"hydra.run.dir={run}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    rates = hit_rates(run)
    assert rates["marconi"] > rates["sglang_plus"] > rates["vllm_plus"] > 0
    got = trends(run)
    assert {a: c["status"] for a, c in got.items()} == {"marconi vs sglang_plus": "pass",
                                                         "marconi vs vllm_plus": "pass"}
    assert abs(got["marconi vs vllm_plus"]["observed"] - (rates["marconi"] - rates["vllm_plus"])) < 1e-9
    bundle = json.loads((run / "bundle.json").read_text())
    assert bundle["modelled"] is True and bundle["verdict"] == "pass"
    assert all(t["server"]["evicted_states"] > 0 for t in bundle["trials"])
    published = {p["baseline_arm"]: p for p in bundle["published"]}
    assert published["vllm_plus"]["direction"] == published["sglang_plus"]["direction"] == "same"
    assert published["vllm_plus"]["mark"] == "not comparable"  # Marconi's simulator on its real traces
    assert "## published vs this run" in (run / "report.md").read_text()


def test_a_trend_marconi_does_not_show_fails_and_one_no_eviction_exercised_is_inconclusive(tmp_path: Path) -> None:
    # 5 GB is below Marconi's SWE-bench range (40-100 GB): there its eviction loses to SGLang+'s on this trace.
    tight = tmp_path / "tight"
    proc = hb("workloads.swebench.params.num_sessions=10", "engine.capacity_bytes=5e9", f"hydra.run.dir={tight}")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    rates = hit_rates(tight)
    assert rates["marconi"] < rates["sglang_plus"]
    assert trends(tight)["marconi vs sglang_plus"]["status"] == "fail"
    roomy = tmp_path / "roomy"
    proc = hb("workloads.swebench.params.num_sessions=3", "engine.capacity_bytes=1e13", "arms=[sglang_plus,marconi]",
              "checks.enabled=[marconi_trends]", f"hydra.run.dir={roomy}")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert trends(roomy)["marconi vs sglang_plus"]["status"] == "inconclusive"


def test_arms_only_the_replayer_has_are_refused_elsewhere_and_bad_replay_input_is_one_line(tmp_path: Path,
                                                                                        hb_here: HbHere) -> None:
    # refusals: the entry in this process (the runs above and below are real processes)
    for args, needle in ((("engine=reference",), "use engine=replay"), (("engine=sim",), "use engine=replay"),
                         (("arms=[disabled,sglang_plus]",), "cache-off arm"),
                         (("engine.capacity_bytes=0",), "engine.capacity_bytes"),
                         (("arms=[sglang_plus,lru]", "engine.page_size=16"), "page size 1")):
        proc = hb_here("+experiment=marconi", *args, f"hydra.run.dir={tmp_path / 'x'}")
        assert proc.returncode == 2, (args, proc.stderr[-2000:])
        assert needle in proc.stderr and "Traceback" not in proc.stderr, (args, proc.stderr[-2000:])


def test_marconi_ttft_model_is_its_published_step_line() -> None:
    # Marconi, arXiv 2411.19379: 20.46 ms under 50 tokens, 73.4 ms at 1K, 1,710 ms from 31,950 on.
    assert round(marconi_ttft_ms(0), 2) == round(marconi_ttft_ms(49), 2) == 20.46
    assert round(marconi_ttft_ms(1000), 1) == 73.4
    assert round(marconi_ttft_ms(10**6)) == round(marconi_ttft_ms(31_950)) == 1710


def _record(arm: str, cached: int | None) -> Record:
    # as the replay engine writes them (its snapshots below say the replay is deterministic): one replay decides
    return Record(run_id="r", trial_id="t", arm=arm, workload="w", repeat=0, request_index=0, session_id=0, turn_id=0,
                  scheduled_s=0.0, sent_s=0.0, first_token_s=0.1, end_s=0.1, prompt_tokens=100, output_tokens=1,
                  cached_tokens=cached, status="ok", modelled=True)


def test_marconi_trends_verdicts_from_hits_and_evictions() -> None:
    def verdict(marconi: int, sglang_plus: int | None, evicted: int = 5) -> str:
        arms = ("sglang_plus", "marconi")
        base = [_record("sglang_plus", 60), _record("sglang_plus", sglang_plus)] if sglang_plus is None else \
            [_record("sglang_plus", sglang_plus)]
        inp = CheckInput(ChecksCfg(), arms, "sglang_plus", ("w",),
                         {("w", "marconi"): [_record("marconi", marconi)], ("w", "sglang_plus"): base},
                         {}, {("w", a): [{"evicted_states": evicted, DETERMINISTIC_HITS: True}] for a in arms}, 0)
        (result,) = marconi_trends(inp)
        assert result.arm == "marconi vs sglang_plus"
        return result.status

    assert verdict(60, 40) == "pass"
    assert verdict(40, 60) == "fail"
    assert verdict(50, 50) == "inconclusive"  # a tie compared nothing
    assert verdict(60, 40, evicted=0) == "inconclusive"  # nothing evicted: the policies never ran
    # The baseline's second request carries no hit count: read as 0 its rate was 30%, and marconi's 50% passed.
    assert verdict(50, None) == "inconclusive"


def _rates_input(marconi: list[float], sglang_plus: list[float], *, modelled: bool) -> CheckInput:
    """Each repeat one request of 10,000 prompt tokens, cached at the repeat's rate; both caches evicted. ``modelled``:
    the replay engine's records, its snapshots saying the replay is deterministic (a trace load)."""
    def recs(arm: str, rates: list[float]) -> list[Record]:
        return [Record(run_id="r", trial_id=f"t{r}", arm=arm, workload="w", repeat=r, request_index=0, session_id=0,
                       turn_id=0, scheduled_s=0.0, sent_s=0.0, first_token_s=0.1, end_s=0.1, prompt_tokens=10_000,
                       output_tokens=1, cached_tokens=round(rate * 10_000), status="ok", modelled=modelled)
                for r, rate in enumerate(rates)]

    arms = ("sglang_plus", "marconi")
    records = {("w", "marconi"): recs("marconi", marconi), ("w", "sglang_plus"): recs("sglang_plus", sglang_plus)}
    snaps = {("w", a): [{"evicted_states": 5, DETERMINISTIC_HITS: modelled}] * len(marconi) for a in arms}
    return CheckInput(ChecksCfg(), arms, "sglang_plus", ("w",), records, {}, snaps, 0)


def test_marconi_trends_needs_a_lead_past_rounding_or_past_the_spread_between_repeats() -> None:
    def row(marconi: list[float], sglang_plus: list[float], *, modelled: bool = True) -> tuple[str, str]:
        (result,) = marconi_trends(_rates_input(marconi, sglang_plus, modelled=modelled))
        return result.status, result.detail

    # A deterministic replay (the replay engine's modelled records): 40.04% against 40.00% is a lead no report shows
    # (both "40.0%"), and it passed as Marconi's direction.
    status, detail = row([0.4004], [0.4000])
    assert status == "inconclusive" and "within" in detail and "0.1 pt" in detail, detail
    assert row([0.45], [0.40])[0] == "pass" and row([0.40], [0.45])[0] == "fail"
    # A measured run (a server under concurrency: scheduling changes what is cached): one repeat has no spread to
    # clear, so a lead of 5 points is no verdict either way.
    status, detail = row([0.45], [0.40], modelled=False)
    assert status == "inconclusive" and "1 paired repeat(s)" in detail, detail
    assert row([0.40], [0.45], modelled=False)[0] == "inconclusive"
    # Three repeats: a mean lead of ~4 points inside a spread of 30 decides nothing; clear of it, it passes or fails.
    status, detail = row([0.62, 0.30, 0.60], [0.40, 0.41, 0.39], modelled=False)
    assert status == "inconclusive" and "CI" in detail and "3 paired repeats" in detail, detail
    assert row([0.45, 0.47, 0.44], [0.40, 0.41, 0.39], modelled=False)[0] == "pass"
    assert row([0.40, 0.41, 0.39], [0.45, 0.47, 0.44], modelled=False)[0] == "fail"
    # Leads of 5 points in each repeat (1e-17 apart in floating point) are no measured spread: the requests hit
    # differently in each repeat, so the agreement is chance, not an interval of width 1e-17 that passed.
    status, detail = row([0.45, 0.46, 0.44], [0.40, 0.41, 0.39], modelled=False)
    assert status == "inconclusive" and "hit differently" in detail, detail


def _hits_input(marconi: list[list[int]], sglang_plus: list[list[int]], *, replay: bool,
                status: str = "ok") -> CheckInput:
    """Per repeat, each request's cached tokens of a 100-token prompt; ``replay``: the trials' snapshots say what the
    replay engine under a trace load says of its hits (records.schema.DETERMINISTIC_HITS)."""
    def recs(arm: str, repeats: list[list[int]]) -> list[Record]:
        return [Record(run_id="r", trial_id=f"t{rep}", arm=arm, workload="w", repeat=rep, request_index=i,
                       session_id=i, turn_id=0, scheduled_s=0.0, sent_s=0.0, first_token_s=0.1, end_s=0.1,
                       prompt_tokens=100, output_tokens=1, cached_tokens=hit, status=status,  # type: ignore[arg-type]
                       modelled=True)
                for rep, hits in enumerate(repeats) for i, hit in enumerate(hits)]

    arms = ("sglang_plus", "marconi")
    snap = {"evicted_states": 5, **({DETERMINISTIC_HITS: True} if replay else {})}
    records = {("w", "marconi"): recs("marconi", marconi), ("w", "sglang_plus"): recs("sglang_plus", sglang_plus)}
    return CheckInput(ChecksCfg(), arms, "sglang_plus", ("w",), records, {},
                      {("w", a): [snap] * len(marconi) for a in arms}, 0)


def test_modelled_is_not_deterministic_only_a_replay_of_a_trace_is() -> None:
    """The simulator's records are modelled too, but its Poisson arrivals follow each repeat's seed, so another repeat
    caches other tokens: one modelled repeat passed a 5-point lead as if it were a deterministic replay."""
    (sim,) = marconi_trends(_hits_input([[45, 45]], [[40, 40]], replay=False))
    assert sim.status == "inconclusive" and "1 paired repeat(s)" in sim.detail, sim
    (replay,) = marconi_trends(_hits_input([[45, 45]], [[40, 40]], replay=True))
    assert replay.status == "pass" and "deterministic replay" in replay.detail, replay
    assert ">= +0.1 pt" in replay.detail and "%" not in replay.detail.partition(":")[2], replay.detail


def test_a_zero_spread_between_repeats_decides_only_where_the_repeats_hit_alike() -> None:
    """Two repeats whose leads agree (5 points each) gave a zero-width interval that passed, though the marconi arm's
    requests hit differently from one repeat to the next: the leads agreed by chance."""
    (chance,) = marconi_trends(_hits_input([[50, 40], [40, 50]], [[40, 40], [40, 40]], replay=False))
    assert chance.status == "inconclusive" and "hit differently" in chance.detail, chance
    (alike,) = marconi_trends(_hits_input([[50, 40], [50, 40]], [[40, 40], [40, 40]], replay=False))
    assert alike.status == "pass", alike


def test_every_request_failed_says_so() -> None:
    # A replay whose every request failed has no rate: it read "the interval reaches within 0.1 pt of a tie".
    (row,) = marconi_trends(_hits_input([[45]], [[40]], replay=True, status="error"))
    assert row.status == "inconclusive" and "completed no request" in row.detail and "tie" not in row.detail, row


def test_only_a_trace_load_makes_one_replay_repeat_decide(tmp_path: Path) -> None:
    # The replay engine says its hits are deterministic only under a trace load (its snapshots); the same replay under
    # a Poisson load is judged as any run: one repeat is inconclusive, two alike repeats decide.
    run = tmp_path / "poisson"
    args = ("workloads.swebench.params.num_sessions=10", "engine.capacity_bytes=1e10", "load.kind=poisson",
            "load.request_rate=4", "checks.enabled=[marconi_trends]")
    proc = hb(*args, f"hydra.run.dir={run}")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    bundle = json.loads((run / "bundle.json").read_text())
    assert {t["server"]["deterministic_hits"] for t in bundle["trials"]} == {False}
    assert {c["status"] for c in trends(run).values()} == {"inconclusive"}
    two = tmp_path / "two"
    proc = hb(*args, "repeats=2", f"hydra.run.dir={two}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert {c["status"] for c in trends(two).values()} == {"pass"}
