"""The one registry of workload names: name -> typed parameters, presets and builder.

A generator declares its parameters once, as the fields of a frozen dataclass (``workloads.params``); the
command line (``python -m workloads.generate NAME --option ...``) and typed callers (``Workload.make``, what
the harness uses) are both built from those declarations. ``source`` declares where input comes from (a
file, a dataset): options that are not part of the trace's recorded parameters.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from workloads import gsp, prefix_groups, random_load, sharegpt, swebench, trace_file
from workloads.errors import WorkloadError
from workloads.params import add_arguments, checked_values, values_from_args
from workloads.trace import TraceStream

__all__ = ["WORKLOADS", "Workload", "get_workload"]

# (params, source or None, vocab_size, seed, preset) -> trace
Builder = Callable[[Any, Any, int, int, "str | None"], TraceStream]


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    summary: str
    params: type[Any]  # a frozen dataclass whose fields are the parameters (recorded in the trace's metadata)
    build: Builder
    presets: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # name -> params instance
    preset_help: str = "a seed load; options override it"
    source: type[Any] | None = None  # a frozen dataclass: where input comes from

    def _classes(self) -> tuple[type[Any], ...]:
        return (self.params,) if self.source is None else (self.params, self.source)

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        if self.presets:
            parser.add_argument("--preset", choices=sorted(self.presets), help=self.preset_help)
        for cls in self._classes():
            add_arguments(parser, cls)

    def from_args(self, ns: argparse.Namespace, vocab_size: int, seed: int) -> TraceStream:
        values = {k: v for cls in self._classes() for k, v in values_from_args(ns, cls).items()}
        return self.make(values, vocab_size, seed, preset=getattr(ns, "preset", None))

    def make(self, values: Mapping[str, object], vocab_size: int, seed: int, *,
             preset: str | None = None) -> TraceStream:
        """The trace for ``values`` (parameter name -> value) over ``preset``'s parameters. WorkloadError (one
        line naming the parameter) for an unknown name, a value of the wrong type or one the generator refuses;
        rows are generated lazily, as the returned stream is read."""
        return self.build(*self.resolve(values, preset=preset), vocab_size, seed, preset)

    def resolve(self, values: Mapping[str, object], *, preset: str | None = None) -> tuple[Any, Any]:
        """The typed (params, source) ``make`` would use; nothing is generated."""
        if preset and preset not in self.presets:
            choices = ", ".join(sorted(self.presets)) or "none"
            raise WorkloadError(f"preset: unknown preset {preset!r} for {self.name}; choose from {choices}")
        checked = checked_values(values, *self._classes())
        params = dataclasses.replace(self.presets[preset], **checked[0]) if preset else self.params(**checked[0])
        validate = getattr(params, "validate", None)
        if validate is not None:
            validate()
        return params, (self.source(**checked[1]) if self.source is not None else None)


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("gsp", "generated shared prefix (SGLang bench_serving semantics)", gsp.GspParams, gsp.build,
                 gsp.PRESETS),
        Workload("sharegpt", "multi-turn ShareGPT chats (file, datasets, or synthetic)", sharegpt.ShareGptParams,
                 sharegpt.build, sharegpt.PRESETS, "marconi: >= 10 turns, 100 sessions", sharegpt.ShareGptSource),
        Workload("swebench", "agent trajectories with observation collapsing (files or synthetic)",
                 swebench.SwebenchParams, swebench.build, swebench.PRESETS, "seglen: sps 10, art 5, 100 sessions",
                 swebench.SwebenchSource),
        Workload("prefix_groups", "shared-prefix groups of different lengths among noise prompts (seglen PR)",
                 prefix_groups.PrefixGroupsParams, prefix_groups.build, prefix_groups.PRESETS,
                 "the seglen PR's datasets: multi-group, mixed-7k-10k-noise (inferred)"),
        Workload("random", "independent random prompts (prefill overhead)", random_load.RandomParams,
                 random_load.build, random_load.PRESETS),
        Workload("trace", "replay a trace file unchanged (Marconi/SegLen names too)", trace_file.TraceFileParams,
                 trace_file.build),
    )
}  # fmt: skip


def get_workload(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise WorkloadError(f"unknown workload {name!r}; choose one of {', '.join(WORKLOADS)}") from None
