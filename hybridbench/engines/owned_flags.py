"""What ``engine.extra_args`` may not give a server: the flags that say which server it is (model, address, TP and
anything adding GPUs), which cache an arm runs, or a value the harness builds from a config key. Given there, a
flag replaced the built one on the server while the plan, the forecast, the plan-time checks and the record kept
the key's: an ``lru`` arm run as ``extra_buffer`` under its own name, TP 8 served while TP 4 was recorded, a pool
of 200 tokens under "sized by the server from memory". Each engine's table names who sets each flag.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hybridbench.errors import ConfigError

__all__ = ["OWNED_BY_ARM", "OWNED_BY_GPU_COUNT", "OWNED_BY_HARNESS", "data_parallel_groups", "extra_flag_names",
           "given_flags", "last_flag", "refuse_owned", "refuse_replicas"]

# Who sets a flag engine.extra_args may not give (refuse_owned's owners, shared by every engine's table).
OWNED_BY_ARM = "the arm (choose arms=[...]; docs/reference/arms.md)"
OWNED_BY_HARNESS = "the harness (it picks a free port and polls it)"

# More GPUs than engine.tp: the doctor, the run's GPU check, the forecast and the record all count engine.tp.
OWNED_BY_GPU_COUNT = "the harness (it plans, checks and records one server on engine.tp GPUs)"


def extra_flag_names(extra: Sequence[str]) -> set[str]:
    return {a.split("=", 1)[0] for a in extra if a.startswith("--")}


def last_flag(args: Sequence[str], *names: str) -> tuple[str, str] | None:
    """The last of ``names`` given in ``args`` and the value argparse keeps for it (``--name v`` or ``--name=v``;
    "" for a flag at the end with no value); None when none is given."""
    found = None
    for i, arg in enumerate(args):
        name, eq, rest = arg.partition("=")
        if name in names:
            found = (name, rest if eq else (args[i + 1] if i + 1 < len(args) else ""))
    return found


def given_flags(extra: Sequence[str]) -> set[str]:
    """Every flag ``extra`` gives, short ones too: argparse reads ``-dp=2`` as ``-dp 2``."""
    return {a.split("=", 1)[0] for a in extra if a.startswith("-")}


def refuse_owned(extra: Sequence[str], owned: Mapping[str, str]) -> None:
    """ConfigError for an ``engine.extra_args`` flag that says which server this is (model, address, TP) or which cache
    an arm runs: given there it would run something other than what is planned, forecast and recorded (a ``lru``
    arm run as ``extra_buffer``, every arm with the cache off, TP 8 recorded as TP 4, a port never polled)."""
    for name in sorted(given_flags(extra)):
        if name in owned:
            owner = owned[name]
            where = "; set that key instead" if owner.startswith(("engine.", "model.")) else ""
            raise ConfigError(f"engine.extra_args has {name}, which {owner} sets{where}")



def refuse_replicas(extra: Sequence[str], names: Sequence[str], within: str | None) -> None:
    """ConfigError for data parallelism in ``engine.extra_args`` that serves more than one copy of the model, each
    on engine.tp GPUs (``within``: the flag that keeps the copies inside those GPUs instead, SGLang's
    ``--enable-dp-attention``; None where none does)."""
    given = given_flags(extra)
    for name in sorted(given & set(names)):
        if within is None or within not in extra:
            keep = f" (with {within} the data-parallel groups share those GPUs)" if within else ""
            raise ConfigError(f"engine.extra_args has {name}, which serves several copies of the model on engine.tp "
                              f"GPUs each; the harness plans, checks and records one server on engine.tp GPUs{keep}")


def data_parallel_groups(extra: Sequence[str], names: Sequence[str], within: str | None) -> int:
    """How many data-parallel groups ``extra`` splits the engine.tp GPUs into: the last of ``names`` given, when
    ``within`` (SGLang's ``--enable-dp-attention``; None: the names alone say so) is also given; 1 otherwise.
    ConfigError for a value that is not a positive integer (argparse would refuse it only after the harness had
    planned and recorded the run)."""
    if within is not None and within not in extra:
        return 1
    found = last_flag(extra, *names)
    if found is None:
        return 1
    name, value = found
    if not (value.isascii() and value.isdigit()) or int(value) < 1:  # "²" is a digit to isdigit, not to int
        raise ConfigError(f"engine.extra_args has {name} {value!r}; give a positive integer")
    return int(value)
