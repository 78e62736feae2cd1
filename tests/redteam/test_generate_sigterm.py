"""SIGTERM (a CI cancel, ``timeout``) while ``python -m workloads.generate`` writes its trace left the atomic writer's
hidden temporary file beside the output (``.big.jsonl.old3s6cn``, 74 MB for the seglen preset): Python's default
SIGTERM ends the process without running the ``finally`` that removes it. Now SIGTERM unwinds like Ctrl-C: one line,
exit 128 + 15, nothing left in the output's folder."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_sigterm_mid_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    out = tmp_path / "big.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "workloads.generate", "swebench", "--preset", "seglen",
                             "--vocab-size", "50000", "-o", str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline and not any(tmp_path.iterdir()) and proc.poll() is None:
            time.sleep(0.02)
        assert proc.poll() is None, "the generator finished before it could be stopped mid-write"
        assert next(p.name for p in tmp_path.iterdir()).startswith(".big.jsonl."), "no temporary file mid-write"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert err.strip() == "python -m workloads.generate: error: stopped by SIGTERM", err
    assert list(tmp_path.iterdir()) == []
