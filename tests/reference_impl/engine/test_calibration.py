"""The committed cost factors reproduce the seed's H100 radix-cache runs within 15%, both arms."""

from __future__ import annotations

import pytest

from reference_impl.engine.calibration import (
    SEED_RADIX_TARGETS,
    TOLERANCE,
    run_seed_arm,
    seed_metrics,
    seed_radix_rows,
)


@pytest.fixture(scope="module")
def rows():  # type: ignore[no-untyped-def]
    return seed_radix_rows()


def test_seed_trace_has_the_token_totals_the_server_saw(rows) -> None:  # type: ignore[no-untyped-def]
    assert len(rows) == 500
    assert sum(len(r.input_tokens) for r in rows) == 5_521_500  # seed: 5,521,483 after retokenizing text
    assert {len(r.output_tokens) for r in rows} == {128}


@pytest.mark.parametrize("arm", sorted(SEED_RADIX_TARGETS))
def test_calibrated_simulation_matches_the_seed_run(rows, arm: str) -> None:  # type: ignore[no-untyped-def]
    got = seed_metrics(run_seed_arm(rows, arm))
    for name, value, target in zip(("req/s", "mean TTFT", "median ITL"), got, SEED_RADIX_TARGETS[arm], strict=True):
        assert abs(value / target - 1) <= TOLERANCE, f"{arm} {name}: simulated {value:.2f}, seed {target:.2f}"
