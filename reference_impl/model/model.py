"""The tiny hybrid model: embeddings, recurrent (gated delta rule) and attention layers, MLPs, LM head.

Recurrent layer (Qwen3-Next's gated-delta-net at toy size): the input goes through a projection and
a depthwise causal conv of width ``conv_kernel`` (its *conv state* is the last ``kernel - 1``
projected inputs), then per head a delta-rule state ``S`` (``[d_k, d_v]``) is decayed, corrected
towards ``v`` along ``k`` and read with ``q``. The recurrence runs token by token, so the state after
*any* position inside a chunk is available exactly — that is what lets a prefill snapshot the
chunk-aligned track point or a branch point, as SGLang's kernels do with their per-chunk ``h``.

Each recurrence step works on one token's ``[H, d, d]`` state with the same operations whether it runs in a
prefill or a decode, alone or in a batch (each head's contraction is one 1×d by d×d matmul, of the same
shape everywhere), so a sequence computes the same state in any chunking; projections and attention use
matmuls whose rounding depends on shapes (≈1e-7 relative), which is why the cache-hit contract has a
tolerance. The token-by-token loop runs in numpy: its steps are a few hundred floats each, where torch's
per-call dispatch cost (~7 µs an op) made it most of a prefill's time.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F  # noqa: N812 - the universal torch spelling
from torch import Tensor

from reference_impl.model.config import ModelConfig

__all__ = ["ExtendOut", "HybridModel", "RecState"]

# sigmoid(8) ≈ 0.9997 decay and sigmoid(-2) ≈ 0.12 write strength give the recurrent state a long memory,
# and the recurrent layers a strong say in the output (scale 4): a wrong or off-by-one state must move
# the logits hundreds of tokens later, as it does on a real model.
_DECAY_BIAS = 8.0
_BETA_BIAS = -2.0
_REC_OUT_SCALE = 4.0
_LOGIT_SCALE = 3.0  # spreads the output distribution so logprobs and KL are informative


@dataclass(slots=True)
class RecState:
    """Recurrent state of every recurrent layer: conv ``[..., R, K-1, C]`` and ssm ``[..., R, H, d, d]``."""

    conv: Tensor
    ssm: Tensor

    def clone(self) -> RecState:
        return RecState(self.conv.clone(), self.ssm.clone())


@dataclass(slots=True)
class ExtendOut:
    logits: Tensor  # [T, V] with all_logits, else [1, V] for the last position
    state: RecState  # after the last token
    kv: Tensor  # [T, A, 2, H, dh]: keys and values of the new tokens
    snapshots: dict[int, RecState]  # absolute position -> state after tokens[:position]


def _rms(x: Tensor) -> Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


_F32 = npt.NDArray[np.float32]


def _step(s: _F32, ops: tuple[_F32, ...]) -> tuple[_F32, _F32]:
    """One gated delta-rule step on ``s`` ``[..., H, dk, dv]``; ``ops`` are ``_step_inputs``' rows: ``a``
    ``[..., H, 1, 1]``, ``k`` ``[..., H, 1, dk]``, ``bk`` (``beta * k``) ``[..., H, dk, 1]``, ``v`` ``[..., H, 1, dv]``
    and ``q`` ``[..., H, 1, dk]``. The output is ``[..., H, 1, dv]``. Prefill and decode both take it."""
    a, k, bk, v, q = ops
    s = s * a
    s = s + bk * (v - k @ s)
    return s, q @ s


def _step_inputs(q: Tensor, k: Tensor, v: Tensor, a: Tensor, beta: Tensor) -> tuple[_F32, ...]:
    """``_step``'s operands for every leading index at once (``[..., H, d]`` / ``[..., H]`` in)."""
    # Contiguous operands keep numpy's matmul on one code path (BLAS) for prefill and decode alike.
    return tuple(np.ascontiguousarray(x.numpy()) for x in (
        a[..., None, None], k[..., None, :], (beta[..., None] * k)[..., None], v[..., None, :], q[..., None, :]))


def _delta_scan(s: Tensor, ops: tuple[_F32, ...], at: dict[int, int]) -> tuple[Tensor, Tensor, dict[int, Tensor]]:
    """The recurrence over ``T`` tokens (``ops`` from ``_step_inputs`` over ``[T, H, ...]``) after ``s``: the final
    state, every token's output ``[T, H, dv]`` and the state after ``i`` tokens for each ``i`` in ``at``."""
    v = ops[3]
    outs = np.empty(v.shape, dtype=np.float32)  # [T, H, 1, dv]
    state: _F32 = np.ascontiguousarray(s.numpy())
    snaps: dict[int, Tensor] = {}
    for i, row in enumerate(zip(*ops, strict=True)):
        state, outs[i] = _step(state, row)
        if i + 1 in at:
            snaps[i + 1] = torch.from_numpy(state)  # never written in place: each step makes a new array
    return torch.from_numpy(state), torch.from_numpy(outs).squeeze(-2), snaps


def one_thread() -> None:
    """Run torch on one thread unless ``OMP_NUM_THREADS`` says otherwise.

    The tiny model's ops are too small to split: torch's worker threads only wait for each other, and on a busy
    2-core machine their spin-waits made decode 6-10x slower at 6-10x the CPU (batch 1: 32-51 decode steps/s on
    two threads against 310-380 on one; ``benchmarks/reference_server_speed.py``)."""
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)


class HybridModel:
    def __init__(self, config: ModelConfig) -> None:
        one_thread()
        self.config = c = config
        gen = torch.Generator().manual_seed(c.seed)

        def w(*shape: int, fan_in: int, scale: float = 1.0) -> Tensor:
            return torch.randn(*shape, generator=gen) * (scale / math.sqrt(fan_in))

        d, hl = c.hidden, c.lin_heads * c.lin_head_dim
        ha = c.num_heads * c.head_dim
        self.embed = torch.randn(c.vocab_size, d, generator=gen)
        self.layers: list[dict[str, Tensor]] = []
        for kind in c.layers:
            p: dict[str, Tensor]
            if kind == "R":
                p = {
                    "u": w(d, c.conv_channels, fan_in=d),
                    "conv": w(c.conv_kernel, c.conv_channels, fan_in=c.conv_kernel),
                    "beta": w(d, c.lin_heads, fan_in=d),
                    "a": w(d, c.lin_heads, fan_in=d),
                    "gate": w(d, hl, fan_in=d),
                    "o": w(hl, d, fan_in=hl, scale=_REC_OUT_SCALE),
                }
            else:
                p = {"q": w(d, ha, fan_in=d), "k": w(d, ha, fan_in=d), "v": w(d, ha, fan_in=d)}
                p["o"] = w(ha, d, fan_in=ha)
            p["up"] = w(d, 2 * c.mlp_hidden, fan_in=d)
            p["down"] = w(c.mlp_hidden, d, fan_in=c.mlp_hidden)
            self.layers.append(p)
        self.lm_head = w(d, c.vocab_size, fan_in=d, scale=_LOGIT_SCALE)
        half = c.head_dim // 2
        self._inv_freq = c.rope_theta ** (-torch.arange(half, dtype=torch.float32) / half)

    # ------------------------------------------------------------------ state shapes
    def empty_state(self, *batch: int) -> RecState:
        c = self.config
        return RecState(
            torch.zeros(*batch, c.num_recurrent, c.conv_kernel - 1, c.conv_channels),
            torch.zeros(*batch, c.num_recurrent, c.lin_heads, c.lin_head_dim, c.lin_head_dim),
        )

    @property
    def kv_row_shape(self) -> tuple[int, int, int, int]:
        c = self.config
        return (c.num_attention, 2, c.num_heads, c.head_dim)

    # ------------------------------------------------------------------ pieces
    def _rope(self, x: Tensor, positions: Tensor) -> Tensor:
        ang = positions.to(torch.float32)[:, None] * self._inv_freq[None, :]
        cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)

    def _mlp(self, p: dict[str, Tensor], x: Tensor) -> Tensor:
        gate, up = (_rms(x) @ p["up"]).chunk(2, -1)
        return x + (F.silu(gate) * up) @ p["down"]

    def _qkv(self, p: dict[str, Tensor], x: Tensor, start: int) -> tuple[Tensor, Tensor, Tensor]:
        c = self.config
        t = x.shape[0]
        pos = torch.arange(start, start + t)
        q = self._rope((x @ p["q"]).view(t, c.num_heads, c.head_dim), pos)
        k = self._rope((x @ p["k"]).view(t, c.num_heads, c.head_dim), pos)
        return q, k, (x @ p["v"]).view(t, c.num_heads, c.head_dim)

    def _attend(self, q: Tensor, keys: Tensor, values: Tensor, start: int) -> Tensor:
        """Causal attention of ``q`` (positions ``start..``) over ``keys``/``values`` of positions ``0..``."""
        t, length = q.shape[0], keys.shape[0]
        allowed = torch.arange(length)[None, :] <= torch.arange(start, start + t)[:, None]
        out = F.scaled_dot_product_attention(
            q.transpose(0, 1), keys.transpose(0, 1), values.transpose(0, 1), attn_mask=allowed
        )
        return out.transpose(0, 1).reshape(t, -1)  # [T, H*dh]

    def _rec_inputs(self, p: dict[str, Tensor], x: Tensor, conv: Tensor) -> tuple[Tensor, ...]:
        """Projections and the causal conv for ``x`` ``[..., T, d]`` after ``conv`` ``[..., K-1, C]``."""
        c = self.config
        window = torch.cat([conv, x @ p["u"]], -2)  # [..., T+K-1, C]
        t = x.shape[-2]
        mixed = window[..., 0:t, :] * p["conv"][0]
        for j in range(1, c.conv_kernel):
            mixed = mixed + window[..., j : j + t, :] * p["conv"][j]
        q, k, v = F.silu(mixed).view(*mixed.shape[:-1], 3, c.lin_heads, c.lin_head_dim).unbind(-3)
        q = F.normalize(q, dim=-1) / math.sqrt(c.lin_head_dim)
        k = F.normalize(k, dim=-1)
        beta = torch.sigmoid(x @ p["beta"] + _BETA_BIAS)
        a = torch.sigmoid(x @ p["a"] + _DECAY_BIAS)
        return window, q, k, v, a, beta

    def _logits(self, x: Tensor) -> Tensor:
        return _rms(x) @ self.lm_head

    # ------------------------------------------------------------------ forwards
    def extend(
        self,
        tokens: Sequence[int],
        start: int,
        state: RecState,
        past_kv: Tensor,
        snapshot_at: Sequence[int] = (),
        *,
        all_logits: bool = False,
        snapshot_shift: int = 0,
    ) -> ExtendOut:
        """Prefill ``tokens`` (positions ``start..``) of one sequence after ``state`` and ``past_kv``.

        ``snapshot_at`` lists absolute positions ``p`` in ``(start, start+T]`` whose state (after
        ``tokens[:p]``) is wanted. ``snapshot_shift`` moves every snapshot that many positions
        earlier while keeping its label: only the ``branch_off_by_one`` fault injection uses it.
        """
        c = self.config
        t = len(tokens)
        if t == 0:
            raise ValueError("extend needs at least one token")
        x = self.embed[torch.tensor(list(tokens), dtype=torch.long)]
        rel = {p - start - snapshot_shift: p for p in snapshot_at}
        snaps_conv: dict[int, list[Tensor]] = {p: [] for p in snapshot_at}
        snaps_ssm: dict[int, list[Tensor]] = {p: [] for p in snapshot_at}
        convs, ssms, kvs = [], [], []
        r = a_i = 0
        for kind, p in zip(c.layers, self.layers, strict=True):
            h = _rms(x)
            if kind == "R":
                window, q, k, v, a, beta = self._rec_inputs(p, h, state.conv[r])
                s, outs, at = _delta_scan(state.ssm[r], _step_inputs(q, k, v, a, beta), rel)
                for i, snap in at.items():
                    snaps_conv[rel[i]].append(window[i : i - 1 + c.conv_kernel].clone())
                    snaps_ssm[rel[i]].append(snap)
                if 0 in rel:  # a shifted snapshot can land on the chunk's own start state
                    snaps_conv[rel[0]].append(state.conv[r].clone())
                    snaps_ssm[rel[0]].append(state.ssm[r].clone())
                convs.append(window[t:].clone())
                ssms.append(s)
                y = outs.reshape(t, -1) * F.silu(h @ p["gate"])
                x = x + y @ p["o"]
                r += 1
            else:
                q, k, v = self._qkv(p, h, start)
                kvs.append(torch.stack([k, v], 1))  # [T, 2, H, dh]
                keys = torch.cat([past_kv[:, a_i, 0], k]) if start else k
                values = torch.cat([past_kv[:, a_i, 1], v]) if start else v
                x = x + self._attend(q, keys, values, start) @ p["o"]
                a_i += 1
            x = self._mlp(p, x)
        logits = self._logits(x if all_logits else x[-1:])
        kv = torch.stack(kvs, 1) if kvs else torch.zeros(t, *self.kv_row_shape)
        snapshots = {pos: RecState(torch.stack(snaps_conv[pos]), torch.stack(snaps_ssm[pos])) for pos in snapshot_at}
        final = RecState(torch.stack(convs), torch.stack(ssms)) if convs else self.empty_state()
        return ExtendOut(logits, final, kv, snapshots)

    def decode(
        self, tokens: Sequence[int], positions: Sequence[int], state: RecState, past_kv: Sequence[Tensor]
    ) -> tuple[Tensor, RecState, Tensor]:
        """One decode step for a batch: token ``b`` sits at ``positions[b]`` after ``past_kv[b]``.

        ``state`` is batched (``[B, R, ...]``). Returns logits ``[B, V]``, the new batched state and
        the new KV rows ``[B, A, 2, H, dh]``.
        """
        c = self.config
        b = len(tokens)
        x = self.embed[torch.tensor(list(tokens), dtype=torch.long)]  # [B, d]
        convs, ssms, kvs = [], [], []
        r = a_i = 0
        for kind, p in zip(c.layers, self.layers, strict=True):
            h = _rms(x)
            if kind == "R":
                window, q, k, v, a, beta = self._rec_inputs(p, h[:, None, :], state.conv[:, r])
                ops = _step_inputs(q[:, 0], k[:, 0], v[:, 0], a[:, 0], beta[:, 0])
                s, o = _step(np.ascontiguousarray(state.ssm[:, r].numpy()), ops)
                convs.append(window[:, 1:])
                ssms.append(torch.from_numpy(s))
                x = x + (torch.from_numpy(o).reshape(b, -1) * F.silu(h @ p["gate"])) @ p["o"]
                r += 1
            else:
                outs, new = [], []
                for i in range(b):
                    q, k, v = self._qkv(p, h[i : i + 1], positions[i])
                    new.append(torch.stack([k[0], v[0]]))
                    past = past_kv[i]
                    keys = torch.cat([past[:, a_i, 0], k])
                    values = torch.cat([past[:, a_i, 1], v])
                    outs.append(self._attend(q, keys, values, positions[i]))
                kvs.append(torch.stack(new))  # [B, 2, H, dh]
                x = x + torch.cat(outs) @ p["o"]
                a_i += 1
            x = self._mlp(p, x)
        kv = torch.stack(kvs, 1) if kvs else torch.zeros(b, *self.kv_row_shape)
        new_state = RecState(torch.stack(convs, 1), torch.stack(ssms, 1)) if convs else self.empty_state(b)
        return self._logits(x), new_state, kv
