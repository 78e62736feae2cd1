"""The hybridbench commands the docs show: every `python -m hybridbench...` and `hybridbench ...` line of a fenced
code block in README.md and docs/, and how each is checked (composed against the typed schema, or parsed)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUBCOMMANDS = {"run": "hybridbench", "plan": "hybridbench.preview", "doctor": "hybridbench.doctor",
               "compare": "hybridbench.compare", "rescore": "hybridbench.rescore", "results": "hybridbench.results",
               "dashboard": "hybridbench.dashboard"}
_START = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S+\s+)*(?:\S*python3?\s+-m\s+(hybridbench[\w.]*)|hybridbench)(?:\s|$)")


@dataclass(frozen=True)
class Command:
    where: str  # file:line
    module: str  # hybridbench, hybridbench.compare, ...
    args: tuple[str, ...]

    @property
    def args_text(self) -> str:
        return " ".join(self.args)

    @property
    def id(self) -> str:
        return f"{self.where}: {self.module} {' '.join(self.args)}"[:160]


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _blocks(text: str) -> list[tuple[int, list[str]]]:
    """(first line number, lines) of every fenced code block, continuation lines joined."""
    out, inside, start, lines = [], False, 0, []
    for n, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            if inside:
                out.append((start, lines))
            inside, start, lines = not inside, n + 1, []
        elif inside:
            lines.append(line)
    joined = []
    for start, block in out:
        merged: list[str] = []
        for line in block:
            if merged and merged[-1].endswith("\\"):
                merged[-1] = merged[-1][:-1] + " " + line.strip()
            else:
                merged.append(line)
        joined.append((start, merged))
    return joined


def parse_line(line: str, where: str) -> list[Command]:
    """The hybridbench commands on one shell line (`a && b`, a trailing `# comment` dropped)."""
    out = []
    for raw in re.split(r"\s*(?:&&|\|\||;)\s*", line):
        part = re.sub(r"\s+#.*$", "", raw.strip())
        part = re.sub(r"\$\([^)]*\)", "SUBST", part)  # a shell substitution: a value the shell fills in
        m = _START.match(part)
        if not m:
            continue
        argv = shlex.split(part[m.end(0):])
        if m.group(1):
            module = m.group(1)
        else:  # the console script: `hybridbench SUBCOMMAND ...`, or overrides straight away (a run)
            sub = argv[0] if argv and argv[0] in SUBCOMMANDS else "run"
            module = SUBCOMMANDS[sub]
            argv = argv[1:] if argv and argv[0] == sub else argv
        out.append(Command(where, module, tuple(argv)))
    return out


def commands() -> list[Command]:
    out = []
    for path in doc_files():
        for start, block in _blocks(path.read_text(encoding="utf-8")):
            for i, line in enumerate(block):
                out.extend(parse_line(line, f"{path.relative_to(ROOT)}:{start + i}"))
    return out


HYDRA_MODULES = {"hybridbench", "hybridbench.preview", "hybridbench.doctor"}  # take the run's overrides


def overrides_to_compose(args: tuple[str, ...]) -> list[str]:
    """A run's Hydra overrides as `compose` takes them: `-m` dropped, a sweep reduced to its first value, Hydra's
    own keys (run dir, launcher) left to Hydra."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    kept = [a for a in args if a not in ("-m", "--multirun") and not a.startswith(("hydra.", "hydra/"))]
    out = []
    for o in OverridesParser.create().parse_overrides(kept):
        if o.is_sweep_override():
            value = next(iter(o.sweep_string_iterator()))
            out.append(f"{o.get_key_element()}={value}")
        else:
            out.append(o.input_line or "")
    return out


def compose_run(overrides: list[str]) -> object:
    """The composed, schema-checked run config, as `python -m hybridbench` builds it; raises on a bad override."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from hybridbench.config.schema import RunCfg
    from hybridbench.config.store import register
    from hybridbench.config.strict import reject_unknown_keys

    register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "conf")):
        cfg = compose(config_name="config", overrides=overrides)
    reject_unknown_keys(cfg, RunCfg)
    return OmegaConf.to_object(cfg)


def check(cmd: Command) -> None:
    """Raise (AssertionError, or the composer's own error) when the command would not be accepted."""
    if cmd.module in HYDRA_MODULES:
        compose_run(overrides_to_compose(cmd.args))
        return
    if cmd.module == "hybridbench.rescore":  # RUN_DIR then scoring overrides: keys of the same schema
        assert cmd.args, f"{cmd.where}: rescore needs a run directory"
        compose_run(["+experiment=smoke", *overrides_to_compose(cmd.args[1:])])
        return
    parsers = {"hybridbench.compare": "hybridbench.compare.__main__", "hybridbench.results": "hybridbench.results.cli"}
    if cmd.module in parsers:
        import importlib

        mod = importlib.import_module(parsers[cmd.module])
        try:
            mod._parser().parse_args(list(cmd.args))
        except SystemExit as exc:
            raise AssertionError(f"{cmd.where}: {cmd.module} refuses {' '.join(cmd.args)} (exit {exc.code})") from None
        return
    if cmd.module in ("hybridbench.dashboard", "hybridbench.dashboard.pr_summary"):
        import contextlib
        import importlib
        import io

        module = cmd.module if cmd.module.endswith("pr_summary") else "hybridbench.dashboard.cli"
        main = importlib.import_module(module).main
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            main(["--help"])
        unknown = [a.split("=")[0] for a in cmd.args if a.startswith("--") and a.split("=")[0] not in out.getvalue()]
        assert not unknown, f"{cmd.where}: {cmd.module} has no option {', '.join(unknown)}"
        return
    raise AssertionError(f"{cmd.where}: unknown hybridbench module {cmd.module}")
