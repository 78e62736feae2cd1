"""The ``accuracy`` check: answers with the cache on against answers with it off, question by question.

Reads the accuracy probe's samples (accuracy.jsonl). On an engine that decodes greedily and
deterministically (mode ``exact``) any differing answer text fails, and the first one is named; equal answers pass
only over enough questions that one differing answer would stay within ``checks.accuracy_tolerance``
(1 / tolerance: 100 at 1%), else they are inconclusive with the count. On GPUs
(mode ``paired``) McNemar's exact test on the flipped questions fails a lopsided drop beyond
``checks.accuracy_tolerance``, and a pass needs the whole interval of the drop inside it (too few questions to bound
it: inconclusive); every flipped question is listed either way. A pass in which the cache
served no prompt token proves nothing about cached states, so an arm whose passes never hit fails, as
the ``kl`` check fails when too few of its probes hit.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

from hybridbench.checks.base import CheckInput, CheckResult, judged_result
from hybridbench.metrics.decision import POWER, Judgement
from hybridbench.metrics.paired_accuracy import Answer, first_difference, flip_test
from hybridbench.records.accuracy import AccuracySample

__all__ = ["accuracy", "accuracy_rows", "accuracy_table"]

_LISTED = 8  # flipped questions named in a verdict line; the report lists them all


def _cache_off(arm: str) -> bool:
    return "disabled" in arm.partition("@")[0].split("+")


def _answers(rows: Sequence[AccuracySample]) -> dict[str, Answer]:
    return {r.question: Answer(r.question, r.prediction, r.extracted, r.correct) for r in rows if not r.summary}


def _where(off: str, on: str) -> str:
    """Where two answer texts part, with a little of each from just before that point."""
    i = next((k for k, (a, b) in enumerate(zip(off, on, strict=False)) if a != b), min(len(off), len(on)))
    lo = max(0, i - 8)
    return f"from character {i}: cache off {off[lo:i + 24]!r} vs on {on[lo:i + 24]!r}"


def _group(samples: Sequence[AccuracySample]) -> dict[tuple[str, str], list[AccuracySample]]:
    groups: dict[tuple[str, str], list[AccuracySample]] = defaultdict(list)
    for s in samples:
        groups[(s.arm, s.pass_)].append(s)
    return groups


def accuracy_table(samples: Sequence[AccuracySample]) -> list[tuple[str, str, int, int, int | None]]:
    """(arm, pass, questions, correct, cached tokens) per pass, for the report."""
    out = []
    for (arm, pass_), rows in sorted(_group(samples).items()):
        answers = [r for r in rows if not r.summary]
        cached = next((r.cached_tokens for r in rows if r.summary), None)
        out.append((arm, pass_, len(answers), sum(r.correct for r in answers), cached))
    return out


def accuracy(inp: CheckInput) -> Sequence[CheckResult]:
    samples: list[AccuracySample] = inp.samples.get("accuracy", [])
    groups = _group(samples)
    cfg = inp.cfg
    expected = ("every answer equal to the cache-off arm's" if all(s.mode == "exact" for s in samples) else
                f"no accuracy drop > {cfg.accuracy_tolerance:g} (McNemar p < {cfg.accuracy_alpha:g})")
    off_arms = [a for a in inp.arms if _cache_off(a)]
    on_arms = [a for a in inp.arms if not _cache_off(a)]
    if not off_arms:
        return [CheckResult("accuracy", "accuracy", arm, "fail", None, expected,
                            "the experiment has no cache-off (disabled) arm to compare answers with")
                for arm in on_arms]
    base_rows = groups.get((off_arms[0], "cold"), [])
    base_error = next((r.error for r in base_rows if r.summary and r.error), "")
    base = _answers(base_rows)
    out = []
    for arm in on_arms:
        passes = sorted(p for (a, p) in groups if a == arm)
        if not passes:
            out.append(CheckResult("accuracy", "accuracy", arm, "fail", None, expected,
                                   "no accuracy samples: the probe did not run for this arm"))
            continue
        summaries = [r for p in passes for r in groups[(arm, p)] if r.summary]
        cached = [r.cached_tokens for r in summaries]
        never_hit = all(c == 0 for c in cached)
        # No pass measured a hit: every one measured 0 (never_hit), or some left theirs unmeasured and the rest
        # measured 0 (a cold pass at 0 beside a warm pass unmeasured is no evidence of a cached state either).
        no_hit_seen = not any(cached)
        for pass_ in passes:
            rows = groups[(arm, pass_)]
            subject = f"accuracy/{pass_}"
            error = next((r.error for r in rows if r.summary and r.error), "")
            if base_error or error or not base:
                why = (f"cache-off arm {off_arms[0]}: {base_error or 'no answers'}" if base_error or not base
                       else error)
                out.append(CheckResult("accuracy", subject, arm, "fail", None, expected, why))
                continue
            cand = _answers(rows)
            out.append(_verdict(subject, arm, expected, base, cand, rows=rows, inp=inp))
        if never_hit:
            out = [r if r.arm != arm or r.status != "pass" else
                   CheckResult(r.check, r.workload, arm, "fail", r.observed, r.expected,
                               f"{r.detail}; but the cache served no prompt token in any pass: "
                               "the answers never came from a cached state") for r in out]
        elif no_hit_seen:  # equal answers, but nothing says any came from a cached state
            out = [r if r.arm != arm or r.status != "pass" else
                   CheckResult(r.check, r.workload, arm, "inconclusive", r.observed, r.expected,
                               f"{r.detail}; but no pass measured its cache hits: no evidence the answers came "
                               "from a cached state") for r in out]
    return out


def _verdict(subject: str, arm: str, expected: str, base: dict[str, Answer], cand: dict[str, Answer], *,
             rows: Sequence[AccuracySample], inp: CheckInput) -> CheckResult:
    t = flip_test(base, cand)
    cached = next((r.cached_tokens for r in rows if r.summary), None)
    hits = "cache hits unmeasured" if cached is None else f"{cached} prompt tokens from the cache"
    acc = t.cand_correct / t.questions if t.questions else None
    flips = (f"{len(t.lost)} lost ({', '.join(t.lost[:_LISTED])}), "
             f"{len(t.gained)} gained ({', '.join(t.gained[:_LISTED])})")
    if any(r.mode == "exact" for r in rows if not r.summary):
        q = first_difference(base, cand)
        if q is not None:
            b, c = base.get(q), cand.get(q)
            what = ("answered in one arm only" if b is None or c is None else
                    _where(b.prediction, c.prediction))
            return CheckResult("accuracy", subject, arm, "fail", acc, expected,
                               f"first differing answer: {q} ({what}); flips: {flips}; {hits}")
        tol = inp.cfg.accuracy_tolerance
        need = math.ceil(1 / tol - 1e-9) if tol > 0 else None  # questions for one differing answer to stay <= tol
        if need is None or t.questions < need:  # equal answers bound no drop finer than one answer in the count
            return CheckResult("accuracy", subject, arm, "inconclusive", acc, expected,
                               f"{t.questions} answers equal to the cache-off arm's, but one differing answer would "
                               f"be a {1 / max(1, t.questions):.1%} drop, past the {tol:g} tolerance (a verdict needs "
                               f">= {need or 'unbounded'} questions); {hits}")
        return CheckResult("accuracy", subject, arm, "pass", acc, expected,
                           f"{t.questions} answers equal to the cache-off arm's; {hits}")
    one_sided = sorted(base.keys() ^ cand.keys())
    if one_sided or not t.questions:  # a pass cut short: the questions it lost would otherwise never count
        return CheckResult("accuracy", subject, arm, "fail", acc, expected,
                           f"{len(one_sided)} question(s) answered by one arm only ({', '.join(one_sided[:_LISTED])}); "
                           f"{t.questions} answered by both; {hits}")
    # Paired mode (GPUs): fail on lopsided flips beyond the tolerance (McNemar) or an interval wholly past it; pass
    # only when the whole interval of the drop lies inside the tolerance; otherwise the questions were too few.
    tol = inp.cfg.accuracy_tolerance
    low, high, se = t.drop_interval(confidence=inp.cfg.confidence)
    j = Judgement("fail" if t.regressed(alpha=inp.cfg.accuracy_alpha, tolerance=tol) or low > tol
                  else "pass" if high <= tol else "inconclusive",
                  t.drop, low, high, tol, _mde(se, inp.cfg.confidence), None)
    if j.status == "inconclusive" and se > 0 and t.drop < tol:  # questions for the interval to clear the tolerance
        j = replace(j, repeats_needed=math.ceil(t.questions * (_z(inp.cfg.confidence) * se / (tol - t.drop)) ** 2))
    words = {"fail": "", "pass": "", "inconclusive": " (questions to decide: "
             f"{'unknown' if j.repeats_needed is None else j.repeats_needed})"}[j.status]
    return judged_result("accuracy", subject, arm, j, observed=acc, expected=expected, detail=(
        f"accuracy {t.base_correct}/{t.questions} -> {t.cand_correct}/{t.questions} "
        f"(drop {t.drop:+.1%}, CI {low:+.1%} .. {high:+.1%}, McNemar p={t.p_value:.3g}){words}; "
        f"flips: {flips}; {hits}"))


def _z(confidence: float) -> float:
    return statistics.NormalDist().inv_cdf(1 - (1 - confidence) / 2)


def _mde(se: float, confidence: float) -> float:
    return (_z(confidence) + statistics.NormalDist().inv_cdf(POWER)) * se


def accuracy_rows(samples: Sequence[AccuracySample], arms: Sequence[str]) -> list[dict[str, object]]:
    """Per (arm, pass): questions, correct, cached prompt tokens, and every flipped question against the cache-off
    arm (bundle.json's ``accuracy``: what the report and the dashboard show)."""
    groups = _group(samples)
    off = next((a for a in arms if _cache_off(a)), None)
    base = _answers(groups.get((off, "cold"), [])) if off is not None else {}
    out: list[dict[str, object]] = []
    for arm, pass_, questions, correct, cached in accuracy_table(samples):
        row: dict[str, object] = {"arm": arm, "pass": pass_, "questions": questions, "correct": correct,
                                  "cached_tokens": cached}
        error = next((r.error for r in groups[(arm, pass_)] if r.summary and r.error), "")
        if error:
            row["error"] = error
        wall = next((r.wall_s for r in groups[(arm, pass_)] if r.summary and r.wall_s is not None), None)
        if wall is not None:
            row["wall_s"] = wall
        if arm != off and base:
            cand = _answers(groups[(arm, pass_)])
            t = flip_test(base, cand)
            row.update(lost=list(t.lost), gained=list(t.gained), first_difference=first_difference(base, cand))
        out.append(row)
    return out
