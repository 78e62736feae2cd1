"""``engine=tokenspeed`` command lines against TokenSpeed's own parsers, per release (0.1.0 and 0.1.1).

``ts serve`` routes each flag: ones the engine's ``ServerArgs`` parser knows go to the gRPC engine, the rest to the
smg gateway, whose parser rejects what it does not know, but only after the engine has loaded the model (on a GPU,
minutes). This tier runs the real routing (``tokenspeed.cli._argsplit.split_argv``) and both real parsers (the
engine's with its GPU kernel packages stubbed, ``smg.launch_router.parse_router_args``) over the command
hybridbench builds for every arm, so an arm that plans is one the packages accept, and one hybridbench refuses
at plan time is one they would have refused late. Build with ``bash tests/tokenspeed/build_env.sh``.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tokenspeed_env import HERE, PYTHON, pythonpath, release, require

from hybridbench.config.schema import ArmCfg, EngineCfg, ModelCfg, RunCfg
from hybridbench.engines.context_length import served_context
from hybridbench.engines.tokenspeed_cmd import TOKENSPEED_DEFAULT_PAGE, TOKENSPEED_VERSIONS, tokenspeed_command
from hybridbench.errors import ConfigError
from hybridbench.plan.arms import plan_arm

pytestmark = [pytest.mark.tokenspeed, pytest.mark.slow]

FIXTURES = HERE.parent / "hybridbench" / "fixtures"

require(*map(release, TOKENSPEED_VERSIONS), what="parser env")


def _release_path(version: str) -> str:
    return pythonpath(release(version))


def _probe_env(version: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": _release_path(version)}


class _Prober:
    """One ``probe_parsers.py -`` per release for the whole module, asked line by line (each interpreter imports
    the parsers for 3-4 CPU s; the module asks some twenty times). Its stderr goes to a file, so a chatty parser
    cannot fill a pipe and stall it."""

    def __init__(self, version: str, stderr: Path) -> None:
        self.stderr = stderr
        with stderr.open("w") as err:
            self.proc = subprocess.Popen([str(PYTHON), str(HERE / "probe_parsers.py"), "-"], env=_probe_env(version),
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)

    def ask(self, asked: object) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(asked) + "\n")
        self.proc.stdin.flush()
        if not select.select([self.proc.stdout], [], [], 300)[0]:
            self.proc.kill()
            raise AssertionError(f"probe_parsers.py gave no answer in 300 s to {asked}")
        line = self.proc.stdout.readline()
        assert line, f"probe_parsers.py exited {self.proc.wait()}: {self.stderr.read_text()[-2000:]}"
        answer: dict[str, Any] = json.loads(line)
        # a stray line from a parser would shift every later answer onto the wrong question: caught, not passed on
        assert answer.pop("asked") == asked, f"probe_parsers.py answered another question than {asked}: {line[:500]}"
        return answer

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class _Probers:
    """The module's probers, one per release, started when first asked and stopped when the module ends."""

    def __init__(self) -> None:
        self.running: dict[str, _Prober] = {}
        self.folder: Path | None = None

    def __call__(self, version: str) -> _Prober:
        if version not in self.running:
            assert self.folder is not None, "asked outside the module's tests"
            self.running[version] = _Prober(version, self.folder / f"stderr-{version}.txt")
        return self.running[version]


_prober = _Probers()


@pytest.fixture(scope="module", autouse=True)
def _probers_for_the_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    _prober.folder = tmp_path_factory.mktemp("probe_parsers")
    try:
        yield
    finally:
        while _prober.running:
            _prober.running.popitem()[1].close()


def live_help(version: str) -> str:
    text: str = _prober(version).ask("help")["help"]
    return text


def build(version: str, arm: str, *, hybrid: bool = True, extra: tuple[str, ...] = (),
          quantization: str = "") -> list[str]:
    return tokenspeed_command(
        python="/venv/bin/python", model=ModelCfg(hf_id="/models/tiny", hybrid=hybrid, quantization=quantization),
        engine=EngineCfg(name="tokenspeed", extra_args=list(extra), page_size=64, kv_tokens=60000,
                         max_mamba_cache_size=40 if version == "0.1.0" else 0),
        arm=plan_arm(arm, ArmCfg()), port=30000, control_port=30001, prometheus_port=30002,
        version=TOKENSPEED_VERSIONS[version],
        help_text=live_help(version))


def routed(version: str, *argvs: list[str]) -> list[dict[str, Any]]:
    assert all(argv[2:4] == ["tokenspeed.cli", "serve"] for argv in argvs)
    return [_prober(version).ask(argv[4:]) for argv in argvs]


@pytest.mark.parametrize("version", list(TOKENSPEED_VERSIONS))
def test_fixture_help_is_the_installed_parser(version: str) -> None:
    """The default tier's fixtures are what the release's own ServerArgs prints."""
    assert (FIXTURES / f"tokenspeed_help_{version.replace('.', '_')}.txt").read_text() == live_help(version)


# (arm, hybrid model) each release can express
EXPRESSIBLE = {"0.1.0": [("disabled", True), ("branching", True), ("l2", True)],
               "0.1.1": [("disabled", True), ("branching", True), ("l2", False)]}


@pytest.mark.parametrize("version", list(TOKENSPEED_VERSIONS))
def test_every_planned_arm_is_accepted_by_both_parsers(version: str) -> None:
    results = routed(version, *(build(version, arm, hybrid=hybrid) for arm, hybrid in EXPRESSIBLE[version]))
    for (arm, _), r in zip(EXPRESSIBLE[version], results, strict=True):
        assert (r["engine_error"], r["gateway_error"]) == ("", ""), (arm, r)
        # Nothing hybridbench meant for the engine reaches the gateway (where it would fail after the model loads).
        gateway_flags = {a for a in r["gateway"] if a.startswith("--")}
        assert gateway_flags == {"--model", "--host", "--port", "--prometheus-host", "--prometheus-port"}, (arm, r)
        assert r["gateway"][r["gateway"].index("--prometheus-host") + 1] == "127.0.0.1"
        assert r["control_port"] == 30001
        if arm == "l2" and version == "0.1.0":
            assert {"--enable-mamba-l2", "--kvstore-ratio", "--mamba-l2-ratio"} <= set(r["engine"])
        # The engine's own start-up resolution runs the arm hybridbench means, on engine.tp GPUs.
        assert r["resolved"] == {"error": "", "world_size": 1, "attn_tp": 1, "attn_dp": 1,
                                 "prefix_caching": arm != "disabled", "kvstore": arm == "l2",
                                 "mamba_l2": arm == "l2" and version == "0.1.0", "quantization": None,
                                 "page": 64, "context": None}, (arm, r)  # no --max-model-len given


def test_what_hybridbench_refuses_on_0_1_1_the_gateway_would_have_refused_late() -> None:
    """The seed's launch flags and 0.1.0's Mamba host tier: refused at plan time by hybridbench, and on the real
    routing they land on the gateway, whose parser rejects them (in a real launch, after the model loaded)."""
    flags = ("--enable-cache-report", "--mamba-track-interval", "--max-mamba-cache-size", "--enable-mamba-l2")
    argvs = []
    for flag in flags:
        extra = (flag,) if flag.startswith("--enable") else (flag, "64")
        with pytest.raises(ConfigError, match=flag):
            build("0.1.1", "branching", extra=extra)
        # 0.1.0's --max-mamba-cache-size comes from engine.max_mamba_cache_size (extra_args may not give it)
        argvs.append(build("0.1.0", "branching", extra=() if flag == "--max-mamba-cache-size" else extra))
    assert all(r["gateway_error"] == "" for r in routed("0.1.0", *argvs))  # 0.1.0's engine knows them all
    for flag, r in zip(flags, routed("0.1.1", *argvs), strict=True):
        assert flag in r["gateway"] and "unrecognized arguments" in r["gateway_error"], r
    with pytest.raises(ConfigError, match="KV-only host tier"):
        build("0.1.1", "l2")


def _interpreter(tmp_path: Path, version: str) -> Path:
    """``engine.python`` for a release: the parser env's python with that release (and the kernel stubs) on its
    path, as a GPU machine's TokenSpeed venv would have it installed."""
    wrapper = tmp_path / f"python-{version}"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{_release_path(version)}" exec "{PYTHON}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


QWEN35 = "model=qwen3.5-122b-a10b"  # a hybrid model both releases serve


@pytest.mark.parametrize(("version", "args", "says"), [
    ("0.1.1", ["+experiment=l2", "engine.max_mamba_cache_size=0", QWEN35], "KV-only host tier"),
    ("0.1.1", ["+experiment=l2", "arms=[branching]", "engine.max_mamba_cache_size=0", QWEN35,
               "engine.extra_args=[--kvstore-ratio,2]"], "KV-only host tier (--kvstore-ratio)"),
    ("0.1.0", ["+experiment=l2", "arms=[lru,branching]", QWEN35], "branch points"),
    # Neither release has a Qwen3-Next model class: its parsers take the id, the server dies at model load.
    ("0.1.1", ["+experiment=smoke", "model=qwen3-next-80b-a3b"], "TokenSpeed 0.1.1 has no such model class"),
    ("0.1.0", ["+experiment=smoke", "model=nemotron-h-8b", "engine.tp=1"], "TokenSpeed 0.1.0 has no such model"),
])
def test_unexpressible_launches_fail_at_plan_time_through_the_cli(tmp_path: Path, version: str, args: list[str],
                                                                  says: str) -> None:
    """The whole CLI, with the release's version and parser read from the interpreter as on a GPU machine:
    exit 2, one line naming the problem, nothing launched."""
    import sys

    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "hybridbench", *args, "engine=tokenspeed",
         f"engine.python={_interpreter(tmp_path, version)}", f"hydra.run.dir={run_dir}"],
        cwd=HERE.parents[1], capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert says in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert not (run_dir / "logs").exists()  # no server was started


# engine.extra_args that parse but run another server than the plan records (TokenSpeed's own routing and start-up
# resolution say what): hybridbench refuses each at plan time, naming the flag.
OTHER_SERVER: list[tuple[str, tuple[str, ...], dict[str, object]]] = [
    ("branching", ("--tp", "8"), {"attn_tp": 8, "world_size": 8}),  # ts serve rewrites --tp; the later one wins
    ("branching", ("--world-size", "8"), {"attn_tp": 1, "attn_dp": 8, "world_size": 8}),
    ("branching", ("--attn-tp-size", "8"), {"error": "ValueError: Cannot specify both --tensor-parallel-size and "
                                                     "--attn-tp-size. --tensor-parallel-size is an alias for "
                                                     "--attn-tp-size."}),
    ("l2", ("--disable-kvstore",), {"kvstore": False}),  # the l2 arm's host tier, off
]


@pytest.mark.parametrize("version", list(TOKENSPEED_VERSIONS))
def test_extra_args_that_would_run_another_server_are_refused(version: str) -> None:
    cases = [c for c in OTHER_SERVER if not (c[0] == "l2" and version == "0.1.1")]  # 0.1.1: l2 on a dense model
    argvs = []
    for arm, extra, _ in cases:
        with pytest.raises(ConfigError, match=rf"^engine\.extra_args has {extra[0]}, which "):
            build(version, arm, hybrid=version == "0.1.0", extra=extra)
        argvs.append([*build(version, arm, hybrid=version == "0.1.0"), *extra])  # as it would have launched
    if version == "0.1.1":  # l2 on 0.1.1 runs a dense model's KV host tier only
        with pytest.raises(ConfigError, match="--disable-kvstore, which the arm"):
            build(version, "l2", hybrid=False, extra=("--disable-kvstore",))
        argvs.append([*build(version, "l2", hybrid=False), "--disable-kvstore"])
        cases.append(OTHER_SERVER[-1])
    for (_, extra, differs), r in zip(cases, routed(version, *argvs), strict=True):
        assert (r["engine_error"], r["gateway_error"]) == ("", ""), (extra, r)  # both parsers take it
        assert {k: r["resolved"][k] for k in differs} == differs, (extra, r)
    # The disabled arm's own switch: the other spelling is exclusive with it (the engine's parser stops).
    with pytest.raises(ConfigError, match="--enable-prefix-caching, which the arm"):
        build(version, "disabled", extra=("--enable-prefix-caching",))
    [r] = routed(version, [*build(version, "disabled"), "--enable-prefix-caching"])
    assert "not allowed with argument" in r["engine_error"]


@pytest.mark.parametrize("version", list(TOKENSPEED_VERSIONS))
def test_a_host_tier_size_in_extra_args_leaves_the_disabled_arm_startable(version: str) -> None:
    """--kvstore-ratio in extra_args sizes the cache-on arms' host tier; on the disabled arm it used to drop
    --disable-kvstore too, and TokenSpeed refuses a KV store without prefix caching at start-up."""
    extra = ("--kvstore-ratio", "4")
    r_off, r_on = routed(version, build(version, "disabled", hybrid=False, extra=extra),
                         build(version, "branching", hybrid=False, extra=extra))
    assert r_off["resolved"]["error"] == "" and not r_off["resolved"]["kvstore"], r_off
    assert not r_off["resolved"]["prefix_caching"]
    assert r_on["resolved"]["kvstore"] and r_on["resolved"]["prefix_caching"], r_on  # a host tier of one's own


@pytest.mark.parametrize("version", list(TOKENSPEED_VERSIONS))
def test_the_context_length_flag_the_plan_reads_is_the_engines(version: str) -> None:
    """hybridbench holds a plan's requests to --max-model-len in engine.extra_args (engines/context_length.py): the
    engine resolves it to its context length, and has no SGLang-style --context-length."""
    cfg = RunCfg(engine=EngineCfg(name="tokenspeed", extra_args=["--max-model-len", "4096"]),
                 model=ModelCfg(context_length=8192))
    ours, sglangs = routed(version, [*build(version, "branching"), "--max-model-len", "4096"],
                           [*build(version, "branching"), "--context-length", "4096"])
    assert (ours["engine_error"], ours["resolved"]["error"]) == ("", ""), ours
    got = served_context(cfg)
    assert got is not None and (got.context, got.key) == (ours["resolved"]["context"],
                                                          "--max-model-len 4096 in engine.extra_args")
    # no such engine flag: `ts serve` hands it to the gateway, which refuses it
    assert "--context-length" in sglangs["gateway"] and "--context-length" not in sglangs["engine"], sglangs
    assert "unrecognized arguments: --context-length" in sglangs["gateway_error"], sglangs
    [planned] = routed(version, build(version, "branching"))
    assert planned["resolved"]["context"] is None  # config.json's: model.context_length


@pytest.mark.parametrize("version", list(TOKENSPEED_VERSIONS))
def test_model_quantization_reaches_the_engine(version: str) -> None:
    """model.quantization=fp8 is what the forecast and the record say: the engine resolves it (it got no flag)."""
    [r] = routed(version, build(version, "branching", quantization="fp8"))
    assert (r["engine_error"], r["resolved"]["error"], r["resolved"]["quantization"]) == ("", "", "fp8"), r


@pytest.mark.parametrize("version", list(TOKENSPEED_VERSIONS))
def test_the_configured_page_is_the_page_tokenspeed_runs(version: str) -> None:
    """engine.page_size=1 passed no page flag, and TokenSpeed then ran 64-token pages while the plan, the pool check
    and the record said 1: it is refused, naming the page the release resolves without the flag (the configured
    command with its page flag taken out), which is conf/engine/tokenspeed.yaml's page, always passed."""
    from hybridbench.preview.compose import compose_run

    page = compose_run(["engine=tokenspeed"]).cfg.engine.page_size
    flag = TOKENSPEED_VERSIONS[version].granularity_flag
    with pytest.raises(ConfigError, match=rf"^engine\.page_size=1 gives ts serve no {flag}: TokenSpeed would run "
                                          rf"its own {TOKENSPEED_DEFAULT_PAGE}-token pages"):
        tokenspeed_command(
            python="/venv/bin/python", model=ModelCfg(hf_id="/models/tiny"), engine=EngineCfg(name="tokenspeed"),
            arm=plan_arm("branching", ArmCfg()), port=30000, control_port=30001, prometheus_port=30002,
            version=TOKENSPEED_VERSIONS[version], help_text=live_help(version))
    configured = build(version, "branching")  # build() sets page_size=64: the flag given
    at = configured.index(flag)
    unflagged = configured[:at] + configured[at + 2:]  # what engine.page_size=1 used to pass
    r_none, r_conf = routed(version, unflagged, configured)
    assert r_none["resolved"]["page"] == r_conf["resolved"]["page"] == page == TOKENSPEED_DEFAULT_PAGE == 64, (
        r_none, r_conf)


@pytest.mark.parametrize("version", list(TOKENSPEED_VERSIONS))
def test_the_served_page_is_read_from_the_line_the_scheduler_writes(version: str, tmp_path: Path) -> None:
    """The run's served_page is the page the release's scheduler logs at start-up: the "Scheduler config" call of its
    own runtime/engine/event_loop.py (0.1.0 %-formats block_size, 0.1.1 f-formats prefix_granularity), rendered
    with a page its flag did not give, is read back by hybridbench.engines.tokenspeed.scheduler_page."""
    import ast

    from hybridbench.engines.tokenspeed import scheduler_page

    source = (release(version) / "tokenspeed" / "runtime" / "engine" / "event_loop.py").read_text()
    [call] = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call) and n.args
              and "Scheduler config" in ast.unparse(n.args[0]) and ast.unparse(n.func) == "logger.info"]
    fmt = call.args[0]
    if isinstance(fmt, ast.JoinedStr):  # f-string: each field rendered as the page, the first one being it
        line = "".join(v.value if isinstance(v, ast.Constant) else "128" for v in fmt.values)
    else:  # %-format: the arguments after it, the first being the page
        assert isinstance(fmt, ast.Constant) and isinstance(fmt.value, str), ast.dump(fmt)
        line = fmt.value % tuple(["128"] * (len(call.args) - 1))
    assert line.startswith("Scheduler config: " + ("block_size=128 " if version == "0.1.0" else
                                                   "prefix_granularity=128 ")), line
    log = tmp_path / "server-branching.log"
    log.write_text(f"[2026-11-30 10:00:00 TP0] {line}\n[2026-11-30 10:00:00 TP1] {line}\n")
    assert scheduler_page(log) == 128


@pytest.mark.parametrize("version", list(TOKENSPEED_VERSIONS))
def test_a_switch_given_a_value_is_refused_and_a_gateway_flags_value_is_not_an_engine_token(version: str) -> None:
    """``ts serve`` hands a switch's following word to the engine with it; the engine's parser takes the word for its
    positional model, and start-up stops on the model given twice (the plan's parser call, ending in --help, never
    got that far). A flag ``ts serve`` gives the gateway takes its value along: that value is no engine token."""
    with pytest.raises(ConfigError, match=r"^engine\.extra_args has 'True' where no flag reads it \(after "
                                          r"--enforce-eager, which takes no value"):
        build(version, "branching", extra=("--enforce-eager", "True"))
    gateway = ("--prometheus-host", "127.0.0.1", "--enforce-eager")
    launched, given = routed(version, [*build(version, "branching"), "--enforce-eager", "True"],
                             build(version, "branching", extra=gateway))
    assert launched["engine"][-2:] == ["--enforce-eager", "True"], launched
    assert "Cannot specify model both as a positional argument and --model" in launched["resolved"]["error"], launched
    assert (given["engine_error"], given["gateway_error"]) == ("", ""), given
