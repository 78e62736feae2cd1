"""A run's client and the reference server's modelled lockstep, wired as the harness wires them: the server started
from the run's own command line (engines/reference_cmd.py), the load driven by the real client and driver with the
``vacate`` the trial layer builds (load/trial.py ``vacate_call``)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from hybridbench.config.schema import RunCfg
from hybridbench.config.store import register
from hybridbench.engines.process import free_port
from hybridbench.engines.reference import REFERENCE
from hybridbench.engines.reference_cmd import LOCKSTEP_MS, reference_command
from hybridbench.load.client import ClientResult, generate_sglang
from hybridbench.load.driver import Completed, drive
from hybridbench.load.http import StreamPool
from hybridbench.load.trial import vacate_call
from hybridbench.plan.load import plan_load
from reference_impl.engine.arms import arm_spec
from workloads.arrival import arrival_schedule
from workloads.trace import TraceRow

ROOT = Path(__file__).resolve().parents[2]
# One long agent session (15 short turns) beside eight one-turn sessions that end one by one while it runs: each of
# those ends is a finish with no successor while the loop is still sending, and a lockstep that is not told waits
# out its bound at each of them.
ROWS = [*(TraceRow("agent", t, 0.0, tuple(range(10 + t, 110 + t)), (0,) * 8) for t in range(15)),
        *(TraceRow(i, 0, 0.0, tuple(range(300 + i, 400 + i)), (0,) * (30 + 25 * i)) for i in range(8))]


def run_cfg(*overrides: str) -> RunCfg:
    register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose(config_name="config", overrides=["+experiment=smoke", "model=reference-tiny", *overrides])
    out = OmegaConf.to_object(cfg)
    assert isinstance(out, RunCfg)
    return out


@contextlib.contextmanager
def reference_server(cfg: RunCfg) -> Iterator[int]:
    """A reference server started from the run's own command line, waiting in lockstep; yields its port."""
    port = free_port()
    argv = reference_command(cfg, arm_spec("branching"), port)
    assert f"--modelled-lockstep-ms {LOCKSTEP_MS}" in " ".join(argv)  # the run's servers do wait in lockstep
    proc = subprocess.Popen([*argv, "--log-level", "warning"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "the reference server did not start"
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def drive_seconds(cfg: RunCfg, *, told: bool) -> float:
    """Wall seconds to drive ROWS through a closed loop of 9 slots against a server started as the run starts it."""
    with reference_server(cfg) as port:
        async def go() -> float:
            async with StreamPool(f"http://127.0.0.1:{port}") as pool:
                async def send(prompt: list[int], n: int, answer_needed: bool):  # type: ignore[no-untyped-def]
                    return await generate_sglang(pool, prompt, n, 60.0)

                def on_done(c: Completed) -> None:
                    assert c.result.status == "ok", c.result.error

                vacate = vacate_call(REFERENCE, cfg, pool, 10.0)
                assert vacate is not None
                schedule = arrival_schedule(ROWS, plan_load(cfg.load), 0)
                t0 = time.perf_counter()
                await drive(ROWS, schedule, send, on_done, vacate if told else None)
                return time.perf_counter() - t0

        return asyncio.run(go())


def test_a_run_on_the_modelled_clock_tells_its_lockstep_server_which_finishes_have_no_successor() -> None:
    cfg = run_cfg("load.max_concurrency=9")
    assert cfg.load.kind == "closed" and cfg.engine.timing == "modelled"
    told, untold = drive_seconds(cfg, told=True), drive_seconds(cfg, told=False)
    # Untold, an end costs a 1 s wait (about five of the eight do: an end in a wait that got nothing marks the loop
    # draining until the next arrival); told, none does.
    assert untold - told > 2.5, (told, untold)


def test_a_run_on_the_wall_clock_or_an_open_loop_sends_no_vacate() -> None:
    async def make(cfg: RunCfg) -> object:
        async with StreamPool("http://127.0.0.1:9") as pool:
            return vacate_call(REFERENCE, cfg, pool, 1.0)

    assert asyncio.run(make(run_cfg())) is not None
    assert asyncio.run(make(run_cfg("engine.timing=wall"))) is None
    assert asyncio.run(make(run_cfg("load.kind=poisson", "load.request_rate=4"))) is None


# A session of three short turns beside one long request: B is still decoding when A's turns end, so a finish of A's
# that the lockstep awaits a successor for and never hears of stalls B's next forward for the whole wait.
FAILING = [*(TraceRow("A", t, 0.0, tuple(range(10, 40 + 10 * t)), (0,) * 4) for t in range(3)),
           TraceRow("B", 0, 0.0, tuple(range(200, 300)), (0,) * 80)]


def drive_failing(cfg: RunCfg, rows: list[TraceRow], fault: str, *,
                  told: bool) -> tuple[dict[tuple[str, int], ClientResult], int]:
    """Drive ``rows`` through a closed loop of 2 slots against a lockstep reference server: each turn's result and
    the vacate calls made. ``fault``: ``after_finish``, the client fails A's first turn after the server finished it
    (as a stream that broke after its last answer, or output ids it cannot read); ``timeout``, the client gives A's
    second turn 0.3 s."""
    with reference_server(cfg) as port:
        async def go() -> tuple[dict[tuple[str, int], ClientResult], int]:
            results: dict[tuple[str, int], ClientResult] = {}
            calls = 0
            async with StreamPool(f"http://127.0.0.1:{port}") as pool:
                real = vacate_call(REFERENCE, cfg, pool, 10.0)
                assert real is not None

                async def vacate() -> None:
                    nonlocal calls
                    calls += 1
                    await real()

                async def send(prompt: list[int], n: int, answer_needed: bool) -> ClientResult:
                    timeout = 0.3 if fault == "timeout" and prompt[-1] == rows[1].input_tokens[-1] else 60.0
                    r = await generate_sglang(pool, prompt, n, timeout)
                    if fault == "after_finish" and prompt == list(rows[0].input_tokens):
                        assert r.status == "ok" and r.modelled is not None  # the server finished it
                        r.status, r.error = "server_died", "connection failed after the last answer"
                    return r

                def on_done(c: Completed) -> None:
                    results[str(c.row.session_id), c.row.turn_id] = c.result

                await drive(rows, arrival_schedule(rows, plan_load(cfg.load), 0), send, on_done,
                            vacate if told else None)
            return results, calls

        return asyncio.run(go())


def longest_gap_ms(r: ClientResult) -> float:
    assert r.status == "ok", r.error
    return max(r.itl_ms)


def test_a_failed_turn_the_server_finished_ends_its_session_and_is_vacated() -> None:
    """The server finished A's first turn and awaits its successor; the client failed it, so the session ends and
    nothing is sent in its place: the client says so, and B's decode goes on at once. Untold, the lockstep holds B
    for its whole wait (1 s)."""
    cfg = run_cfg("load.max_concurrency=2")
    told, told_calls = drive_failing(cfg, FAILING, "after_finish", told=True)
    assert [told["A", t].status for t in range(3)] == ["server_died", "skipped", "skipped"]
    assert told_calls == 2  # A's failed first turn (finished by the server) and B's end
    # Told, B's longest gap is a decode step, or the call's round trip (slack for a machine shared with other jobs).
    assert (gap := longest_gap_ms(told["B", 0])) < 0.8 * LOCKSTEP_MS, gap
    untold, _ = drive_failing(cfg, FAILING, "after_finish", told=False)
    assert [untold["A", t].status for t in range(3)] == ["server_died", "skipped", "skipped"]
    # Untold, the whole wait falls inside B's request (A's turn ends while B decodes). Where it falls among B's steps
    # follows the machine's load (a busy one moved part of it before B's first token), so B's span is what is judged.
    span = untold["B", 0]
    assert span.status == "ok" and span.end is not None and span.sent is not None, span.error
    assert (span.end - span.sent) * 1e3 > 0.9 * LOCKSTEP_MS, span


def test_a_turn_the_server_aborted_ends_its_session_and_is_not_vacated() -> None:
    """A's second turn times out on the client: the server took it in (the successor of A's first) and aborts it when
    the client goes, a finish it never awaits a successor for. The session ends; the client's only call is for B's
    end, as a call too many would let the lockstep run ahead of a request on its way. B is never held."""
    cfg = run_cfg("load.max_concurrency=2")
    rows = [FAILING[0], TraceRow("A", 1, 0.0, FAILING[1].input_tokens, (0,) * 2000), FAILING[2], FAILING[3]]
    results, calls = drive_failing(cfg, rows, "timeout", told=True)
    assert results["A", 0].status == "ok"
    assert results["A", 1].status == "timeout" and results["A", 1].first_token is not None  # taken in, then cut short
    assert results["A", 2].status == "skipped"
    assert calls == 1
    assert (gap := longest_gap_ms(results["B", 0])) < 0.8 * LOCKSTEP_MS, gap
