"""engine.track_interval is SGLang's --mamba-track-interval (where extra_buffer keeps a state while decoding). vLLM and
TokenSpeed take no such flag (vLLM's states follow its block size; TokenSpeed 0.1.0's flag is read nowhere), so
their commands leave it out: the plan's pools must not print it as the server's, and an override of it on those
engines, which changes nothing the server runs, is said instead of dropped silently."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hybridbench.engines.registry import make_engine

ROOT = Path(__file__).resolve().parents[2]
MAIN_HELP = Path(__file__).resolve().parent / "fixtures" / "vllm_help_main.txt"


@pytest.mark.parametrize(("engine", "used"), [("sglang", True), ("reference", True), ("sim", True),
                                               ("vllm", False), ("tokenspeed", False)])
def test_which_engines_take_a_tracking_interval(engine: str, used: bool) -> None:
    made = make_engine(engine)
    try:
        assert made.traits.track_interval is used
    finally:
        made.close()


def _plan(tmp_path: Path, *overrides: str) -> dict[str, object]:
    fake = tmp_path / "python"  # a vLLM main build: its version and its `serve --help=all`
    fake.write_text(f'#!/bin/sh\ncase "$*" in *--help=all*) cat "{MAIN_HELP}";; *) echo 0.20.0;; esac\n')
    fake.chmod(0o755)
    proc = subprocess.run([sys.executable, "-m", "hybridbench.preview", "+experiment=radix", "engine=vllm",
                           f"engine.python={fake}", *overrides, "--no-forecast", "--json"],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert isinstance(out, dict)
    return out


def test_a_vllm_plan_does_not_claim_a_tracking_interval(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    pools = plan["pools"]
    assert isinstance(pools, dict) and "not used by engine=vllm" in str(pools["track_interval"])
    assert not [w for w in plan["warnings"] if "track_interval" in w]  # type: ignore[attr-defined]


def test_an_override_vllm_ignores_is_said(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "engine.track_interval=64")
    warned = [w for w in plan["warnings"] if "engine.track_interval=64" in w]  # type: ignore[attr-defined]
    assert len(warned) == 1 and "no effect on engine=vllm" in warned[0], plan["warnings"]
    for arm in plan["arms"].values():  # type: ignore[attr-defined]
        assert "64" not in arm["argv"]
