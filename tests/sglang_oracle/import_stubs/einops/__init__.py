"""An import stub (our own code, no einops code): SGLang's model modules import ``einops.rearrange`` at the top,
and the 0.5.9 and 0.5.23 envs leave einops out (build_env.sh). tp_split_oracle.py builds layers up to their TP
checks and never reaches a call of it."""


def rearrange(*_args: object, **_kwargs: object) -> None:
    raise NotImplementedError("einops import stub: tests/sglang_oracle/import_stubs")
