"""``python -m hybridbench +experiment=NAME [engine=sim] [key=value ...]`` (Hydra; ``-m`` sweeps).

Exit codes (docs/reference/exit-codes.md): 0 all checks passed, 1 a check failed, 2 usage or config error (one line
naming the bad key, flag or file), 3 infrastructure failure. Never a raw traceback for a user error.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import tempfile
import traceback
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from hybridbench import sweep_status
from hybridbench.config.group_choices import refuse_relabelled_sizing, refuse_replaced_load, refuse_unread_rate
from hybridbench.config.redact import scrub, secret_values
from hybridbench.config.redact_files import scrub_file
from hybridbench.config.store import register
from hybridbench.config.sweep_secrets import scrub_swept
from hybridbench.errors import HybridbenchError, Interrupted, RunInterrupted
from workloads.closed_stdout import stdout_closed, stop_writing_stdout

_CONF = str(Path(__file__).resolve().parent.parent / "conf")


class _HoldStderr(io.TextIOBase):
    """Buffers stderr until the task starts, so Hydra's multi-line compose errors become one line."""

    def __init__(self, real: TextIO) -> None:
        self.real = real
        self.buffer_text = io.StringIO()
        self.holding = True

    def write(self, s: str) -> int:
        return (self.buffer_text if self.holding else self.real).write(s)

    def flush(self) -> None:
        self.real.flush()

    def release(self) -> None:
        self.holding = False
        self.real.write(self.buffer_text.getvalue())


_NOISE = ("HYDRA_FULL_ERROR", "To append to your config", "reference_type=", "object_type=", "full_key:")


def _one_line(text: str, multirun: bool = False) -> str:
    """Hydra's compose error, condensed: drop search paths and hints, keep what names the problem."""
    if "Traceback (most recent call last)" in text:  # Hydra failed outside composition: its last line says why
        last = [ln.strip() for ln in text.splitlines() if ln.strip() and not any(n in ln for n in _NOISE)][-1]
        if last.startswith(("FileExistsError", "FileNotFoundError", "NotADirectoryError", "PermissionError")):
            # a sweep makes hydra.sweep.dir (and its jobs' folders under it), a run hydra.run.dir
            key, what = ("hydra.sweep.dir", "sweep") if multirun else ("hydra.run.dir", "run")
            return f"{key}: cannot create the {what} directory ({last.split(': ', 1)[-1]})"
        return last
    text = text.split("Config search path:", maxsplit=1)[0]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not any(n in ln for n in _NOISE)]
    out: list[str] = []
    for ln in lines:
        if out and out[-1].endswith(":"):
            out[-1] = f"{out[-1]} {ln}"  # "Available options in 'experiment':" + first option
        elif out and " " not in ln and ":" in out[-1]:
            out[-1] = f"{out[-1]}, {ln}"  # further options
        elif ln not in out:
            out.append(ln)
    return "; ".join(out) or "invalid configuration"


_hold = _HoldStderr(sys.stderr)
_outcome = {"exit_code": 0}  # Hydra discards the task's return value; keep it here


def _save_traceback(run_dir: Path, secrets: frozenset[str]) -> Path:
    """The traceback of a bug goes to a file (the terminal gets one line): the run dir, else a temp file."""
    text = scrub(traceback.format_exc(), secrets)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "crash.txt").write_text(text)
        return run_dir / "crash.txt"
    except OSError:
        fd, name = tempfile.mkstemp(prefix="hybridbench-crash-", suffix=".txt")
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        return Path(name)


def _drop_empty_run_dir(run_dir: Path) -> None:
    """A refused run leaves no directory: Hydra made it and opened an empty job log before the task ran. Only an
    empty log and then an empty directory are removed, so nothing a previous run or the user wrote is lost."""
    log = run_dir / "__main__.log"
    try:
        if log.is_file() and log.stat().st_size == 0:
            log.unlink()
        run_dir.rmdir()
    except OSError:  # it holds something else (a reused dir, a crash file): keep it
        pass


def _subcommand_refusal(argv: list[str]) -> str | None:
    """``python -m hybridbench plan ...``: a subcommand of the ``hybridbench`` script typed after ``python -m``,
    which takes Hydra overrides only (Hydra's own word for it is "missing EQUAL at '<EOF>'")."""
    from hybridbench.cli import COMMANDS  # noqa: PLC0415 - a dict; cli imports nothing heavy

    first = argv[0] if argv else ""
    if first not in COMMANDS:
        return None
    if first == "run":
        return "python -m hybridbench takes the overrides themselves: python -m hybridbench +experiment=NAME ... " \
               "(or hybridbench run +experiment=NAME ...)"
    return f"'{first}' is a subcommand of the hybridbench command: hybridbench {first} ... " \
           f"(or {COMMANDS[first][1]} ...); python -m hybridbench takes overrides only"


def _rerun_refusal(argv: list[str]) -> str | None:
    """Hydra's ``--experimental-rerun FILE`` reads a pickled config no run of hybridbench writes (no ``.hydra/``:
    plan.json holds the redacted config); Hydra's own refusal of a missing file was a traceback."""
    if any(a == "--experimental-rerun" or a.startswith("--experimental-rerun=") for a in argv):
        return ("--experimental-rerun: hybridbench keeps no Hydra pickle of a run (plan.json holds its resolved "
                "config); re-judge a run with python -m hybridbench.rescore RUN, or run again with its overrides")
    return None


def _name_refusal(argv: list[str]) -> str | None:
    """A ``name=`` override that is not a plain file name, refused before Hydra runs: the default run dir is
    ``results/runs/<time>-<name>``, and Hydra makes it (and whatever a '/' or '..' in the name adds) before the task
    can refuse the name. Undoing that afterwards means guessing which directories Hydra made, and a guess removed an
    empty directory the user already had. The same rule as ``validate_config`` (names from config files go there)."""
    for arg in argv:
        key, eq, value = arg.lstrip("+").partition("=")
        if key != "name" or not eq:
            continue
        if any(c in value for c in "/\\\0") or value.strip().strip("'\"") in ("", ".", ".."):
            return f"name must be a plain file name (no '/', not empty), got {value!r}"
    return None


def _job(cfg: DictConfig) -> int:
    _hold.release()
    sys.stderr = _hold.real
    from hybridbench.app import run  # noqa: PLC0415 - keeps compose errors free of import cost
    from hybridbench.prepare import typed_config  # noqa: PLC0415

    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    secrets: frozenset[str] = frozenset()
    try:
        # The secrets as written (multirun.yaml holds them so) and as resolved, where they resolve: an interpolation
        # that does not is typed_config's ConfigError naming its key (exit 2), not an internal error.
        secrets = secret_values(OmegaConf.to_container(cfg, resolve=False))
        with contextlib.suppress(OmegaConfBaseException):
            secrets |= secret_values(OmegaConf.to_container(cfg, resolve=True))
        if hydra_cfg.mode == RunMode.MULTIRUN:  # Hydra wrote the sweep's config and overrides verbatim
            scrub_file(Path(hydra_cfg.sweep.dir) / "multirun.yaml", secrets)
        # what `hybridbench plan` checks too (hybridbench.prepare); its resolved dict has engine.gpu normalised
        run_cfg, resolved = typed_config(cfg)
        refuse_replaced_load(list(hydra_cfg.overrides.task), run_cfg.load.kind)
        refuse_relabelled_sizing(hydra_cfg.runtime.choices, run_cfg.sizing.family)
        refuse_unread_rate(list(hydra_cfg.overrides.task), run_cfg.load.kind)
        code = run(run_cfg, run_dir, resolved)
        sys.stdout.flush()  # the report, while a closed stdout can still be told from a failure (below)
    except RunInterrupted as exc:  # what ran is on disk; a sweep stops here too
        print(f"error: {scrub(str(exc), secrets)}", file=sys.stderr)
        _outcome["exit_code"] = exc.exit_code
        raise SystemExit(exc.exit_code) from None
    except HybridbenchError as exc:
        print(f"error: {scrub(str(exc), secrets)}", file=sys.stderr)
        code = exc.exit_code
        _drop_empty_run_dir(run_dir)
    except KeyboardInterrupt as exc:  # before any trial started (a signal during a trial is RunInterrupted)
        name = exc.signame if isinstance(exc, Interrupted) else "SIGINT"
        print(f"error: interrupted by {name} before the run started", file=sys.stderr)
        raise SystemExit(3) from None
    except Exception as exc:  # a bug or an unforeseen failure is infrastructure, never "a check failed"
        if stdout_closed(exc):  # `... | head` read what it wanted; what ran is on disk
            _outcome["exit_code"] = stop_writing_stdout()
            return _outcome["exit_code"]
        where = _save_traceback(run_dir, secrets)
        summary = scrub(" ".join(f"{type(exc).__name__}: {exc}".split()), secrets)[:300]
        print(f"error: internal {summary} (traceback in {where})", file=sys.stderr)
        code = 3
    _outcome["exit_code"] = max(_outcome["exit_code"], code)  # a sweep exits with its worst job
    return code  # what a submitit job reports back to the launching process (hydra_plugins/hybridbench_cluster)


# Undecorated under its own name, so a submitit job unpickles the task by reference, not by value.
_task = hydra.main(version_base="1.3", config_path=_CONF, config_name="config")(_job)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _stop(signum: int, _frame: object) -> None:
    """Ctrl-C, a CI cancel (SIGTERM) or a closed terminal (SIGHUP): unwind so every ``finally`` stops the servers
    we started and the run writes its bundle for what ran. Later signals only wait for that to finish."""
    for sig in _STOP_SIGNALS:
        signal.signal(sig, _stopping)
    raise Interrupted(signal.Signals(signum).name)


def _stopping(signum: int, _frame: object) -> None:
    print(f"{signal.Signals(signum).name}: already stopping (stopping the server, writing what ran)",
          file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """The run; ``argv`` (default ``sys.argv[1:]``) is what Hydra reads from ``sys.argv`` for this call. Each call
    starts afresh (this call's stderr, no exit code carried over), so a caller may call it more than once. The stop
    signals' handlers stay installed after it returns: a signal while the process exits only waits."""
    global _hold  # noqa: PLW0603 - _job (Hydra's task) reads it: the stderr of this call, not of the import
    argv_before = sys.argv
    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    _hold = _HoldStderr(sys.stderr)
    _outcome["exit_code"] = 0
    sweep_status.reset()
    try:
        return _main()
    finally:
        sys.argv = argv_before


def _main() -> int:
    # conf/hydra/launcher/submitit_*.yaml shadow the submitit plugin's configs on purpose (hydra_plugins/
    # hybridbench_cluster) and are validated against its schemas; Hydra warns about that name match.
    warnings.filterwarnings("ignore", message="(?s).*is validated against ConfigStore schema with the same name")
    for sig in _STOP_SIGNALS:
        signal.signal(sig, _stop)
    register()
    refused = _subcommand_refusal(sys.argv[1:]) or _rerun_refusal(sys.argv[1:]) or _name_refusal(sys.argv[1:])
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return 2
    sys.stderr = _hold
    try:
        _task()
    except SystemExit as exc:
        if _hold.holding:  # Hydra refused the command line or the config before the task ran
            text = _hold.buffer_text.getvalue()
            _hold.holding = False
            sys.stderr = _hold.real
            if exc.code not in (0, None):
                print(f"error: {_one_line(text, multirun=bool({'-m', '--multirun'} & set(sys.argv[1:])))}",
                      file=sys.stderr)
                return 2
            sys.stderr.write(text)  # --help and friends
            return 0
        raise
    except (HydraException, OmegaConfBaseException) as exc:
        if not _hold.holding:
            raise
        # Hydra's --help composes the config outside its own error reporting: a bad override there raised
        # (a traceback, exit 1) where the same override without --help is one line and exit 2.
        _hold.holding = False
        sys.stderr = _hold.real
        print(f"error: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    finally:
        if _hold.holding:
            _hold.release()
        sys.stderr = _hold.real
        scrub_swept()
    return max(_outcome["exit_code"], sweep_status.worst())


if __name__ == "__main__":
    # Run the copy importable by name: a submitit job (hydra/launcher=submitit_*) then unpickles the task by
    # reference instead of by value with this process's open stderr.
    from hybridbench import __main__ as _by_name  # noqa: PLW0406

    sys.exit(_by_name.main())
