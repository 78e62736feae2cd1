"""The one registry of workload names: name -> CLI arguments and builder.

``hybridbench`` looks workloads up here too; an unknown name lists the valid ones.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from workloads import gsp, random_load, sharegpt, swebench, trace_file
from workloads.errors import WorkloadError
from workloads.trace import TraceStream

__all__ = ["WORKLOADS", "Workload", "get_workload"]


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    summary: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    from_args: Callable[[argparse.Namespace, int, int], TraceStream]  # (args, vocab_size, seed)


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("gsp", "generated shared prefix (SGLang bench_serving semantics)",
                 gsp.add_arguments, gsp.from_args),
        Workload("sharegpt", "multi-turn ShareGPT chats (file, datasets, or synthetic)",
                 sharegpt.add_arguments, sharegpt.from_args),
        Workload("swebench", "agent trajectories with observation collapsing (files or synthetic)",
                 swebench.add_arguments, swebench.from_args),
        Workload("random", "independent random prompts (prefill overhead)",
                 random_load.add_arguments, random_load.from_args),
        Workload("trace", "replay a trace file unchanged (Marconi/SegLen names too)",
                 trace_file.add_arguments, trace_file.from_args),
    )
}  # fmt: skip


def get_workload(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise WorkloadError(f"unknown workload {name!r}; choose one of {', '.join(WORKLOADS)}") from None
