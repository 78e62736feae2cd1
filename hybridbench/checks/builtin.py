"""The checks of docs/reference/checks.md that work from records alone: survival, ttft, throughput, cache_hits.

Regression checks compare each candidate arm with the baseline arm by a paired t-interval over the repeats'
relative changes, in three outcomes (hybridbench.metrics.decision): ``pass`` when the whole interval lies inside
the tolerance, ``fail`` when it lies wholly beyond, ``inconclusive`` otherwise — also with fewer than two
repeats a side, since one trial's requests say nothing of run-to-run variation. On the reference engine the
timing checks judge its modelled clock (``CheckInput.timing``).
The cache-off arm ``disabled`` is a reference point, not a candidate, unless it is the baseline itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Literal

from hybridbench.checks.base import CheckInput, CheckResult, Status, judged_result
from hybridbench.checks.log_hits import usage_vs_log
from hybridbench.checks.subjects import candidate_arms
from hybridbench.metrics.decision import judge
from hybridbench.metrics.stats import bootstrap_relative_change, paired_relative_change
from hybridbench.plan.build import derive_seed
from hybridbench.records.coverage import TrialOutcome, coverage
from hybridbench.records.exact_hits import NOT_PREDICTABLE, ExactHitSample
from hybridbench.records.hits import impossible_hit_detail, impossible_hits, unknown_hit_records
from hybridbench.records.schema import Record
from hybridbench.records.timed import untimed, untimed_detail

__all__ = ["UNEXERCISED", "UNPAIRED", "cache_hits", "repeat_judgement", "survival", "throughput", "timing_key", "ttft"]

# Why a timing row of a policy-only comparison (seglen against branching) on a modelled clock decided nothing: the
# model's clock has no term for the policy itself, so with every request's hits alike the arms ran the same
# computation; more repeats of the same load are not the remedy (hybridbench.plan.repeats earns none for it).
UNEXERCISED = "the arms' cache hits are identical request for request"
# Why a timing row of repeats one of which has no figure decided nothing: that repeat stays unmeasured, so more
# repeats cannot decide it (hybridbench.plan.repeats earns none for it).
UNPAIRED = "repeat(s) without a figure on a side"


def _candidates(inp: CheckInput) -> list[str]:
    return candidate_arms(inp.arms, inp.baseline_arm, inp.cache_off)


def _uncompared(check: str, inp: CheckInput, expected: str) -> list[CheckResult]:
    """Inconclusive rows when the run has arms besides the baseline but none is a candidate: every other arm has
    the cache off and the baseline has it on (``checks.baseline_arm=branching`` with ``arms=[disabled,branching]``).
    The timing check then compared nothing; as a skip (no row) the run passed on survival and the hit rate, the
    symptom the default baseline rule (hybridbench.plan.arms.default_baseline) removed for an unset key."""
    others = [a for a in inp.arms if a != inp.baseline_arm]
    if not others or _candidates(inp):
        return []
    return [CheckResult(check, workload, arm, "inconclusive", None, expected,
                        f"nothing compared: arm {arm} has the cache off and baseline {inp.baseline_arm} has it on "
                        "(a cache-off arm is compared only with a cache-off baseline); set checks.baseline_arm to "
                        "the cache-off arm to judge the cache against it")
            for workload in inp.workloads for arm in others]


def _shortened(text: str) -> str:
    """The head (what died) and the tail (the server's last words, e.g. its allocation error)."""
    return text if len(text) <= 400 else f"{text[:150]} … {text[-250:]}"


def _trial_problems(outcomes: Sequence[TrialOutcome], recs: Sequence[Record]) -> list[str]:
    """What keeps a pair's trials from counting as complete: one that did not run to its end, or records that
    do not hold each planned request once (a trial cut short; a second run appended to the same file)."""
    problems = []
    for t in outcomes:
        if t.state == "engine died":
            problems.append(_shortened(t.detail) or f"{t.trial_id}: the engine died")
        elif t.state != "ran":
            problems.append(f"{t.trial_id} {t.state}" + (f" ({t.detail})" if t.state == "interrupted" else ""))
        elif t.planned_requests is not None:  # an unknown count is survival's inconclusive, not a problem
            cover = coverage(t.planned_requests, [r for r in recs if r.trial_id == t.trial_id])
            if not cover.complete:
                problems.append(f"{t.trial_id}: {cover.describe()}")
    return problems


def _uncounted(outcomes: Sequence[TrialOutcome]) -> str:
    """Why the records cannot show a lost tail: trials that ran with no planned request count ("" when all have)."""
    unknown = [t.trial_id for t in outcomes if t.state == "ran" and t.planned_requests is None]
    return (f"{len(unknown)} trial(s) (first {unknown[0]}) with no planned request count (a bundle written before "
            "trials counted them, and no trace left): requests lost at a trial's end would not show" if unknown else "")


def _failures(bad: Sequence[Record], total: int) -> str:
    """The failed requests, the first one's error, and the later turns of their sessions that were not sent."""
    failed = [r for r in bad if r.status != "skipped"]
    if not failed:  # turns not sent, with no failure recorded beside them (records not written by this driver)
        return f"{len(bad)} of {total} requests not sent ({bad[0].error})"
    skipped = len(bad) - len(failed)
    detail = f"{len(failed)} of {total} requests failed ({failed[0].status}: {failed[0].error})"
    return detail + (f"; {skipped} later turn(s) of a failed session not sent" if skipped else "")


def survival(inp: CheckInput) -> Sequence[CheckResult]:
    out = []
    pairs = list(inp.records) + [p for p in inp.trials if p not in inp.records]
    for workload, arm in pairs:
        recs = inp.records.get((workload, arm), [])
        outcomes = inp.trials.get((workload, arm), [])
        bad = [r for r in recs if r.status != "ok"]
        snaps = inp.snapshots.get((workload, arm), [])
        crashes = sum(int(s.get("crashes", 0)) for s in snaps)
        infra = [str(s["infrastructure_error"]) for s in snaps if s.get("infrastructure_error")]
        # A known failure signature in the server's log during a trial (hybridbench.engines.server_logs) is a fault
        # the server survived, not a clean run: e.g. a mamba sanity check that failed while every request completed.
        logged = [str(f) for s in snaps if isinstance(fs := s.get("server_failures"), list) for f in fs]
        problems = _trial_problems(outcomes, recs)
        if not outcomes and not recs:  # nothing says a request was even sent: never "all completed"
            problems.append("no trial of this arm recorded anything")
        problems += [f"the server logged: {f}" for f in dict.fromkeys(logged)]
        ok = not bad and crashes == 0 and not infra and not problems
        detail = f"all {len(recs)} requests completed"
        if infra:
            detail = _shortened(infra[0])
        elif problems:
            detail = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        elif bad:
            detail = _failures(bad, len(recs))
        elif crashes:
            detail = f"{crashes} server crash(es)"
        verdict: Status = "pass" if ok else "fail"
        if ok and (uncounted := _uncounted(outcomes)):
            verdict, detail = "inconclusive", f"{len(recs)} recorded requests completed, but {uncounted}"
        elif ok and (unseen := untimed(recs)):
            verdict, detail = "inconclusive", untimed_detail(unseen)
        out.append(CheckResult("survival", workload, arm, verdict, float(len(bad)),
                               "every planned request recorded once; 0 failed, 0 crashes, no failure logged",
                               detail))
    return out


def _repeat_means(summaries: Sequence[dict[str, Any]], key: str) -> list[float]:
    return [float(s.get(key, math.nan)) for s in summaries]


def timing_key(inp: CheckInput, key: str) -> str:
    """The summary key a timing check judges: the wall clock's, or the reference server's modelled one."""
    return f"modelled_{key}" if inp.timing == "modelled" else key


def _clock(inp: CheckInput) -> str:
    """The clock a timing row judged, as its detail names it: the simulator's records carry modelled times in their
    wall-clock fields (``modelled: true``), so a row over them says so rather than "wall time"."""
    if inp.timing == "modelled":
        return "modelled time"
    simulated = any(recs and recs[0].modelled for recs in inp.records.values())
    return "simulated time" if simulated else "wall time"


def repeat_judgement(check: str, workload: str, arm: str, inp: CheckInput, *, base: Sequence[float],
                     cand: Sequence[float], limit: float, worse: Literal["above", "below"], expected: str,
                     offset: float = 0.0, fmt: str = "{:+.1%}", advisory: str = "") -> CheckResult:
    """A paired t-interval over per-repeat values, judged in three outcomes; fewer than two paired repeats decide
    nothing (``inconclusive``, with ``advisory``: e.g. an interval over one trial's requests, shown, not gated)."""
    ch = paired_relative_change(base, cand, confidence=inp.cfg.confidence)
    pairs = sum(1 for b, c in zip(base, cand, strict=False) if b and math.isfinite(b) and math.isfinite(c))
    if pairs < 2:
        return CheckResult(check, workload, arm, "inconclusive", None, expected,
                           f"{pairs} paired repeat(s) of {_clock(inp)}: a verdict needs >= 2 (run-to-run variation "
                           f"is unmeasured){advisory}", limit=limit + offset)
    j = judge(ch, limit=limit, worse=worse, confidence=inp.cfg.confidence)
    shifted = replace(j, estimate=j.estimate + offset, low=j.low + offset, high=j.high + offset,
                      limit=j.limit + offset)
    row = judged_result(check, workload, arm, j, observed=j.estimate + offset, expected=expected, offset=offset,
                        detail=f"{shifted.describe(fmt)}, {pairs} paired repeats, {_clock(inp)}")
    # A repeat with no figure on a side (its requests without a first token or a modelled stamp, a trial cut short)
    # is unmeasured, not absent: the slow repeat may be the one left out, so the rest pass nothing. A fail stands.
    unpaired = max(len(base), len(cand)) - pairs
    if unpaired and row.status != "fail":
        row = replace(row, status="inconclusive", detail=f"{unpaired} {UNPAIRED}, so not "
                      f"judged on the {pairs} others; {row.detail}")
    return row


def _untimed_row(check: str, workload: str, arm: str, inp: CheckInput, expected: str) -> CheckResult | None:
    """An inconclusive row when either side holds a completed record whose times cannot be believed."""
    sides = [(side, bad) for side, a in (("baseline", inp.baseline_arm), ("candidate", arm))
             if (bad := untimed(inp.records.get((workload, a), [])))]
    if not sides:
        return None
    return CheckResult(check, workload, arm, "inconclusive", None, expected,
                       "; ".join(untimed_detail(bad, who=side) for side, bad in sides))


def _hits(recs: Sequence[Record]) -> dict[tuple[int, int], int | None]:
    return {(r.repeat, r.request_index): r.cached_tokens for r in recs if r.status == "ok"}


def _unexercised(row: CheckResult, inp: CheckInput, workload: str, arm: str) -> CheckResult:
    """A pass of an arm that differs from the baseline in its eviction policy alone, judged on a modelled clock
    (the simulator's, the reference server's cost model), where every request found the same hits in both arms: the
    policy never changed what a request found cached, and the model has no cost for the policy itself, so the
    "no change" is the model's, not a measurement of the policy. Inconclusive, never a pass. On a wall clock the
    same pass stands: it measures the policy's own cost (its victim search on the scheduler's path)."""
    if row.status != "pass" or arm not in inp.policy_only or _clock(inp) == "wall time":
        return row
    base, cand = _hits(inp.records.get((workload, inp.baseline_arm), [])), _hits(inp.records.get((workload, arm), []))
    if not base or base != cand:
        return row
    repeats = len({k[0] for k in base})
    return replace(row, status="inconclusive", detail=(
        f"{UNEXERCISED} ({len(base)} requests, {repeats} repeat(s)): the eviction policy compared never changed a "
        f"request's hits, and {_clock(inp)} has no cost for the policy itself; {row.detail}"))


def ttft(inp: CheckInput) -> Sequence[CheckResult]:
    """A paired t-interval over the per-repeat mean TTFTs: what drifts between repeats (a busy machine) is then
    spread, not signal. Pooling every repeat's requests into one bootstrap would count only request-to-request noise
    and decide a run whose repeats merely drifted; with one repeat a side run-to-run variation is unmeasured, so
    the bootstrap over requests is shown, never a verdict. On a modelled clock, an arm that differs from the
    baseline in its eviction policy alone and found the same hits request for request is inconclusive, as in
    throughput: the model has no cost for the policy itself."""
    out = []
    key = timing_key(inp, "mean_ttft_ms")
    limit = inp.cfg.ttft_regression
    expected = f"mean TTFT change vs {inp.baseline_arm} <= +{limit:.0%} ({_clock(inp)})"
    if uncompared := _uncompared("ttft", inp, expected):
        return uncompared
    for workload in inp.workloads:
        base = [t for r in inp.records.get((workload, inp.baseline_arm), []) if (t := r.ttft_ms) is not None]
        base_means = _repeat_means(inp.trial_summaries.get((workload, inp.baseline_arm), []), key)
        for arm in _candidates(inp):
            if unseen := _untimed_row("ttft", workload, arm, inp, expected):
                out.append(unseen)
                continue
            cand = [t for r in inp.records.get((workload, arm), []) if (t := r.ttft_ms) is not None]
            if not base or not cand:  # e.g. a run cut short by a dead server (survival fails it): a skip
                # Completed requests without a TTFT (no first token seen) are unmeasured, not absent: undecided.
                done = [sum(r.status == "ok" for r in inp.records.get((workload, a), []))
                        for a in (inp.baseline_arm, arm)]
                unmeasured = (not base and done[0]) or (not cand and done[1])
                out.append(CheckResult("ttft", workload, arm, "inconclusive" if unmeasured else "skip", None,
                                       "TTFTs on both sides", f"{len(base)} baseline and {len(cand)} candidate TTFT(s) "
                                       f"of {done[0]} and {done[1]} completed request(s): no verdict"))
                continue
            cand_means = _repeat_means(inp.trial_summaries.get((workload, arm), []), key)
            advisory = ""
            if inp.timing == "wall" and min(len(base_means), len(cand_means)) < 2:
                ch = bootstrap_relative_change(base, cand, samples=inp.cfg.bootstrap_samples,
                                               confidence=inp.cfg.confidence, seed=derive_seed(inp.seed, workload, arm))
                advisory = (f"; advisory over one trial's {len(cand)} requests: {ch.estimate:+.1%} "
                            f"(CI {ch.low:+.1%} .. {ch.high:+.1%})")
            out.append(_unexercised(repeat_judgement("ttft", workload, arm, inp, base=base_means, cand=cand_means,
                                                     limit=limit, worse="above", expected=expected, advisory=advisory),
                                    inp, workload, arm))
    return out


def throughput(inp: CheckInput) -> Sequence[CheckResult]:
    out = []
    key = timing_key(inp, "request_throughput")
    limit = inp.cfg.throughput_regression
    if uncompared := _uncompared("throughput", inp, f"request throughput change vs {inp.baseline_arm} >= "
                                 f"-{limit:.0%} ({_clock(inp)})"):
        return uncompared
    for workload in inp.workloads:
        base = _repeat_means(inp.trial_summaries.get((workload, inp.baseline_arm), []), key)
        for arm in _candidates(inp):
            expected = f"request throughput change vs {inp.baseline_arm} >= -{limit:.0%} ({_clock(inp)})"
            if unseen := _untimed_row("throughput", workload, arm, inp, expected):
                out.append(unseen)
                continue
            cand = _repeat_means(inp.trial_summaries.get((workload, arm), []), key)  # one value per repeat
            out.append(_unexercised(repeat_judgement(
                "throughput", workload, arm, inp, base=base, cand=cand, limit=-limit, worse="below",
                expected=expected), inp, workload, arm))
    return out


def _exact_hits(workload: str, arm: str, recs: Sequence[Record],
                predictions: dict[tuple[str, int], int]) -> CheckResult | None:
    """Sequential mode: every request's cached_tokens equals the reference cache's prediction (the exact_hits
    probe's samples; runs saved before the probe existed carry it in the record)."""
    expect = {id(r): predictions.get((r.trial_id, r.request_index), r.expected_cached_tokens) for r in recs}
    predicted = [r for r in recs if expect[id(r)] is not None]
    if not predicted:
        return None
    wrong = [r for r in predicted if r.cached_tokens != expect[id(r)]]
    expected = "cached_tokens == the reference cache's prediction, request by request"
    if not wrong:
        return CheckResult("cache_hits", f"{workload}/exact", arm, "pass", 0.0, expected,
                           f"all {len(predicted)} predicted request(s) match")
    shown = ", ".join(f"request {r.request_index} (r{r.repeat}): {r.cached_tokens} vs {expect[id(r)]}"
                      for r in wrong[:3])
    return CheckResult("cache_hits", f"{workload}/exact", arm, "fail", float(len(wrong)), expected,
                       f"{len(wrong)} of {len(predicted)} differ: {shown}")


def cache_hits(inp: CheckInput) -> Sequence[CheckResult]:
    floor = inp.cfg.min_token_hit_rate
    samples: list[ExactHitSample] = inp.samples.get("exact_hits", [])
    predictions = {(s.trial_id, s.request_index): s.expected_cached_tokens for s in samples}
    out = []
    for (workload, arm), recs in inp.records.items():
        exact = _exact_hits(workload, arm, recs, predictions)
        # A mirror that broke mid-trial (a failed request, output ids missing) predicted only the requests before it:
        # their match is no verdict on the rest.
        stopped = [str(p) for s in inp.snapshots.get((workload, arm), [])
                   if (p := s.get("prediction")) is not None and p != "exact"]
        if exact is not None and exact.status == "pass" and stopped:
            exact = replace(exact, status="inconclusive", observed=None,
                            detail=f"{exact.detail}, but predictions stopped in {len(stopped)} trial(s): {stopped[0]}")
        if exact is not None:
            out.append(exact)
        elif stopped:  # the probe ran but predicted nothing: by design (another engine's semantics, a warm start)
            # a skip; a probe that was to predict and broke before its first prediction decided nothing
            broken = [p for p in stopped if not p.startswith(NOT_PREDICTABLE)]
            out.append(CheckResult("cache_hits", f"{workload}/exact", arm, "inconclusive" if broken else "skip",
                                   None, "cached_tokens == the reference cache's prediction, request by request",
                                   f"no request predicted: {broken[0]}" if broken else stopped[0]))
        logged = usage_vs_log(workload, arm, inp.trials.get((workload, arm), []),
                              inp.snapshots.get((workload, arm), []), recs)
        if logged is not None:
            out.append(logged)
        ok = [r for r in recs if r.status == "ok"]
        # A hit longer than its prompt (or negative) is a server miscounting its hits: it must not lift the rate. With
        # the cache off any hit is one: such a count fails whatever the floor (the rate row is then not the only
        # place a build's hit accounting is judged).
        impossible = impossible_hits(ok)
        prompt = sum(r.prompt_tokens for r in ok)
        rate = sum(r.cached_tokens or 0 for r in ok) / prompt if prompt else 0.0
        if arm in inp.cache_off or floor <= 0:
            off = arm in inp.cache_off
            bad = [r for r in ok if r.cached_tokens] if off else impossible  # a negative is truthy
            if bad:
                out.append(CheckResult(
                    "cache_hits", f"{workload}/accounting", arm, "fail", float(len(bad)),
                    "0 <= cached_tokens <= prompt tokens" + ("; 0 with the cache off" if off else ""),
                    impossible_hit_detail(bad, note=", with the prefix cache off" if off else "")))
            elif not off and ok:
                # Said, not passed: without a floor the hit rate is shown and judges nothing (a build that stopped
                # hitting would pass this row silently otherwise).
                out.append(CheckResult("cache_hits", workload, arm, "skip", rate, "a hit-rate floor",
                                       f"{rate:.1%} of prompt tokens cached; no floor set "
                                       "(checks.min_token_hit_rate=0), so not judged"))
            continue
        # A request with no hit count is unknown, never 0: the rate lies between its value with those hits none and
        # with them whole prompts, and only a floor on one side of both bounds decides.
        unknown = unknown_hit_records(ok)
        top = rate + sum(r.prompt_tokens for r in unknown) / prompt if prompt else 0.0
        verdict: Status = "fail" if impossible or (prompt and top < floor) else "pass" if prompt and rate >= floor \
            else "inconclusive"
        detail = f"{rate:.1%} of prompt tokens cached" if prompt else "no completed request: no hit rate to judge"
        if unknown:
            detail += (f" at least; {len(unknown)} of {len(ok)} completed request(s) reported no hit count, so up to "
                       f"{top:.1%}")
        if impossible:
            detail += f"; {impossible_hit_detail(impossible)}"
        out.append(CheckResult("cache_hits", workload, arm, verdict, None if verdict == "inconclusive" else rate,
                               f"token hit rate >= {floor:.0%}", detail))
    return out
