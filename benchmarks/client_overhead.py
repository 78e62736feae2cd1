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

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from hybridbench.config.schema import LoadCfg
from hybridbench.load.client import ClientResult, generate_sglang
from hybridbench.load.driver import Completed, drive
from hybridbench.metrics.stats import percentile
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
            chunk = {"text": "x" * (k + 1), "meta_info": {"completion_tokens": k + 1, "cached_tokens": 0}}
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


async def _run(port: int, n: int, concurrency: int) -> tuple[list[float], float]:
    rows = [TraceRow(i, 0, 0.0, tuple(range(INPUT_TOKENS)), (0,) * OUTPUT_TOKENS) for i in range(n)]
    done: list[Completed] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        async def send(prompt: list[int], k: int) -> ClientResult:
            return await generate_sglang(session, f"http://127.0.0.1:{port}", prompt, k, 30.0)

        start = time.perf_counter()
        await drive(rows, LoadCfg(kind="closed", max_concurrency=concurrency), 0, send, done.append)
        wall = time.perf_counter() - start
    ttft = [(c.result.first_token - c.result.sent) * 1e3 for c in done if c.result.first_token is not None]
    return ttft, n / wall


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


def _bench_serving(python: str, tmp: Path, port: int, n: int, concurrency: int, *,
                   extra: list[str]) -> dict[str, Any] | str:
    """bench_serving's result line (its JSON output), or why there is none."""
    out = tmp / f"bench_serving_{len(extra)}_c{concurrency}.jsonl"
    cmd = [python, "-c", _BENCH_SERVING_SHIM, *extra,
           *bench_serving_args(f"http://127.0.0.1:{port}", str(tmp / "tokenizer"), n, str(concurrency), str(out))]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_sglang_env(), timeout=900, check=False)
    except subprocess.TimeoutExpired:
        return "bench_serving did not finish within 900 s"
    if proc.returncode != 0 or not out.exists():
        return f"bench_serving exited with status {proc.returncode}:\n{_tail(proc.stderr or proc.stdout)}"
    result: dict[str, Any] = json.loads(out.read_text().strip().splitlines()[-1])
    return result


def run_bench_serving(python: str, port: int, n: int) -> None:
    """Print bench_serving's figures beside hybridbench's, or a note saying why they are missing."""
    print()
    if not python:
        print("bench_serving: skipped (--sglang-python '').")
        return
    if not os.access(python, os.X_OK):
        print(f"bench_serving: skipped, no SGLang python at {python} (build it with "
              "tests/sglang_oracle/build_env.sh, or pass --sglang-python PATH).")
        return
    with tempfile.TemporaryDirectory(prefix="client_overhead_") as tmp_name:
        tmp = Path(tmp_name)
        made = subprocess.run([python, "-c", _TOKENIZER_SCRIPT, str(tmp / "tokenizer")], capture_output=True,
                              text=True, env=_sglang_env(), timeout=300, check=False)
        if made.returncode != 0:
            print(f"bench_serving: skipped, {python} cannot build the local tokenizer (is SGLang installed?):\n"
                  f"{_tail(made.stderr)}")
            return
        info = json.loads(made.stdout.strip().splitlines()[-1])
        # bench_serving's own Python client; newer SGLang also ships a Rust one behind --rust-client.
        clients: list[tuple[str, list[str]]] = [("Python", [])]
        if info["rust_client"]:
            clients.append(("Rust (--rust-client)", ["--rust-client"]))
        shown = bench_serving_args("http://127.0.0.1:PORT", "TOKENIZER_DIR", n, "C", "OUT.jsonl")
        print(f"SGLang {info['version']} bench_serving against the same server, same request shape:")
        rust_flag = "[--rust-client] " if len(clients) > 1 else ""
        print(f"    {python} -m sglang.bench_serving {rust_flag}{' '.join(shown)}")
        print("    (run as `python -c` with a stand-in for the `datasets` package when the venv lacks it)")
        print("| bench_serving client | concurrent streams | requests | TTFT p50 ms | TTFT p99 ms | requests/s |")
        print("|---|---|---|---|---|---|")
        for label, extra in clients:
            for c in CONCURRENCY:
                res = _bench_serving(python, tmp, port, n, c, extra=extra)
                if isinstance(res, str):
                    print(f"| {label} | {c} | {n} | n/a | n/a | n/a |\n{res}", flush=True)
                    continue
                failed = n - int(res.get("completed", 0))
                note = f" ({failed} failed)" if failed else ""
                print(f"| {label} | {c} | {n}{note} | {res['median_ttft_ms']:.2f} | {res['p99_ttft_ms']:.2f} | "
                      f"{res['request_throughput']:,.0f} |", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--sglang-python", default=str(DEFAULT_SGLANG_PYTHON),
                    help="a python with SGLang installed, to run bench_serving side by side ('' to skip); "
                         "default: %(default)s")
    args = ap.parse_args()
    port = _free_port()
    server = mp.Process(target=_serve, args=(port, OUTPUT_TOKENS), daemon=True)
    server.start()
    time.sleep(1.0)
    try:
        cpu = platform.processor() or platform.machine()
        print(f"machine: {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}; server in its own process")
        print("hybridbench load client:")
        print("| concurrent streams | requests | TTFT p50 ms | TTFT p99 ms | requests/s |")
        print("|---|---|---|---|---|")
        for c in CONCURRENCY:
            ttft, rate = asyncio.run(_run(port, args.requests, c))
            print(f"| {c} | {args.requests} | {percentile(ttft, 50):.2f} | {percentile(ttft, 99):.2f} | {rate:,.0f} |",
                  flush=True)
        run_bench_serving(args.sglang_python, port, args.requests)
    finally:
        server.terminate()
        server.join(5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
