"""Both sides of the differential tier: SGLang (through ``sglang_driver.py`` in its own venv) and
``reference_impl``, driven by the same operation list and observed the same way.

An operation is a plain dict, exactly what the driver receives:

    {"op": "insert", "tokens": [...]}
    {"op": "match", "tokens": [...], "cow": bool, "lock": bool}
    {"op": "unlock", "lock": lock_id}           # lock ids count from 1 in the order locks were taken
    {"op": "evict", "num_tokens": n, "mamba_num": m}

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

from reference_impl.policies.registry import make_policy
from reference_impl.radix.invariants import check_invariants
from reference_impl.radix.pools import KVPool, StatePool
from reference_impl.radix.tree import LockHandle, MambaRadixTree

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
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
    """A long-lived ``sglang_driver.py`` subprocess in the version's venv."""

    def __init__(self, version: str) -> None:
        self.version = version
        env = dict(os.environ)
        env.pop("SGLANG_USE_CPU_ENGINE", None)
        env.pop("PYTHONPATH", None)
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

    def apply(self, op: Op) -> dict[str, Any]:
        tree = self.tree
        kind = op["op"]
        out: dict[str, Any]
        if kind == "insert":
            tokens = list(op["tokens"])
            if not tokens or tree.kv_pool.available < len(tokens) or tree.state_pool.available < 1:
                out = {"skipped": True}
            else:
                assert tree.kv_pool.alloc(len(tokens))
                slot = tree.state_pool.alloc()
                assert slot is not None
                r = tree.insert(tokens, slot)
                if self.version == "0.5.9":
                    tree.kv_pool.free(r.duplicate_kv)  # what 0.5.9's cache_finished_req does
                if r.state_exists:
                    tree.state_pool.free(slot)
                out = {"skipped": False, "prefix_len": r.prefix_len, "mamba_exist": r.state_exists}
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


def init_cmd(version: str, backend: str | None, kv_size: int, mamba_size: int) -> dict[str, Any]:
    return {"op": "init", "version": version, "backend": backend, "kv_size": kv_size, "mamba_size": mamba_size}


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


def snippet(version: str, backend: str | None, kv_size: int, mamba_size: int, ops: list[Op]) -> str:
    lines = [
        "# Run from the repository root (needs the SGLang venv from tests/sglang_oracle/build_env.sh):",
        "import sys; sys.path.insert(0, 'tests/sglang_oracle')",
        "from oracle_client import replay",
        f"replay({version!r}, {backend!r}, kv_size={kv_size}, mamba_size={mamba_size}, ops=[",
    ]
    lines += [f"    {json.dumps(op)}," for op in ops]
    lines.append("])")
    return "\n".join(lines)


def diff(sg: dict[str, Any], ref: dict[str, Any]) -> list[str]:
    out = []
    for key in sorted(set(sg) | set(ref)):
        if key == "obs":
            continue
        if sg.get(key, "<absent>") != ref.get(key, "<absent>"):
            out.append(f"{key}: sglang={sg.get(key, '<absent>')!r} reference={ref.get(key, '<absent>')!r}")
    so, ro = sg.get("obs", {}), ref.get("obs", {})
    for key in sorted(set(so) | set(ro)):
        a, b = so.get(key, "<absent>"), ro.get(key, "<absent>")
        if a == b:
            continue
        if key == "tree":
            sa = {json.dumps(x) for x in a}
            sb = {json.dumps(x) for x in b}
            out.append(f"tree: only in sglang {sorted(sa - sb)}; only in reference {sorted(sb - sa)}")
        else:
            out.append(f"{key}: sglang={a!r} reference={b!r}")
    return out


def run_both(
    driver: Driver, backend: str | None, kv_size: int, mamba_size: int, ops: list[Op]
) -> tuple[int, list[str], list[tuple[dict[str, Any], dict[str, Any]]]] | None:
    """Apply ``ops`` to both sides; return (index, differences, transcript) at the first mismatch."""
    version = driver.version
    driver.call(init_cmd(version, backend, kv_size, mamba_size))
    ref = Reference(version, kv_size, mamba_size)
    transcript = []
    for i, op in enumerate(ops):
        sg = driver.call(op)
        rf = ref.apply(op)
        transcript.append((sg, rf))
        problems = diff(sg, rf)
        if problems:
            return i, problems, transcript
    return None


def check_sequence(driver: Driver, backend: str | None, kv_size: int, mamba_size: int, ops: list[Op]) -> None:
    """Assert both sides agree after every operation; the failure message is a runnable snippet."""
    found = run_both(driver, backend, kv_size, mamba_size, ops)
    if found is None:
        return
    i, problems, _ = found
    raise AssertionError(
        f"SGLang {driver.version} ({backend or 'default'} core) and reference_impl disagree after op #{i} "
        f"{json.dumps(ops[i])}:\n  "
        + "\n  ".join(problems)
        + "\n\nReproduce:\n"
        + snippet(driver.version, backend, kv_size, mamba_size, ops[: i + 1])
    )


def replay(version: str, backend: str | None, *, kv_size: int, mamba_size: int, ops: list[Op]) -> None:
    """Print both sides' answers op by op and the first difference (for humans; see ``snippet``)."""
    driver = Driver(version)
    try:
        found = run_both(driver, backend, kv_size, mamba_size, ops)
        ref = Reference(version, kv_size, mamba_size)
        driver.call(init_cmd(version, backend, kv_size, mamba_size))
        for i, op in enumerate(ops):
            sg, rf = driver.call(op), ref.apply(op)
            sg.pop("obs", None)
            rf.pop("obs", None)
            print(f"#{i} {json.dumps(op)}\n   sglang    {sg}\n   reference {rf}")
        if found is None:
            print("no difference")
        else:
            print(f"first difference after op #{found[0]}:\n  " + "\n  ".join(found[1]))
    finally:
        driver.close()


if __name__ == "__main__":  # pragma: no cover - manual use
    sys.exit("import replay() from this module; see snippet()")
