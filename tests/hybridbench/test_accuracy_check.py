"""The accuracy check on saved samples: exact agreement on deterministic engines, McNemar on GPUs, hit gating."""

from __future__ import annotations

from hybridbench.checks.accuracy import accuracy, accuracy_table
from hybridbench.checks.base import CheckInput
from hybridbench.config.schema import ChecksCfg
from hybridbench.records.accuracy import AccuracySample, accuracy_sample_from_json

ARMS = ("disabled", "lru", "branching")


def _pass(arm: str, pass_: str, answers: list[tuple[str, bool]], *, mode: str = "exact",
          cached: int | None = 100, error: str = "") -> list[AccuracySample]:
    ident = {"trial_id": f"t-{arm}", "arm": arm, "workload": "chat", "repeat": 0, "pass_": pass_, "mode": mode}
    rows = [AccuracySample(**ident, dataset="gsm8k", index=i, prediction=text, extracted="", target="[\"1\"]",
                           correct=ok) for i, (text, ok) in enumerate(answers)]
    return [*rows, AccuracySample(**ident, cached_tokens=cached, prompt_tokens=1000, error=error)]  # type: ignore[arg-type]


def _check(samples: list[AccuracySample], arms: tuple[str, ...] = ARMS, **cfg: object):
    # BASE's three questions decide an exact verdict only at a tolerance one answer in three (33%) stays within
    cfg.setdefault("accuracy_tolerance", 0.34)
    inp = CheckInput(cfg=ChecksCfg(**cfg), arms=arms, baseline_arm=arms[0], workloads=("chat",), records={},  # type: ignore[arg-type]
                     trial_summaries={}, snapshots={}, seed=0, samples={"accuracy": samples})
    return {(r.arm, r.workload): r for r in accuracy(inp)}


BASE = [("a", True), ("b", False), ("c", True)]


def test_equal_answers_pass_and_the_cache_off_arm_is_the_baseline_not_a_subject():
    samples = _pass("disabled", "cold", BASE, cached=0)
    for arm in ("lru", "branching"):
        samples += _pass(arm, "cold", BASE, cached=0 if arm == "lru" else 50) + _pass(arm, "warm", BASE)
    out = _check(samples)
    assert set(out) == {(a, f"accuracy/{p}") for a in ("lru", "branching") for p in ("cold", "warm")}
    assert all(r.status == "pass" for r in out.values()), out
    assert out[("lru", "accuracy/warm")].observed == 2 / 3


def test_one_differing_answer_fails_and_is_named_even_when_correctness_is_unchanged():
    changed = [("a", True), ("B!", False), ("c", True)]  # same correctness, different text: a changed state
    samples = _pass("disabled", "cold", BASE) + _pass("branching", "cold", BASE) + _pass("branching", "warm", changed)
    out = _check(samples, ("disabled", "branching"))
    assert out[("branching", "accuracy/cold")].status == "pass"
    bad = out[("branching", "accuracy/warm")]
    assert bad.status == "fail" and "first differing answer: gsm8k/1" in bad.detail and "'B!'" in bad.detail


def test_an_arm_whose_passes_never_hit_fails_even_with_equal_answers():
    samples = (_pass("disabled", "cold", BASE) + _pass("lru", "cold", BASE, cached=0)
               + _pass("lru", "warm", BASE, cached=0))
    out = _check(samples, ("disabled", "lru"))
    assert {r.status for r in out.values()} == {"fail"}
    assert "served no prompt token" in out[("lru", "accuracy/warm")].detail


def test_failed_passes_missing_arms_and_a_missing_baseline_fail():
    samples = _pass("disabled", "cold", BASE) + _pass("lru", "cold", [], error="evalscope failed: boom")
    out = _check(samples)
    assert out[("lru", "accuracy/cold")].status == "fail" and "boom" in out[("lru", "accuracy/cold")].detail
    assert out[("branching", "accuracy")].status == "fail" and "did not run" in out[("branching", "accuracy")].detail
    no_base = _check(_pass("lru", "cold", BASE), ("lru",))
    assert no_base[("lru", "accuracy")].status == "fail" and "no cache-off" in no_base[("lru", "accuracy")].detail
    base_failed = _check(_pass("disabled", "cold", [], error="x") + _pass("lru", "cold", BASE), ("disabled", "lru"))
    assert base_failed[("lru", "accuracy/cold")].status == "fail"


def test_paired_mode_fails_lopsided_flips_and_lists_them():
    n = 60
    base = [(f"q{i}", True) for i in range(n)]
    noisy = [(f"x{i}", i not in (3, 7)) for i in range(n)]  # 2 lost: within noise at alpha 0.05
    broken = [(f"x{i}", i >= 10) for i in range(n)]  # 10 lost, none gained: p = 1/1024
    samples = (_pass("disabled", "cold", base, mode="paired") + _pass("lru", "cold", noisy, mode="paired")
               + _pass("branching", "cold", broken, mode="paired"))
    out = _check(samples, accuracy_tolerance=0.01)
    # different texts are not a failure on GPUs; but 60 questions cannot bound a drop to the 1% tolerance (2 lost:
    # an interval up to ~+8.6%), so it is no pass either; at a 10% tolerance they can
    assert out[("lru", "accuracy/cold")].status == "inconclusive"
    lru = _check(samples, accuracy_tolerance=0.1)[("lru", "accuracy/cold")]
    assert lru.status == "pass" and lru.high is not None and lru.high <= 0.1
    bad = out[("branching", "accuracy/cold")]
    assert bad.status == "fail" and "10 lost (gsm8k/0, gsm8k/1" in bad.detail and "p=0.000977" in bad.detail
    lenient = _check(samples, accuracy_tolerance=0.5)
    assert lenient[("branching", "accuracy/cold")].status == "pass"


def test_samples_round_trip_through_json_and_the_table_counts_per_pass():
    samples = _pass("disabled", "cold", BASE, cached=0) + _pass("lru", "warm", BASE, cached=321)
    again = [accuracy_sample_from_json(s.to_json()) for s in samples]
    assert again == samples and samples[0].to_json()["pass"] == "cold"
    assert accuracy_table(again) == [("disabled", "cold", 3, 2, 0), ("lru", "warm", 3, 2, 321)]


def test_paired_mode_fails_a_pass_that_lost_questions():
    # Questions answered by one arm only were left out of McNemar: a pass cut to 3 of 60 answers passed on those 3.
    base = [(f"q{i}", True) for i in range(60)]
    samples = (_pass("disabled", "cold", base, mode="paired")
               + _pass("lru", "cold", base[:3], mode="paired") + _pass("branching", "cold", base, mode="paired"))
    out = _check(samples, accuracy_tolerance=0.01)
    cut = out[("lru", "accuracy/cold")]
    assert cut.status == "fail" and "57 question(s) answered by one arm only (gsm8k/10, gsm8k/11" in cut.detail
    # every answer equal, but 60 questions cannot bound a drop to 1%: undecided, never a pass
    assert out[("branching", "accuracy/cold")].status == "inconclusive"


def test_equal_answers_with_hits_unmeasured_in_every_pass_are_inconclusive():
    # The check fails an arm whose passes never hit; one whose hits nobody measured had no evidence either.
    samples = (_pass("disabled", "cold", BASE) + _pass("lru", "cold", BASE, cached=None)
               + _pass("lru", "warm", BASE, cached=None))
    out = _check(samples, ("disabled", "lru"))
    assert {r.status for r in out.values()} == {"inconclusive"}
    assert "no pass measured its cache hits" in out[("lru", "accuracy/warm")].detail
    measured_once = [*samples[:-1], _pass("lru", "warm", BASE, cached=40)[-1]]
    assert {r.status for r in _check(measured_once, ("disabled", "lru")).values()} == {"pass"}


def test_a_pass_at_zero_hits_beside_one_unmeasured_is_no_evidence_and_not_a_pass():
    # cold measured 0 cached tokens, warm left its hits unmeasured: neither says an answer came from a cached state.
    samples = _pass("disabled", "cold", BASE) + _pass("lru", "cold", BASE, cached=0) + _pass("lru", "warm", BASE,
                                                                                                cached=None)
    out = _check(samples, ("disabled", "lru"))
    assert {r.status for r in out.values()} == {"inconclusive"}, out
    hit = _pass("disabled", "cold", BASE) + _pass("lru", "cold", BASE, cached=0) + _pass("lru", "warm", BASE)
    assert {r.status for r in _check(hit, ("disabled", "lru")).values()} == {"pass"}  # warm measured its hits


def test_exact_agreement_on_too_few_questions_to_bound_the_tolerance_is_inconclusive():
    """Three equal answers passed a 1% tolerance: one differing answer in three is a 33% drop, so equality on
    three says nothing at 1%. The pass needs enough questions that one differing answer stays within it."""
    samples = _pass("disabled", "cold", BASE) + _pass("lru", "cold", BASE)
    few = _check(samples, ("disabled", "lru"), accuracy_tolerance=0.01)[("lru", "accuracy/cold")]
    assert few.status == "inconclusive", few
    assert "3 answers" in few.detail and "100" in few.detail  # the count, and the questions a 1% verdict needs
    enough = _check(samples, ("disabled", "lru"), accuracy_tolerance=0.34)[("lru", "accuracy/cold")]
    assert enough.status == "pass", enough  # one in three (33%) is within 34%
    hundred = [(f"q{i}", True) for i in range(100)]
    many = _check(_pass("disabled", "cold", hundred) + _pass("lru", "cold", hundred), ("disabled", "lru"),
                  accuracy_tolerance=0.01)[("lru", "accuracy/cold")]
    assert many.status == "pass", many
