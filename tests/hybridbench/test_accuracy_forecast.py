"""The accuracy probe's passes in the plan's forecast: on a GPU they, not the warm-up trials, are most of the run, and
a pass past checks.accuracy_timeout_s leaves its arm's accuracy inconclusive. Before, the forecast of
+experiment=accuracy said 1.9 s in total, whatever the question set."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from machine_fakes import fake_sglang
from omegaconf import OmegaConf

from hybridbench.checks.accuracy import accuracy_rows
from hybridbench.config.schema import RunCfg
from hybridbench.config.store import register
from hybridbench.errors import ConfigError
from hybridbench.preview.__main__ import main as plan_main
from hybridbench.preview.accuracy_forecast import (
    DECODE_STEPS,
    _sample_size,
    forecast_accuracy,
    pass_timeout_warnings,
    with_accuracy,
)
from hybridbench.preview.build import build_preview
from hybridbench.preview.compose import compose_run
from hybridbench.preview.forecast_warnings import forecast_warnings
from hybridbench.preview.render import duration, render_text
from hybridbench.probes.accuracy_data import CHARS_PER_TOKEN, dataset_shapes
from hybridbench.records.accuracy import AccuracySample
from hybridbench.report.forecast import forecast_section

CONF = Path(__file__).resolve().parents[2] / "conf"


def question_set(folder: Path, questions: int, chars: int = 240, shots: int = 4) -> Path:
    """A gsm8k folder in evalscope's local format: ``questions`` of ``chars`` characters, ``shots`` train rows."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test.jsonl").write_text("".join(json.dumps({"question": "q" * chars, "answer": "#### 1"}) + "\n"
                                               for _ in range(questions)))
    (folder / "train.jsonl").write_text("".join(json.dumps({"question": "s" * 200, "answer": "a" * 250}) + "\n"
                                                for _ in range(shots)))
    return folder


def gpu_cfg(gsm8k: Path, *overrides: str) -> RunCfg:
    register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = compose(config_name="config", overrides=["+experiment=accuracy", "engine=sglang",
                                                       f"+checks.accuracy_datasets.gsm8k={gsm8k}", *overrides])
    run = OmegaConf.to_object(cfg)
    assert isinstance(run, RunCfg)
    return run


def test_a_set_is_read_as_evalscope_sends_it(tmp_path: Path) -> None:
    cfg = gpu_cfg(question_set(tmp_path / "g", 30, chars=300))
    (shape,) = dataset_shapes(cfg)
    assert (shape.name, shape.questions) == ("gsm8k", 30)
    assert shape.shared_tokens == round(4 * 450 / CHARS_PER_TOKEN)  # the four examples every prompt starts with
    assert 300 / CHARS_PER_TOKEN < shape.question_tokens < 600 / CHARS_PER_TOKEN
    cfg.checks.accuracy_limit = 7
    assert dataset_shapes(cfg)[0].questions == 7


@pytest.mark.parametrize(("line", "message"), [
    ("{not json", r"test\.jsonl:3: not a JSON line$"),
    ('{"problem": "x"}', r"test\.jsonl:3: no 'question' text"),
    ('["a list"]', r"test\.jsonl:3: no 'question' text"),
])
def test_a_line_evalscope_could_not_read_is_refused_by_file_and_line(tmp_path: Path, line: str, message: str) -> None:
    folder = question_set(tmp_path / "g", 4)
    rows = (folder / "test.jsonl").read_text().splitlines()
    rows[2] = line
    (folder / "test.jsonl").write_text("\n".join(rows) + "\n")
    with pytest.raises(ConfigError, match=message):
        dataset_shapes(gpu_cfg(folder))


def test_gsm8k_without_its_examples_is_refused(tmp_path: Path) -> None:
    folder = question_set(tmp_path / "g", 4, shots=2)
    with pytest.raises(ConfigError, match=r"train\.jsonl: 2 rows; evalscope takes 4 examples from it"):
        dataset_shapes(gpu_cfg(folder))
    (folder / "train.jsonl").unlink()
    with pytest.raises(ConfigError, match=r"train\.jsonl does not exist"):
        dataset_shapes(gpu_cfg(folder))


def test_the_plan_refuses_a_bad_question_line_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = question_set(tmp_path / "g", 4)
    (folder / "test.jsonl").write_text('{"question": "fine"}\n{"question": 3}\n')
    code = plan_main(["+experiment=accuracy", "engine=sglang", f"engine.python={fake_sglang(tmp_path)}",
                      f"checks.accuracy_python={sys.executable}", f"+checks.accuracy_datasets.gsm8k={folder}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "test.jsonl:2: no 'question' text" in err, err


def test_every_arm_has_its_passes_and_their_time_follows_the_load(tmp_path: Path) -> None:
    every = forecast_accuracy(gpu_cfg(question_set(tmp_path / "e", 16), "checks.accuracy_max_tokens=64"), {})
    assert [(p.arm, p.pass_) for p in every.passes] == [
        ("disabled", "cold"), ("lru", "cold"), ("lru", "warm"), ("branching", "cold"), ("branching", "warm"),
        ("l2", "cold"), ("l2", "warm")]  # the cache-off arm answers once; a cache-on arm again after its cold pass
    assert every.total_s == pytest.approx(sum(p.wall_s for p in every.passes))

    def one_pass(questions: int, *overrides: str) -> float:
        folder = question_set(tmp_path / f"q{questions}", questions)
        (only,) = forecast_accuracy(gpu_cfg(folder, "arms=[disabled]", "checks.accuracy_batch_size=8",
                                            "checks.accuracy_max_tokens=256", *overrides), {}).passes
        return only.wall_s

    base = one_pass(160)
    assert 1.8 < one_pass(320) / base < 2.2
    assert one_pass(160, "checks.accuracy_batch_size=64") < base / 2  # more in flight: decode steps shared
    assert one_pass(160, "checks.accuracy_max_tokens=64") < base / 2.5  # every answer runs to max_tokens


def test_a_pass_past_the_timeout_is_warned_of_in_the_plan(tmp_path: Path) -> None:
    folder = question_set(tmp_path / "g", 400)
    common = ["+experiment=accuracy", "engine=sglang", f"engine.python={fake_sglang(tmp_path)}", "arms=[disabled,lru]",
              f"checks.accuracy_python={sys.executable}", f"+checks.accuracy_datasets.gsm8k={folder}",
              "checks.accuracy_batch_size=4", "checks.accuracy_max_tokens=256"]
    slow = build_preview(compose_run([*common, "checks.accuracy_timeout_s=60"]))
    late = [w for w in slow.warnings if "accuracy probe" in w]
    assert len(late) == 1 and "3 of the accuracy probe's 3 passes (disabled cold, lru cold, lru warm)" in late[0], late
    assert "checks.accuracy_timeout_s=60" in late[0] and "checks.accuracy_max_tokens=256" in late[0]
    assert slow.forecast is not None
    passes = slow.forecast["accuracy"]["total_s"]
    assert passes > 3 * 60
    lines = render_text(slow).split("\n")
    assert any(ln.startswith("  accuracy passes (evalscope after each arm: gsm8k 400 questions; 4 in flight")
               for ln in lines), lines
    head = next(ln for ln in lines if ln.startswith("forecast"))
    assert f"{duration(passes)} of accuracy passes" in head and duration(slow.forecast["total_s"] + passes) in head
    assert pass_timeout_warnings(slow.forecast["accuracy"] | {"timeout_s": passes}) == []


def test_warnings_name_only_the_late_passes() -> None:
    fc = {"max_tokens": 1024, "timeout_s": 600.0, "passes": [
        {"arm": "lru", "pass_": "cold", "wall_s": 700.0}, {"arm": "lru", "pass_": "warm", "wall_s": 500.0}]}
    (line,) = pass_timeout_warnings(fc)
    assert "1 of the accuracy probe's 2 passes (lru cold) take up to 700 s" in line
    fc["timeout_s"] = 800.0
    assert pass_timeout_warnings(fc) == []


def test_a_gpu_run_keeps_its_passes_beside_its_trials_forecast(tmp_path: Path) -> None:
    """What the run writes as forecast.json (hybridbench/app.py): the trials' forecast, and the passes when asked."""
    cfg = gpu_cfg(question_set(tmp_path / "g", 8), "arms=[disabled]", "checks.accuracy_max_tokens=16")
    trials = {"trials": [], "total_s": 1.0}
    kept = with_accuracy(trials, cfg, {})
    assert [(p["arm"], p["pass_"]) for p in kept["accuracy"]["passes"]] == [("disabled", "cold")]
    assert with_accuracy({"none": "no forecast on a CPU"}, cfg, {}) == {"none": "no forecast on a CPU"}
    cfg.checks.enabled = ["survival"]
    assert with_accuracy(trials, cfg, {}) == trials
    cfg.checks.enabled, cfg.model.name = ["accuracy"], "no-such-model"
    assert "none" in with_accuracy(trials, cfg, {})["accuracy"]  # a model the simulator lacks: said, not raised


def test_the_report_sets_each_pass_beside_its_forecast() -> None:
    """A pass that took far longer than its bound (every answer at max_tokens) is a server the model does not know."""
    ident = {"trial_id": "t", "workload": "chat", "repeat": 0, "mode": "paired"}
    samples = [AccuracySample(arm=arm, pass_=p, **ident, dataset="gsm8k", index=0, correct=True)
               for arm, p in (("disabled", "cold"), ("lru", "cold"))]
    samples += [AccuracySample(arm="disabled", pass_="cold", **ident, cached_tokens=0, prompt_tokens=9, wall_s=412.5),
                AccuracySample(arm="lru", pass_="cold", **ident, error="evalscope timed out after 1800 s",
                               wall_s=1800.2)]
    fc = {"trials": [{"arm": "lru", "workload": "chat", "wall_s": 1.0, "requests": 6, "simulated": 6}],
          "accuracy": {"max_tokens": 1024, "batch_size": 64, "timeout_s": 1800.0, "passes": [
              {"arm": "disabled", "pass_": "cold", "wall_s": 511.0}, {"arm": "lru", "pass_": "cold", "wall_s": 504.0},
              {"arm": "lru", "pass_": "warm", "wall_s": 498.0}]}}
    lines = forecast_section({"forecast": fc, "accuracy": accuracy_rows(samples, ["disabled", "lru"])})
    assert "| disabled | cold | 511.0 / 412.5 |" in lines
    assert "| lru | cold | 504.0 / 1,800.2 |" in lines  # cut off: the measured time says so beside the bound
    assert "| lru | warm | 498.0 / n/a |" in lines  # never ran
    assert not any("Accuracy passes" in ln for ln in forecast_section({"forecast": {**fc, "accuracy": None}}))


def test_plan_and_run_warn_alike(tmp_path: Path) -> None:
    """The run prints forecast_warnings of its forecast.json as it starts, as `hybridbench plan` lists them."""
    cfg = gpu_cfg(question_set(tmp_path / "g", 8))
    assert forecast_warnings({"none": "engine.gpu=cpu"}, cfg) == []
    fc = {"trials": [{"arm": "lru", "workload": "w", "failed": 2, "simulated": 9, "slowest_s": 900.0}],
          "accuracy": {"none": "no such model"}}
    said = forecast_warnings(fc, cfg)
    assert said[0].startswith("forecast: 2 of 9 simulated requests of w failed on arm lru")
    assert "past engine.request_timeout_s=600" in said[1]
    assert said[2] == "forecast: accuracy passes none (no such model)"
    fc["accuracy"] = {"max_tokens": 8, "timeout_s": 10.0, "passes": [{"arm": "lru", "pass_": "cold", "wall_s": 11.0}]}
    assert "1 of the accuracy probe's 1 passes (lru cold)" in forecast_warnings(fc, cfg)[2]


def test_a_pass_whose_questions_the_server_refused_is_warned_of_not_bounded(tmp_path: Path) -> None:
    """Review: with answers past a pool the config fixes, every simulated question failed at once and each pass was
    forecast at 0.4 s "an upper bound", warned of nowhere."""
    py = fake_sglang(tmp_path)
    plan = build_preview(compose_run(["+experiment=accuracy", "engine=sglang", f"engine.python={py}",
                                      f"checks.accuracy_python={sys.executable}", "arms=[disabled,lru]",
                                      f"+checks.accuracy_datasets.gsm8k={question_set(tmp_path / 'g', 8)}",
                                      "engine.kv_tokens=1500", "checks.accuracy_max_tokens=4096"]))
    assert plan.forecast is not None and all(p["failed"] for p in plan.forecast["accuracy"]["passes"])
    refused = [w for w in plan.warnings if "simulated questions of the accuracy probe's passes" in w]
    assert len(refused) == 1 and "(disabled cold, lru cold, lru warm) failed" in refused[0], plan.warnings


def test_the_plan_reads_a_set_as_evalscope_does(tmp_path: Path) -> None:
    """Review: evalscope 1.14.1 reads the whole file before its limit, as utf-8-sig (``jsonl_to_list``). A BOM was
    refused at plan time ("not a JSON line") though evalscope reads it; a bad line past checks.accuracy_limit (or past
    train.jsonl's fourth row) passed the plan, and then every evalscope pass failed on it."""
    folder = question_set(tmp_path / "g", 6)
    (folder / "test.jsonl").write_bytes(b"\xef\xbb\xbf" + (folder / "test.jsonl").read_bytes())
    assert dataset_shapes(gpu_cfg(folder))[0].questions == 6
    with (folder / "test.jsonl").open("a") as fh:
        fh.write("{not json\n")
    with pytest.raises(ConfigError, match=r"test\.jsonl:7: not a JSON line$"):
        dataset_shapes(gpu_cfg(folder, "checks.accuracy_limit=2"))
    folder = question_set(tmp_path / "h", 6, shots=6)
    with (folder / "train.jsonl").open("a") as fh:
        fh.write("[1]\n")
    with pytest.raises(ConfigError, match=r"train\.jsonl:7: no 'question' text"):
        dataset_shapes(gpu_cfg(folder))


def test_a_gsm8k_question_without_its_answer_is_refused(tmp_path: Path) -> None:
    """Review: evalscope's gsm8k adapter splits every asked row's answer (KeyError without one), so a test.jsonl of
    questions alone passed the plan and failed every pass."""
    folder = question_set(tmp_path / "g", 3)
    (folder / "test.jsonl").write_text('{"question": "a", "answer": "#### 1"}\n{"question": "b"}\n')
    with pytest.raises(ConfigError, match=r"test\.jsonl:2: no 'answer' text"):
        dataset_shapes(gpu_cfg(folder))
    assert dataset_shapes(gpu_cfg(folder, "checks.accuracy_limit=1"))[0].questions == 1  # not asked: not read


def test_the_forecast_simulates_a_bounded_sample_or_says_it_cannot(tmp_path: Path) -> None:
    """Review: at 1 in flight and 32,768 tokens an answer, 400 sampled questions did not end in five minutes (the
    run builds the same forecast before its first server). The sample now fits a token and step budget, and a loop
    whose smallest sample is past it is not forecast, said in one line."""
    folder = question_set(tmp_path / "g", 1319)
    shapes = dataset_shapes(gpu_cfg(folder))
    assert _sample_size(gpu_cfg(folder), shapes, 400) == 400  # the GPU sizing: 64 in flight, 1,024 tokens
    long = gpu_cfg(folder, "checks.accuracy_batch_size=1", "checks.accuracy_max_tokens=32768")
    assert _sample_size(long, shapes, 400) * 32768 <= DECODE_STEPS  # one in flight: every token a decode step
    wide = gpu_cfg(folder, "checks.accuracy_batch_size=256", "checks.accuracy_max_tokens=8192")
    with pytest.raises(ConfigError, match=r"smallest sample \(512 questions in a loop of 256, up to 8,192 tokens"):
        forecast_accuracy(wide, {})
    assert "none" in with_accuracy({"trials": []}, wide, {})["accuracy"]
