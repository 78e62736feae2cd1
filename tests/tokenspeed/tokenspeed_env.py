"""Where the TokenSpeed tier's environments are, the gate every test module opens with, and a release's PYTHONPATH.

Not a test module (no ``test_`` prefix): pytest puts this directory on sys.path, so the tests import it by name.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
HOME = Path(os.environ.get("HYBRIDBENCH_TOKENSPEED_HOME") or Path.home() / ".cache" / "hybridbench")
PYTHON = HOME / "tokenspeed-parsers" / "bin" / "python"  # the parser env every probe runs in
SCHEDULER_010 = HOME / "tokenspeed-scheduler-0.1.0"  # 0.1.0's scheduler build, beside its release
KERNEL_STUB = HERE / "kernel_stub"  # the GPU kernel packages, stubbed so the releases import on CPU


def release(version: str) -> Path:
    return HOME / f"tokenspeed-{version}"


def require(*folders: Path, what: str) -> None:
    """Skip the calling module unless the parser env and ``folders`` (each built and stamped by build_env.sh) are
    there; in CI (``HYBRIDBENCH_REQUIRE_TOKENSPEED=1``) fail instead of skipping."""
    if PYTHON.exists() and all((folder / ".hybridbench-stamp").exists() for folder in folders):
        return
    if os.environ.get("HYBRIDBENCH_REQUIRE_TOKENSPEED") == "1":
        raise RuntimeError(f"HYBRIDBENCH_REQUIRE_TOKENSPEED=1 but the TokenSpeed {what} is missing under {HOME}: "
                           "run `bash tests/tokenspeed/build_env.sh`")
    pytest.skip(f"no TokenSpeed {what}: run `bash tests/tokenspeed/build_env.sh`", allow_module_level=True)


def pythonpath(*folders: Path) -> str:
    """The parser env's PYTHONPATH for these release folders: the kernel stubs first."""
    return os.pathsep.join(str(p) for p in (KERNEL_STUB, *folders))
