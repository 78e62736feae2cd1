"""The reference server's extra_buffer_lazy: asked for as SGLang asks (--mamba-radix-cache-strategy) or as an arm,
refused where SGLang refuses it (without the overlap schedule) and where TokenSpeed's cache has no such slot."""

from __future__ import annotations

import pytest

from reference_impl.engine.config import state_ratio
from reference_impl.server.args import UsageError, parse_config


@pytest.mark.parametrize("argv", [["--arm", "lazy"], ["--mamba-radix-cache-strategy", "extra_buffer_lazy"],
                                  ["--mamba-scheduler-strategy", "extra_buffer_lazy"]])
def test_lazy_is_asked_for_as_sglang_or_as_an_arm(argv: list[str]) -> None:
    config = parse_config(argv)
    assert (config.arm.name, config.engine.cache, state_ratio(config.engine)) == ("lazy", "extra_buffer_lazy", 4)


@pytest.mark.parametrize(("argv", "message"), [
    (["--arm", "lazy", "--disable-overlap-schedule"], "requires the overlap schedule"),
    (["--arm", "lazy+seglen", "--cache-semantics", "tokenspeed"], "TokenSpeed has no lazy ping-pong slot"),
    (["--arm", "lazy", "--max-mamba-cache-size", "3"], "cannot hold one running request (4 slots each"),
])
def test_lazy_is_refused_where_it_cannot_run(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        parse_config(argv)
