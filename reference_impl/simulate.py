"""``python -m reference_impl.simulate TRACE.jsonl --arm lru --max-concurrency 5``: a modelled serving run.

Runs the trace through the engine core (SGLang's scheduler and cache semantics) with time from the
GPU cost model and prints a bench_serving-style summary. Every number is *modelled*, not measured.
Exit codes: 0 done; 2 bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from typing import NoReturn

from reference_impl.engine.arms import ARMS, NOT_ON_REFERENCE, SEGLEN_EFF_WEIGHT_MAX, parse_arm
from reference_impl.engine.config import fits_kv_pool
from reference_impl.engine.core import EngineCore
from reference_impl.engine.cost_model import QUANTIZATIONS, CostModel
from reference_impl.engine.hardware import GPUS, get_gpu
from reference_impl.engine.simulator import simulate
from reference_impl.engine.sizing import engine_config
from reference_impl.engine.summary import summarize
from reference_impl.models import MODELS, STATE_DTYPES, get_model
from reference_impl.policies.seglen import DEFAULT_EFF_WEIGHT
from workloads.arrival import LoadSpec, arrival_schedule
from workloads.closed_stdout import quiet_on_closed_stdout
from workloads.trace import TraceError, TraceRow, read_trace

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _positive(kind: type[int] | type[float]):  # type: ignore[no-untyped-def]
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a valid {kind.__name__}") from None
        if not (0 < value < math.inf):
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value

    return parse


def _fraction(text: str) -> float:
    """A fraction in (0, 1], as the harness's engine.mem_fraction_static."""
    value: float = _positive(float)(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def _weight(text: str) -> float:
    """seglen's eff_weight: a number in [0, SEGLEN_EFF_WEIGHT_MAX] (the harness's arm.seglen.eff_weight range)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid float") from None
    if not 0 <= value <= SEGLEN_EFF_WEIGHT_MAX:
        raise argparse.ArgumentTypeError(f"must be in [0, {SEGLEN_EFF_WEIGHT_MAX:g}], got {text}")
    return value


def _rate(text: str) -> float:
    """A positive request rate, or ``inf`` (bench_serving's default: every request at once)."""
    if text.strip().lower() in ("inf", "infinity"):
        return math.inf
    value: float = _positive(float)(text)
    return value


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m reference_impl.simulate", description=(__doc__ or "").splitlines()[0])
    p.add_argument("trace")
    p.add_argument("--model", default="qwen3-next-80b-a3b", choices=sorted(MODELS))
    p.add_argument("--gpu", default="h100", choices=sorted(GPUS))
    p.add_argument("--tp", type=_positive(int), default=1)
    p.add_argument("--quantization", choices=sorted(QUANTIZATIONS), default=None,
                   help="SGLang's --quantization: fp8 / w8a8_fp8 weights (one byte, fp8 GEMMs)")
    p.add_argument("--mamba-ssm-dtype", choices=list(STATE_DTYPES), default=None,
                   help="SGLang's --mamba-ssm-dtype: the temporal state's dtype (default: the model's, float32)")
    arms = ", ".join(a for a in ARMS if a not in NOT_ON_REFERENCE)
    p.add_argument("--arm", default="lru", help=f"one of {arms}, composable with '+'")
    # bench_serving's pair: --request-rate (default inf: everything at once) capped by --max-concurrency.
    p.add_argument("--max-concurrency", type=_positive(int), help="at most N requests in flight")
    p.add_argument("--request-rate", type=_rate, help="Poisson arrivals, requests/s; inf = all at t=0")
    p.add_argument("--trace-timestamps", action="store_true", help="send at each row's ts × --slowdown")
    p.add_argument("--slowdown", type=_positive(float), default=1.0)
    p.add_argument("--mem-fraction-static", type=_fraction, default=0.85)
    p.add_argument("--kv-tokens", type=_positive(int), help="KV pool size (default: from GPU memory)")
    p.add_argument("--max-mamba-cache-size", type=_positive(int), help="state slots (default: from GPU memory)")
    p.add_argument("--host-capacity-tokens", type=_positive(int), default=None, help="host tier KV tokens (l2 arm)")
    p.add_argument("--chunked-prefill-size", type=_positive(int), default=8192)
    p.add_argument("--max-running-requests", type=_positive(int))
    p.add_argument("--schedule-policy", choices=["fcfs", "lpm"], default="fcfs")
    p.add_argument("--page-size", type=_positive(int), default=1)
    p.add_argument("--track-interval", type=_positive(int), default=256)
    p.add_argument("--eff-weight", type=_weight, default=None,
                   help=f"seglen's replay-length weight against recency, in [0, {SEGLEN_EFF_WEIGHT_MAX:g}] "
                        f"(default {DEFAULT_EFF_WEIGHT:g}, the PR's; 0 is LRU); arms with seglen only")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    return p


def _refuse_unfit(rows: Sequence[TraceRow], kv_tokens: int, source: str) -> None:
    """Refuse a trace with a request the KV pool cannot hold alone (as the harness's plan does, and as
    --max-mamba-cache-size is refused below one running request): it would be rejected on arrival."""
    unfit = [r for r in rows if not fits_kv_pool(len(r.input_tokens), len(r.output_tokens), kv_tokens)]
    if unfit:
        longest = max(len(r.input_tokens) + max(1, len(r.output_tokens)) for r in unfit)
        raise ValueError(f"{source}: {len(unfit)} of {len(rows)} requests cannot fit a KV pool of {kv_tokens} tokens "
                         f"alone (the longest needs {longest}); raise the pool or shrink the trace")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        trace_ts, rate, cap = args.trace_timestamps, args.request_rate, args.max_concurrency
        if trace_ts and rate is not None:
            raise ValueError("--trace-timestamps and --request-rate both set when requests are sent; choose one")
        if not (trace_ts or rate is not None or cap):
            raise ValueError("choose a load: --max-concurrency N, --request-rate R (or inf), --trace-timestamps")
        arm = parse_arm(args.arm)
        if args.eff_weight is not None and arm.policy != "seglen":
            raise ValueError(f"--eff-weight is seglen's weight; arm {arm.name} evicts by {arm.policy}, which has none")
        # Flags nothing would read, refused as the harness refuses load.slowdown off a trace replay: the run went on
        # without them (exit 0), its figures taken for the setting given.
        if args.slowdown != 1.0 and not trace_ts:
            raise ValueError(f"--slowdown {args.slowdown:g} scales the trace's timestamps: give --trace-timestamps too")
        if args.host_capacity_tokens is not None and not arm.host_tier:
            raise ValueError(f"--host-capacity-tokens sizes a host tier; arm {arm.name} has none (use l2, or an arm "
                             "composed with '+l2')")
        model, gpu = get_model(args.model, temporal_dtype=args.mamba_ssm_dtype or ""), get_gpu(args.gpu)
        timer = CostModel(model, gpu, tp=args.tp, quantization=args.quantization or "")
        config = engine_config(
            arm,
            timer,
            mem_fraction_static=args.mem_fraction_static,
            kv_tokens=args.kv_tokens,
            state_slots=args.max_mamba_cache_size,
            host_kv_tokens=args.host_capacity_tokens,
            chunked_prefill_size=args.chunked_prefill_size,
            max_running_requests=args.max_running_requests,
            schedule_policy=args.schedule_policy,
            page_size=args.page_size,
            track_interval=args.track_interval,
            eff_weight=args.eff_weight,
        )
        rows = list(read_trace(args.trace).rows)
        _refuse_unfit(rows, config.kv_tokens, "--kv-tokens" if args.kv_tokens else "the KV pool from GPU memory")
        core = EngineCore(config)
        if trace_ts:
            load = LoadSpec("trace", slowdown=args.slowdown, max_concurrency=cap)
        elif rate is None or math.isinf(rate):  # all at t=0, as bench_serving's default rate inf sends them
            load = LoadSpec("closed", max_concurrency=cap or max(1, len(rows)))
        else:
            load = LoadSpec("poisson", request_rate=rate, max_concurrency=cap)
        try:
            arrival = arrival_schedule(rows, load, args.seed)
        except ValueError as exc:  # "slowdown: ..." / "request_rate: ...": name the flag
            key, _, rest = str(exc).partition(":")
            raise ValueError(f"--{key.replace('_', '-')}:{rest}") from None
    except (TraceError, ValueError, KeyError) as exc:
        print(f"error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return EXIT_USAGE
    result = simulate(rows, core, timer, arrival)
    summary = summarize(result)
    weight = (DEFAULT_EFF_WEIGHT if args.eff_weight is None else args.eff_weight) if arm.policy == "seglen" else None
    summary.update({"arm": arm.name, "eff_weight": weight, "model": model.name, "gpu": gpu.name, "tp": args.tp,
                    "quantization": args.quantization or "", "mamba_ssm_dtype": model.temporal_dtype})
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    else:
        print("======= Simulated Serving Result (modelled, not measured) =======")
        for key, value in summary.items():
            shown = f"{value:.4f}" if isinstance(value, float) else str(value)
            print(f"{key:<32}{shown}")
    return 0


if __name__ == "__main__":
    sys.exit(quiet_on_closed_stdout(main))
