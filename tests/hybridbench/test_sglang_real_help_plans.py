"""Every experiment planned on engine=sglang against real ``python -m sglang.launch_server --help`` texts: the
installed builds of the differential tier (0.5.9, 0.5.16, 0.5.23; skipped when a venv is missing, a failure under
HYBRIDBENCH_REQUIRE_SGLANG=1) and the recorded ones in tests/hybridbench/fixtures. The plan path is the run's own
(hybridbench.prepare): each arm's command line is built, or the plan stops naming the flag the build lacks.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from machine_fakes import fake_sglang

from hybridbench.engines.launchers import installed_help
from hybridbench.engines.sglang_cmd import parse_help, sglang_help_argv
from hybridbench.errors import ConfigError
from hybridbench.prepare import prepare_run
from hybridbench.preview.build import _arms
from hybridbench.preview.compose import compose_run

HOME = Path(os.environ.get("HYBRIDBENCH_SGLANG_HOME", str(Path.home() / ".cache" / "hybridbench")))
ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = sorted(p.stem for p in (ROOT / "conf" / "experiment").glob("*.yaml"))
# Arms whose eviction policy exists only on unmerged PR builds. (marconi's replayer-only arms are never reached: its
# model is refused first, see check.)
UNRELEASED = ("--radix-eviction-policy seglen", "cannot express",
              "SGLang 0.5.9 has no host tier for hybrid models")  # l2 (and kl's, accuracy's) before 0.5.16


def venv_python(version: str) -> Path:
    python = HOME / f"sglang-{version}" / "bin" / "python"
    installed = any((HOME / f"sglang-{version}").glob("lib/python*/site-packages/sglang/launch_server.py"))
    if not (python.exists() and installed):  # a venv still being built has its python before its sglang
        (pytest.fail if os.environ.get("HYBRIDBENCH_REQUIRE_SGLANG") else pytest.skip)(
            f"SGLang {version} venv missing: run bash tests/sglang_oracle/build_env.sh {version}")
    return python


def plan_all(python: Path, help_text: str) -> dict[str, str]:
    """experiment -> "planned" or the refusal; every planned arm's flags checked against ``help_text``."""
    offered = parse_help(help_text)
    outcome: dict[str, str] = {}
    for name in EXPERIMENTS:
        composed = compose_run([f"+experiment={name}", "engine=sglang", "engine.tp=1", f"engine.python={python}"])
        try:
            prepared = prepare_run(composed.cfg, composed.run_dir, composed.resolved)
        except ConfigError as exc:
            outcome[name] = str(exc)
            continue
        arms = _arms(prepared)
        assert set(arms) == set(prepared.plan.arms)
        for arm, a in arms.items():
            argv = a["argv"]
            assert argv[:3] == [str(python), "-m", "sglang.launch_server"], (name, arm)
            flags = [x for x in argv[3:] if x.startswith("--")]
            assert all(offered.offers(f) for f in flags), (name, arm, [f for f in flags if not offered.offers(f)])
            assert ("--disable-radix-cache" in flags) == (arm == "disabled"), (name, arm)
        outcome[name] = "planned"
    return outcome


def check(outcome: dict[str, str], help_text: str) -> None:
    has_seglen = "seglen" in (parse_help(help_text).choices.get("--radix-eviction-policy") or ())
    # marconi's model is a Megatron-LM checkpoint no SGLang build loads: refused for it, before any arm.
    assert outcome.pop("marconi").startswith("model.architecture is empty for model marconi-7b")
    for name, result in outcome.items():
        if result != "planned":  # refused only for an arm this build cannot express, with the flag named
            assert any(u in result for u in UNRELEASED), (name, result)
    assert outcome["smoke"] == outcome["radix"] == outcome["branching"] == "planned"
    assert (outcome["seglen"] == "planned") == has_seglen


@pytest.mark.parametrize("fixture", ["sglang_help_new.txt", "sglang_help_old.txt", "sglang_help_seglen.txt"])
def test_every_experiment_plans_against_recorded_help(tmp_path: Path, fixture: str) -> None:
    text = (Path(__file__).parent / "fixtures" / fixture).read_text()
    check(plan_all(fake_sglang(tmp_path, fixture), text), text)


@pytest.mark.sglang
@pytest.mark.parametrize("version", ["0.5.9", "0.5.16", "0.5.23"])
def test_every_experiment_plans_against_the_installed_builds_help(tmp_path: Path, version: str) -> None:
    python = venv_python(version)
    text = installed_help(sglang_help_argv(str(python)), "sglang", str(python))
    # The build's own --help, read once (importing SGLang takes a minute on a loaded CPU), then served to each
    # experiment's plan by a stand-in interpreter, as fake_sglang serves the recorded texts.
    (tmp_path / "help.txt").write_text(text)
    check(plan_all(fake_sglang(tmp_path, str(tmp_path / "help.txt"), version), text), text)


@pytest.mark.sglang
def test_dp_attention_plans_against_the_installed_builds_help_and_the_forecast_says_what_it_lacks(
        tmp_path: Path) -> None:
    """TP 4 in two DP attention groups (flags as the 0.5.23 build's --help has them): the servers get the flags, the
    counters are read per group, and the simulator's one-cache forecast says it is not that server."""
    from hybridbench.engines.launchers import make_sglang_engine
    from hybridbench.preview.build import build_preview

    python = venv_python("0.5.23")
    text = installed_help(sglang_help_argv(str(python)), "sglang", str(python))
    (tmp_path / "help.txt").write_text(text)
    fake = fake_sglang(tmp_path, str(tmp_path / "help.txt"), "0.5.23")
    extra = "engine.extra_args=[--enable-dp-attention,--dp-size,2]"
    composed = compose_run(["+experiment=radix", "engine=sglang", f"engine.python={fake}", extra])
    preview = build_preview(composed, max_requests=20)
    for arm in preview.arms.values():
        assert arm["argv"][-3:] == ["--enable-dp-attention", "--dp-size", "2"]
    ranks = make_sglang_engine().spec.metrics_ranks
    assert ranks is not None and ranks(composed.cfg) == 2
    assert [w for w in preview.warnings if "dp-attention" in w] == [
        "forecast: one cache over engine.tp=4 GPUs; with --enable-dp-attention each of the 2 groups has its own pools "
        "and requests, which the simulator does not model: read its figures as a single-cache server's"]
    plain = build_preview(compose_run(["+experiment=radix", "engine=sglang", f"engine.python={fake}"]), max_requests=20)
    assert not [w for w in plain.warnings if "dp-attention" in w]
    with pytest.raises(ConfigError, match=r"3 data-parallel attention groups, which do not divide engine\.tp=4"):
        build_preview(compose_run(["+experiment=radix", "engine=sglang", f"engine.python={fake}",
                                   "engine.extra_args=[--enable-dp-attention,--dp-size,3]"]), forecast=False)
