"""The warm fork server the oracle tests run SGLang's scripts from (warm_release.py, warm_zygote.py).

Most of these run the server under this venv's interpreter with a small preload (what it does is the same for any
interpreter); the last one runs it in SGLang 0.5.23's venv with the oracle tests' own preload.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import warm_release
from oracle_client import env_python, env_ready

PY = Path(sys.executable)
LIGHT = ("json",)  # what the server imports before forking, for these tests


@pytest.fixture(autouse=True)
def _warm(monkeypatch: pytest.MonkeyPatch) -> None:
    # the server itself is under test, whatever the session's switch (unset, not "1": the key of the release's server
    # is the environment, which then stays the one the oracle tests share)
    monkeypatch.delenv(warm_release.SWITCH, raising=False)


def warm(args: list[str], *, input: str | None = None, env: dict[str, str] | None = None, timeout: float = 60,
         cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return warm_release.start(PY, args, input=input, env=env if env is not None else warm_release.oracle_env(),
                              cwd=cwd, timeout=timeout, preload=LIGHT).wait()


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's exit status waits for whoever reaps orphans here)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


MUTATE = """
import json, os, sys, types, colorsys
json.PLANTED = "module state"
sys.modules["planted"] = types.ModuleType("planted")
os.environ["PLANTED"] = "environment"
os.chdir("/")
print(json.dumps([os.getppid(), json.PLANTED, "planted" in sys.modules, os.environ["PLANTED"], os.getcwd()]))
"""
LOOK = """
import json, os, sys
print(json.dumps([os.getppid(), getattr(json, "PLANTED", None), "planted" in sys.modules, "colorsys" in sys.modules,
                  os.environ.get("PLANTED"), os.getcwd(), os.environ.get("PYTEST_CURRENT_TEST")]))
"""


def test_each_request_starts_from_the_servers_own_state_never_an_earlier_requests(tmp_path: Path) -> None:
    env = warm_release.oracle_env()
    first = warm(["-c", MUTATE], env={**env, "PYTEST_CURRENT_TEST": "the first request's"}, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    server = warm_release.server(PY, env, LIGHT).proc.pid
    assert json.loads(first.stdout) == [server, "module state", True, "environment", "/"]
    # the same server (the child's parent), none of the first request's changes; the environment exactly the one
    # passed (the server started with the first request's PYTEST_CURRENT_TEST, this one has none)
    env.pop("PYTEST_CURRENT_TEST", None)
    second = warm(["-c", LOOK], env=env, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout) == [server, None, False, False, None, str(tmp_path), None]


def test_a_hung_child_is_killed_at_its_timeout_with_what_it_started_and_the_server_serves_on(tmp_path: Path) -> None:
    hang = ("import subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
            "print(child.pid, flush=True)\n"
            "time.sleep(600)\n")
    began = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as timed_out:
        warm(["-c", hang], timeout=10)  # room for the child to start and print on a loaded 2-core runner
    assert time.monotonic() - began < 60
    assert timed_out.value.timeout == 10
    grandchild = int(str(timed_out.value.output).strip())  # what it printed before it was killed
    for _ in range(50):
        if not running(grandchild):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the hung request's own child {grandchild} still runs")
    assert warm(["-c", "print('next')"]).stdout == "next\n"


SCRIPT = """
import atexit, os, sys
atexit.register(lambda: print("at exit", flush=True))
print(__name__, __file__ if "__file__" in globals() else None, sys.argv, sys.path[0], os.getcwd())
print("stdin:", sys.stdin.read())
print("unflushed, no newline", end="")
how = sys.argv[1]
if how == "code":
    sys.exit(3)
if how == "message":
    sys.exit("a message on stderr")
if how == "raise":
    raise ValueError("boom")
if how == "signal":
    sys.stdout.flush()
    os.kill(os.getpid(), 15)
if how == "hard":
    os._exit(7)
"""


@pytest.mark.parametrize("how", ["code", "message", "raise", "signal", "hard", "plain"])
@pytest.mark.parametrize("as_file", [True, False])
def test_a_request_gives_what_a_fresh_process_gives(tmp_path: Path, how: str, as_file: bool) -> None:
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    args = [str(script), how] if as_file else ["-c", SCRIPT, how]
    env = warm_release.oracle_env()
    fresh = subprocess.run([str(PY), *args], input="in put", capture_output=True, text=True, timeout=60, check=False,
                           env=env, cwd=tmp_path)
    got = warm(args, input="in put", env=env, cwd=tmp_path)
    assert (got.returncode, got.stdout) == (fresh.returncode, fresh.stdout)
    assert got.stderr.strip().splitlines()[-1:] == fresh.stderr.strip().splitlines()[-1:]
    assert got.args == [str(PY), *args]
    assert fresh.returncode == {"code": 3, "message": 1, "raise": 1, "signal": -signal.SIGTERM, "hard": 7,
                                "plain": 0}[how]


def test_what_the_servers_imports_print_reaches_no_request(tmp_path: Path) -> None:
    (tmp_path / "noisy.py").write_text("import sys\nprint('import noise', end='')\nsys.stderr.write('noise')\n")
    # buffered, as where PYTHONUNBUFFERED is not set: what the server's imports printed sits in its buffers at a fork
    env = {k: v for k, v in warm_release.oracle_env().items() if k != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = str(tmp_path)
    got = warm_release.start(PY, ["-c", "import noisy, sys; print('out'); print('err', file=sys.stderr)"], input=None,
                             env=env, timeout=60, preload=("noisy",)).wait()
    assert (got.returncode, got.stdout, got.stderr) == (0, "out\n", "err\n")
    assert warm_release.server(PY, env, ("noisy",)).ready()["loaded"] == ["noisy"]


def test_the_switch_runs_fresh_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    servers = dict(warm_release._servers)
    monkeypatch.setenv(warm_release.SWITCH, "0")
    got = warm(["-c", "import os; print(os.getppid())"])
    assert got.stdout.strip() == str(os.getpid())  # this process's own child
    assert warm_release.run(PY, ["-c", "import sys; print(sys.stdin.read())"], input="x", env=warm_release.oracle_env(),
                            timeout=60).stdout == "x\n"
    assert warm_release._servers == servers  # none started


def test_a_child_finds_the_imports_frozen_and_its_cpu_is_logged(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # The imports' objects are out of a child's collections (gc.freeze): its exit's collection walked, and copied, the
    # whole imported heap, ~2 CPU s a request in SGLang 0.5.23. The CPU the tests cannot see goes to the log.
    log = tmp_path / "cpu.jsonl"
    monkeypatch.setenv(warm_release.CPU_LOG, str(log))
    got = warm(["-c", "import gc; print(gc.get_freeze_count())"])
    assert got.returncode == 0 and int(got.stdout) > 1000, got
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["what"] for r in rows] == ["imports", "request"] and all(r["cpu"] >= 0 for r in rows), rows
    assert rows[-1]["test"].startswith("tests/sglang_oracle/test_warm_release.py::test_a_child_finds"), rows


def test_an_interactive_child_answers_each_line_as_it_comes_and_ends_at_eof(tmp_path: Path) -> None:
    # sglang_driver.py's way (oracle_client.Driver): a reply per line, each read before the next line is written
    (tmp_path / "echo.py").write_text("import os, sys\nfor line in sys.stdin:\n"
                                      "    print(line.strip().upper(), os.getppid(), flush=True)\n")
    child = warm_release.Interactive(PY, tmp_path / "echo.py", env=warm_release.oracle_env(), cwd=tmp_path,
                                     timeout=60, preload=LIGHT)
    server = warm_release.server(PY, warm_release.oracle_env(), LIGHT).proc.pid
    for word in ("one", "two"):
        child.stdin.write(word + "\n")
        child.stdin.flush()
        assert child.stdout.readline() == f"{word.upper()} {server}\n"
    assert child.poll() is None
    assert child.wait() == 0 and child.poll() == 0 and not child.files.exists()


@pytest.mark.sglang
def test_children_of_a_releases_server_run_torch_as_a_fresh_process_does() -> None:
    """Fork after importing torch: the server runs no thread when it forks (numpy's OpenBLAS pool stops at fork),
    and a child's torch has the thread settings, and the answers, of a fresh process."""
    if not env_ready("0.5.23"):
        (pytest.fail if os.environ.get("CI") or os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG") else pytest.skip)(
            "SGLang 0.5.23 venv missing: run bash tests/sglang_oracle/build_env.sh 0.5.23")
    code = ("import json, sys, torch\n"
            "torch.manual_seed(0)\n"
            "x = torch.rand(600, 600)\n"
            "print(json.dumps([torch.get_num_threads(), torch.get_num_interop_threads(), float((x @ x).sum()),\n"
            "                  sorted(m for m in sys.modules if m.startswith('sglang.srt.mem_cache.memory_pool'))]))\n")
    python, env = env_python("0.5.23"), warm_release.oracle_env()
    fresh = subprocess.run([str(python), "-c", "import sglang.srt.mem_cache.memory_pool\n" + code], capture_output=True,
                           text=True, timeout=600, check=False, env=env)
    got = warm_release.start(python, ["-c", code], input=None, env=env, timeout=600).wait()
    assert fresh.returncode == got.returncode == 0, got.stderr[-2000:]
    assert json.loads(got.stdout) == json.loads(fresh.stdout)
    assert warm_release.server(python, env).ready()["loaded"] == list(warm_release.PRELOAD)
