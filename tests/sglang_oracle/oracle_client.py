"""Both sides of the differential tier: SGLang (through ``sglang_driver.py`` in its own venv) and
``reference_impl``, driven by the same operation list and observed the same way.

An operation is a plain dict, exactly what the driver receives:

    {"op": "insert", "tokens": [...]}
    {"op": "insert", "tokens": [...], "prev_prefix_len": k}   # caller protects min(k, matched) tokens
    {"op": "request", "input": [...], "output": [...], "chunks": [end, ...]}   # 0.5.23 lifecycle
    {"op": "request", "input": [...], "output": [...], "chunk_size": n}
    {"op": "match", "tokens": [...], "cow": bool, "lock": bool}
    {"op": "unlock", "lock": lock_id}           # lock ids count from 1 in the order locks were taken
    {"op": "evict", "num_tokens": n, "mamba_num": m}

A ``request`` op is one whole request (no_buffer strategy, page size 1): SGLang's scheduler-side
helpers in the driver, ``reference_impl.lifecycle.NoBufferStrategy`` here. Its reply is a list of
``stages`` (admit, every checkpoint, finish), each with its own facts and observation, so a
difference is reported at the first stage where the two sides part.

``replay(...)`` runs a list on both sides and stops at the first difference; a failing test prints a
call to it, so a reviewer can paste one line and see both answers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import warm_release

from reference_impl.lifecycle import CachedRequest, NoBufferStrategy
from reference_impl.policies.registry import make_policy
from reference_impl.radix.invariants import check_invariants
from reference_impl.radix.pools import KVPool, StatePool
from reference_impl.radix.results import LockHandle
from reference_impl.radix.tree import MambaRadixTree

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
# The start of a script that resolves server args in a release's venv as on a GPU host: the platform check that
# extra_buffer makes (0.5.23 arg_groups/mamba_hook.py, older server_args.is_cuda) answered as an H100 answers it.
PRETEND_H100 = """
try:  # an H100 supports extra_buffer; this CPU's platform says it does not
    import sglang.srt.arg_groups.mamba_hook as hook
    hook._platform_supports_mamba_cache_extra_buffer = lambda: True
except ImportError:
    import sglang.srt.server_args as sa_module
    sa_module.is_cuda = lambda: True
"""
DRIVER = HERE / "sglang_driver.py"
VERSIONS = ("0.5.23", "0.5.9")

Op = dict[str, Any]
Obs = dict[str, Any]


def env_home() -> Path:
    return Path(os.environ.get("HYBRIDBENCH_SGLANG_HOME", str(Path.home() / ".cache" / "hybridbench")))


def env_python(version: str) -> Path:
    return env_home() / f"sglang-{version}" / "bin" / "python"


def env_ready(version: str) -> bool:
    root = env_home() / f"sglang-{version}"
    return (root / ".hybridbench-stamp").is_file() and env_python(version).is_file()


class DriverError(RuntimeError):
    pass


class Driver:
    """A long-lived ``sglang_driver.py`` in the version's venv: a fork of its warm server (warm_release.py)."""

    def __init__(self, version: str) -> None:
        self.version = version
        env = warm_release.oracle_env()
        self.proc: subprocess.Popen[str] | warm_release.Interactive
        if warm_release.mode() == "warm" and os.environ.get("HYBRIDBENCH_ORACLE_VERBOSE") is None:
            # a fork of the release's warm server: SGLang's import (~6 CPU s) is done once for every oracle
            self.proc = warm_release.Interactive(env_python(version), DRIVER, env=env, cwd=HERE, timeout=3600)
        else:  # its stderr on this one's (verbose), or the warm server switched off
            self.proc = subprocess.Popen(
                [str(env_python(version)), "-u", str(DRIVER)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL if os.environ.get("HYBRIDBENCH_ORACLE_VERBOSE") is None else None,
                text=True,
                env=env,
                cwd=str(HERE),
            )
        hello = self._read()
        if hello.get("version") != version:
            self.close()
            raise DriverError(f"driver in the {version} venv reports sglang {hello.get('version')}")

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise DriverError(f"sglang {self.version} driver exited (code {self.proc.poll()})")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def call(self, cmd: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        reply = self._read()
        if not reply.pop("ok", False):
            raise DriverError(f"{cmd['op']} failed in sglang {self.version}:\n{reply.get('traceback')}")
        return reply

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


class Reference:
    """The same operations on ``reference_impl``'s tree, observed in the driver's vocabulary."""

    def __init__(self, version: str, kv_size: int, mamba_size: int, chunk_size: int = 64) -> None:
        self.version = version
        self.tree = MambaRadixTree(
            KVPool(kv_size), StatePool(mamba_size), make_policy("lru"), page_size=1, chunk_size=chunk_size,
            semantics=version,
        )
        self.locks: dict[int, LockHandle] = {}
        self._next_lock = 1
        # One request at a time; chunk ends are given per request, never chunked_prefill_size.
        self.strategy = NoBufferStrategy(self.tree, chunked_prefill_size=None)

    def request(self, op: Op) -> dict[str, Any]:
        """One request through ``NoBufferStrategy``, observed at the driver's stages."""
        if self.version == "0.5.9":
            raise ValueError("request lifecycle ops are implemented for 0.5.23 only")
        strat = self.strategy
        inp, outp = [int(t) for t in op["input"]], [int(t) for t in op["output"]]
        stages: list[dict[str, Any]] = []
        want_obs = op.get("observe", True)

        req: CachedRequest | None = None

        def stage(name: str, **facts: Any) -> None:
            st: dict[str, Any] = {"stage": name, **facts}
            if want_obs:
                live = req is not None and req.lock is not None  # admitted and not yet finished
                check_invariants(
                    self.tree,
                    held_kv_tokens=req.held_kv if live and req is not None else 0,
                    held_states=req.held_states() if live and req is not None else (),
                )
                st["obs"] = self.observe()
            stages.append(st)

        req = strat.admit(inp)
        assert req.lock is not None
        stage(
            "admit",
            cached_tokens=req.prefix_len,
            branching_seqlen=req.branch_seqlen,
            cow=req.lock.node is not self.tree.root,
        )
        prefix = req.prefix_len
        if op.get("chunk_size"):
            ends = list(range(prefix + int(op["chunk_size"]), len(inp), int(op["chunk_size"])))
        else:
            ends = [int(e) for e in op.get("chunks") or [] if prefix < int(e) < len(inp)]
        ends = [*sorted(set(ends)), len(inp)]
        one_output = len(outp) == 1
        for end in ends:
            strat.prefill_chunk(req, end, finishes_after_prefill=one_output)
            if end < len(inp) or not one_output:
                stage("chunk", end=end, protected=req.protected_len)
        for tok in outp:  # one decode step per output token (the first comes from the prefill)
            strat.decode(req, [tok])
        committed = req.kv_len
        strat.finish(req)
        stage("finish", committed_kv=committed)
        return {"stages": stages}

    def apply(self, op: Op) -> dict[str, Any]:
        tree = self.tree
        kind = op["op"]
        out: dict[str, Any]
        if kind == "request":
            return self.request(op)
        if kind == "insert":
            tokens = list(op["tokens"])
            protected = 0
            if int(op.get("prev_prefix_len", 0)) > 0 and tokens:
                protected = min(int(op["prev_prefix_len"]), tree.match_prefix(tokens).prefix_len)
            need = len(tokens) - protected
            if not tokens or tree.kv_pool.available < need or tree.state_pool.available < 1:
                out = {"skipped": True, "protected": protected}
            else:
                assert tree.kv_pool.alloc(need)
                slot = tree.state_pool.alloc()
                assert slot is not None
                r = tree.insert(tokens, slot, prev_prefix_len=protected)
                if self.version == "0.5.9":
                    tree.kv_pool.free(r.duplicate_kv)  # what 0.5.9's cache_*_req does
                if r.state_exists:
                    tree.state_pool.free(slot)
                out = {
                    "skipped": False, "prefix_len": r.prefix_len, "mamba_exist": r.state_exists,
                    "protected": protected,
                }
        elif kind == "match":
            m = tree.match_prefix(list(op["tokens"]))
            out = {"prefix_len": m.prefix_len, "branching_seqlen": m.branch_seqlen}
            if self.version != "0.5.9":
                out["full_kv_hit_length"] = m.kv_match_len
            out["last_node_key_len"] = len(m.last_node.key)
            if op.get("cow"):
                before = tree.state_pool.available
                slot = None
                if m.last_node.state is not None:
                    slot = tree.state_pool.alloc()
                    if slot is None:  # SGLang: lock the hit, evict one state, allocate again
                        handle = tree.lock(m.last_node)
                        tree.evict(num_states=1)
                        tree.unlock(handle)
                        slot = tree.state_pool.alloc()
                        assert slot is not None, "Can not alloc mamba cache"
                    tree.state_pool.free(slot)
                out["cow_slot"] = slot is not None
                out["cow_mamba_avail"] = before
            if op.get("lock"):
                lid = self._next_lock
                self._next_lock += 1
                self.locks[lid] = tree.lock(m.last_node)
                out["lock"] = lid
        elif kind == "unlock":
            tree.unlock(self.locks.pop(int(op["lock"])))
            out = {}
        elif kind == "evict":
            n, k = int(op.get("num_tokens", 0)), int(op.get("mamba_num", 0))
            if self.version == "0.5.9":
                # 0.5.9 runs evict_full then evict_mamba and reports only what each phase was asked
                # for: tokens from the KV phase, states from the state phase (see README/report).
                r1 = tree.evict(num_tokens=n)
                r2 = tree.evict(num_states=k)
                out = {"num_tokens_evicted": r1.tokens_evicted, "mamba_num_evicted": r2.states_evicted}
            else:
                ev = tree.evict(num_tokens=n, num_states=k)
                out = {"num_tokens_evicted": ev.tokens_evicted, "mamba_num_evicted": ev.states_evicted}
        else:
            raise ValueError(f"unknown op {kind!r}")
        check_invariants(tree)
        out["obs"] = self.observe()
        return out

    def observe(self) -> Obs:
        tree = self.tree
        dump = []
        for node in tree.nodes.values():
            path: list[int] = []
            walk = node
            while walk is not tree.root:
                path[:0] = walk.key
                assert walk.parent is not None
                walk = walk.parent
            dump.append([path, node.state is not None, node.kv_lock])
        dump.sort()
        return {
            "full_avail": tree.kv_pool.available,
            "mamba_avail": tree.state_pool.available,
            "full_evictable": tree.kv_evictable,
            "full_protected": tree.kv_protected,
            "mamba_evictable": tree.state_evictable,
            "mamba_protected": tree.state_protected,
            "tree": dump,
        }


def init_cmd(version: str, backend: str | None, kv_size: int, mamba_size: int, chunk_size: int = 64) -> dict[str, Any]:
    return {
        "op": "init", "version": version, "backend": backend, "kv_size": kv_size, "mamba_size": mamba_size,
        "chunk_size": chunk_size,
    }


def valid_ops(ops: Iterable[Op]) -> list[Op]:
    """Drop unlocks of locks that do not exist at that point (hypothesis draws them freely)."""
    live: set[int] = set()
    taken = 0
    out = []
    for op in ops:
        if op["op"] == "match" and op.get("lock"):
            taken += 1
            live.add(taken)
        if op["op"] == "unlock":
            if not live:
                continue
            ids = sorted(live)
            lock = ids[int(op["lock"]) % len(ids)]
            live.discard(lock)
            out.append({"op": "unlock", "lock": lock})
            continue
        out.append(op)
    return out


def _py_tokens(tokens: list[int]) -> str:
    """Python source for a token list, runs of consecutive tokens as ``*range(a, b)``."""
    parts: list[str] = []
    i = 0
    while i < len(tokens):
        j = i
        while j + 1 < len(tokens) and tokens[j + 1] == tokens[j] + 1:
            j += 1
        if j - i >= 3:
            parts.append(f"*range({tokens[i]}, {tokens[j] + 1})")
        else:
            parts += [str(t) for t in tokens[i : j + 1]]
        i = j + 1
    return "[" + ", ".join(parts) + "]"


def _py(value: Any) -> str:
    """Python source for an op (or a reply fragment), token lists compacted."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_py(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list) and value and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        return _py_tokens(value)
    if isinstance(value, list):
        return "[" + ", ".join(_py(v) for v in value) + "]"
    return repr(value)


def snippet(
    version: str, backend: str | None, kv_size: int, mamba_size: int, ops: list[Op], *, chunk_size: int = 64
) -> str:
    chunk = "" if chunk_size == 64 else f", chunk_size={chunk_size}"
    lines = [
        "# Run from the repository root (needs the SGLang venv from tests/sglang_oracle/build_env.sh):",
        "import sys; sys.path.insert(0, 'tests/sglang_oracle')",
        "from oracle_client import replay",
        f"replay({version!r}, {backend!r}, kv_size={kv_size}, mamba_size={mamba_size}{chunk}, ops=[",
    ]
    lines += [f"    {_py(op)}," for op in ops]
    lines.append("])")
    return "\n".join(lines)


def diff(sg: dict[str, Any], ref: dict[str, Any]) -> list[str]:
    out = []
    for key in sorted(set(sg) | set(ref)):
        if key == "obs":
            continue
        if key == "stages":
            a_st, b_st = sg.get(key, []), ref.get(key, [])
            for i, (a, b) in enumerate(zip(a_st, b_st, strict=False)):
                found = diff(a, b)
                if found:  # the first stage where the two sides part; later ones follow from it
                    out += [f"stage #{i} ({a.get('stage')}): {line}" for line in found]
                    break
            else:
                if len(a_st) != len(b_st):
                    out.append(
                        f"stages: sglang {[a.get('stage') for a in a_st]} reference {[b.get('stage') for b in b_st]}"
                    )
            continue
        if sg.get(key, "<absent>") != ref.get(key, "<absent>"):
            out.append(f"{key}: sglang={sg.get(key, '<absent>')!r} reference={ref.get(key, '<absent>')!r}")
    so, ro = sg.get("obs", {}), ref.get("obs", {})
    for key in sorted(set(so) | set(ro)):
        a, b = so.get(key, "<absent>"), ro.get(key, "<absent>")
        if a == b:
            continue
        if key == "tree":
            sa = {_py(x) for x in a}
            sb = {_py(x) for x in b}
            out.append(f"tree: only in sglang {sorted(sa - sb)}; only in reference {sorted(sb - sa)}")
        else:
            out.append(f"{key}: sglang={a!r} reference={b!r}")
    return out


def run_both(
    driver: Driver, backend: str | None, kv_size: int, mamba_size: int, ops: list[Op], *, chunk_size: int = 64
) -> tuple[int, list[str], list[tuple[dict[str, Any], dict[str, Any]]]] | None:
    """Apply ``ops`` to both sides; return (index, differences, transcript) at the first mismatch."""
    version = driver.version
    driver.call(init_cmd(version, backend, kv_size, mamba_size, chunk_size))
    ref = Reference(version, kv_size, mamba_size, chunk_size)
    transcript = []
    for i, op in enumerate(ops):
        sg = driver.call(op)
        rf = ref.apply(op)
        transcript.append((sg, rf))
        problems = diff(sg, rf)
        if problems:
            return i, problems, transcript
    return None


def check_sequence(
    driver: Driver, backend: str | None, kv_size: int, mamba_size: int, ops: list[Op], *, chunk_size: int = 64
) -> None:
    """Assert both sides agree after every operation; the failure message is a runnable snippet."""
    found = run_both(driver, backend, kv_size, mamba_size, ops, chunk_size=chunk_size)
    if found is None:
        return
    i, problems, _ = found
    raise AssertionError(
        f"SGLang {driver.version} ({backend or 'default'} core) and reference_impl disagree after op #{i} "
        f"{_py(ops[i])}:\n  "
        + "\n  ".join(problems)
        + "\n\nReproduce:\n"
        + snippet(driver.version, backend, kv_size, mamba_size, ops[: i + 1], chunk_size=chunk_size)
    )


def replay(
    version: str, backend: str | None, *, kv_size: int, mamba_size: int, ops: list[Op], chunk_size: int = 64
) -> None:
    """Print both sides' answers op by op and the first difference (for humans; see ``snippet``)."""
    driver = Driver(version)
    try:
        found = run_both(driver, backend, kv_size, mamba_size, ops, chunk_size=chunk_size)
        ref = Reference(version, kv_size, mamba_size, chunk_size)
        driver.call(init_cmd(version, backend, kv_size, mamba_size, chunk_size))
        for i, op in enumerate(ops):
            sg, rf = driver.call(op), ref.apply(op)
            for reply in (sg, rf):
                reply.pop("obs", None)
                for st in reply.get("stages", []):
                    st.update({k: v for k, v in st.pop("obs", {}).items() if k != "tree"})
            print(f"#{i} {_py(op)}\n   sglang    {_py(sg)}\n   reference {_py(rf)}")
        if found is None:
            print("no difference")
        else:
            print(f"first difference after op #{found[0]}:\n  " + "\n  ".join(found[1]))
    finally:
        driver.close()


if __name__ == "__main__":  # pragma: no cover - manual use
    sys.exit("import replay() from this module; see snippet()")
