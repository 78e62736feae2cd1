"""Output paths of compare, dashboard and results checked before any work: an empty -o/--json (which would be
the current directory), a directory where a file goes and a folder that cannot be made are one line naming the
flag, exit 2, and nothing written anywhere."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from hybridbench.compare.__main__ import main as compare_main
from hybridbench.dashboard.cli import main as dashboard_main
from hybridbench.results.cli import main as results_main

Main = Callable[[Sequence[str]], int]
# The runs and roots do not exist: a refusal that names them instead came after the work had started.
CASES: list[tuple[Main, list[str], str, str]] = [
    (compare_main, ["no-run-a", "no-run-b", "-o", ""], "-o", "an empty path"),
    (compare_main, ["no-run-a", "no-run-b", "-o", "afile/deep"], "-o", "afile is not a directory"),
    (compare_main, ["no-run-a", "no-run-b", "-o", "cmp"], "-o", "cmp/compare.md: is a directory"),
    (dashboard_main, ["no-root", "-o", ""], "-o", "an empty path"),
    (dashboard_main, ["no-root", "-o", "afile"], "-o", "afile: exists and is not a directory"),
    (results_main, ["export", "no-root", "-o", ""], "-o", "an empty path"),
    (results_main, ["export", "no-root", "-o", "afile/x"], "-o", "afile is not a directory"),
    (results_main, ["history", "no-root", "--json", ""], "--json", "an empty path"),
    (results_main, ["history", "no-root", "--json", "adir"], "--json", "adir: is a directory"),
    (results_main, ["history", "no-root", "--json", "nodir/h.json"], "--json", "does not exist"),
]


@pytest.mark.parametrize(("main", "argv", "flag", "says"), CASES)
def test_a_bad_output_path_is_one_line_naming_the_flag_before_any_work(
        main: Main, argv: list[str], flag: str, says: str, *, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("")
    (tmp_path / "cmp" / "compare.md").mkdir(parents=True)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {flag}: ") and says in err and err.count("\n") == 1, err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_a_folder_output_is_made_with_its_parents(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "root").mkdir()
    assert dashboard_main([str(tmp_path / "root"), "-o", str(tmp_path / "new" / "deep" / "site")]) == 0
    assert (tmp_path / "new" / "deep" / "site" / "index.html").is_file()


def test_history_json_through_a_symlink_writes_its_target_and_keeps_the_link(results_root: Path,
                                                                             tmp_path: Path) -> None:
    (tmp_path / "target.json").write_text("old")
    (tmp_path / "link").symlink_to("target.json")
    results_main(["history", str(results_root), "--experiment", "smoke", "--json", str(tmp_path / "link")])
    assert (tmp_path / "link").is_symlink()
    assert json.loads((tmp_path / "target.json").read_text())["series"]


@pytest.mark.parametrize(("main", "argv", "says"), [
    (results_main, [], "error: the following arguments are required: command"),
    (results_main, ["ls"], "error: the following arguments are required: root"),
    (results_main, ["show", "r", "--bogus"], "error: unrecognized arguments: --bogus"),
    (results_main, ["ls", "r", "--since"], "error: argument --since: expected one argument"),
    (dashboard_main, ["root"], "error: the following arguments are required: -o/--out"),
    (dashboard_main, ["root", "-o"], "error: argument -o/--out: expected one argument"),
])
def test_a_usage_error_is_one_line_naming_the_flag(main: Main, argv: list[str], says: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # argparse's own refusal was two lines at least: a usage block (wrapped over several lines), then the error
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines() == [says]
