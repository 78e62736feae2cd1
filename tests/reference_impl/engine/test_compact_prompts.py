"""A trace's compact prompts stay compact in the engine's queue (the seglen preset's backlog once held 1.6 GB of
Python ints), and the engine serves a compact prompt exactly as it serves the same tuple."""

from __future__ import annotations

from reference_impl.engine.config import EngineConfig
from reference_impl.engine.core import EngineCore
from workloads.token_ids import TokenIds


def _core() -> EngineCore:
    return EngineCore(EngineConfig(kv_tokens=1000, state_slots=64, cache="no_buffer", init_new_token_ratio=0.7))


def test_a_waiting_request_holds_the_compact_prompt_itself() -> None:
    prompt = TokenIds(range(100, 150))
    req = _core().add_request(0, prompt, 8)
    assert req.input_tokens is prompt and req.prompt_tuple is None  # no tuple until the engine works on it
    listed = _core().add_request(1, list(range(5)), 8)
    assert isinstance(listed.input_tokens, tuple)  # a mutable prompt is still copied


def test_compact_and_tuple_prompts_are_served_alike() -> None:
    runs = []
    for wrap in (tuple, TokenIds):
        core = _core()
        reqs = [core.add_request(i, wrap(range(100 * i, 100 * i + 50)), 30) for i in range(10)]
        log = []
        while not core.idle:
            batch = core.schedule()
            assert batch is not None
            log.append((batch.kind, [(it.request.rid, it.start, it.end) for it in batch.items]))
            core.complete(batch, [7] * len(batch.items))
        assert all(r.status == "finished" and r.prompt_tuple is None for r in reqs)  # dropped at the end
        runs.append(log)
    assert runs[0] == runs[1]
