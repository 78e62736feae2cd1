"""engine=sim refuses at plan time, in one line naming engine.page_size, a page its model's mamba chunk does not
divide (nor divides): the simulator's tree raised it as a ValueError traceback once the first trial started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_page_the_mamba_chunk_does_not_divide_is_refused_in_one_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "hybridbench.preview", "+experiment=radix", "engine=sim",
                           "arms=[branching]", "engine.page_size=272"], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == ("error: engine.page_size=272: model qwen3-next-80b-a3b's 64-token mamba chunk "
                           "and the page must divide one another (SGLang refuses it at start-up); use a page size "
                           "that divides 64 or a multiple of it\n"), proc.stderr
