"""What every server command shares: an installed server's ``--help`` (its flags and their listed choices), a
command's flags with who asked for each, the check of one against the other, and ``engine.extra_args`` merged in.

SGLang's ``launch_server``, vLLM's ``serve --help=all`` and TokenSpeed's parsers are argparse: one reader serves all
three (``sglang_cmd``, ``vllm_cmd``, ``tokenspeed_cmd``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from hybridbench.config.redact import scrub, secret_values
from hybridbench.engines.owned_flags import extra_flag_names
from hybridbench.errors import ConfigError

__all__ = ["Flag", "HelpText", "check_flags", "fmt_number", "merge_extra", "parse_help", "unread_token"]

_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
# What argparse takes for a negative number rather than an option (its _negative_number_matcher): "-1e5" is an option
_NEGATIVE = re.compile(r"^-\d+$|^-\d*\.\d+$")


# --------------------------------------------------------------------------------------------------------------
# Help text


@dataclass(frozen=True, slots=True)
class HelpText:
    """The flags an installed server offers, the choices listed for those that have them, and how many values each
    takes where its help line says (0: a switch, 1: one value; absent: optional or several)."""

    flags: frozenset[str]
    choices: Mapping[str, frozenset[str]] = field(default_factory=dict)
    takes: Mapping[str, int] = field(default_factory=dict)

    def offers(self, flag: str) -> bool:
        return flag in self.flags

    def accepts(self, flag: str, value: str) -> bool:
        """True if ``flag`` exists and ``value`` is among its listed choices (or it lists none)."""
        if flag not in self.flags:
            return False
        listed = self.choices.get(flag)
        return listed is None or value in listed


_OPTION_LINE = re.compile(r"^ {0,6}--?[A-Za-z0-9]")  # options sit at indent 2; descriptions much deeper
# Short aliases too (vLLM's -tp, -q): a short spelling in engine.extra_args is checked against them as given.
_INVOCATION = re.compile(r"(--?[A-Za-z0-9][A-Za-z0-9_-]*)(?:[ =](\{[^}]*\}|[^\s,]+))?")
_ANY_FLAG = re.compile(r"(?<![\w-])(--[A-Za-z0-9][A-Za-z0-9_-]*)")
_ONE_VALUE = re.compile(r"\{[^}]*\}|[^\s\[\].]+")  # METAVAR or {a,b}; "[X]" and "X [X ...]" take a varying number


def parse_help(text: str) -> HelpText:
    """Parse argparse ``--help`` output (SGLang's ``launch_server`` and vLLM's ``serve --help=all`` both use it).

    A flag counts as offered only where an option line *defines* it: the line starts with ``-`` after at most
    six spaces, and its invocation part runs up to the first run of two spaces, listing aliases separated by
    ``, ``. Flags merely mentioned in a description, or in the ``usage:`` block, are not offered. Choices come
    from ``{a,b,c}`` right after the flag. If no option line is found (an unfamiliar help format), every
    ``--flag`` anywhere in the text counts, and no choices are known.
    """
    flags: set[str] = set()
    choices: dict[str, frozenset[str]] = {}
    takes: dict[str, int] = {}
    for line in text.splitlines():
        if not _OPTION_LINE.match(line):
            continue
        head = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        for part in head.split(", "):
            m = _INVOCATION.match(part.strip())
            if not m:
                continue
            flags.add(m.group(1))
            metavar = m.group(2)
            if metavar and metavar.startswith("{"):
                choices[m.group(1)] = frozenset(c.strip() for c in metavar[1:-1].split(",") if c.strip())
            rest = part.strip()[len(m.group(1)):].lstrip(" =")
            if not rest or _ONE_VALUE.fullmatch(rest):
                takes[m.group(1)] = 1 if rest else 0
    if not flags:
        flags = set(_ANY_FLAG.findall(text))
        choices, takes = {}, {}
    return HelpText(frozenset(flags), choices, takes)


@dataclass(frozen=True, slots=True)
class Flag:
    """One ``--flag [value]`` of a command line and who asked for it (for error messages)."""

    name: str
    value: str | None
    owner: str  # "arm seglen", "engine.page_size", ...
    alternatives: tuple[str, ...] = ()  # other spellings, named in the error message only

    def render(self) -> list[str]:
        return [self.name] if self.value is None else [self.name, self.value]


def fmt_number(x: float) -> str:
    """``4`` -> "4", ``2.0`` -> "2.0", ``0.85`` -> "0.85" (ints stay ints; floats keep Python's shortest repr)."""
    return str(int(x)) if float(x).is_integer() and not isinstance(x, float) else repr(float(x))


def check_flags(flags: Iterable[Flag], extra: Sequence[str], help_text: HelpText | None, engine_name: str) -> None:
    """ConfigError for the first flag (or extra_args flag) the installed server does not offer."""
    if help_text is None:
        return
    for f in flags:
        if not help_text.offers(f.name):
            value = f" {f.value}" if f.value is not None and not _NUMBER.match(f.value) else ""
            alt = f" (or {' / '.join(f.alternatives)} on other builds)" if f.alternatives else ""
            raise ConfigError(f"{f.owner} needs {f.name}{value}{alt}, which this {engine_name} build does not offer")
        if f.value is not None and not help_text.accepts(f.name, f.value):
            listed = ", ".join(sorted(help_text.choices.get(f.name, ())))
            raise ConfigError(
                f"{f.owner} needs {f.name} {f.value}, which this {engine_name} build does not offer "
                f"(it lists {listed})"
            )
    for name in sorted(extra_flag_names(extra)):
        if not help_text.offers(name):
            raise ConfigError(f"engine.extra_args has {name}, which this {engine_name} build does not offer")
    for name in sorted(_short_spellings(extra)):
        if not help_text.offers(name):
            # argparse reads -qfp8 as -q fp8 and -t as -tp (the one short flag it begins): another flag than the
            # owned-flag table and this check were shown (TP 8 served, TP 4 recorded), or one the server refuses
            raise ConfigError(f"engine.extra_args has {name}, which this {engine_name} build does not offer as "
                              "written (argparse may read it as another flag: a prefix of a longer one, or a short one "
                              "with its value run in); give each flag whole, as its --help spells it, and its value "
                              f"apart{_SHORTHANDS.get(name[:2], '')}")
    if found := unread_token(extra, help_text):
        token, before = found
        where = (f"after {before}, which takes {'no value' if help_text.takes[before] == 0 else 'one value'}"
                 if before else "before any flag")
        raise ConfigError(f"engine.extra_args has {scrub(token, secret_values({'engine': {'extra_args': extra}}))!r} "
                          f"where no flag reads it ({where} on this {engine_name} build), so the server would stop at "
                          "start-up on it")


# Short forms a server rewrites before its parser runs, so its --help does not list them: the spelling to give instead
_SHORTHANDS = {"-O": " (vLLM's -O<n> is --optimization-level <n>)"}


def _is_flag(arg: str) -> bool:
    """Whether argparse reads ``arg`` as an option (a negative number is a value)."""
    return arg.startswith("-") and len(arg) > 1 and not _NEGATIVE.match(arg)


def unread_token(extra: Sequence[str], help_text: HelpText) -> tuple[str, str] | None:
    """The first token of ``extra`` the server's argparse would leave unread, and the flag before it ("" if none):
    one after a switch, after the one value its flag takes, or before any flag. argparse refuses such a token
    ("unrecognized arguments") only once every argument is read, so the plan's parser call, which ends in
    ``--help``, exits on the help first. A flag whose help line gives no fixed count (``[X]``, ``X [X ...]``), or
    a help text read without option lines, leaves the tokens after it unjudged."""
    if not help_text.takes:
        return None
    left, before = 0, ""  # values the flag before still takes (-1: any number)
    for arg in extra:
        if _is_flag(arg):
            name, eq, _ = arg.partition("=")
            taken = help_text.takes.get(name)
            left, before = (-1 if taken is None else 0 if eq else taken), name
        elif left == 0:
            return arg, before
        elif left > 0:
            left -= 1
    return None


def _short_spellings(extra: Sequence[str]) -> set[str]:
    """The single-dash options in ``extra`` as argparse will look them up (``-x=v`` as ``-x``); a negative number
    is a value, not a flag."""
    return {a.split("=", 1)[0] for a in extra if _is_flag(a) and not a.startswith("--")}


def merge_extra(flags: Sequence[Flag], extra: Sequence[str]) -> list[str]:
    """Render ``flags`` then ``extra``; a flag named in ``extra`` is dropped from ``flags`` (extra_args wins)."""
    overridden = extra_flag_names(extra)
    out: list[str] = []
    for f in flags:
        if f.name not in overridden:
            out.extend(f.render())
    out.extend(extra)
    return out
