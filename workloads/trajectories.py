"""Agent trajectory files -> alternating (observation, action) text, for the swebench workload.

Accepted layouts (one trajectory per file):

* SWE-agent ``.traj``: an object with ``history`` (``[{"role", "content"}, ...]``; content a string or
  a list of ``{"type": "text", "text"}`` parts), or else ``trajectory`` (``[{"response"|"action",
  "observation"}, ...]``);
* OpenHands-style event lists: a list (or an object's ``history``) of events with ``source`` and
  ``action`` / ``observation`` and ``content`` / ``message`` / ``args``;
* chat messages: a list (or an object's ``messages``) of ``{"role", "content"}``.

Assistant messages are actions; everything else (system, user, tool output) is observation. The
result pairs them as Marconi does: round i = (observation i, action i), where observation 0 is the
system prompt + task and the last round may lack an action.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads.errors import WorkloadError

__all__ = ["Round", "load_trajectory", "parse_trajectory"]

_ASSISTANT = {"assistant", "agent", "ai", "model", "gpt"}


@dataclass(frozen=True, slots=True)
class Round:
    """One agent step: the observation messages it saw and the action messages it produced."""

    observation: tuple[str, ...]
    action: tuple[str, ...]


def _content(value: Any, where: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # OpenAI/Anthropic content parts
        parts = []
        for part in value:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
            else:
                raise WorkloadError(f"{where}: content part is not text")
        return "\n".join(parts)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    raise WorkloadError(f"{where}: content must be text, got {type(value).__name__}")


def _chat_messages(items: list[Any], where: str) -> list[tuple[bool, str]]:
    out = []
    for i, msg in enumerate(items):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise WorkloadError(f"{where}: message {i} needs a string 'role'")
        out.append((msg["role"].lower() in _ASSISTANT, _content(msg.get("content"), f"{where}: message {i}")))
    return out


def _events(items: list[Any], where: str) -> list[tuple[bool, str]]:
    out = []
    for i, ev in enumerate(items):
        if not isinstance(ev, dict) or not isinstance(ev.get("source"), str):
            raise WorkloadError(f"{where}: event {i} needs a string 'source'")
        at = f"{where}: event {i}"
        if "observation" in ev:
            is_action = False
        elif "action" in ev:
            is_action = ev["source"].lower() != "user"
        else:
            is_action = ev["source"].lower() in _ASSISTANT
        body = ev.get("content", ev.get("message"))
        if body is None and "args" in ev:
            body = ev["args"]
        out.append((is_action, _content(body, at)))
    return out


def _steps(items: list[Any], where: str) -> list[tuple[bool, str]]:
    out = []
    for i, step in enumerate(items):
        if not isinstance(step, dict):
            raise WorkloadError(f"{where}: trajectory step {i} must be an object")
        at = f"{where}: trajectory step {i}"
        out.append((True, _content(step.get("response", step.get("action")), at)))
        out.append((False, _content(step.get("observation"), at)))
    return out


def _messages(data: Any, where: str) -> list[tuple[bool, str]]:
    """(is_action, text) in order, whichever layout ``data`` uses."""
    if isinstance(data, dict):
        for key in ("history", "messages"):
            items = data.get(key)
            if isinstance(items, list) and items:
                return _messages(items, where)
        steps = data.get("trajectory")
        if isinstance(steps, list) and steps:
            return _steps(steps, where)
        raise WorkloadError(f"{where}: no 'history', 'messages' or 'trajectory' list in this trajectory")
    if isinstance(data, list) and data:
        first = data[0]
        if isinstance(first, dict) and "source" in first:
            return _events(data, where)
        if isinstance(first, dict) and "role" in first:
            return _chat_messages(data, where)
        raise WorkloadError(f"{where}: a trajectory list holds events ('source') or messages ('role')")
    raise WorkloadError(f"{where}: not an agent trajectory (expected a non-empty object or list)")


def parse_trajectory(data: Any, where: str) -> list[Round]:
    """Rounds of (observation, action); consecutive messages of one side are merged into one round half."""
    rounds: list[Round] = []
    obs: list[str] = []
    act: list[str] = []
    for is_action, text in _messages(data, where):
        if is_action:
            act.append(text)
        else:
            if act:
                rounds.append(Round(tuple(obs), tuple(act)))
                obs, act = [], []
            obs.append(text)
    if obs or act:
        rounds.append(Round(tuple(obs), tuple(act)))
    if not any(r.action for r in rounds):
        raise WorkloadError(f"{where}: the trajectory has no agent action")
    return rounds


def load_trajectory(path: Path) -> list[Round]:
    try:
        with path.open(encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read trajectory ({exc.strerror or exc})") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, too deep
        raise WorkloadError(f"{path}: not a JSON trajectory ({type(exc).__name__}: {exc})") from None
    return parse_trajectory(data, str(path))
