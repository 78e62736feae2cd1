"""``semantics_for``'s release table: a release predicts with a proven semantics only where its mirrored code is that
release's (benchmarks/sglang_semantics_by_release.py, output in benchmarks/sglang_semantics_by_release.txt)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from hybridbench.checks.base import CheckInput
from hybridbench.checks.builtin import cache_hits
from hybridbench.config.schema import ChecksCfg
from hybridbench.plan.arms import plan_arm
from hybridbench.probes.exact_hits import SEMANTICS_BY_RELEASE, predictor_config, semantics_for
from hybridbench.records.schema import Record
from reference_impl.radix.tree import SGLANG_SEMANTICS

TABLE = Path(__file__).resolve().parents[2] / "benchmarks" / "sglang_semantics_by_release.txt"
# Releases the script found to differ from every proven one; the old rule gave them the older proven semantics.
IN_BETWEEN = ["0.5.10", "0.5.10.post1", "0.5.12.post1", "0.5.15.post1", "0.5.17", "0.5.20", "0.5.22"]


def script_verdicts() -> dict[str, str | None]:
    """release -> the proven release the script's kept output says it equals (None: differs from all)."""
    out: dict[str, str | None] = {}
    for line in TABLE.read_text().splitlines():
        if (m := re.match(r"^(\d\S*)\s+(= (\S+)|none)", line)) is not None:
            out[m.group(1)] = m.group(3)
    return out


def test_the_table_is_the_scripts_output_and_names_only_proven_semantics() -> None:
    assert script_verdicts() == SEMANTICS_BY_RELEASE
    assert {s for s in SEMANTICS_BY_RELEASE.values() if s is not None} == set(SGLANG_SEMANTICS)
    assert all(SEMANTICS_BY_RELEASE[s] == s for s in SGLANG_SEMANTICS)


@pytest.mark.parametrize("version", IN_BETWEEN)
def test_a_release_whose_code_differs_gets_no_prediction(version: str) -> None:
    assert semantics_for(version) is None
    assert "no cache semantics proven for SGLang" in str(predictor_config(plan_arm("lru"), {
        "version": version, "max_total_num_tokens": 100000}))


@pytest.mark.parametrize(("version", "semantics"), [
    ("0.5.9", "0.5.9"), ("0.5.16", "0.5.16"), ("0.5.23", "0.5.23"),
    # dev/PR builds keep their base release's: post-release and SGLang's default (next version .devN) schemes
    ("0.5.23.post1.dev12+gabc", "0.5.23"), ("0.5.24.dev12+gabc", "0.5.23"), ("0.5.16+gabc", "0.5.16"),
    # up to the newest listed release, a build never compared predicts nothing: dev, pre-release, unlisted post
    ("0.5.17.dev3+g1234", None), ("0.5.16.dev3", None), ("0.5.23rc1", None), ("0.5.10rc0", None),
    ("0.5.17rc0", None), ("0.5.16.post1", None), ("0.5.23.dev5", None),
    # newer than every listed release: the newest's
    ("0.5.24", "0.5.23"), ("0.5.24rc1", "0.5.23"), ("v0.6.0", "0.5.23"), ("reference-0.1.0", "0.5.23"),
    ("0.5.8", None), ("0.5.15.post2", None), ("main", None),
])
def test_builds_resolve_to_their_base_releases_semantics(version: str, semantics: str | None) -> None:
    assert semantics_for(version) == semantics


def test_no_proven_semantics_is_a_skip_never_a_pass() -> None:
    why = predictor_config(plan_arm("lru"), {"version": "0.5.20", "max_total_num_tokens": 100000})
    assert isinstance(why, str)
    recs = [Record("run", "t", "lru", "w", 0, i, i, 0, 0.0, 0.0, 0.1, 0.2, 300, 4, 10 * i, "ok") for i in range(3)]
    inp = CheckInput(ChecksCfg(), ("lru",), "lru", ("w",), {("w", "lru"): recs}, {}, {}, 0, cache_off=frozenset())
    rows = [r for r in cache_hits(replace(inp, snapshots={("w", "lru"): [{"prediction": why}]},
                                          samples={"exact_hits": []})) if r.workload == "w/exact"]
    assert [(r.status, r.detail) for r in rows] == [("skip", why)]
