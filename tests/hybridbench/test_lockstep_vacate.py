"""A run's client and the reference server's modelled lockstep, wired as the harness wires them: the server started
from the run's own command line (engines/reference_cmd.py), the load driven by the real client and driver with the
``vacate`` the trial layer builds (load/trial.py ``vacate_call``)."""

from __future__ import annotations

import asyncio
import subprocess
import time
import urllib.request
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from hybridbench.config.schema import RunCfg
from hybridbench.config.store import register
from hybridbench.engines.process import free_port
from hybridbench.engines.reference import REFERENCE
from hybridbench.engines.reference_cmd import LOCKSTEP_MS, reference_command
from hybridbench.load.client import generate_sglang
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


def drive_seconds(cfg: RunCfg, *, told: bool) -> float:
    """Wall seconds to drive ROWS through a closed loop of 9 slots against a server started as the run starts it."""
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

        async def go() -> float:
            async with StreamPool(f"http://127.0.0.1:{port}") as pool:
                async def send(prompt: list[int], n: int):  # type: ignore[no-untyped-def]
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
    finally:
        proc.terminate()
        proc.wait(timeout=30)


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
