"""Group choices the composed values contradict: a ``load=`` group the experiment then replaced, and a sizing
family relabelled, or one of its files swapped for the other family's.

An experiment may set ``load.kind`` as a value (seglen's GPU sizing, conf/sizing/seglen/gpu.yaml; l2 and marconi in
conf/experiment/), and values compose after the group a command line picks: ``+experiment=seglen engine=sglang
load=closed`` ran Poisson arrivals, and ``+experiment=l2 load=closed`` a trace replay, the user's choice dropped
without a word. Values given on the command line win over both, so the refusal says to give those.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hybridbench.errors import ConfigError

__all__ = ["FAMILY_GROUPS", "refuse_relabelled_sizing", "refuse_replaced_load", "refuse_unread_rate"]


def refuse_replaced_load(overrides: Sequence[str], load_kind: str) -> None:
    """ConfigError when ``overrides`` (Hydra's, as typed) pick a load group other than the ``load.kind`` composed.
    Each group option sets its own kind (conf/load/<kind>.yaml), so a differing kind is a choice replaced."""
    for item in overrides:
        key, eq, value = item.lstrip("+").partition("=")
        value = value.strip().strip("'\"")  # Hydra's quoted form: load='closed'
        if key == "load" and eq and value and value != load_kind:
            raise ConfigError(f"load={value}: load.kind is {load_kind} once the experiment's values (or a load.kind= "
                              f"given too) are composed over the group, so the run would not be a {value} load; give "
                              f"the values instead (load.kind={value}, and its load.* settings) on the command line, "
                              f"or drop load={value}")


# The groups the defaults list picks by the family (conf/config.yaml), and how a choice of each names its family:
# ``sizing@_global_`` is ``<experiment>/<family>`` (``none/<family>`` outside an experiment).
FAMILY_GROUPS = ("sizing@_global_", "sizing/all@_global_")


def refuse_relabelled_sizing(choices: Mapping[str, object], family: str) -> None:
    """ConfigError when a sizing group composed (Hydra's ``runtime.choices``) is not ``sizing.family``'s. The family is
    the label every later rule reads, the refusal of the CPU sizing on a serving engine among them: ``sizing=cpu
    sizing.family=gpu`` put the CPU's 20,000-token pools on SGLang's command line. So did choosing the family's files
    one by one: ``sizing@_global_=survival/cpu`` on SGLang (the run still labelled gpu), and
    ``sizing/all@_global_=cpu`` gave a GPU run the CPU's 48-token accuracy answers. Removing one (``~``) drops the
    family's values for the schema's, as silently."""
    choice = choices.get("sizing")
    if choice is not None and str(choice) != family:
        raise ConfigError(f"sizing.family={family}: the {choice} sizing was composed (sizing={choice}); the family is "
                          f"which files were composed, not a setting: choose it with sizing=cpu|gpu and leave "
                          f"sizing.family unset")
    for group in FAMILY_GROUPS:
        if group not in choices:
            raise ConfigError(f"~{group}: the {family} family's file for the experiment was removed, so the run would "
                              f"take the schema's values under the {family} label; choose the family with "
                              f"sizing=cpu|gpu and leave {group} to it")
        picked = str(choices[group])
        own = f"{choices.get('experiment') or 'none'}/{family}"
        if group == "sizing@_global_" and picked.rpartition("/")[2] == family and picked != own:
            # another experiment's file of the same family (none/gpu: none at all) under this experiment's name:
            # seglen on SGLang ran a closed loop with no budget, still labelled seglen's GPU run
            raise ConfigError(f"{group}={picked}: the experiment's own sizing is {own}; another's values under this "
                              f"experiment's name are no run of it; choose the family with sizing=cpu|gpu and leave "
                              f"{group} to it")
        if picked.rpartition("/")[2] != family:
            raise ConfigError(f"{group}={picked}: the {picked.rpartition('/')[2]} family's file was composed into a "
                              f"{family} run (sizing={family}), so the run would carry one family's values under "
                              f"the other's label; choose the family with sizing=cpu|gpu and leave {group} to it")


def refuse_unread_rate(overrides: Sequence[str], load_kind: str) -> None:
    """ConfigError for a Poisson rate typed on the command line (``load.request_rate=3``,
    ``workloads.<name>.request_rate=3``) under a load that has none: a closed loop or trace replay ran and the rate
    was dropped without a word. Only what was typed: an experiment's own rates (seglen's, for its GPU Poisson load)
    sit unread under its CPU closed loop by design."""
    if load_kind == "poisson":
        return
    for item in overrides:
        key, eq, value = item.lstrip("+~").partition("=")
        parts = key.split(".")
        rate = parts == ["load", "request_rate"] or (len(parts) == 3 and parts[0] == "workloads"
                                                     and parts[2] == "request_rate")
        if rate and eq and value.strip().strip("'\"") not in ("", "0", "0.0", "null"):
            raise ConfigError(f"{key}: only a poisson load reads a request rate; load.kind is {load_kind}, so the run "
                              f"would not send at {value} req/s (add load=poisson, or drop {key})")
