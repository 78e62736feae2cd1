"""The reference pages and README's experiments table are what docs/gen_reference.py makes of the code now."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "docs" / "gen_reference.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gen_reference"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_generated_docs_match_the_code() -> None:
    stale = [str(p.relative_to(ROOT)) for p, text in gen().generate().items()
             if not p.exists() or p.read_text(encoding="utf-8") != text]
    assert not stale, f"stale generated docs, run `python docs/gen_reference.py`: {stale}"


def test_a_change_in_the_code_shows_as_a_stale_page(monkeypatch: pytest.MonkeyPatch) -> None:
    from hybridbench.checks import registry

    page = ROOT / "docs" / "reference" / "checks.md"
    assert gen().checks_page() == page.read_text(encoding="utf-8")
    monkeypatch.setitem(registry.CHECKS, "new_check", registry.CHECKS["survival"])
    assert gen().checks_page() != page.read_text(encoding="utf-8")  # a new check makes the committed page stale


def test_the_pages_say_what_the_code_says() -> None:
    g = gen()
    arms = g.arms_page()
    assert "`--radix-eviction-policy seglen`" in arms and "refused: " in arms  # flags, and why a part is missing
    config = g.config_page()
    assert "| `engine.mem_fraction_static` | `float` | `0.85` |" in config
    assert "`checks.confidence`" in config and "`workloads.NAME.scale`" in config
    table = g.experiments_table()
    assert table.count("\n") - 1 == len(list((ROOT / "conf" / "experiment").glob("*.yaml")))


def test_an_undocumented_environment_variable_stops_the_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    g = gen()
    monkeypatch.delitem(g.ENV_VARS, "HYBRIDBENCH_PR")
    with pytest.raises(SystemExit, match="HYBRIDBENCH_PR"):
        g.environment_page()


def test_check_mode_fails_on_a_stale_file_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    g = gen()
    stale = tmp_path / "page.md"
    stale.write_text("old\n")
    monkeypatch.setattr(g, "ROOT", tmp_path)
    monkeypatch.setattr(g, "generate", lambda: {stale: "new\n"})
    assert g.main(["--check"]) == 1 and stale.read_text() == "old\n"
    assert g.main([]) == 0 and stale.read_text() == "new\n"
    assert g.main(["--check"]) == 0
