"""results/baselines/: the seeds' published figures as runs on the branch `published`, cross-checked against the
experiments' own `published:` entries (conf/experiment/*.yaml) so the two transcriptions cannot drift apart."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hybridbench.errors import ConfigError
from hybridbench.results.baselines import find_published, read_published
from hybridbench.results.store import load_store

ROOT = Path(__file__).resolve().parents[2]
BASELINES = ROOT / "results" / "baselines"


def test_every_baseline_agrees_with_its_experiments_published_entries() -> None:
    checked = 0
    for path in find_published(BASELINES):
        pub = read_published(path)
        entries = yaml.safe_load((ROOT / "conf" / "experiment" / f"{pub.experiment}.yaml").read_text())["published"]
        for e in entries:
            if e["model"] != pub.model or e.get("hardware") != pub.hardware:
                continue
            new = pub.value(e["workload"], e["arm"], e["metric"])
            if new is None:
                continue
            if "baseline_arm" in e:  # a relative change, rounded to 3 decimals in the experiment
                old = pub.value(e["workload"], e["baseline_arm"], e["metric"])
                assert old is not None, (path.name, e)
                assert (new - old) / old == pytest.approx(e["value"], abs=0.0006), (path.name, e)
            else:
                assert new == pytest.approx(e["value"]), (path.name, e)
            checked += 1
    assert checked >= 4  # radix: throughput and TTFT deltas and the absolute throughput; prefill overhead


def test_the_store_lists_baselines_as_published_runs_with_their_source() -> None:
    proc = subprocess.run([sys.executable, "-m", "hybridbench.results", "ls", str(BASELINES)], capture_output=True,
                          text=True, check=False, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    rows = [ln.split() for ln in proc.stdout.splitlines()]
    assert sorted((r[2], r[-2], r[-1]) for r in rows) == [
        ("prefill_overhead", "published", "published/seed-001-prefill-overhead"),
        ("radix", "published", "published/seed-001-radix")]
    store = load_store(BASELINES)
    radix = store.runs[store.runs["experiment"] == "radix"].iloc[0]
    assert radix["gpu"] == "4xH100" and "--gsp-system-prompt-len 10240" in radix["command"]
    assert "SGLang PR #11214" in radix["source"]
    ttft = store.aggregates[(store.aggregates["run"] == radix["run"]) & (store.aggregates["metric"] == "mean_ttft_ms")]
    assert dict(zip(ttft["arm"], ttft["value"], strict=True)) == {"disabled": 890.59, "lru": 507.33}
    assert store.loaded == {}  # no typed run behind a published figure: nothing for show/export/score


def test_a_bad_baseline_file_is_one_skipped_line(tmp_path: Path) -> None:
    folder = tmp_path / "baselines"
    folder.mkdir()
    good = json.loads((BASELINES / "seed-001-radix.json").read_text())
    (folder / "bad.json").write_text(json.dumps({**good, "figures": {"gsp": {"lru": {"mean_ttft_ms": "fast"}}}}))
    (folder / "good.json").write_text(json.dumps(good))
    store = load_store(tmp_path)
    assert list(store.runs["run"]) == ["published/seed-001-radix"]
    assert len(store.skipped) == 1 and "figures.gsp.lru.mean_ttft_ms: not a number" in store.skipped[0]
    with pytest.raises(ConfigError, match="label"):
        (folder / "x.json").write_text(json.dumps({**good, "label": "main"}))
        read_published(folder / "x.json")


def test_every_results_command_takes_a_root_with_baselines(tmp_path: Path) -> None:
    """A published run has no run directory behind it: index, ls, export and history must still work."""
    shutil.copytree(BASELINES, tmp_path / "baselines")
    for args in (["index"], ["ls"], ["history"], ["export", "-o", str(tmp_path / "parquet")]):
        proc = subprocess.run([sys.executable, "-m", "hybridbench.results", args[0], str(tmp_path), *args[1:]],
                              capture_output=True, text=True, check=False, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert proc.returncode == 0, (args, proc.stderr)
    assert (tmp_path / "index.jsonl").read_text() == ""  # the index lists finished runs, not published figures
    assert (tmp_path / "parquet" / "runs.parquet").is_file()
