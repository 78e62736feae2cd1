"""``workloads.generate.checked_rows``: the first id at or above the vocabulary stops the trace, named."""

from __future__ import annotations

import pytest

from workloads.errors import WorkloadError
from workloads.generate import checked_rows
from workloads.token_ids import TokenIds
from workloads.trace import TraceRow


@pytest.mark.parametrize("wide", [False, True])
def test_the_first_id_past_the_vocabulary_is_named_with_its_row(wide: bool) -> None:
    big = (1 << 40) if wide else 1000  # an int64 buffer too (a replayed file may hold any id)
    rows = [TraceRow(0, 0, 0.0, TokenIds([1, 2, 3]), TokenIds([4])),
            TraceRow(7, 1, 0.0, TokenIds([5, big, 6]), TokenIds([]))]
    out = checked_rows(rows, 1000)
    assert next(out) is rows[0]
    with pytest.raises(WorkloadError, match=rf"^row 1 \(session 7, turn 1\): input_tokens holds id {big} >= "
                                            r"--vocab-size 1000$"):
        next(out)
    assert list(checked_rows([*rows[:1], TraceRow(1, 0, 0.0, (999,), [0])], 1000))[-1].input_tokens == (999,)
