"""The load client's own overhead: TTFT against a server that answers instantly, and peak request rate.

A minimal SGLang-protocol streaming server (one SSE chunk per token, no model, no sleeping) runs in a
separate process on 127.0.0.1; hybridbench's driver sends N requests at 1, 64 and 512 concurrent
streams. Whatever TTFT it measures is client + loopback + server-framework overhead, an upper bound
on what the client adds to every real measurement. A benchmark, not a test.

Side by side, when a Python with SGLang is available (``--sglang-python``), SGLang's own
``python -m sglang.bench_serving --backend sglang`` client runs against the same server at the same
concurrency levels with the same request shape (100 input token ids, 4 output tokens), with its
Python client and, where that SGLang has one, its Rust client (``--rust-client``); their median/p99
TTFT and request throughput (from ``--output-file``) are reported in a second table. Both sides start
the clock just before the POST and stop it at the first chunk (non-empty ``text``, one more
``completion_tokens``), which the server sends identically to every client.

    python benchmarks/client_overhead.py [--requests 2000] [--sglang-python PATH | --sglang-python '']
"""

from __future__ import annotations

import importlib.util
import json
import math
import multiprocessing as mp
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from whole_command import count  # a sibling: run as a script

from hybridbench.errors import OneLineParser
from hybridbench.load import event_loop
from hybridbench.load.client import ClientResult, generate_sglang
from hybridbench.load.driver import Completed, drive
from hybridbench.load.http import StreamPool
from hybridbench.load.trial import outcome
from hybridbench.metrics.summary import summarize
from hybridbench.plan.types import Trial
from hybridbench.records.build import trial_record
from hybridbench.records.schema import Record
from workloads.arrival import LoadSpec, arrival_schedule
from workloads.trace import TraceRow

CONCURRENCY = (1, 64, 512)
INPUT_TOKENS = 100
OUTPUT_TOKENS = 4  # the server streams exactly this many chunks, whatever the request asks for
# Where tests/sglang_oracle/build_env.sh puts its SGLang 0.5.23 venv.
SGLANG_HOME = Path(os.environ.get("HYBRIDBENCH_SGLANG_HOME") or Path.home() / ".cache" / "hybridbench")
DEFAULT_SGLANG_PYTHON = SGLANG_HOME / "sglang-0.5.23" / "bin" / "python"


def _serve(port: int, tokens: int) -> None:
    async def generate(request: web.Request) -> web.StreamResponse:
        await request.json()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for k in range(tokens):
            finish = {"type": "length", "length": tokens} if k == tokens - 1 else None  # SGLang's last chunk
            chunk = {"text": "x" * (k + 1), "meta_info": {"completion_tokens": k + 1, "cached_tokens": 0,
                                                          "finish_reason": finish}}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp

    # What bench_serving asks besides /generate: /v1/models (its readiness check), /server_info (after
    # the run, for speculative-decoding stats) and /flush_cache (only with --flush-cache). Never timed.
    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "client-overhead", "object": "model"}]})

    async def server_info(_: web.Request) -> web.Response:
        return web.json_response({"internal_states": []})

    async def flush_cache(_: web.Request) -> web.Response:
        return web.Response(text="Cache flushed.")

    app = web.Application()
    app.router.add_post("/generate", generate)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/server_info", server_info)
    app.router.add_get("/get_server_info", server_info)
    app.router.add_post("/flush_cache", flush_cache)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Cell:
    """One run of one client at one concurrency."""

    p50_ms: float
    p99_ms: float
    rate: float
    failed: int = 0
    p99_delay_ms: float = math.nan  # hybridbench only: its records' client delay
    cpu_us: float = math.nan  # hybridbench only: the client process's CPU per request while driving
    server_cpu_us: float = math.nan  # the server process's CPU per request over the same span


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _run(port: int, server_pid: int, n: int, concurrency: int) -> Cell:
    """hybridbench's client as a trial runs it: every completion becomes a Record through the trial runner's
    own constructor (outcome -> trial_record), kept with its client delay."""
    rows = [TraceRow(i, 0, 0.0, tuple(range(INPUT_TOKENS)), (0,) * OUTPUT_TOKENS) for i in range(n)]
    trial = Trial(index=0, arm="none", workload="instant", repeat=0, seed=0)
    records: list[Record] = []

    def on_done(done: Completed) -> None:
        records.append(trial_record("client-overhead", trial, outcome(done), "uncontrolled"))

    async with StreamPool(f"http://127.0.0.1:{port}") as pool:
        async def send(prompt: list[int], k: int, answer_needed: bool) -> ClientResult:
            return await generate_sglang(pool, prompt, k, 30.0)

        server_cpu, cpu, start = _cpu_s(server_pid), time.process_time(), time.perf_counter()
        await drive(rows, arrival_schedule(rows, LoadSpec("closed", max_concurrency=concurrency)), send, on_done)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        server_cpu = _cpu_s(server_pid) - server_cpu
    if len(records) != n:
        raise RuntimeError(f"{len(records)} records for {n} requests")
    summary = summarize(records)
    return Cell(summary["median_ttft_ms"], summary["p99_ttft_ms"], n / wall, summary["failed"],
                summary["p99_client_delay_ms"], cpu / n * 1e6, server_cpu / n * 1e6)


# --- SGLang's bench_serving, side by side --------------------------------------------------------------

# Runs inside the SGLang python: a word-level tokenizer over a synthetic 1,000-word vocabulary, saved so
# that transformers.AutoTokenizer.from_pretrained(dir) loads it offline. bench_serving needs one to draw
# random token ids (vocab_size) and to re-count output tokens; no model or download is involved.
_TOKENIZER_SCRIPT = """
import importlib.metadata, importlib.util, json, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i + 3 for i in range(1000)}}
tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.decoder = decoders.WordPiece(prefix="##")
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
fast.save_pretrained(sys.argv[1])
try:
    rust = importlib.util.find_spec("sglang.benchmark.rust_client") is not None
except ImportError:
    rust = False
print(json.dumps({"version": importlib.metadata.version("sglang"), "rust_client": rust}))
"""

# `python -m sglang.bench_serving` with one shim: sglang.benchmark.datasets imports the `datasets`
# package at module level (for the MMMU/LongBench loaders) and the SGLang venv does not ship it. The
# random-ids dataset used here never calls it, so a placeholder module stands in when it is missing.
_BENCH_SERVING_SHIM = """
import importlib.util, runpy, sys, types
if importlib.util.find_spec("datasets") is None:
    stub = types.ModuleType("datasets")
    def load_dataset(*args, **kwargs):
        raise ImportError("the datasets package is not installed in this venv")
    stub.load_dataset = load_dataset
    sys.modules["datasets"] = stub
runpy.run_module("sglang.bench_serving", run_name="__main__", alter_sys=True)
"""


def _sglang_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_IS_IN_CI"}  # CI mode would flush the cache
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONWARNINGS="ignore", TOKENIZERS_PARALLELISM="false")
    return env


def _tail(text: str, lines: int = 8) -> str:
    return "\n".join("    " + line for line in text.strip().splitlines()[-lines:])


def bench_serving_args(base_url: str, tokenizer: str, n: int, concurrency: str, output_file: str) -> list[str]:
    """bench_serving's arguments: the same request shape hybridbench sends (``input_ids``, not text)."""
    return ["--backend", "sglang", "--base-url", base_url, "--model", tokenizer,
            "--tokenizer", tokenizer, "--dataset-name", "random-ids", "--tokenize-prompt",
            "--random-input-len", str(INPUT_TOKENS), "--random-output-len", str(OUTPUT_TOKENS),
            "--random-range-ratio", "1", "--num-prompts", str(n), "--request-rate", "inf",
            "--max-concurrency", concurrency, "--warmup-requests", "0", "--disable-tqdm",
            "--output-file", output_file]


def _bench_serving(python: str, tmp: Path, port: int, server_pid: int, n: int, *, concurrency: int,
                   extra: list[str]) -> Cell | str:
    """One bench_serving run's figures (from its JSON output), or why there are none."""
    out = tmp / f"bench_serving_{len(extra)}_c{concurrency}.jsonl"
    out.unlink(missing_ok=True)
    cmd = [python, "-c", _BENCH_SERVING_SHIM, *extra,
           *bench_serving_args(f"http://127.0.0.1:{port}", str(tmp / "tokenizer"), n, str(concurrency), str(out))]
    server_cpu = _cpu_s(server_pid)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_sglang_env(), timeout=900, check=False)
    except subprocess.TimeoutExpired:
        return "bench_serving did not finish within 900 s"
    server_cpu = _cpu_s(server_pid) - server_cpu  # also its readiness check and /server_info: a few requests
    if proc.returncode != 0 or not out.exists():
        return f"bench_serving exited with status {proc.returncode}:\n{_tail(proc.stderr or proc.stdout)}"
    res: dict[str, Any] = json.loads(out.read_text().strip().splitlines()[-1])
    return Cell(res["median_ttft_ms"], res["p99_ttft_ms"], res["request_throughput"], n - int(res.get("completed", 0)),
                server_cpu_us=server_cpu / n * 1e6)


Runner = Callable[[int], "Cell | str"]


def bench_serving_clients(python: str, tmp: Path, port: int, server_pid: int, n: int) -> list[tuple[str, Runner]]:
    """bench_serving's Python client and (where this SGLang has it) its Rust client, or none with a note why."""
    if not python:
        print("bench_serving: skipped (--sglang-python '').")
        return []
    if not os.access(python, os.X_OK):
        print(f"bench_serving: skipped, no SGLang python at {python} (build it with "
              "tests/sglang_oracle/build_env.sh, or pass --sglang-python PATH).")
        return []
    made = subprocess.run([python, "-c", _TOKENIZER_SCRIPT, str(tmp / "tokenizer")], capture_output=True,
                          text=True, env=_sglang_env(), timeout=300, check=False)
    if made.returncode != 0:
        print(f"bench_serving: skipped, {python} cannot build the local tokenizer (is SGLang installed?):\n"
              f"{_tail(made.stderr)}")
        return []
    info = json.loads(made.stdout.strip().splitlines()[-1])
    flags: list[tuple[str, list[str]]] = [("bench_serving (Python)", [])]
    if info["rust_client"]:
        flags.append(("bench_serving `--rust-client`", ["--rust-client"]))
    shown = bench_serving_args("http://127.0.0.1:PORT", "TOKENIZER_DIR", n, "C", "OUT.jsonl")
    rust_flag = "[--rust-client] " if len(flags) > 1 else ""
    print(f"SGLang {info['version']} bench_serving against the same server, same request shape:\n"
          f"    {python} -m sglang.bench_serving {rust_flag}{' '.join(shown)}\n"
          "    (run as `python -c` with a stand-in for the `datasets` package when the venv lacks it)")

    def runner(extra: list[str]) -> Runner:
        return lambda c: _bench_serving(python, tmp, port, server_pid, n, concurrency=c, extra=extra)

    return [(label, runner(extra)) for label, extra in flags]


def _median(cells: list[Cell], key: str) -> float:
    return float(statistics.median(getattr(c, key) for c in cells))


def _shown(x: float, spec: str) -> str:
    return "—" if math.isnan(x) else format(x, spec)


def _hybridbench_clients(choice: str, port: int, server_pid: int, n: int) -> list[tuple[str, Runner]]:
    """hybridbench's client on the chosen event loop(s); ``both`` alternates them like separate clients."""
    loops: list[event_loop.EventLoop] = list(event_loop.EVENT_LOOPS) if choice == "both" else \
        [event_loop.default() if choice == "auto" else choice]  # type: ignore[list-item]

    def runner(loop: event_loop.EventLoop) -> Runner:
        return lambda c: event_loop.run(_run(port, server_pid, n, c), loop)

    return [(f"hybridbench ({loop})", runner(loop)) for loop in loops]


def main(argv: Sequence[str] | None = None) -> int:
    ap = OneLineParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--requests", type=count(1), default=2000)
    ap.add_argument("--runs", type=count(1), default=6, help="runs per client and concurrency, alternated (default 6)")
    ap.add_argument("--concurrency", default=",".join(map(str, CONCURRENCY)),
                    help="comma-separated stream counts (default %(default)s)")
    ap.add_argument("--event-loop", choices=("auto", *event_loop.EVENT_LOOPS, "both"), default="auto",
                    help="hybridbench's event loop: auto = uvloop when installed, as a trial runs (default); "
                         "both = each, alternated as two clients")
    ap.add_argument("--no-python-client", action="store_true", help="leave out bench_serving's Python client")
    ap.add_argument("--sglang-python", default=str(DEFAULT_SGLANG_PYTHON),
                    help="a python with SGLang installed, to run bench_serving side by side ('' to skip); "
                         "default: %(default)s")
    args = ap.parse_args(argv)
    try:
        levels = [int(c) for c in args.concurrency.split(",")]
    except ValueError:
        ap.error(f"--concurrency: not a list of integers: {args.concurrency!r}")
    if min(levels) < 1:
        ap.error(f"argument --concurrency: every count must be >= 1, got {args.concurrency!r}")
    if args.event_loop in ("uvloop", "both") and event_loop.default() != "uvloop":
        ap.error(f"--event-loop {args.event_loop}: uvloop is not installed (pip install -e '.[fast]')")
    port = _free_port()
    server = mp.Process(target=_serve, args=(port, OUTPUT_TOKENS), daemon=True)
    server.start()
    time.sleep(1.0)
    assert server.pid is not None
    try:
        with tempfile.TemporaryDirectory(prefix="client_overhead_") as tmp_name:
            cpu = platform.processor() or platform.machine()
            print(f"machine: {cpu}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start, "
                  f"Python {platform.python_version()}; server in its own process")
            json_lib = "orjson" if importlib.util.find_spec("orjson") else "json"
            print(f"hybridbench's client: event loop {args.event_loop} (installed default: {event_loop.default()}), "
                  f"request bodies and SSE chunks through {json_lib}")
            clients = _hybridbench_clients(args.event_loop, port, server.pid, args.requests)
            clients += [(label, run) for label, run in bench_serving_clients(args.sglang_python, Path(tmp_name), port,
                                                                              server.pid, args.requests)
                        if not (args.no_python_client and "Python" in label)]
            cells: dict[tuple[str, int], list[Cell]] = {}
            for c in levels:
                for rep in range(args.runs):
                    # Alternate who goes first, so a slow spell on the shared machine hits every client.
                    for label, run in clients if rep % 2 == 0 else clients[::-1]:
                        cell = run(c)
                        if isinstance(cell, str):
                            print(f"{label} at {c} streams: {cell}", flush=True)
                            continue
                        cells.setdefault((label, c), []).append(cell)
                        print(f"  run {rep + 1}/{args.runs} {label} c={c}: p50 {cell.p50_ms:.2f} ms, p99 "
                              f"{cell.p99_ms:.2f} ms, {cell.rate:,.0f} req/s, client CPU "
                              f"{_shown(cell.cpu_us, '.0f')} µs/req, server CPU {_shown(cell.server_cpu_us, '.0f')} "
                              f"µs/req, load {os.getloadavg()[0]:.1f}", flush=True)
            print(f"\nmedians of {args.runs} alternating runs, {args.requests} requests each, load average "
                  f"{os.getloadavg()[0]:.1f} at the end; the ratios divide by the last client's cell (> 1: the "
                  "row's client ahead); CPU is per request while driving (client: this process; server: its process)")
            last = clients[-1][0]
            print("| client | concurrent streams | TTFT p50 ms | TTFT p99 ms | requests/s | p99 client delay ms "
                  f"| client CPU µs/req | server CPU µs/req | failed | req/s ratio | p99 ratio |\n|{'---|' * 11}")
            for c in levels:
                for label, _ in clients:
                    got = cells.get((label, c))
                    if not got:
                        continue
                    ref = cells.get((last, c))
                    rate_ratio = _median(got, "rate") / _median(ref, "rate") if ref else math.nan
                    p99_ratio = _median(ref, "p99_ms") / _median(got, "p99_ms") if ref else math.nan
                    print(f"| {label} | {c} | {_median(got, 'p50_ms'):.2f} | {_median(got, 'p99_ms'):.2f} | "
                          f"{_median(got, 'rate'):,.0f} | {_shown(_median(got, 'p99_delay_ms'), '.2f')} | "
                          f"{_shown(_median(got, 'cpu_us'), '.0f')} | {_shown(_median(got, 'server_cpu_us'), '.0f')} | "
                          f"{sum(x.failed for x in got)} | {rate_ratio:.2f} | {p99_ratio:.2f} |")
    finally:
        server.terminate()
        server.join(5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
