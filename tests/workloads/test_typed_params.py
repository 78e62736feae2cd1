"""Generators are called with typed parameters declared once (a dataclass field each): the command line is built
from the same declarations and writes the same bytes; bad values are one-line exceptions naming the parameter."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from workloads import generate
from workloads.cli import run_cli
from workloads.errors import WorkloadError
from workloads.generate import generate_trace
from workloads.params import add_arguments, declarations, param
from workloads.registry import WORKLOADS


def test_the_typed_call_and_the_command_line_write_the_same_trace(tmp_path: Path) -> None:
    values = {"num_groups": 3, "prompts_per_group": 2, "system_prompt_len": 40, "question_len": 8, "output_len": 4,
              "num_turns": 2, "ordered": True, "range_ratio": 0.5}
    typed, cli = tmp_path / "typed.jsonl", tmp_path / "cli.jsonl"
    generate_trace("gsp", values, vocab_size=500, seed=7, output=str(typed), preset="radix", scale=2)
    argv = ["gsp", "--preset", "radix", "--num-groups", "3", "--prompts-per-group", "2", "--system-prompt-len", "40",
            "--question-len", "8", "--output-len", "4", "--num-turns", "2", "--ordered", "--range-ratio", "0.5",
            "--vocab-size", "500", "--seed", "7", "-o", str(cli), "--scale", "2"]
    assert run_cli(generate.main, "workloads.generate", argv) == 0
    assert typed.read_bytes() == cli.read_bytes()


@pytest.mark.parametrize(("values", "message"), [
    ({"num_grups": 3}, "unknown parameter 'num_grups'; choose from "),
    ({"num_groups": "3"}, "num_groups: expected int, got '3'"),
    ({"num_groups": True}, "num_groups: expected int, got True"),
    ({"range_ratio": "x"}, "range_ratio: expected a number, got 'x'"),
    ({"ordered": 1}, "ordered: expected bool, got 1"),
    ({"group_distribution": "pareto"}, "group_distribution: 'pareto' is not one of uniform, zipf"),
    ({"num_groups": 0}, "num_groups must be >= 1, got 0"),  # the generator's own check, before any row
    # an empty prompt is a trace stats, replay and simulate refuse: refused before any row
    ({"system_prompt_len": 0, "question_len": 0}, r"system_prompt_len \+ question_len must be >= 1 .*got 0 \+ 0"),
])
def test_bad_values_are_one_line_exceptions_naming_the_parameter(tmp_path: Path, values: dict[str, object],
                                                                 message: str) -> None:
    with pytest.raises(WorkloadError, match=message) as e:
        generate_trace("gsp", values, vocab_size=500, seed=1, output=str(tmp_path / "t.jsonl"))
    assert "\n" not in str(e.value) and not (tmp_path / "t.jsonl").exists()


def test_sources_are_typed_too_and_required_ones_are_required(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="path: a value is required"):
        WORKLOADS["trace"].resolve({})
    params, source = WORKLOADS["sharegpt"].resolve({"num_sessions": 3, "split": "test"}, preset="marconi")
    assert (params.num_sessions, params.min_turns, source.split, source.path) == (3, 10, "test", None)
    with pytest.raises(WorkloadError, match="unknown preset 'nope' for sharegpt"):
        WORKLOADS["sharegpt"].resolve({}, preset="nope")


def test_every_registered_generator_declares_each_parameter_once() -> None:
    for w in WORKLOADS.values():
        names = [d.name for cls in (w.params, w.source) if cls is not None for d in declarations(cls)]
        assert len(names) == len(set(names)) and names, w.name
        parser = argparse.ArgumentParser()
        w.add_arguments(parser)  # argparse refuses a flag declared twice


def test_a_new_generator_needs_only_its_dataclass() -> None:
    @dataclasses.dataclass(frozen=True)
    class Knobs:
        count: int = param(2, "how many")
        label: str | None = param(None, "a name")
        loud: bool = param(False, "shout")

    parser = argparse.ArgumentParser()
    add_arguments(parser, Knobs)
    ns = parser.parse_args(["--count", "5", "--loud"])
    assert (ns.count, ns.label, ns.loud) == (5, None, True)
    assert "how many; default 2" in parser.format_help()
