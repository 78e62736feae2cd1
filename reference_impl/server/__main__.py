"""``python -m reference_impl.server --port P --arm branching ...``: start the CPU reference server."""

from __future__ import annotations

import os
import warnings

# One compute thread for torch and numpy's BLAS before either starts its pool (reference_impl.model.model.one_thread
# says why: the tiny model's ops are too small to split, and idle workers spin); a value the caller set wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# Silences torch's import-time warning about a missing numpy (numpy is a dependency of the package).
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

import logging  # noqa: E402
import sys  # noqa: E402
from collections.abc import Sequence  # noqa: E402

from reference_impl.server.args import UsageError, parse_config  # noqa: E402

LISTEN_BACKLOG = 2048  # SGLang's listen backlog (uvicorn's default): see main()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = parse_config(argv)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    level = str(config.args["log_level"]).upper()
    logging.basicConfig(level=level, format="[%(asctime)s] %(message)s", stream=sys.stdout, force=True)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    # Imported late so `--help` and usage errors answer without loading torch (1.5 CPU s of a start) or aiohttp.
    import torch  # noqa: PLC0415
    from aiohttp import web  # noqa: PLC0415

    from reference_impl.model.model import HybridModel  # noqa: PLC0415
    from reference_impl.server.app import build_app  # noqa: PLC0415
    from reference_impl.server.engine_loop import EngineLoop  # noqa: PLC0415

    torch.manual_seed(config.model.seed)
    engine = EngineLoop(config, HybridModel(config.model))
    engine.start()
    log = logging.getLogger("reference_impl.server")
    log.info(
        f"Reference server: arm={config.arm.name} strategy={config.engine.cache} policy={config.engine.policy} "
        f"page_size={config.engine.page_size} max_total_num_tokens={config.engine.kv_tokens} "
        f"max_mamba_cache_size={config.engine.state_slots} max_running_requests={engine.core.max_running} "
        f"chunked_prefill_size={config.engine.chunked_prefill_size} faults={sorted(config.faults) or 'none'}"
    )
    app = build_app(config, engine)

    def ready(_banner: str) -> None:
        # run_app prints its banner once every site is listening: SGLang's line comes after its bind too (on_startup
        # ran before the bind, so a port in use logged "ready" and then failed).
        log.info("The server is fired up and ready to roll!")

    try:
        # SGLang serves through uvicorn.run with no backlog given, so uvicorn's 2048 (0.5.16 and 0.5.23
        # entrypoints/http_server.py, the default one-tokenizer branch; their granian path sets 2048 too). aiohttp's
        # 128 dropped SYNs under a burst of connects, and each dropped one is retried a second later: a p99 TTFT
        # the real server would not show.
        web.run_app(app, host=config.host, port=config.port, print=ready, handler_cancellation=True,
                    shutdown_timeout=2.0, access_log=None, backlog=LISTEN_BACKLOG)
    except OSError as exc:
        print(f"error: cannot serve on {config.host}:{config.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


def exit_now(code: int) -> None:
    """Exit without the interpreter's teardown of torch's modules, once every stream is flushed: the teardown took
    0.3-0.4 s of each stop (`import torch` then exit, against the same with os._exit), and the harness stops a
    server per arm. The server registers no atexit hook of its own; those its imports register (logging's, run here
    first; torch's, multiprocessing's) write nothing the harness reads, and its log is the flushed streams."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
