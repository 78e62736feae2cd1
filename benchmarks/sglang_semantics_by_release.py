"""Which proven cache semantics each SGLang release's own code equals: the table behind ``semantics_for``.

reference_impl mirrors three SGLang releases (``reference_impl.radix.tree.SGLANG_SEMANTICS``), each proven against
that release's code on the CPU (tests/sglang_oracle/). A release in between is only predicted with a proven
semantics if every SGLang function the reference mirrors is, after normalisation, the same code as in that proven
release. This script answers that per release: it reads each release's wheel (pure source, nothing imported or
run), resolves every mirrored function, method, class or module constant by qualified name (wherever the release
keeps it: files move, e.g. 0.5.17's ``unified_cache/``), compares ``ast.dump`` of it (no line numbers, no
docstrings, no parameter/return annotations) with each proven release's and prints:

    release   -> the proven semantics whose mirrored code it equals, or per proven release the first items that differ

    python benchmarks/sglang_semantics_by_release.py /tmp/sgw            # wheels unzipped as /tmp/sgw/<version>/
    python benchmarks/sglang_semantics_by_release.py /tmp/sgw --download  # pip-downloads and unzips them first

No SGLang code is copied here: only names, and the wheels stay in the folder given.

What it cannot see: compiled code (0.5.20+ ship a Rust tree core, ``rust_tree_core/*.so``; only its Python adapter and
the Python core are compared — 0.5.23's proof ran both cores and found them equal), and behaviour that lives outside
the listed code (a kernel, a default read from a model config). An "equal" verdict is only as wide as ``MIRRORED``.
"""

from __future__ import annotations

import ast
import copy
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from whole_command import count  # a sibling: run as a script

from hybridbench.errors import OneLineParser
from workloads.atomic_file import output_problem

PROVEN = ("0.5.9", "0.5.16", "0.5.23")
DEFAULT_RELEASES = (
    "0.5.9", "0.5.10", "0.5.10.post1", "0.5.11", "0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1", "0.5.14",
    "0.5.15", "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23",
)

# Per proven release, what the reference mirrors: "path::Qualname" with path relative to sglang/srt in THAT release
# (a hint; other releases resolve the qualname wherever it lives). "Class.*" = every method and the class body;
# a bare NAME is a module-level constant. Sources: tests/sglang_oracle/ (sglang_driver.py, lifecycle_0516.py,
# extra_buffer_oracle*.py) and the file:line citations in reference_impl/ and docs/concepts/reference-cache.md.
_COMMON_POOLS = [
    "mem_cache/memory_pool.py::ReqToTokenPool.alloc", "mem_cache/memory_pool.py::ReqToTokenPool.free",
    "mem_cache/memory_pool.py::HybridReqToTokenPool.*",
    "mem_cache/radix_cache.py::RadixKey.*",
    "mem_cache/base_prefix_cache.py::MatchResult.*", "mem_cache/base_prefix_cache.py::InsertResult.*",
    "mem_cache/base_prefix_cache.py::EvictParams.*", "mem_cache/base_prefix_cache.py::MatchPrefixParams.*",
    "mem_cache/base_prefix_cache.py::InsertParams.*",
]
_SCHEDULER = [
    "managers/schedule_batch.py::Req.init_next_round_input",
    "managers/schedule_batch.py::ScheduleBatch.prepare_for_extend",
    "managers/schedule_batch.py::ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend",
    "managers/schedule_batch.py::ScheduleBatch.prepare_for_decode",
    "managers/scheduler.py::Scheduler.event_loop_overlap",  # the overlap order: prepare k + 1, then process k
]
MIRRORED: dict[str, list[str]] = {
    "0.5.9": [
        "mem_cache/mamba_radix_cache.py::TreeNode.*", "mem_cache/mamba_radix_cache.py::LRUList.*",
        "mem_cache/mamba_radix_cache.py::MambaRadixCache.*", "mem_cache/mamba_radix_cache.py::get_last_access_time",
        "mem_cache/allocator.py::BaseTokenToKVPoolAllocator.*", "mem_cache/allocator.py::TokenToKVPoolAllocator.*",
        *_COMMON_POOLS, "mem_cache/memory_pool.py::MambaPool.alloc", "mem_cache/memory_pool.py::MambaPool.free",
        "mem_cache/radix_cache.py::get_child_key", "mem_cache/radix_cache.py::_key_match_page_size1",
        "mem_cache/radix_cache.py::_key_match_paged",
        "mem_cache/common.py::MAMBA_STATE_PER_REQ_PREFIX_CACHE", "mem_cache/common.py::MAMBA_STATE_PER_REQ_NO_CACHE",
        "mem_cache/common.py::alloc_token_slots", "mem_cache/common.py::evict_from_tree_cache",
        "mem_cache/common.py::alloc_req_slots", "mem_cache/common.py::alloc_for_extend",
        "mem_cache/common.py::alloc_paged_token_slots_extend", "mem_cache/common.py::alloc_for_decode",
        "mem_cache/common.py::release_kv_cache",
        *_SCHEDULER,
        "managers/scheduler_output_processor_mixin.py::SchedulerOutputProcessorMixin._mamba_prefix_cache_update",
        "managers/scheduler_output_processor_mixin.py::SchedulerOutputProcessorMixin.process_batch_result_decode",
        "managers/scheduler_output_processor_mixin.py::SchedulerOutputProcessorMixin.process_batch_result_prefill",
        "server_args.py::ServerArgs.mamba_cache_chunk_size",
    ],
    "0.5.16": [
        "mem_cache/unified_radix_cache.py::UnifiedTreeNode.*", "mem_cache/unified_radix_cache.py::UnifiedLRUList.*",
        "mem_cache/unified_radix_cache.py::UnifiedRadixCache.*",
        "mem_cache/unified_cache_components/tree_component.py::TreeComponent.*",
        "mem_cache/unified_cache_components/tree_component.py::get_and_increase_time_counter",
        "mem_cache/unified_cache_components/full_component.py::FullComponent.*",
        "mem_cache/unified_cache_components/mamba_component.py::MambaComponent.*",
        "mem_cache/allocator/base.py::BaseTokenToKVPoolAllocator.*",
        "mem_cache/allocator/token.py::TokenToKVPoolAllocator.*",
        *_COMMON_POOLS, "mem_cache/allocator/mamba.py::MambaSlotAllocator.*",
        "mem_cache/common.py::MAMBA_STATE_PER_REQ_PREFIX_CACHE", "mem_cache/common.py::MAMBA_STATE_PER_REQ_NO_CACHE",
        "mem_cache/common.py::maybe_cache_unfinished_req", "mem_cache/common.py::evict_from_tree_cache",
        "mem_cache/common.py::release_kv_cache", "mem_cache/common.py::_release_overallocated_kv_indices",
        "mem_cache/allocation.py::alloc_token_slots", "mem_cache/allocation.py::alloc_req_slots",
        "mem_cache/allocation.py::alloc_for_extend", "mem_cache/allocation.py::alloc_paged_token_slots_extend",
        "mem_cache/allocation.py::alloc_for_decode",
        *_SCHEDULER,
        "managers/schedule_batch.py::Req.effective_kv_committed_len",
        "managers/schedule_batch.py::set_mamba_track_indices_from_reqs",
        "managers/scheduler_components/batch_result_processor.py::"
        "SchedulerBatchResultProcessor._handle_finish_state_updated_req",
        "managers/scheduler_components/batch_result_processor.py::"
        "SchedulerBatchResultProcessor._mamba_prefix_cache_update",
        "managers/scheduler_components/batch_result_processor.py::"
        "SchedulerBatchResultProcessor._mamba_check_track_boundary",
        "managers/scheduler_components/batch_result_processor.py::"
        "SchedulerBatchResultProcessor.process_batch_result_decode",
        "managers/scheduler_components/batch_result_processor.py::"
        "SchedulerBatchResultProcessor.process_batch_result_prefill",
        "server_args.py::ServerArgs.mamba_cache_chunk_size",
    ],
    "0.5.23": [
        "mem_cache/unified_radix_cache.py::UnifiedRadixCache.*",
        "mem_cache/unified_cache/unified_tree_core.py::UnifiedTreeNode.*",
        "mem_cache/unified_cache/unified_tree_core.py::UnifiedLRUList.*",
        "mem_cache/unified_cache/unified_tree_core.py::UnifiedTreeCore.*",
        "mem_cache/unified_cache/unified_tree_core.py::_set_tlru_lens_and_raise_history",
        "mem_cache/unified_cache/tree_core_registry.py::select_tree_core_backend",
        "mem_cache/unified_cache/tree_core_registry.py::resolve_tree_core_backend",
        "mem_cache/unified_cache/tree_core_registry.py::_rust_fallback_reason",
        "mem_cache/unified_cache/components/base.py::TreeComponent.*",
        "mem_cache/unified_cache/components/base.py::get_and_increase_time_counter",
        "mem_cache/unified_cache/components/full.py::FullComponent.*",
        "mem_cache/unified_cache/components/mamba.py::MambaComponent.*",
        "mem_cache/allocator/base.py::BaseTokenToKVPoolAllocator.*",
        "mem_cache/allocator/token.py::TokenToKVPoolAllocator.*",
        *_COMMON_POOLS, "mem_cache/allocator/mamba.py::MambaSlotAllocator.*",
        "mem_cache/common.py::match_kv_cache", "mem_cache/common.py::_req_radix_key",
        "mem_cache/common.py::checkpoint_kv_cache", "mem_cache/common.py::evict_from_tree_cache",
        "mem_cache/common.py::_evict_until_allocatable", "mem_cache/common.py::release_kv_cache",
        "mem_cache/common.py::_release_overallocated_kv_indices",
        "mem_cache/allocation.py::alloc_token_slots", "mem_cache/allocation.py::ensure_mamba_capacity",
        "mem_cache/allocation.py::alloc_req_slots", "mem_cache/allocation.py::alloc_for_extend",
        "mem_cache/allocation.py::alloc_paged_token_slots_extend", "mem_cache/allocation.py::alloc_for_decode",
        "mem_cache/allocation.py::alloc_for_decode_default",
        "mem_cache/allocation_sizing.py::get_mamba_tracking_slots",
        "runtime_context.py::mamba_checkpoint_grid", "runtime_context.py::mamba_track_grid",
        *_SCHEDULER,
        "managers/schedule_batch.py::Req.owned_kv_len",
        "managers/schedule_batch.py::set_mamba_track_indices_from_reqs",
        "managers/scheduler_components/batch_result_processor.py::"
        "SchedulerBatchResultProcessor._handle_finish_state_updated_req",
        "managers/scheduler_components/batch_result_processor.py::"
        "SchedulerBatchResultProcessor._mamba_can_cache_finished_req",
        "managers/scheduler_components/batch_result_processor.py::"
        "SchedulerBatchResultProcessor._mamba_prefix_cache_update",
        "managers/scheduler_components/batch_result_processor.py::"
        "SchedulerBatchResultProcessor._mamba_check_track_boundary",
        "managers/scheduler_components/batch_result_processor.py::"
        "SchedulerBatchResultProcessor._mamba_assert_committed_len_lookahead",
        "managers/scheduler_components/batch_result_processor.py::"
        "SchedulerBatchResultProcessor.process_batch_result_decode",
        "managers/scheduler_components/batch_result_processor.py::"
        "SchedulerBatchResultProcessor.process_batch_result_prefill",
        "arg_groups/overrides.py::mamba_cache_chunk_size",
    ],
}

Defs = dict[str, list[tuple[str, ast.AST]]]  # qualname -> [(path under sglang/srt, node)]


def _strip(node: ast.AST) -> ast.AST:
    """Drop docstrings and parameter/return annotations: neither changes what the code does."""
    for sub in ast.walk(node):
        body = getattr(sub, "body", None)
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)) and body \
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            sub.body = body[1:] or [ast.Pass()]
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
            sub.returns = None
        if isinstance(sub, ast.arg):
            sub.annotation = None
    return node


def _names(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, ast.Assign):
        return [t.id for t in stmt.targets if isinstance(t, ast.Name)]
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return [stmt.target.id]
    return []


def _walk(body: list[ast.stmt], prefix: str) -> Iterator[tuple[str, ast.AST]]:
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield prefix + stmt.name, stmt
            if isinstance(stmt, ast.ClassDef):
                yield from _walk(stmt.body, prefix + stmt.name + ".")
        else:
            for name in _names(stmt):
                yield prefix + name, stmt


def index(root: Path, wanted: set[str]) -> Defs:
    """Every definition under ``root`` (sglang/srt) inside a wanted top-level name, by qualified name."""
    defs: Defs = {}
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if not any(name in text for name in wanted):
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        rel = path.relative_to(root).as_posix()
        for qual, node in _walk(tree.body, ""):
            if qual.split(".")[0] in wanted:
                defs.setdefault(qual, []).append((rel, node))
    return defs


def resolve(defs: Defs, qual: str, hint: str) -> tuple[str, ast.AST] | str:
    """The definition of ``qual``: at the hinted path, else the one file that has it (moves allowed)."""
    found = defs.get(qual, [])
    for rel, node in found:
        if rel == hint:
            return rel, node
    same_name = [f for f in found if f[0].rsplit("/", 1)[-1] == hint.rsplit("/", 1)[-1]]
    pick = same_name if len(same_name) == 1 else found
    if len(pick) == 1:
        return pick[0]
    return "missing" if not found else f"ambiguous ({', '.join(r for r, _ in found)})"


def dump(node: ast.AST) -> str:
    if isinstance(node, ast.ClassDef):  # a class body without its methods: bases, decorators, fields
        node = copy.copy(node)
        node.body = [s for s in node.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return ast.dump(_strip(copy.deepcopy(node)), include_attributes=False)


@dataclass
class Release:
    version: str
    root: Path
    defs: Defs

    def item(self, qual: str, hint: str) -> dict[str, str]:
        """Normalised dumps of one mirrored item; "X.*" expands to the class body and each method."""
        if not qual.endswith(".*"):
            got = resolve(self.defs, qual, hint)
            return {qual: got if isinstance(got, str) else dump(got[1])}
        cls = qual[:-2]
        got = resolve(self.defs, cls, hint)
        if isinstance(got, str):
            return {cls: got}
        out = {cls: dump(got[1])}
        assert isinstance(got[1], ast.ClassDef)
        for stmt in got[1].body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[f"{cls}.{stmt.name}"] = dump(stmt)
        return out


def _wanted() -> set[str]:
    names: set[str] = set()
    for items in MIRRORED.values():
        for item in items:
            qual = item.split("::")[1].removesuffix(".*")
            names.add(qual.split(".")[0])
    return names


def _usage(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _root(folder: Path, version: str) -> Path:
    return folder / version / "sglang" / "srt"


def load(folder: Path, version: str) -> Release:
    root = _root(folder, version)
    return Release(version, root, index(root, _wanted()))


def diff(release: Release, proven: Release) -> list[str]:
    """Mirrored items of ``proven`` whose code differs in ``release`` (missing/ambiguous say so)."""
    out: list[str] = []
    for item in MIRRORED[proven.version]:
        hint, qual = item.split("::")
        want = proven.item(qual, hint)
        have = release.item(qual, hint)
        for key in sorted(set(want) | set(have)):
            if key not in want:
                out.append(f"{key} (new)")
            elif key not in have:
                out.append(f"{key} (gone)")
            elif want[key] in ("missing",) or want[key].startswith("ambiguous"):
                raise SystemExit(f"MIRRORED names {key} for {proven.version}, which {want[key]} there")
            elif have[key] != want[key]:
                out.append(key if not have[key].startswith(("missing", "ambiguous")) else f"{key} ({have[key]})")
    return out


def download(folder: Path, versions: tuple[str, ...]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for version in versions:
        if (folder / version / "sglang").is_dir():
            continue
        wheels = list(folder.glob(f"sglang-{version}-*.whl"))
        if not wheels:
            done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", f"sglang=={version}", "-d",
                                   str(folder)], check=False)
            wheels = list(folder.glob(f"sglang-{version}-*.whl"))
            if done.returncode or not wheels:
                _usage(f"--releases {version}: pip could not download sglang=={version} into {folder}")
        with zipfile.ZipFile(wheels[0]) as wheel:
            wheel.extractall(folder / version, [n for n in wheel.namelist() if n.startswith("sglang/srt/")])


def main(argv: list[str] | None = None) -> None:
    parser = OneLineParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("folder", type=Path, help="wheels unzipped as <folder>/<version>/sglang/")
    parser.add_argument("--download", action="store_true", help="pip-download and unzip missing releases first")
    parser.add_argument("--releases", nargs="*", default=list(DEFAULT_RELEASES))
    parser.add_argument("--show", type=count(0), default=4, help="differing items named per proven release")
    args = parser.parse_args(argv)
    if not args.download and not args.folder.is_dir():
        parser.error(f"argument folder: {args.folder}: no such directory (pass --download to fill a new one)")
    if args.download and (problem := output_problem(args.folder, folder=True)):
        parser.error(f"argument folder: {problem}")
    if args.download:
        download(args.folder, tuple(args.releases))
    for version in (*PROVEN, *args.releases):  # every release there before any work starts
        if not _root(args.folder, version).is_dir():
            _usage(f"{_root(args.folder, version)} missing: unzip sglang {version}'s wheel there or pass --download")
    proven = {v: load(args.folder, v) for v in PROVEN}
    print(f"mirrored items: {', '.join(f'{v} {len(MIRRORED[v])}' for v in PROVEN)} (X.* = whole class)", flush=True)
    for version in args.releases:
        release = proven.get(version) or load(args.folder, version)
        diffs = {p: diff(release, proven[p]) for p in PROVEN}
        same = [p for p in PROVEN if not diffs[p]]
        if same:
            print(f"{version:<13} = {' = '.join(same)}")
            continue
        print(f"{version:<13} none")
        for p in PROVEN:
            shown = ", ".join(diffs[p][: args.show])
            more = f" (+{len(diffs[p]) - args.show} more)" if len(diffs[p]) > args.show else ""
            print(f"{'':<15}vs {p}: {len(diffs[p])} differ: {shown}{more}")


if __name__ == "__main__":
    main()
