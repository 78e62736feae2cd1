"""What each check judges among a run's arms, and why an enabled check may find nothing there: asked at plan time.

An enabled check whose arms gave it nothing to judge (``host_hits`` with no l2 arm, ``prefill_overhead`` with no
cache-off arm, ``ttft`` with only cache-off arms beside a cache-on baseline) used to leave a skip after every trial
had run, and the run passed on the other checks: the experiment's own question went unanswered behind a pass. The
plan now refuses such a run (exit 2, hybridbench.prepare), naming the check and what to add; a re-scoring that
enables one (its arms are fixed) gets an inconclusive row (hybridbench.checks.registry). The checks pick their
subjects with the functions here, so the refusal and the verdicts cannot disagree. A single arm is no refusal for
the timing checks: it is compared across runs (``hybridbench compare``, a pull request against main).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

__all__ = ["MARCONI_BASELINES", "SUGGESTED_ARMS", "candidate_arms", "host_tier_arms", "marconi_arms",
           "marconi_baselines", "nothing_to_judge"]

# Marconi's baselines by its paper's names (arXiv 2411.19379): the arms a marconi arm is compared with.
MARCONI_BASELINES = ("sglang_plus", "vllm_plus")
# The arms a refusal suggests adding, where one arm kind is the only way to give the check a subject: the plan asks
# the engine whether it can run any of them, and where it can run none says so instead (advice the user can follow).
SUGGESTED_ARMS = {"host_hits": ("l2", "branching+l2")}


def _parts(arm: str) -> list[str]:
    # "lazy+l2@copy" -> ["lazy", "l2"]: the composed arm's parts, without its knob variant
    return arm.partition("@")[0].split("+")


def candidate_arms(arms: Sequence[str], baseline: str, cache_off: Collection[str]) -> list[str]:
    """The arms a timing check compares with the baseline: a cache-off arm only against a cache-off baseline."""
    return [a for a in arms if a != baseline and (a not in cache_off or baseline in cache_off)]


def host_tier_arms(arms: Sequence[str]) -> list[str]:
    return [a for a in arms if "l2" in _parts(a)]


def marconi_arms(arms: Sequence[str]) -> list[str]:
    return [a for a in arms if "marconi" in _parts(a)]


def marconi_baselines(arms: Sequence[str]) -> list[str]:
    return [a for a in arms if a in MARCONI_BASELINES]


def _both_sides(arms: Sequence[str], cache_off: Collection[str], what: str) -> str | None:
    if not any(a in cache_off for a in arms):
        return f"compares {what} with a cache-off arm's, and no arm has the cache off: add `disabled` to arms"
    if all(a in cache_off for a in arms):
        return f"compares {what} with a cache-off arm's, and every arm has the cache off: add a cache-on arm"
    return None


def nothing_to_judge(check: str, arms: Sequence[str], baseline: str, cache_off: Collection[str]) -> str | None:
    """Why ``check`` has nothing to judge among ``arms`` (a clause completing "<check> ..."), or ``None``."""
    if check in ("ttft", "throughput"):
        if len(arms) == 1 or candidate_arms(arms, baseline, cache_off):
            return None  # a single arm is compared across runs (hybridbench compare: a pull request with main)
        return (f"compares each arm with the baseline arm {baseline}, and no other arm is compared with it (a "
                "cache-off arm is compared only with a cache-off baseline): set checks.baseline_arm to the cache-off "
                "arm, or add a cache-on arm")
    if check == "prefill_overhead":
        return _both_sides(arms, cache_off, "each cache-on arm's input throughput")
    if check == "accuracy":
        return _both_sides(arms, cache_off, "each cache-on arm's answers")
    if check == "evictions" and all(a in cache_off for a in arms):
        return "judges the cache-on arms' evictions, and every arm has the cache off: add a cache-on arm"
    if check == "kl" and all(a in cache_off for a in arms):  # the kl probe skips cache-off arms: nothing is measured
        return ("compares logprobs after a cache hit with a cache-free replay's, and every arm has the cache off: add "
                "a cache-on arm")
    if check == "host_hits" and not host_tier_arms(arms):
        return "judges the arms with a host tier, and no arm has one: add one (e.g. l2, or branching+l2)"
    if check == "marconi_trends":
        if not marconi_arms(arms):
            return "compares a marconi arm with Marconi's baselines, and no arm is a marconi arm: add marconi"
        if not marconi_baselines(arms):
            return (f"compares a marconi arm with Marconi's baselines, and neither is an arm: add "
                    f"{' or '.join(MARCONI_BASELINES)}")
    return None
