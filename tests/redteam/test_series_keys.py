"""What keys a nightly series beyond its arguments: the trace's bytes (a generator changed on main sends other rows
for the same arguments) and, for a CPU engine, the CPU it ran on. Either changing on main holds the nights after it
(exit 1, the change named), as a load change does; two CPUs side by side are two series; a run that recorded neither
is still read, its trace ``unknown`` and never taken for a known one."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hostile import ROOT, clean, cli, make_run, set_metric

pytestmark = pytest.mark.redteam

REFERENCE = ROOT / "tests" / "hybridbench" / "fixtures" / "runs" / "reference-smoke-kl"


def results(*args: object) -> tuple[int, str, str]:
    proc = cli("hybridbench.results", *args)
    clean(proc)
    return proc.returncode, proc.stdout, proc.stderr


def ttft_lines(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if " mean_ttft_ms " in ln]


def _recorded(digest: str) -> Any:
    """plan.json's trace digest, as a run writes it since the digest is recorded."""
    return lambda p: p["workloads"][0].update(trace_sha256=digest)


def test_a_generator_changed_on_main_holds_the_nights_after_it(tmp_path: Path) -> None:
    # Four nights on one trace, then the generator changed on main (same arguments, other rows: a lighter load) and
    # the code slowed by as much: the figures stayed at 100. Keyed by the arguments alone the six nights were one
    # series, "ok", exit 0 -- nights measured on different loads judged against each other.
    a, b = "a" * 64, "b" * 64
    for i in range(4):
        make_run(tmp_path, f"n{i}", night=i, bundle=set_metric(100.0), plan=_recorded(a))
    for i in (4, 5):
        make_run(tmp_path, f"n{i}", night=i, bundle=set_metric(100.0), plan=_recorded(b))
    rc, out, err = results("history", tmp_path, "--json", tmp_path / "h.json")
    new = [ln for ln in ttft_lines(out) if ln.startswith("insufficient data")]
    says = "the trace changed on main at n4: trace aaaaaaaaaaaa -> bbbbbbbbbbbb"
    assert len(new) == 2 and all(says in ln for ln in new), out
    assert rc == 1, out + err
    keys = {s["trace"] for s in json.loads((tmp_path / "h.json").read_text())["series"]}
    assert keys == {a, b}


def _rows_sha256(trace: Path) -> str:
    """The sha256 of a trace's requests: its bytes after the generator's metadata line."""
    return hashlib.sha256(trace.read_bytes().split(b"\n", 1)[1]).hexdigest()


def _edit_trace(run_dir: Path) -> None:
    """Another request: the first row's first token (a generator changed; its metadata line may say nothing)."""
    trace = run_dir / "traces" / "gsp.jsonl"
    trace.write_bytes(trace.read_bytes().replace(b'"input_tokens": [25970,', b'"input_tokens": [25971,', 1))


def test_a_run_from_before_the_digest_is_keyed_by_its_saved_trace(tmp_path: Path) -> None:
    # Runs whose plan.json records no digest (older ones) are keyed by the trace file they kept (compare's rule):
    # the same generator change is seen there too, and an unchanged store reads as one series, as before.
    for i in range(4):
        make_run(tmp_path, f"n{i}", night=i, bundle=set_metric(100.0))
    rc, out, err = results("history", tmp_path)
    assert rc == 0 and "changed on main" not in out, out + err
    for i in (4, 5):
        _edit_trace(make_run(tmp_path, f"n{i}", night=i, bundle=set_metric(100.0)))
    old = _rows_sha256(tmp_path / "n0" / "traces" / "gsp.jsonl")[:12]
    new = _rows_sha256(tmp_path / "n4" / "traces" / "gsp.jsonl")[:12]
    assert old != new
    rc, out, err = results("history", tmp_path)
    held = [ln for ln in ttft_lines(out) if ln.startswith("insufficient data")]
    assert len(held) == 2 and all(f"changed on main at n4: trace {old} -> {new}" in ln for ln in held), out
    assert rc == 1, out + err


def _no_trace(run_dir: Path) -> None:
    (run_dir / "traces" / "gsp.jsonl").unlink()


def test_a_trace_nobody_recorded_is_unknown_never_the_same(tmp_path: Path) -> None:
    # Older runs copied without their traces: nothing says which rows they sent. Among themselves they are keyed by
    # the arguments, as before (one series, judged: exit 0); a night whose trace is known is not taken for theirs.
    for i in range(4):
        _no_trace(make_run(tmp_path, f"n{i}", night=i, bundle=set_metric(100.0)))
    rc, out, err = results("history", tmp_path, "--json", tmp_path / "h.json")
    assert rc == 0 and all(ln.startswith("ok") for ln in ttft_lines(out)), out + err
    assert {s["trace"] for s in json.loads((tmp_path / "h.json").read_text())["series"]} == {"unknown"}
    for i in (4, 5):
        make_run(tmp_path, f"n{i}", night=i, bundle=set_metric(100.0), plan=_recorded("c" * 64))
    rc, out, err = results("history", tmp_path)
    held = [ln for ln in ttft_lines(out) if ln.startswith("insufficient data")]
    assert len(held) == 2 and all("trace unknown -> cccccccccccc" in ln for ln in held), out
    assert rc == 1, out + err


def _cpu(name: str | None) -> Any:
    def edit(b: dict[str, Any]) -> None:
        set_metric(100.0)(b)
        if name is not None:  # None: a bundle from before provenance.machine
            b["provenance"]["machine"] = {"cpu": name, "cores": 2}
    return edit


def test_two_cpus_side_by_side_are_two_series(tmp_path: Path) -> None:
    # Two runners with other CPUs running the reference nightly: every CPU engine was labelled "cpu", so both
    # runners' nights made one series, 100 and 130 in turn, read as "inconclusive" (exit 1) -- or, with the faster
    # CPU's nights last, a slower code hidden by the faster machine.
    for i in range(6):
        make_run(tmp_path, f"a{i}", night=i, bundle=_cpu("Intel Xeon 8370C"), source=REFERENCE)
        make_run(tmp_path, f"b{i}", night=i, bundle=lambda b: (_cpu("AMD EPYC 7763")(b), set_metric(130.0)(b)),
                 source=REFERENCE)
    rc, out, err = results("history", tmp_path)
    ttft = ttft_lines(out)
    assert len(ttft) == 4 and all(ln.startswith("ok") for ln in ttft), out
    assert sum("cpu (Intel Xeon 8370C, 2 cores)" in ln for ln in ttft) == 2, ttft
    assert sum("cpu (AMD EPYC 7763, 2 cores)" in ln for ln in ttft) == 2, ttft
    assert rc == 0, out + err


def test_the_cpu_changed_on_main_holds_the_nights_after_it_and_older_runs_still_read(tmp_path: Path) -> None:
    # Nights from before bundles recorded the CPU read as "cpu", as ever; then main's runner moved to another CPU.
    for i in range(4):
        make_run(tmp_path, f"n{i}", night=i, bundle=_cpu(None), source=REFERENCE)
    rc, out, err = results("history", tmp_path)
    assert rc == 0 and all(", cpu, reference)" in ln for ln in ttft_lines(out)), out + err
    for i in (4, 5):
        make_run(tmp_path, f"n{i}", night=i, bundle=_cpu("AMD EPYC 7763"), source=REFERENCE)
    rc, out, err = results("history", tmp_path)
    held = [ln for ln in ttft_lines(out) if ln.startswith("insufficient data")]
    assert len(held) == 2, out
    assert all("the CPU changed on main at n4: gpu cpu -> cpu (AMD EPYC 7763, 2 cores)" in ln for ln in held), held
    assert rc == 1, out + err


def test_latest_takes_main_on_the_candidates_cpu(tmp_path: Path) -> None:
    from hybridbench.results import read_run
    from hybridbench.results.store import latest_passing_main

    root = tmp_path / "store"
    same = make_run(root, "xeon", night=1, bundle=_cpu("Intel Xeon 8370C"), source=REFERENCE)
    make_run(root, "epyc", night=2, bundle=_cpu("AMD EPYC 7763"), source=REFERENCE)  # newer, another CPU

    def pr(b: dict[str, Any]) -> None:
        _cpu("Intel Xeon 8370C")(b)
        b["provenance"]["pr_number"] = 7

    candidate = make_run(tmp_path, "pr", night=3, bundle=pr, source=REFERENCE)
    assert latest_passing_main(root, read_run(candidate)) == same


def test_latest_takes_another_cpus_main_run_when_none_ran_on_the_candidates(tmp_path: Path) -> None:
    # A runner pool of mixed CPUs: a pull request's runner drew a CPU main never ran on. latest: refused it (exit 2)
    # although compare takes the pair and holds its wall-clock rows inconclusive across two CPUs.
    from hybridbench.results import read_run
    from hybridbench.results.store import latest_passing_main

    root = tmp_path / "store"
    make_run(root, "xeon", night=1, bundle=_cpu("Intel Xeon 8370C"), source=REFERENCE)
    newest = make_run(root, "epyc", night=2, bundle=_cpu("AMD EPYC 7763"), source=REFERENCE)

    def pr(b: dict[str, Any]) -> None:
        _cpu("AMD EPYC 9654")(b)
        b["provenance"]["pr_number"] = 7

    candidate = make_run(tmp_path, "pr", night=3, bundle=pr, source=REFERENCE)
    assert latest_passing_main(root, read_run(candidate)) == newest
    proc = cli("hybridbench.compare", f"latest:{root}", candidate)
    assert proc.returncode in (0, 1), proc.stderr
    assert "two CPUs" in proc.stdout + proc.stderr


def test_compare_refuses_two_recorded_traces_without_their_files(tmp_path: Path) -> None:
    # The digest plan.json recorded is the trace's, also where the run was copied without its traces: two runs
    # that sent other rows are not compared (before, with no file to hash, the arguments alone passed them).
    base = make_run(tmp_path, "main", plan=_recorded("a" * 64))
    cand = make_run(tmp_path, "pr", night=1, plan=_recorded("b" * 64))
    for run in (base, cand):
        _no_trace(run)
    proc = cli("hybridbench.compare", base, cand, "-o", tmp_path / "cmp")
    clean(proc)
    assert proc.returncode == 2 and "workload 'gsp' sent different requests" in proc.stderr, proc.stderr


def test_a_digest_that_is_no_sha256_is_one_line_naming_the_key(tmp_path: Path) -> None:
    make_run(tmp_path / "store", "bad", plan=_recorded("<img src=x onerror=alert(1)>"))
    # history and the dashboard print the digest: anything else in its place is refused, the run skipped in one line
    rc, out, err = results("ls", tmp_path / "store")
    assert "plan.json: workloads[0]: trace_sha256 is not a sha256" in err, err
    assert rc == 0 and "run(s)" not in out, out  # no run listed (one run listed: "1 run(s)")
