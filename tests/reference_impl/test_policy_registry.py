"""One registry defines every policy name; unknown names are rejected with the valid ones listed."""

from __future__ import annotations

import pytest

from reference_impl.lifecycle import STRATEGIES, make_strategy
from reference_impl.policies.registry import POLICIES, make_policy
from reference_impl.radix.pools import KVPool, StatePool
from reference_impl.radix.tree import MambaRadixTree


def test_the_issue_policy_names_are_all_registered() -> None:
    assert set(POLICIES) == {"lru", "seglen", "marconi", "sglang_plus", "vllm_plus"}
    assert set(STRATEGIES) == {"no_buffer", "extra_buffer", "extra_buffer_lazy", "disabled", "tokenspeed"}


def test_unknown_names_list_the_valid_ones() -> None:
    with pytest.raises(KeyError, match="choose one of lru, seglen"):
        make_policy("fifo")
    tree = MambaRadixTree(KVPool(8), StatePool(4), make_policy("lru"))
    with pytest.raises(KeyError, match="disabled, extra_buffer, extra_buffer_lazy, no_buffer"):
        make_strategy("extra_buffer_eager", tree)


def test_marconi_family_policies_cannot_drive_the_sglang_tree() -> None:
    with pytest.raises(KeyError, match="own tree"):
        make_policy("marconi")
