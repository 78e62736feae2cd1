"""data.*: real ShareGPT on GPU runs, tokenized by the served model's tokenizer, through the path a GPU run plans.

The data sets are made with ``datasets`` itself (save_to_disk) and as bench_serving's JSON file, the tokenizer is
trained here with ``tokenizers`` and saved as a ``transformers`` tokenizer folder; nothing is downloaded.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import datasets
import pytest
import tokenizers
import transformers
from machine_fakes import fake_sglang

from hybridbench.errors import ConfigError
from hybridbench.preview.build import build_preview
from hybridbench.preview.compose import compose_run

# The `data` extra (in `test`): a missing one fails collection here rather than skipping the real-data path.
CHATS = [
    [("human", "how do radix trees share prefixes"), ("gpt", "each node holds the tokens of its edge")],
    [("human", "what is a mamba state"), ("gpt", "a recurrent summary of every token so far")],
    [("human", "why evict by segment length"), ("gpt", "replaying a long segment costs more prefill")],
]


def conversations() -> list[dict[str, object]]:
    return [{"id": str(i), "conversations": [{"from": r, "value": v} for r, v in chat]} for i, chat in enumerate(CHATS)]


def tiny_tokenizer(folder: Path) -> Path:
    """A word-level tokenizer trained on the chats, saved as transformers saves one."""
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    trainer = tokenizers.trainers.WordLevelTrainer(special_tokens=["[UNK]"])
    tok.train_from_iterator([v for chat in CHATS for _, v in chat], trainer)
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(folder)
    return folder


def gpu_plan(tmp_path: Path, *args: str) -> dict[str, object]:
    """The preview of smoke on SGLang (a stand-in interpreter answering its --help) with ``args``: the GPU path."""
    python = fake_sglang(tmp_path)
    composed = compose_run(["+experiment=smoke", "engine=sglang", "engine.tp=1", f"engine.python={python}", *args])
    preview = build_preview(composed, forecast=False)
    return {"workloads": preview.workloads, "warnings": preview.warnings}


def sharegpt_plan(tmp_path: Path, *extra: str) -> dict[str, object]:
    return gpu_plan(tmp_path, "+workload@workloads.chat=sharegpt_single_turn", "workloads.chat.params.num_sessions=3",
                    *extra)


def first_turn_tokens(tokenizer: Path) -> int:
    tok = transformers.AutoTokenizer.from_pretrained(str(tokenizer))
    return sum(len(tok.encode(chat[0][1], add_special_tokens=False)) for chat in CHATS)


@pytest.mark.parametrize("form", ["save_to_disk", "json"])
def test_data_sharegpt_is_tokenized_by_the_given_tokenizer(tmp_path: Path, form: str) -> None:
    if form == "json":
        source = tmp_path / "ShareGPT_V3_unfiltered_cleaned_split.json"
        source.write_text(json.dumps(conversations()))
    else:
        source = tmp_path / "sharegpt_ds"
        datasets.Dataset.from_list(conversations()).save_to_disk(str(source))
    tok = tiny_tokenizer(tmp_path / "tok")
    out = sharegpt_plan(tmp_path, f"data.sharegpt={source}", f"data.tokenizer={tok}")
    chat = out["workloads"]["chat"]  # type: ignore[index]
    assert chat["requests"] == 3 and chat["input_tokens"] == first_turn_tokens(tok)
    assert not any("synthetic" in w for w in out["warnings"])  # type: ignore[attr-defined]


def test_the_served_models_own_tokenizer_is_the_default_on_gpu_engines(tmp_path: Path) -> None:
    source = tmp_path / "sharegpt_ds"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(conversations())}).save_to_disk(str(source))
    tok = tiny_tokenizer(tmp_path / "model")  # model.hf_id: a local model folder holding its tokenizer
    out = sharegpt_plan(tmp_path, f"data.sharegpt={source}", f"model.hf_id={tok}")
    assert out["workloads"]["chat"]["input_tokens"] == first_turn_tokens(tok)  # type: ignore[index]


def test_a_gpu_run_on_synthetic_text_says_so_and_require_real_refuses_it(tmp_path: Path) -> None:
    out = sharegpt_plan(tmp_path)
    assert any(w.startswith("workloads.chat: synthetic ShareGPT stand-in") for w in out["warnings"])  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"^data\.require_real: workloads\.chat: synthetic"):
        sharegpt_plan(tmp_path, "data.require_real=true")


FIXTURES = Path(__file__).resolve().parents[1] / "workloads" / "fixtures"


def swebench_plan(tmp_path: Path, *extra: str) -> dict[str, object]:
    return gpu_plan(tmp_path, "+workload@workloads.agent=swebench_seglen", "+workloads.agent.params.num_sessions=2",
                    *extra)


def test_data_swebench_trajectories_are_tokenized_by_the_served_models_tokenizer(tmp_path: Path) -> None:
    """SWE-agent and OpenHands files in one folder, message by message, with model.hf_id's tokenizer: the same
    token counts as the generator given that tokenizer itself."""
    from workloads.swebench import PRESETS, generate_swebench

    folder = tmp_path / "trajectories"
    folder.mkdir()
    for name in ("swe_agent_tiny.traj", "openhands_tiny.json"):
        (folder / name).write_bytes((FIXTURES / name).read_bytes())
    tok = tiny_tokenizer(tmp_path / "model")
    out = swebench_plan(tmp_path, f"data.swebench={folder}", f"model.hf_id={tok}")
    agent = out["workloads"]["agent"]  # type: ignore[index]
    assert agent["argv"][agent["argv"].index("--tokenizer") + 1] == str(tok)
    params = dataclasses.replace(PRESETS["seglen"], num_sessions=2)
    rows = list(generate_swebench(params, agent_vocab(agent), 0, path=str(folder), tokenizer=str(tok)).rows)
    assert agent["sessions"] == 2 and agent["input_tokens"] == sum(r.num_input_tokens for r in rows) > 0
    assert not any("synthetic" in w for w in out["warnings"])  # type: ignore[attr-defined]


def agent_vocab(agent: dict[str, object]) -> int:
    argv = agent["argv"]
    assert isinstance(argv, list)
    return int(argv[argv.index("--vocab-size") + 1])


def test_data_swebench_trace_jsonl_is_replayed_as_it_is(tmp_path: Path) -> None:
    trace = FIXTURES / "swebench_sps=10_art=5_nums=2.jsonl"
    out = swebench_plan(tmp_path, f"data.swebench='{trace}'")  # quoted: Hydra reads "=" in a value as syntax
    agent = out["workloads"]["agent"]  # type: ignore[index]
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    assert agent["requests"] == len(rows) and agent["input_tokens"] == sum(len(r["input_tokens"]) for r in rows)
    assert "--tokenizer" not in agent["argv"]  # token ids already: no tokenizer applies
    assert any("data.swebench is a trace file, sent as it is" in w for w in out["warnings"])  # type: ignore[attr-defined]


def test_a_missing_data_swebench_is_refused_at_plan_time_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^data\.swebench: .*/nope: no such file or directory$"):
        swebench_plan(tmp_path, f"data.swebench={tmp_path / 'nope'}")


def test_a_gpu_run_on_synthetic_sessions_says_so_and_require_real_refuses_it(tmp_path: Path) -> None:
    out = swebench_plan(tmp_path)
    assert any(w.startswith("workloads.agent: synthetic SWE-bench sessions") for w in out["warnings"])  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"^data\.require_real: workloads\.agent: synthetic SWE-bench"):
        swebench_plan(tmp_path, "data.require_real=true")


def test_data_aime25_and_gsm8k_are_the_accuracy_probes_folders(tmp_path: Path) -> None:
    for name, field in (("gsm8k", "question"), ("aime25", "problem")):  # the fields evalscope reads
        (tmp_path / name).mkdir()
        (tmp_path / name / "test.jsonl").write_text(json.dumps({field: "What is 2 + 2?", "answer": "4"}) + "\n")
    shot = json.dumps({"question": "1 + 1?", "answer": "#### 2"}) + "\n"
    (tmp_path / "gsm8k" / "train.jsonl").write_text(shot * 4)  # evalscope's four examples
    python = fake_sglang(tmp_path)
    composed = compose_run(["+experiment=accuracy", "engine=sglang", "engine.tp=1", f"engine.python={python}",
                            f"data.gsm8k={tmp_path / 'gsm8k'}", f"data.aime25={tmp_path / 'aime25'}"])
    preview = build_preview(composed, forecast=False)
    assert composed.cfg.checks.accuracy_datasets == {"gsm8k": str(tmp_path / "gsm8k"),
                                                     "aime25": str(tmp_path / "aime25")}
    assert not any(w.startswith("accuracy:") for w in preview.warnings)
