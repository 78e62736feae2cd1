"""README.md is a quickstart page: under the bound, both quickstarts, the CI blocks .ci/run and the main job read."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
MAX_LINES = 250


def block(name: str) -> str:
    m = re.search(rf"<!-- ci:{name}:begin -->\n```\n(.*?)\n```\n<!-- ci:{name}:end -->", README, re.S)
    assert m, f"README.md lost its ci:{name} block (or its markers)"
    return m.group(1)


def test_readme_stays_a_quickstart_page() -> None:
    n = len(README.splitlines())
    assert n <= MAX_LINES, f"README.md has {n} lines (bound {MAX_LINES}): move detail to docs/"


def test_readme_keeps_both_quickstarts_in_order() -> None:
    heads = [h for h in re.findall(r"^## (.+)$", README, re.M)]
    want = ["Engines and versions", "Quickstart on a CPU", "Quickstart on one H100 with your SGLang build",
            "Experiments", "Reading a run", "Documentation", "Developing"]
    assert heads == want
    gpu = README.split("## Quickstart on one H100")[1].split("\n## ")[0]
    for step in ("hybridbench doctor", "hybridbench plan", "+experiment=smoke engine=sglang",
                 "+experiment=seglen engine=sglang", "python -m hybridbench.compare runs/main runs/pr"):
        assert step in gpu


def test_the_ci_blocks_are_the_commands_ci_runs() -> None:
    assert block("main") == ("python3 -m venv .venv && .venv/bin/pip install -q torch==2.13.0 && .venv/bin/pip install "
                             "-q -e . && .venv/bin/python -m hybridbench +experiment=seglen")
    test = block("test")
    # no --no-compile: with PYTHONDONTWRITEBYTECODE set (CI's machines) no import writes a .pyc, so every test's
    # process would compile torch from source (a CI run took 22% more CPU)
    assert "pip install -q torch==2.13.0" in test and "pip install -q -e '.[test]'" in test
    assert "-m pytest -q -m \"not slow or vllm or tokenspeed\"" in test
    # every tier runs, and a missing tier env fails it instead of skipping it
    for tier in ("SGLANG", "VLLM", "TOKENSPEED"):
        assert f"HYBRIDBENCH_REQUIRE_{tier}=1" in test, tier
    assert test.index("tests/vllm_cpu/build_env.sh") < test.index("-m pytest")  # the envs are built first
    extras = re.search(r'test = \[\s*"hybridbench\[([^\]]*)\]"', (ROOT / "pyproject.toml").read_text())
    assert extras and "docs" in extras.group(1).split(","), "the test extra must pull the docs extra (the site build)"


def test_every_relative_link_in_the_readme_resolves() -> None:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if not re.match(r"[a-z]+://", link)]
    assert len(local) > 20
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"
