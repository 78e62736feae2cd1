"""prefix_groups: the seglen PR's dataset shapes — groups sharing prefixes of their own lengths, among noise."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from workloads.errors import WorkloadError
from workloads.prefix_groups import PRESETS, PrefixGroupsParams, generate_prefix_groups
from workloads.registry import get_workload
from workloads.scale import scale_stream
from workloads.trace import TraceRow

ROOT = Path(__file__).resolve().parents[2]


def common(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def rows(params: PrefixGroupsParams, vocab: int = 5000, seed: int = 1) -> list[TraceRow]:
    return list(generate_prefix_groups(params, vocab, seed).rows)


def test_groups_share_exactly_their_own_prefix_and_noise_shares_nothing() -> None:
    p = PrefixGroupsParams(num_groups=3, prompts_per_group=6, num_noise=5, prefix_lens="10,40,25",
                           suffix_lens="3,5", noise_lens="7", output_len=2)
    got = rows(p)
    assert len(got) == 23 and [r.session_id for r in got] == list(range(23))
    by_group: dict[int, list[TraceRow]] = {}
    noise = []
    for r in got:
        (by_group.setdefault(int(r.extra["group"]), []) if "group" in r.extra else noise).append(r)
    assert {g: len(v) for g, v in by_group.items()} == {0: 6, 1: 6, 2: 6} and len(noise) == 5
    for g, members in by_group.items():
        prefix = (10, 40, 25)[g]
        for i, a in enumerate(members):
            suffix = a.num_input_tokens - prefix
            assert suffix in (3, 5)
            for b in members[i + 1:]:
                assert common(a.input_tokens, b.input_tokens) == prefix  # part right after the prefix
    for a in got:
        for b in got:
            if a is not b and (a.extra.get("group", -1) != b.extra.get("group", -2) or "group" not in a.extra):
                assert a.input_tokens[0] != b.input_tokens[0]  # nothing shared across groups or with noise
    assert {r.num_input_tokens for r in noise} == {7} and {r.num_output_tokens for r in got} == {2}
    # shuffled: groups interleave with noise, deterministically for a seed
    assert [("group" in r.extra) for r in got] != sorted(("group" in r.extra) for r in got)
    assert [r.input_tokens for r in rows(p)] == [r.input_tokens for r in got]
    assert [r.input_tokens for r in rows(p, seed=2)] != [r.input_tokens for r in got]


def test_multi_group_preset_is_the_prs_generator_shape_and_the_mixed_one_its_inferred_shape() -> None:
    mg = PRESETS["multi-group"]
    assert mg.group_prefix_lens() == (256, 384, 512, 640, 768, 896, 1024, 1280, 1536, 1792, 2048, 2304)
    assert mg.num_groups * mg.prompts_per_group + mg.num_noise == 2760  # the PR's table: 2760 prompts
    mixed = PRESETS["mixed-7k-10k-noise"]
    assert mixed.group_prefix_lens() == (7000, 7600, 8200, 8800, 9400, 10000)
    assert mixed.num_groups * mixed.prompts_per_group + mixed.num_noise == 1800
    got = rows(PrefixGroupsParams(num_groups=2, prompts_per_group=2, num_noise=0, prefix_min=7000, prefix_max=10000,
                                  suffix_lens="48", output_len=128))
    assert sorted(r.num_input_tokens for r in got) == [7048, 7048, 10048, 10048]


def test_scaling_keeps_every_fth_group_and_every_fth_noise_prompt() -> None:
    p = PrefixGroupsParams(num_groups=4, prompts_per_group=3, num_noise=8, prefix_lens="64,64,64,64",
                           suffix_lens="8", noise_lens="16", output_len=4)
    scaled = list(scale_stream(generate_prefix_groups(p, 5000, 3), 2, 5000).rows)
    assert Counter("group" in r.extra for r in scaled) == {True: 6, False: 4}


@pytest.mark.parametrize(("values", "needle"), [
    ({"prefix_lens": "1,2"}, "prefix_lens: 2 lengths for num_groups=12"),
    ({"suffix_lens": "4,x"}, "suffix_lens"),
    ({"noise_lens": "0"}, "noise_lens"),
    ({"prefix_min": 50, "prefix_max": 10}, "prefix_min"),
    ({"num_noise": -1}, "num_noise"),
])
def test_bad_parameters_are_one_line_naming_them(values: dict[str, object], needle: str) -> None:
    with pytest.raises(WorkloadError, match=needle):
        get_workload("prefix_groups").resolve(values)


def test_cli_preset_and_bad_option(tmp_path: Path) -> None:
    out = tmp_path / "mg.jsonl"
    ok = subprocess.run([sys.executable, "-m", "workloads.generate", "prefix_groups", "--preset", "multi-group",
                         "--num-groups", "2", "--prefix-lens", "30,60", "--prompts-per-group", "3", "--num-noise",
                         "2", "--vocab-size", "1000", "-o", str(out)], capture_output=True, text=True, cwd=ROOT,
                        check=False)
    assert ok.returncode == 0, ok.stderr
    assert len(out.read_text().splitlines()) == 1 + 8  # metadata line + rows
    bad = subprocess.run([sys.executable, "-m", "workloads.generate", "prefix_groups", "--prefix-lens", "a",
                          "--vocab-size", "1000", "-o", str(tmp_path / "x.jsonl")], capture_output=True, text=True,
                         cwd=ROOT, check=False)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "prefix_lens" in bad.stderr
    assert not (tmp_path / "x.jsonl").exists()
