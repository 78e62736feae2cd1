"""sharegpt: Marconi-style multi-turn sessions from ShareGPT JSON, and the labelled synthetic stand-in."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from workloads.errors import WorkloadError
from workloads.sharegpt import ShareGptParams, generate_sharegpt, parse_conversations
from workloads.stats import ideal_hits
from workloads.text_tokens import HashWordTokenizer

FIXTURE = Path(__file__).parent / "fixtures" / "sharegpt_tiny.json"
V = 50000


def test_file_sessions_follow_marconi_layout() -> None:
    stream = generate_sharegpt(ShareGptParams(sps=2.0), V, 0, path=str(FIXTURE))
    rows = list(stream.rows)
    assert stream.metadata["synthetic"] is False and stream.metadata["tokenizer"].startswith("hash-words")
    tok = HashWordTokenizer(V)
    convs = json.loads(FIXTURE.read_text())
    a = [r for r in rows if r.session_id == 0]
    texts = [m["value"] for m in convs[0]["conversations"]]
    user0 = tok.encode("\n".join(texts[0:2]))  # the system message joins the first user turn
    assert a[0].input_tokens == user0 and a[0].output_tokens == tok.encode(texts[2])
    assert a[1].input_tokens == user0 + tok.encode(texts[2]) + tok.encode(texts[3])
    assert a[2].input_tokens == a[1].input_tokens + a[1].output_tokens + tok.encode(texts[5])
    assert [r.turn_id for r in a] == [0, 1, 2]
    # conv-b: the leading assistant greeting and the unanswered last user turn are dropped.
    b = [r for r in rows if r.session_id == 1]
    assert len(b) == 1 and b[0].input_tokens == tok.encode(convs[1]["conversations"][1]["value"])
    # Session i starts at i / sps; later turns follow after typing time (spaces / 1.5 words per second).
    assert b[0].ts == 0.5 and a[0].ts == 0.0
    assert a[1].ts == pytest.approx(texts[3].count(" ") / 1.5)
    assert [r.ts for r in rows] == sorted(r.ts for r in rows)


def test_min_turns_num_sessions_and_max_context() -> None:
    rows = list(generate_sharegpt(ShareGptParams(min_turns=2), V, 0, path=str(FIXTURE)).rows)
    assert {r.session_id for r in rows} == {0}  # only conv-a has >= 2 turns
    one = list(generate_sharegpt(ShareGptParams(num_sessions=1), V, 0, path=str(FIXTURE)).rows)
    assert {r.session_id for r in one} == {0}
    short = list(generate_sharegpt(ShareGptParams(max_context=30), V, 0, path=str(FIXTURE)).rows)
    assert all(r.num_input_tokens <= 30 for r in short)
    assert len([r for r in short if r.session_id == 0]) < 3


def test_synthetic_is_labelled_and_follows_published_turn_counts() -> None:
    stream = generate_sharegpt(ShareGptParams(num_sessions=3000), V, 5)
    rows = list(stream.rows)
    assert stream.metadata["synthetic"] is True and "synthetic" in stream.metadata["source"]
    sessions = {r.session_id for r in rows}
    assert len(sessions) == 3000
    assert 3.2 < len(rows) / len(sessions) < 3.8  # published mean 3.51 turns per conversation
    out_mean = sum(r.num_output_tokens for r in rows) / len(rows)
    assert 300 < out_mean < 400  # published mean response 348.5 tokens
    marconi = list(generate_sharegpt(replace(ShareGptParams(), min_turns=10, num_sessions=50), V, 5).rows)
    counts = [sum(1 for r in marconi if r.session_id == s) for s in range(50)]
    assert min(counts) >= 1 and sum(c >= 10 for c in counts) > 25  # context cap may cut long sessions


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ([1, 2], "'conversations'"),
        ({"conversations": [{"from": "human"}]}, "'value' must be a string"),
        ({"conversations": [{"from": "robot", "value": "x"}]}, "unknown role"),
        ({"conversations": "hi"}, "'conversations'"),
        ({"conversations": [{"value": "x"}]}, "string 'from'"),
    ],
)
def test_malformed_records_raise_workload_error(record: object, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        parse_conversations(record, "f.json: conversation 0")


def test_bad_files_and_missing_optional_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"conversations": []}')
    with pytest.raises(WorkloadError, match="JSON list"):
        generate_sharegpt(ShareGptParams(), V, 0, path=str(bad))
    bad.write_text("[{")
    with pytest.raises(WorkloadError, match="not a ShareGPT JSON"):
        generate_sharegpt(ShareGptParams(), V, 0, path=str(bad))
    with pytest.raises(WorkloadError, match="cannot read"):
        generate_sharegpt(ShareGptParams(), V, 0, path=str(tmp_path / "missing.json"))
    with pytest.raises(WorkloadError, match="no conversation"):
        generate_sharegpt(ShareGptParams(min_turns=9), V, 0, path=str(FIXTURE))
    # The `data` extra absent (a None entry in sys.modules makes its import fail): one line naming the package.
    monkeypatch.setitem(sys.modules, "transformers", None)
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(WorkloadError, match="transformers"):
        generate_sharegpt(ShareGptParams(), V, 0, path=str(FIXTURE), tokenizer="gpt2")
    with pytest.raises(WorkloadError, match="datasets"):
        generate_sharegpt(ShareGptParams(), V, 0, dataset="anon/sharegpt")


def test_single_turn_is_bench_serving_sharegpt_first_user_turns_alone_with_little_reuse() -> None:
    multi = list(generate_sharegpt(ShareGptParams(), V, 0, path=str(FIXTURE)).rows)
    single = list(generate_sharegpt(ShareGptParams(single_turn=True, output_len=7), V, 0, path=str(FIXTURE)).rows)
    firsts = [r for r in multi if r.turn_id == 0]
    assert [(r.session_id, r.input_tokens) for r in single] == [(r.session_id, r.input_tokens) for r in firsts]
    assert all(r.turn_id == 0 and len(r.output_tokens) == 7 for r in single)
    synthetic = list(generate_sharegpt(ShareGptParams(num_sessions=300, single_turn=True), V, 1).rows)
    assert len(synthetic) == 300  # one request per conversation
    hits = sum(ideal_hits(synthetic))
    assert hits < 0.05 * sum(r.num_input_tokens for r in synthetic)  # the seed's regression load: ~1% hit
    chats = list(generate_sharegpt(ShareGptParams(num_sessions=300), V, 1).rows)
    assert sum(ideal_hits(chats)) > 0.3 * sum(r.num_input_tokens for r in chats)  # multi-turn: histories reused
    with pytest.raises(WorkloadError, match="output_len"):
        generate_sharegpt(ShareGptParams(output_len=-1), V, 0)
