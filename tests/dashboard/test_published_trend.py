"""The trends page draws a published figure (results/baselines/) as a dashed line on the series it matches."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from hybridbench.dashboard.trends import trend_page
from hybridbench.results.store import load_store

BASELINES = Path(__file__).resolve().parents[2] / "results" / "baselines"


def test_a_matching_published_figure_is_a_dashed_line_on_its_trend(results_root: Path, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    shutil.copytree(results_root, root)
    pub = json.loads((BASELINES / "seed-001-radix.json").read_text())
    # The smoke runs' own experiment, workload and model, so exactly their mean-TTFT chart matches.
    pub.update(name="smoke-ttft", experiment="smoke", figures={"gsp": {"disabled": {"mean_ttft_ms": 1234.5}}})
    (root / "baselines").mkdir()
    (root / "baselines" / "smoke.json").write_text(json.dumps(pub))
    html = trend_page(load_store(root), root).replace(": ", ":")
    # one dashed line per gsp mean-TTFT chart (the store splits the smoke runs into like-for-like groups)
    assert html.count('"dash":"dash"') == html.count('"text":"published"') >= 1
    assert '"y0":1234.5' in html
    assert '"dash":"dash"' not in trend_page(load_store(results_root), results_root).replace(": ", ":")
    pub["model"] = "qwen3.5-9b"  # another model's figure is not this series' baseline
    (root / "baselines" / "smoke.json").write_text(json.dumps(pub))
    assert '"dash":"dash"' not in trend_page(load_store(root), root).replace(": ", ":")
