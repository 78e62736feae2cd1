"""A run records the sha256 of each workload's trace in plan.json once it has written the trace: what history keys
a nightly series by and compare checks two runs by (results.trace_digest), so a generator changed on main (the same
arguments, other rows) is another load even where the trace file is gone."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from hybridbench.results import read_run
from hybridbench.results.trace_digest import file_sha256

ROOT = Path(__file__).resolve().parents[2]


def test_a_run_records_each_traces_digest_in_plan_json(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "hybridbench", "+experiment=smoke", "engine=sim", "repeats=1",
                           f"hydra.run.dir={tmp_path}"], capture_output=True, text=True, timeout=300, check=False,
                          cwd=ROOT)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["workloads"]
    for w in plan["workloads"]:
        meta, rows = (tmp_path / "traces" / f"{w['name']}.jsonl").read_bytes().split(b"\n", 1)
        assert meta.startswith(b'{"__trace_metadata__"')  # the generator's parameters: not what is sent
        assert w["trace_sha256"] == hashlib.sha256(rows).hexdigest()
    # Read back as history and compare read it; the digest is no part of the plan's fingerprint (the configuration's,
    # known before any trace is written), so the bundle still names this plan.
    run = read_run(tmp_path)
    assert [w.trace_sha256 for w in run.plan.workloads] == [w["trace_sha256"] for w in plan["workloads"]]
    assert run.bundle is not None and run.bundle.provenance.plan_fingerprint == plan["fingerprint"]


def test_the_digest_is_the_requests_not_the_generators_wording(tmp_path: Path) -> None:
    # A generator's new parameter at a default that changes no request (or reworded metadata) rewrites the first line:
    # hashed, it held every nightly series of that generator for four nights.
    rows = b'{"session_id": 0, "turn_id": 0, "input_tokens": [1, 2], "output_tokens": [3]}\n'
    a, b, bare = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "bare.jsonl"
    a.write_bytes(b'{"__trace_metadata__": {"generator": "gsp", "params": {}}}\n' + rows)
    b.write_bytes(b'{"__trace_metadata__": {"generator": "gsp", "params": {"new_knob": 0}}}\n' + rows)
    bare.write_bytes(rows)
    assert file_sha256(a, tmp_path) == file_sha256(b, tmp_path) == file_sha256(bare, tmp_path)
    assert file_sha256(a, tmp_path) == hashlib.sha256(rows).hexdigest()
    other = tmp_path / "other.jsonl"
    other.write_bytes(rows.replace(b"[3]", b"[4]"))
    assert file_sha256(other, tmp_path) != file_sha256(a, tmp_path)


def test_a_secret_spelt_inside_a_digest_leaves_plan_json_readable(tmp_path: Path) -> None:
    # Redaction masked a secret wherever it showed up: a hex API key ("1234") inside a trace's sha256 left a digest no
    # reader takes, and history, the dashboard and compare refused the whole run.
    from hybridbench.app import _write_plan
    from hybridbench.plan.build import build_plan
    from hybridbench.preview.compose import compose_run
    from hybridbench.results.reader import read_plan

    cfg = compose_run(["+experiment=smoke", "engine=sim"]).cfg
    digest = "ab" * 10 + "1234" + "cd" * 20
    plan = build_plan(cfg, tmp_path, {}).with_trace_digests({w.name: digest for w in build_plan(cfg, tmp_path, {})
                                                              .workloads})
    _write_plan(tmp_path, plan, frozenset({"1234"}))
    assert [w.trace_sha256 for w in read_plan(tmp_path / "plan.json").workloads] == [digest] * len(plan.workloads)
