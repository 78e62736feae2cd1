"""The harness's own commands, as a user types them, against a baseline tree: what starting hybridbench costs.

    git worktree add /tmp/base <commit>      # or: git archive <commit> | tar -x -C /tmp/base
    python benchmarks/harness_commands.py --baseline /tmp/base [--repeats 5] [--sglang PYTHON]

Each command runs in this checkout and in the baseline tree alternately (``whole_command.alternate``: same
interpreter, ``cwd`` = the tree, so ``-m`` imports that tree's code): wall seconds, CPU seconds of the process tree
and peak RSS, medians. ``--sglang`` (an SGLang venv's python) adds a plan against that build's real ``--help``,
run three ways: this checkout with its ``--help`` cache warm (the second plan a user types), this checkout with
the cache off, and the baseline. The machine line comes first: wall seconds mean something only on a quiet machine.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from whole_command import Summary, alternate, checkout, count, file, git_head, machine  # a sibling: run as a script

from hybridbench.errors import OneLineParser

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
FIXTURE_RUNS = ROOT / "tests" / "hybridbench" / "fixtures" / "runs"


def commands(work: Path, sglang: str | None) -> dict[str, list[str]]:
    out = {
        "run smoke on the simulator": [PY, "-m", "hybridbench", "+experiment=smoke", "engine=sim",
                                       f"hydra.run.dir={work}/smoke", "overwrite=true"],
        # two reference servers (one per arm), each started, loaded and stopped: what server starts and stops cost
        "run smoke on the reference server": [PY, "-m", "hybridbench", "+experiment=smoke", "engine=reference",
                                              "model=reference-tiny", f"hydra.run.dir={work}/smoke-ref",
                                              "overwrite=true"],
        "plan seglen on the simulator, no forecast": [PY, "-m", "hybridbench.preview", "+experiment=seglen",
                                                      "engine=sim", "--no-forecast"],
        "results ls over the fixture runs": [PY, "-m", "hybridbench.results", "ls", str(FIXTURE_RUNS)],
    }
    if sglang:
        out["plan radix against SGLang's real --help"] = [PY, "-m", "hybridbench.preview", "+experiment=radix",
                                                          "engine=sglang", f"engine.python={sglang}", "--no-forecast"]
    return out


def _cell(s: Summary | None) -> str:
    return "—" if s is None else f"{s.wall_s:.2f} / {s.cpu_s:.2f} / {s.peak_rss_mb:.0f}"


def main(argv: Sequence[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", type=checkout, required=True, help="a tree of the baseline commit")
    ap.add_argument("--repeats", type=count(1), default=5)
    ap.add_argument("--sglang", type=file, help="an SGLang venv's python, for the plan against its real --help")
    args = ap.parse_args(argv)
    print(f"machine: {machine()}; this checkout {git_head(ROOT)}, baseline {git_head(args.baseline)} "
          f"({args.baseline})\n")
    print("| command | this checkout: wall s / CPU s / peak MB | baseline | CPU ratio (this / baseline) | load |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, cmd in commands(Path(tmp), args.sglang).items():
            sides: dict[str, tuple[Sequence[str], str | None]] = {"ours": (cmd, str(ROOT)),
                                                                  "base": (cmd, str(args.baseline))}
            if "SGLang" in name:  # the cache off: what the start-up alone saves
                sides["ours, --help cache off"] = (["/usr/bin/env", "HYBRIDBENCH_HELP_CACHE=off", *cmd], str(ROOT))
            res = alternate(sides, args.repeats)
            load = machine().split("load average ")[1].split(",")[0]
            for label in (k for k in sides if k != "base"):
                row = name if label == "ours" else f"{name} ({label.split(', ', 1)[1]})"
                print(f"| {row} | {_cell(res[label])} | {_cell(res['base'])} "
                      f"| {res[label].cpu_s / res['base'].cpu_s:.2f} | {load} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
