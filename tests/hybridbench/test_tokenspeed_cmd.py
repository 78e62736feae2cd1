"""``ts serve`` command lines per arm and per TokenSpeed version, checked against each version's own engine parser
(the fixtures are ``ServerArgs.add_cli_args``'s help, printed from the 0.1.0 and 0.1.1 wheels with the GPU
kernel packages stubbed; tests/tokenspeed re-derives them from the installed packages)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybridbench.config.schema import ArmCfg, EngineCfg, ModelCfg
from hybridbench.engines.sglang_cmd import parse_help
from hybridbench.engines.tokenspeed_cmd import TOKENSPEED_VERSIONS, tokenspeed_command, tokenspeed_version
from hybridbench.errors import ConfigError
from hybridbench.plan.arms import plan_arm

FIXTURES = Path(__file__).parent / "fixtures"
HELP = {v: (FIXTURES / f"tokenspeed_help_{v.replace('.', '_')}.txt").read_text() for v in TOKENSPEED_VERSIONS}


def command(arm: str, version: str = "0.1.0", *, hybrid: bool = True, extra: tuple[str, ...] = (),
            **engine: object) -> list[str]:
    engine = {"page_size": 64, **engine}  # conf/engine/tokenspeed.yaml's page (a page <= 1 is refused)
    eng = EngineCfg(name="tokenspeed", python="/venv/bin/python", extra_args=list(extra), **engine)  # type: ignore[arg-type]
    return tokenspeed_command(python="/venv/bin/python", model=ModelCfg(hf_id="/models/tiny", hybrid=hybrid),
                              engine=eng, arm=plan_arm(arm, ArmCfg()), port=30000, control_port=30001,
                              prometheus_port=30002,
                              version=TOKENSPEED_VERSIONS[version], help_text=HELP[version])


def value(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


def test_fixtures_are_the_two_parsers() -> None:
    old, new = parse_help(HELP["0.1.0"]), parse_help(HELP["0.1.1"])
    assert old.offers("--enable-mamba-l2") and not new.offers("--enable-mamba-l2")
    assert old.offers("--no-enable-prefix-caching") and new.offers("--disable-prefix-caching")
    assert new.offers("--prefix-granularity") and not old.offers("--prefix-granularity")


@pytest.mark.parametrize("version", ["0.1.0", "0.1.1"])
def test_launch_line_pins_every_port_to_loopback(version: str) -> None:
    cmd = command("branching", version)
    assert cmd[:6] == ["/venv/bin/python", "-m", "tokenspeed.cli", "serve", "--model", "/models/tiny"]
    assert (value(cmd, "--host"), value(cmd, "--port")) == ("127.0.0.1", "30000")
    assert (value(cmd, "--control-port"), value(cmd, "--prometheus-port")) == ("30001", "30002")
    assert value(cmd, "--prometheus-host") == "127.0.0.1"  # the gateway's exporter binds 0.0.0.0 by default
    assert "--disable-kvstore" in cmd  # the KV host tier is on by default: device-only needs it off


def test_disabled_arm_per_version() -> None:
    assert {"--no-enable-prefix-caching", "--disable-kvstore"} <= set(command("disabled", "0.1.0"))
    new = command("disabled", "0.1.1")
    assert {"--disable-prefix-caching", "--disable-kvstore"} <= set(new) and "--no-enable-prefix-caching" not in new


def test_l2_on_0_1_0_turns_on_the_mamba_host_tier_with_the_kv_tier() -> None:
    cmd = command("l2", "0.1.0")
    assert value(cmd, "--kvstore-ratio") == value(cmd, "--mamba-l2-ratio") == "2.0"
    assert "--enable-mamba-l2" in cmd and "--disable-kvstore" not in cmd


def test_l2_on_0_1_1_refused_for_a_hybrid_model_allowed_for_a_dense_one() -> None:
    with pytest.raises(ConfigError, match=r"KV-only host tier.*0\.1\.0"):
        command("l2", "0.1.1")
    dense = command("l2", "0.1.1", hybrid=False)
    assert "--kvstore-ratio" in dense and "--enable-mamba-l2" not in dense


@pytest.mark.parametrize(("arm", "match"), [("lru", "branch points"), ("seglen", "seglen eviction policy"),
                                            ("branching+seglen", "seglen"), ("nonsense", "nonsense")])
def test_arms_tokenspeed_cannot_express_are_refused(arm: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        command(arm)


@pytest.mark.parametrize("extra", [("--kvstore-ratio", "4"), ("--kvstore-size=64",)])
def test_extra_args_asking_for_a_kv_only_host_tier_on_a_hybrid_model_are_flagged(extra: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError, match=r"KV-only host tier \(--kvstore-"):
        command("branching", "0.1.1", extra=extra)
    with pytest.raises(ConfigError, match="KV-only host tier"):
        command("branching", "0.1.0", extra=extra)
    # With the Mamba host tier (0.1.0), or on a dense model, the same arguments are a fine launch.
    both = command("branching", "0.1.0", extra=(*extra, "--enable-mamba-l2"))
    assert "--enable-mamba-l2" in both and "--disable-kvstore" not in both
    assert command("branching", "0.1.1", hybrid=False, extra=extra)[-len(extra):] == list(extra)


def test_flags_a_version_lacks_fail_at_plan_time_naming_them() -> None:
    # The seed's launch line: three of its flags are gone in 0.1.1 (the gateway would reject them after loading).
    with pytest.raises(ConfigError, match=r"--enable-cache-report.*TokenSpeed 0\.1\.1"):
        command("branching", "0.1.1", extra=("--enable-cache-report",))
    assert "--enable-cache-report" in command("branching", "0.1.0", extra=("--enable-cache-report",))
    with pytest.raises(ConfigError, match="max_mamba_cache_size"):
        command("branching", "0.1.1", max_mamba_cache_size=64)
    assert value(command("branching", "0.1.0", max_mamba_cache_size=64), "--max-mamba-cache-size") == "64"


def test_page_size_flag_per_version_and_extra_args_win_only_where_no_key_sets_them() -> None:
    assert value(command("branching", "0.1.0", page_size=64), "--block-size") == "64"
    assert value(command("branching", "0.1.1", page_size=64), "--prefix-granularity") == "64"
    cmd = command("l2", "0.1.0", extra=("--mamba-l2-ratio", "0.5"))  # a host tier of one's own size
    assert cmd.count("--mamba-l2-ratio") == 1 and cmd[-2:] == ["--mamba-l2-ratio", "0.5"]
    # A flag built from a key: given in extra_args it ran while the plan, the pool check and the record kept the key's.
    keyed = {"--chunked-prefill-size": "engine.chunked_prefill_size", "--max-total-tokens": "engine.kv_tokens",
             "--prefix-granularity": "engine.page_size", "--gpu-memory-utilization": "engine.mem_fraction_static"}
    for flag, key in keyed.items():
        with pytest.raises(ConfigError, match=rf"^engine.extra_args has {flag}, which {key} sets; set that key"):
            command("branching", "0.1.1", extra=(flag, "256"))
    with pytest.raises(ConfigError, match=r"--data-parallel-size, which serves several copies of the model on engine"):
        command("branching", "0.1.1", extra=("--data-parallel-size", "2"))
    with pytest.raises(ConfigError, match=r"--pipeline-parallel-size, which the harness \(it plans, checks"):
        command("branching", "0.1.1", extra=("--pipeline-parallel-size", "2"))


def test_versions_are_matched_exactly() -> None:
    assert tokenspeed_version("0.1.1").version == "0.1.1"
    assert tokenspeed_version("0.1.0.post1").version == "0.1.0"
    with pytest.raises(ConfigError, match=r"0\.1\.2 is not one hybridbench knows"):
        tokenspeed_version("0.1.2")
    with pytest.raises(ConfigError, match="unknown"):
        tokenspeed_version("")


def test_flush_is_cold_only_when_tokenspeed_says_success() -> None:
    """0.1.1's /flush_cache answers 200 with success false while requests are in flight: retried, never taken as
    cold; an endpoint that never says true is a failed flush, not a cold cache."""
    import http.server
    import threading

    from hybridbench.engines.process import ServerProcess
    from hybridbench.engines.tokenspeed import TokenSpeedEngine

    answers: list[bytes] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = answers.pop(0) if answers else b'{"success": false, "message": "requests in flight"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        server = ServerProcess(["true"], Path("/nonexistent"), f"http://127.0.0.1:{httpd.server_address[1]}")
        engine = TokenSpeedEngine()
        answers.extend([b'{"success": false}', b'{"success": false}', b'{"success": true}'])
        assert engine._flush(server, timeout_s=10) == "flushed" and not answers
        assert engine._flush(server, timeout_s=1) == "failed"
        answers.append(b'{"success": "yes"}')  # only a JSON true counts
        assert engine._flush(server, timeout_s=1) == "failed"
    finally:
        httpd.shutdown()


@pytest.mark.parametrize("version", ["0.1.0", "0.1.1"])
def test_mamba_ssm_dtype_takes_the_choices_ts_serve_lists(version: str) -> None:
    def with_dtype(dtype: str) -> list[str]:
        return tokenspeed_command(python="/venv/bin/python",
                                  model=ModelCfg(hf_id="/models/tiny", mamba_ssm_dtype=dtype),
                                  engine=EngineCfg(name="tokenspeed", page_size=64),
                                  arm=plan_arm("branching", ArmCfg()),
                                  port=30000, control_port=30001, prometheus_port=30002,
                                  version=TOKENSPEED_VERSIONS[version], help_text=HELP[version])

    assert value(with_dtype("bfloat16"), "--mamba-ssm-dtype") == "bfloat16"
    assert "--mamba-ssm-dtype" not in command("branching", version)
    with pytest.raises(ConfigError, match=r"--mamba-ssm-dtype float16, which this TokenSpeed .* \(it lists bfloat16, "
                                          r"float32\)"):
        with_dtype("float16")  # SGLang offers it; TokenSpeed's parser does not


@pytest.mark.parametrize(("version", "extra", "owner"), [
    ("0.1.0", ("--tensor-parallel-size", "8"), "engine.tp"), ("0.1.1", ("--control-port", "9"), "the harness"),
    ("0.1.0", ("--port", "9"), "the harness"),
    # ts serve rewrites --tp to --tensor-parallel-size, and the later one wins: TP 8 served, TP 4 recorded
    ("0.1.0", ("--tp", "8"), "engine.tp"), ("0.1.1", ("--tp=8",), "engine.tp"),
    ("0.1.1", ("--attn-tp-size", "4"), "engine.tp"),  # the alias ServerArgs refuses beside it, at start-up
    ("0.1.0", ("--world-size", "8"), r"the harness \(it plans, checks"),  # TP 4 in a world of 8: 8 GPUs
    ("0.1.1", ("--nprocs-per-node", "8"), r"the harness \(it plans, checks"),
    ("0.1.0", ("--enable-prefix-caching",), "the arm"),  # exclusive with the disabled arm's flag
    ("0.1.1", ("--disable-kvstore",), "the arm"),  # the l2 arm's host tier, off
])
def test_extra_args_may_not_say_which_server(version: str, extra: tuple[str, ...], owner: str) -> None:
    with pytest.raises(ConfigError, match=rf"^engine\.extra_args has {extra[0].split('=')[0]}, which {owner}"):
        command("branching", version, extra=extra)


@pytest.mark.parametrize("version", ["0.1.0", "0.1.1"])
def test_a_host_tier_size_in_extra_args_keeps_the_disabled_arm_without_a_kv_store(version: str) -> None:
    """TokenSpeed refuses a KV store without prefix caching at start-up: the disabled arm keeps --disable-kvstore
    when extra_args size the other arms' host tier (tests/tokenspeed runs both through ServerArgs)."""
    off = command("disabled", version, hybrid=False, extra=("--kvstore-ratio", "4"))
    assert "--disable-kvstore" in off and off[-2:] == ["--kvstore-ratio", "4"]
    assert "--disable-kvstore" not in command("branching", version, hybrid=False, extra=("--kvstore-ratio", "4"))


@pytest.mark.parametrize("version", ["0.1.0", "0.1.1"])
def test_model_quantization_reaches_ts_serve(version: str) -> None:
    """SGLang got --quantization from model.quantization and TokenSpeed did not: bf16 served, fp8 recorded."""
    def with_quant(name: str) -> list[str]:
        return tokenspeed_command(python="/venv/bin/python", model=ModelCfg(hf_id="/models/tiny", quantization=name),
                                  engine=EngineCfg(name="tokenspeed", page_size=64),
                                  arm=plan_arm("branching", ArmCfg()),
                                  port=30000, control_port=30001, prometheus_port=30002,
                                  version=TOKENSPEED_VERSIONS[version], help_text=HELP[version])

    assert value(with_quant("fp8"), "--quantization") == "fp8"
    assert "--quantization" not in command("branching", version)
    with pytest.raises(ConfigError, match=r"--quantization awq, which this TokenSpeed .* \(it lists"):
        with_quant("awq")  # an SGLang name ts serve does not list: refused at plan time, not at start-up
    with pytest.raises(ConfigError, match=r"^engine\.extra_args has --quantization, which model\.quantization"):
        command("branching", version, extra=("--quantization", "fp8"))


def test_engine_tokenspeed_plans_the_page_tokenspeed_runs() -> None:
    """Without a page flag both releases run 64-token pages (tests/tokenspeed resolves it): engine=tokenspeed's page
    is that one, given explicitly, not the 1 the plan, the pool check and the record used to say."""
    from hybridbench.preview.compose import compose_run

    cfg = compose_run(["engine=tokenspeed"]).cfg
    assert cfg.engine.page_size == 64
    for version, flag in (("0.1.0", "--block-size"), ("0.1.1", "--prefix-granularity")):
        assert value(command("branching", version, page_size=cfg.engine.page_size), flag) == "64"


@pytest.mark.parametrize(("version", "flag"), [("0.1.0", "--block-size"), ("0.1.1", "--prefix-granularity")])
def test_a_page_that_passes_no_page_flag_is_refused(version: str, flag: str) -> None:
    """engine.page_size <= 1 gave ts serve no page flag: TokenSpeed ran its own 64-token pages (tests/tokenspeed
    resolves it) while the plan, the forecast and the run's config said 1. One line naming the key, at plan time."""
    with pytest.raises(ConfigError, match=rf"^engine\.page_size=1 gives ts serve no {flag}: TokenSpeed would run "
                                          r"its own 64-token pages while the plan and the record said 1; set "
                                          r"engine\.page_size=64 \(conf/engine/tokenspeed\.yaml's\) or another page "
                                          r"> 1$") as err:
        command("branching", version, page_size=1)
    assert "\n" not in str(err.value)
    assert value(command("branching", version, page_size=2), flag) == "2"  # every page > 1 is passed as asked
