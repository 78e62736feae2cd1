"""Forward time of a batch on a GPU, from FLOPs and bytes moved, scaled by a few named factors.

    prefill batch:  t = prefill_overhead_s + FLOPs / (tp · peak_flops · prefill_mfu)
    decode step:    t = decode_overhead_s + one rank's bytes / (hbm_bandwidth · decode_bw_efficiency)

Prefill FLOPs count every projection (2 FLOPs per weight per token), the recurrent layers'
per-token work, and causal attention against the cached prefix (a token at position i attends to
i earlier tokens: ``4 · q_dim`` FLOPs each). Decode bytes are the weights a step reads — all dense
weights plus the routed experts the batch touches (the expected number of distinct experts of
``batch · top_k`` draws from ``num_experts``) — plus the KV of every context token and a read and a
write of every request's recurrent state. Tensor parallelism divides FLOPs, weights and states evenly, and K
and V by heads: a rank holds max(1, kv_heads // tp) of them, so past as many ranks as KV heads each rank reads a
whole head (SGLang's ModelConfig.get_num_kv_heads). Communication and kernel-launch costs live in the overheads.

Quantization takes SGLang's ``--quantization`` names: ``fp8`` and ``w8a8_fp8`` store every linear weight
in one byte (weights read per decode step and weight memory halve) and run the linear layers' GEMMs on the
fp8 tensor cores (their prefill FLOPs at the GPU's fp8 peak); attention scores and KV stay in the model's
dtype, recurrent states in theirs (``ModelSpec.conv_dtype``/``temporal_dtype``: SGLang's bf16 conv, fp32
temporal). The fitted factors are the bf16 calibration's, unchanged: an fp8 run is a prediction.

State copies (``Batch.state_copies``) are charged from first principles, not fitted: each reads and writes
one whole recurrent state (conv + SSM, ``ModelSpec.state_bytes``, split over the TP ranks) at the decode
bandwidth efficiency. With the radix cache on SGLang makes one per prefill chunk — no_buffer forks the live
state at every checkpoint (``MambaPool.copy_from``, SGLang 0.5.23 mem_cache/unified_cache/components/
mamba.py:677), extra_buffer's forward writes the tracked state into a ping-pong slot
(layers/attention/hybrid_linear_attn_backend.py:1043-1063) — plus one per hit (copy-on-write); with it off
the checkpoint returns before any copy (mem_cache/unified_radix_cache.py:1172), so the disabled arm has none.
SGLang PR #11214's radix-on prefill overhead (−11.8% input throughput) is held out: this term is not tuned to it.

The factors are what calibration fits (``CALIBRATED``); the same factors serve every cache arm,
so a difference between arms comes only from the work the cache saves or adds. What the model
leaves out: communication that grows with batch size, CUDA-graph padding, MoE load imbalance,
the scheduler's own CPU time, and overlap scheduling (prefill and decode never overlap here).
"""

from __future__ import annotations

from dataclasses import dataclass

from reference_impl.engine.core import Batch
from reference_impl.engine.hardware import GPUSpec
from reference_impl.models import ModelSpec

__all__ = ["CALIBRATED", "QUANTIZATIONS", "CostFactors", "CostModel", "bytes_per_weight", "weight_bytes"]

# SGLang --quantization name -> bytes per linear weight (both are fp8 weights with fp8 activations on H100).
QUANTIZATIONS: dict[str, int] = {"fp8": 1, "w8a8_fp8": 1}


def bytes_per_weight(model: ModelSpec, quantization: str = "") -> int:
    """One linear weight's bytes: the quantization's, else the model's dtype; ValueError for an unknown name."""
    if quantization and quantization not in QUANTIZATIONS:
        raise ValueError(f"unknown quantization {quantization!r}; choose {', '.join(QUANTIZATIONS)} "
                         "(SGLang's --quantization names)")
    return QUANTIZATIONS[quantization] if quantization else model.dtype_bytes


def weight_bytes(model: ModelSpec, quantization: str = "") -> int:
    """Every weight on the GPUs, all TP ranks together: projections, dense MLPs, every routed expert (not only the
    active ones), embedding and LM head. Norms, conv kernels, gates and biases are left out (ModelSpec does not
    count them): a few per cent of the real checkpoint."""
    m = model
    per_layer_mlp = m.mlp_active_params - m.moe_expert_params * m.moe_experts_per_token \
        + m.moe_num_experts * m.moe_expert_params
    params = (m.num_attn_layers * m.attn_proj_params + m.num_ssm_layers * m.ssm_proj_params
              + m.num_mlp_layers * per_layer_mlp + 2 * m.vocab_size * m.d_model)
    return params * bytes_per_weight(model, quantization)


@dataclass(frozen=True, slots=True)
class CostFactors:
    prefill_mfu: float  # achieved fraction of peak FLOP/s in prefill
    decode_bw_efficiency: float  # achieved fraction of peak HBM bandwidth in decode
    prefill_overhead_s: float  # fixed cost per prefill forward (launch, all-reduce latency)
    decode_overhead_s: float  # fixed cost per decode step
    frontend_s: float = 0.0  # per request, before scheduling: HTTP, tokenization, IPC (no GPU time)


# Fitted by benchmarks/calibrate_sim.py to the Qwen3-Next-80B-A3B TP4 H100 runs of SGLang PR #11214
# (reference_impl/engine/calibration.py; docs/concepts/simulator.md, "Calibration"); used unchanged for every arm.
# frontend_s is the largest surprise: ~0.19 s per request outside the GPU is what it takes to
# match both arms' TTFT and throughput at once (bench_serving sent 11K-token *text* prompts, which
# the server tokenizes before scheduling); read it as "unmodelled per-request latency".
CALIBRATED = CostFactors(
    prefill_mfu=0.105, decode_bw_efficiency=0.6, prefill_overhead_s=0.004, decode_overhead_s=0.0038, frontend_s=0.19
)


class CostModel:
    def __init__(self, model: ModelSpec, gpu: GPUSpec, tp: int = 1, factors: CostFactors = CALIBRATED,
                 quantization: str = "") -> None:
        if tp < 1:
            raise ValueError(f"tensor parallel degree must be >= 1, got {tp}")
        self._weight_bytes = bytes_per_weight(model, quantization)  # ValueError for an unknown name, first
        if quantization and not gpu.fp8_flops:
            raise ValueError(f"{gpu.name} has no fp8 tensor cores: --quantization {quantization} cannot run there")
        self.model, self.gpu, self.tp, self.factors = model, gpu, tp, factors
        self.quantization = quantization
        m = model
        # Linear layers' GEMMs run at the fp8 peak when quantized; attention scores stay at bf16's.
        self._linear_peak = gpu.fp8_flops if quantization else gpu.bf16_flops
        # Per-token FLOPs that do not depend on context: projections, recurrences, MLPs.
        self._linear_flops_per_token = (
            m.num_attn_layers * 2 * m.attn_proj_params
            + m.num_ssm_layers * (2 * m.ssm_proj_params + m.ssm_token_flops)
            + m.num_mlp_layers * 2 * m.mlp_active_params
            + 2 * m.vocab_size * m.d_model
        )
        routed = m.moe_expert_params * m.moe_experts_per_token
        self._dense_weight_bytes = (
            m.num_attn_layers * m.attn_proj_params
            + m.num_ssm_layers * m.ssm_proj_params
            + m.num_mlp_layers * (m.mlp_active_params - routed)
            + m.vocab_size * m.d_model
        ) * self._weight_bytes

    def total_weight_bytes(self) -> float:
        """Every weight on the GPUs: dense layers, all routed experts, LM head and embedding (:func:`weight_bytes`)."""
        return weight_bytes(self.model, self.quantization)

    def prefill_flops(self, new_tokens: int, prefix_len: int) -> float:
        """FLOPs of extending a ``prefix_len``-token context by ``new_tokens`` tokens."""
        linear, attention = self._prefill_parts(new_tokens, prefix_len)
        return linear + attention

    def _prefill_parts(self, new_tokens: int, prefix_len: int) -> tuple[float, float]:
        """(linear-layer FLOPs, attention-score FLOPs): they may run at different peaks."""
        m = self.model
        # Sum over new positions i of (prefix_len + i) attended keys, causal.
        attended = new_tokens * prefix_len + new_tokens * (new_tokens + 1) / 2
        return new_tokens * self._linear_flops_per_token, m.num_attn_layers * 4 * m.attn_q_dim * attended

    def routed_weight_bytes(self, batch_size: int) -> float:
        m = self.model
        if not m.moe_num_experts:
            return 0.0
        e, k = m.moe_num_experts, m.moe_experts_per_token
        distinct = e * (1.0 - (1.0 - k / e) ** batch_size)
        return m.num_mlp_layers * distinct * m.moe_expert_params * self._weight_bytes

    def decode_bytes(self, context_lens: list[int]) -> float:
        """The bytes one TP rank reads in a decode step of requests with these context lengths."""
        return self._step_bytes(len(context_lens), sum(context_lens))

    def _step_bytes(self, batch_size: int, context_tokens: int) -> float:
        m = self.model
        # Weights and states split over the ranks; K and V only while there are heads to split: past as many ranks
        # as KV heads each rank holds (and reads) a whole head (Qwen3-Next's 2 heads at TP4: 1 a rank, not 0.5).
        kv = context_tokens * m.kv_bytes_per_token_per_rank(self.tp)
        states = 2 * batch_size * m.state_bytes()
        return (self._dense_weight_bytes + self.routed_weight_bytes(batch_size) + states) / self.tp + kv

    def batch_seconds(self, batch: Batch) -> float:
        f = self.factors
        if batch.kind == "prefill":
            copy_s = self.state_copy_seconds(batch.state_copies)
            if not self.quantization:
                flops = sum(self.prefill_flops(i.end - i.start, i.prefix_len) for i in batch.items)
                return f.prefill_overhead_s + flops / (self.tp * self.gpu.bf16_flops * f.prefill_mfu) + copy_s
            parts = [self._prefill_parts(i.end - i.start, i.prefix_len) for i in batch.items]
            seconds = (sum(lin for lin, _ in parts) / self._linear_peak
                       + sum(att for _, att in parts) / self.gpu.bf16_flops)
            return f.prefill_overhead_s + seconds / (self.tp * f.prefill_mfu) + copy_s
        return self.decode_step_seconds(len(batch.items), sum(i.prefix_len + 1 for i in batch.items),
                                        batch.state_copies)

    def decode_step_seconds(self, batch_size: int, context_tokens: int, state_copies: int = 0) -> float:
        """A decode step of ``batch_size`` requests attending ``context_tokens`` in all (each one's KV plus the
        token it feeds): the decode branch of ``batch_seconds``, for the simulator's runs of steps (no items)."""
        f = self.factors
        return f.decode_overhead_s + self._step_bytes(batch_size, context_tokens) / (
            self.gpu.hbm_bytes_per_s * f.decode_bw_efficiency
        ) + self.state_copy_seconds(state_copies)

    def state_copy_seconds(self, copies: int) -> float:
        """``copies`` whole-state copies on the device: read + write of the state bytes, split over TP."""
        if not copies:
            return 0.0
        return copies * 2 * self.model.state_bytes() / (
            self.tp * self.gpu.hbm_bytes_per_s * self.factors.decode_bw_efficiency
        )

    def frontend_seconds(self, prompt_tokens: int) -> float:
        return self.factors.frontend_s

    def host_transfer_seconds(self, tokens: int, states: int) -> float:
        m = self.model
        return (tokens * m.kv_bytes_per_token() + states * m.state_bytes()) / self.gpu.host_bytes_per_s
