"""The installed server's --help, kept on disk between commands only while what the interpreter would import is
unchanged, as the interpreter itself finds it."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest

from hybridbench.engines.launchers import installed_help
from hybridbench.errors import ConfigError

HELP = "usage: launch_server [--model-path MODEL_PATH] [--radix-eviction-policy {lru,lfu}]\n"


def build(tmp_path: Path, site: Path, help_text: str = HELP, extra: str = "") -> Path:
    """An interpreter (a real Python with ``site`` on its path) whose ``sglang.launch_server --help`` prints
    ``help_text`` and counts its calls in ``tmp_path/calls``."""
    (site / "sglang").mkdir(parents=True, exist_ok=True)
    (site / "sglang" / "__init__.py").write_text("")
    (site / "sglang" / "launch_server.py").write_text(
        f"from pathlib import Path\nwith open({str(tmp_path / 'calls')!r}, 'a') as fh:\n    fh.write('x\\n')\n"
        f"{extra}print({help_text!r}, end='')\n")
    python = tmp_path / "bin" / "python"
    python.parent.mkdir(exist_ok=True)
    python.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return python


def ask(python: Path) -> str:
    return installed_help([str(python), "-m", "sglang.launch_server", "--help"], "sglang", str(python))


def calls(tmp_path: Path) -> int:
    path = tmp_path / "calls"
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HYBRIDBENCH_HELP_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "cache"


def test_an_unchanged_package_is_asked_once_and_any_change_asks_again(tmp_path: Path) -> None:
    python = build(tmp_path, tmp_path / "site")
    assert ask(python) == HELP and ask(python) == HELP
    assert calls(tmp_path) == 1
    # A hand-patched module (or a reinstall, a git checkout of another branch): its files changed, so ask again.
    patched = tmp_path / "site" / "sglang" / "srt_server_args.py"
    patched.write_text("# a new flag\n")
    assert ask(python) == HELP and calls(tmp_path) == 2
    future = time.time_ns() + 10**9
    os.utime(patched, ns=(future, future))
    assert ask(python) == HELP and calls(tmp_path) == 3
    assert ask(python) == HELP and calls(tmp_path) == 3


def test_what_the_interpreter_imports_decides_not_where_its_install_is(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkout in the working directory shadows the installed package for ``python -m``: another text."""
    python = build(tmp_path, tmp_path / "site")
    assert ask(python) == HELP
    checkout = tmp_path / "checkout"
    (checkout / "sglang").mkdir(parents=True)
    (checkout / "sglang" / "__init__.py").write_text("")
    (checkout / "sglang" / "launch_server.py").write_text(
        f"open({str(tmp_path / 'calls')!r}, 'a').write('x\\n')\n"
        "print('usage: launch_server [--seglen-eff-weight W]')\n")
    monkeypatch.chdir(checkout)
    assert "--seglen-eff-weight" in ask(python) and calls(tmp_path) == 2
    monkeypatch.chdir(tmp_path)
    assert ask(python) == HELP and calls(tmp_path) == 2  # the installed one's text, kept from the first call


def test_a_package_changed_while_its_help_ran_is_not_kept(tmp_path: Path, cache: Path) -> None:
    """A pip install racing the --help (here: the first --help adds a module): the text may be either build's, so
    it is kept under neither stamp; the next call, on a settled install, is."""
    racing = "late = Path(__file__).with_name('late.py')\nlate.exists() or late.write_text('')\n"
    python = build(tmp_path, tmp_path / "site", extra=racing)
    assert ask(python) == HELP and calls(tmp_path) == 1
    assert not cache.exists() or not list(cache.iterdir())
    assert ask(python) == HELP and ask(python) == HELP and calls(tmp_path) == 2


def test_off_and_a_failing_help_are_never_cached(tmp_path: Path, cache: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    python = build(tmp_path, tmp_path / "site")
    monkeypatch.setenv("HYBRIDBENCH_HELP_CACHE", "off")
    assert ask(python) == HELP and ask(python) == HELP and calls(tmp_path) == 2
    monkeypatch.setenv("HYBRIDBENCH_HELP_CACHE", str(cache))
    (tmp_path / "site" / "sglang" / "launch_server.py").write_text("raise SystemExit('No module named torch')\n")
    for _ in range(2):
        with pytest.raises(ConfigError, match="cannot run the server's --help"):
            ask(python)
    assert not cache.exists() or not list(cache.iterdir())


def test_an_interpreter_that_answers_the_probe_with_something_else_is_asked_every_time(tmp_path: Path) -> None:
    """A wrapper that answers any ``-c`` with a version number (as some launch scripts do) gives no stamp."""
    python = tmp_path / "wrapper"
    python.write_text(f'#!/bin/sh\nif [ "$1" = "-c" ]; then echo 1; exit 0; fi\necho x >> {tmp_path / "calls"}\n'
                      f"printf '%s' '{HELP}'\n")
    python.chmod(0o755)
    for n in (1, 2):
        assert ask(python) == HELP and calls(tmp_path) == n


PARSER = ("import argparse, sys\n"
          "p = argparse.ArgumentParser(prog='launch_server')\n"
          "p.add_argument('--max-running-requests', type=int)\n"
          "p.add_argument('--api-key')\n"
          "p.add_argument('--port', type=int)\n"
          "p.print_help = lambda file=None: print(" + repr(HELP) + ", end='')\n"
          "p.parse_args(sys.argv[1:])\n"
          "raise SystemExit(0)\n")


def ask_with(python: Path, *extra: str) -> str:
    return installed_help([str(python), "-m", "sglang.launch_server", *extra, "--help"], "sglang", str(python),
                          extra=extra)


def test_extra_args_are_read_by_the_servers_parser_and_no_secret_reaches_the_cache(tmp_path: Path,
                                                                                   cache: Path) -> None:
    python = build(tmp_path, tmp_path / "site", extra=PARSER)
    said = "engine.extra_args: the sglang build's own parser refuses them: argument "
    with pytest.raises(ConfigError, match="^" + re.escape(said + "--max-running-requests: invalid int value: 'abc'")):
        ask_with(python, "--max-running-requests", "abc")
    with pytest.raises(ConfigError, match=re.escape(said + "--port: invalid int value: '***'")):  # a secret quoted
        ask_with(python, "--api-key", "sk-first-secret", "--port", "sk-first-secret")
    assert not list(cache.glob("*"))  # a refusal is never kept
    assert ask_with(python, "--max-running-requests", "8", "--api-key", "sk-first-secret") == HELP
    assert ask_with(python, "--max-running-requests", "8", "--api-key", "sk-other-secret") == HELP
    assert calls(tmp_path) == 3  # two refusals, one help; the second key is the same masked command: the kept text
    assert ask_with(python, "--max-running-requests", "9", "--api-key", "sk-first-secret") == HELP
    assert calls(tmp_path) == 4  # another value is asked again
    kept = [p.name + p.read_text() for p in cache.rglob("*") if p.is_file()]
    assert kept and not any("secret" in k for k in kept)
