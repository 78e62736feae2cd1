"""The installed server's --help, kept on disk between commands only while the install it came from is unchanged."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from hybridbench.engines.launchers import installed_help
from hybridbench.errors import ConfigError

HELP = "usage: launch_server [--model-path MODEL_PATH] [--radix-eviction-policy {lru,lfu}]\n"


def venv(tmp_path: Path, package: str = "sglang", version: str = "0.5.23") -> tuple[Path, Path]:
    """A virtualenv's layout whose python prints ``HELP`` and counts its calls in ``calls``."""
    root = tmp_path / "venv"
    site = root / "lib" / "python3.11" / "site-packages"
    (site / package).mkdir(parents=True)
    (site / package / "__init__.py").write_text("")
    info = site / f"{package}-{version}.dist-info"
    info.mkdir()
    (info / "RECORD").write_text(f"{package}/__init__.py,,\n")
    calls = tmp_path / "calls"
    python = root / "bin" / "python"
    python.parent.mkdir()
    python.write_text(f"#!/bin/sh\necho x >> {calls}\nprintf '%s' '{HELP}'\n")
    python.chmod(0o755)
    return python, site


def ask(python: Path) -> str:
    return installed_help([str(python), "-m", "sglang.launch_server", "--help"], "sglang", str(python))


def calls(tmp_path: Path) -> int:
    return len((tmp_path / "calls").read_text().splitlines())


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HYBRIDBENCH_HELP_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    return tmp_path / "cache"


def test_an_unchanged_install_is_asked_once_and_a_reinstall_asks_again(tmp_path: Path) -> None:
    python, site = venv(tmp_path)
    assert ask(python) == HELP and ask(python) == HELP
    assert calls(tmp_path) == 1
    record = site / "sglang-0.5.23.dist-info" / "RECORD"
    record.write_text(record.read_text() + "sglang/srt/server_args.py,,\n")  # pip rewrites RECORD on every install
    os.utime(record, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    assert ask(python) == HELP and calls(tmp_path) == 2


@pytest.mark.parametrize("how", ["editable", "editable-finder", "pythonpath", "off", "no-package"])
def test_nothing_is_cached_where_the_flags_can_change_without_a_pip_install(tmp_path: Path, how: str,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    python, site = venv(tmp_path)
    if how == "editable":  # pip install -e of a PR checkout: the source changes, the install does not
        (site / "sglang-0.5.23.dist-info" / "direct_url.json").write_text(
            json.dumps({"url": "file:///src/sglang/python", "dir_info": {"editable": True}}))
    elif how == "editable-finder":
        (site / "__editable___sglang_0_5_23_finder.py").write_text("")
    elif how == "pythonpath":
        monkeypatch.setenv("PYTHONPATH", str(tmp_path / "shim"))
    elif how == "off":
        monkeypatch.setenv("HYBRIDBENCH_HELP_CACHE", "off")
    else:
        (site / "sglang" / "__init__.py").unlink()
        (site / "sglang").rmdir()
    for _ in range(2):
        assert ask(python) == HELP
    assert calls(tmp_path) == 2


def test_a_failing_help_is_never_cached(tmp_path: Path, cache: Path) -> None:
    python, _ = venv(tmp_path)
    python.write_text(f"#!/bin/sh\necho x >> {tmp_path / 'calls'}\necho 'No module named sglang' >&2\nexit 1\n")
    for _ in range(2):
        with pytest.raises(ConfigError, match="cannot run the server's --help"):
            ask(python)
    assert calls(tmp_path) == 2 and not list(cache.glob("*"))
