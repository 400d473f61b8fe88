"""An OPT-style decoder-only transformer in one file (nanoGPT style).

Architecture as in OPT (Zhang et al. 2022, metaseq): learned positional embeddings, pre-LayerNorm
blocks, ReLU MLP, a final LayerNorm, the output head tied to the token embedding, biases on every
Linear, weights normal(0, 0.006) with residual projections scaled down by sqrt(2 * n_layers).

Deliberate differences from the Hugging Face OPT port:
  * positions run 0..T-1 (HF offsets them by 2, a fairseq padding leftover);
  * no dropout on the embeddings;
  * opt-350m uses the same shape as its siblings (no 512-wide projection in and out).

The model holds no dtype: mixed precision (autocast, or FSDP2's MixedPrecisionPolicy) is the
trainer's business. Shapes in comments: B batch, T sequence, C d_model, nh heads, hs head size,
V vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["PRESETS", "ModelConfig", "OPTDecoder", "Block", "CausalSelfAttention", "MLP", "model_config"]

IGNORE_INDEX = -100
"""Label value that the loss skips (the `F.cross_entropy` default), e.g. for padding."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelConfig:
    """Sizes and initialisation of an `OPTDecoder`; checked on construction."""

    vocab_size: int
    """Rows of the token embedding (and of the tied output head). Pad to a multiple of 64 for speed."""
    n_layers: int
    """Number of transformer blocks."""
    d_model: int
    """Width of the residual stream; must be divisible by `n_heads`."""
    n_heads: int
    """Attention heads per block; head size is `d_model // n_heads`."""
    max_seq_len: int
    """Rows of the learned positional embedding: the longest sequence (and largest position id + 1)."""
    ffn_dim: int | None = None
    """Hidden width of the MLP; None means 4 * d_model (as in every OPT size)."""
    dropout: float = 0.1
    """Dropout on attention probabilities and on both residual branches' outputs; never on embeddings."""
    init_std: float = 0.006
    """Std of the normal init of every weight and embedding (OPT's 0.006, not GPT-2's 0.02)."""

    def __post_init__(self) -> None:
        if self.ffn_dim is None:
            # Frozen, so the default has to be written past __setattr__.
            object.__setattr__(self, "ffn_dim", 4 * self.d_model)
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the field to change."""
        for name in ("vocab_size", "n_layers", "d_model", "n_heads", "max_seq_len", "ffn_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"ModelConfig.{name} must be a positive int, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"ModelConfig.d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}); "
                f"change d_model or n_heads"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"ModelConfig.dropout must be in [0, 1), got {self.dropout!r}")
        if not self.init_std > 0.0:
            raise ValueError(f"ModelConfig.init_std must be > 0, got {self.init_std!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


PRESETS: dict[str, dict[str, int]] = {
    # A CPU test size: a forward+backward takes milliseconds.
    "opt-tiny": dict(n_layers=2, d_model=64, n_heads=4, ffn_dim=256),
    "opt-125m": dict(n_layers=12, d_model=768, n_heads=12, ffn_dim=3072),
    # The real opt-350m projects 1024 <-> 512 around the decoder; this one does not.
    "opt-350m": dict(n_layers=24, d_model=1024, n_heads=16, ffn_dim=4096),
    "opt-1.3b": dict(n_layers=24, d_model=2048, n_heads=32, ffn_dim=8192),
    "opt-2.7b": dict(n_layers=32, d_model=2560, n_heads=32, ffn_dim=10240),
    "opt-6.7b": dict(n_layers=32, d_model=4096, n_heads=32, ffn_dim=16384),
}
"""Model sizes by name, without vocab_size and max_seq_len (those come from the tokenizer and data)."""

_SIZE_FIELDS = frozenset(f.name for f in fields(ModelConfig)) - {"vocab_size", "max_seq_len"}


def model_config(
    preset_or_sizes: str | Mapping[str, int], vocab_size: int, max_seq_len: int, **overrides
) -> ModelConfig:
    """Build a `ModelConfig` from a preset name (see `PRESETS`) or a dict of sizes, plus overrides.

    `model_config("opt-125m", vocab_size=50272, max_seq_len=2048, dropout=0.0)`.
    """
    if isinstance(preset_or_sizes, str):
        if preset_or_sizes not in PRESETS:
            raise ValueError(f"unknown model preset {preset_or_sizes!r}; choose one of {', '.join(PRESETS)}")
        sizes = dict(PRESETS[preset_or_sizes])
    elif isinstance(preset_or_sizes, Mapping):
        sizes = dict(preset_or_sizes)
    else:
        raise ValueError(f"model preset must be a preset name or a dict of sizes, got {type(preset_or_sizes).__name__}")
    sizes.update(overrides)
    unknown = sorted(set(sizes) - _SIZE_FIELDS)
    if unknown:
        raise ValueError(f"unknown model size field(s) {unknown}; known: {sorted(_SIZE_FIELDS)}")
    return ModelConfig(vocab_size=vocab_size, max_seq_len=max_seq_len, **sizes)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.head_dim = cfg.head_dim
        self.dropout = cfg.dropout
        # One fused matmul for q, k, v: fewer, larger GEMMs.
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.out_proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape  # (B, T, C)
        q, k, v = self.qkv(x).split(C, dim=2)  # each (B, T, C)
        q = q.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        # softmax(q k^T / sqrt(hs)) computed as (q * hs^-1/4)(k * hs^-1/4)^T: OPT's rearrangement,
        # which keeps the unscaled q k^T product from overflowing in half precision.
        s = self.head_dim**-0.25
        y = F.scaled_dot_product_attention(
            q * s, k * s, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0, scale=1.0
        )  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.resid_dropout(self.out_proj(y))  # (B, T, C)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.fc1 = nn.Linear(cfg.d_model, cfg.ffn_dim)
        self.fc2 = nn.Linear(cfg.ffn_dim, cfg.d_model)
        # OPT drops the MLP's output only, not the hidden activation.
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.fc1(x))  # (B, T, ffn_dim)
        return self.dropout(self.fc2(h))  # (B, T, C)


class Block(nn.Module):
    """Pre-LN block: the residual stream itself is never normalised, which keeps deep stacks trainable."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln_attn = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln_mlp = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_attn(x))  # (B, T, C)
        x = x + self.mlp(self.ln_mlp(x))  # (B, T, C)
        return x


class OPTDecoder(nn.Module):
    """Decoder-only transformer; `blocks` is an nn.ModuleList so FSDP2 can shard it block by block.

    Construct on the meta device for large sizes, shard, `to_empty(device=...)`, then call
    `init_weights()`; construction on a real device initialises at once.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.max_seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        # No separate head module: the head reads tok_emb.weight directly, so the tie cannot be
        # broken by to_empty(), load_state_dict() or sharding, and the state dict holds it once.
        self.init_weights()

    @property
    def output_weight(self) -> nn.Parameter:
        """The output head's weight, (V, C): the token embedding itself."""
        return self.tok_emb.weight

    @torch.no_grad()
    def init_weights(self, generator: torch.Generator | None = None) -> None:
        """OPT init: N(0, init_std) weights and embeddings, zero biases, LayerNorm (1, 0).

        The residual projections (attention out_proj, MLP fc2) get init_std / sqrt(2 * n_layers):
        each block adds two branches to the residual stream, so its variance grows with depth
        unless each addition shrinks (GPT-2 / Megatron). `generator` makes the init reproducible
        without touching the global RNG.
        """
        std = self.cfg.init_std
        resid_std = std / math.sqrt(2 * self.cfg.n_layers)
        nn.init.normal_(self.tok_emb.weight, 0.0, std, generator=generator)
        nn.init.normal_(self.pos_emb.weight, 0.0, std, generator=generator)
        for block in self.blocks:
            for linear, s in (
                (block.attn.qkv, std),
                (block.attn.out_proj, resid_std),
                (block.mlp.fc1, std),
                (block.mlp.fc2, resid_std),
            ):
                nn.init.normal_(linear.weight, 0.0, s, generator=generator)
                nn.init.zeros_(linear.bias)
            for ln in (block.ln_attn, block.ln_mlp):
                ln.reset_parameters()
        self.ln_f.reset_parameters()

    def forward(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits, or the loss when labels are given.

        input_ids: LongTensor (B, T), T <= max_seq_len.
        labels: LongTensor (B, T) aligned with input_ids, i.e. labels[:, t] is the target for
            position t (already shifted by the caller: input = tokens[:-1], labels = tokens[1:]).
            Positions labelled -100 are skipped.
        position_ids: LongTensor (B, T) of values in [0, max_seq_len); default 0..T-1 for every row.
            Reset them at document boundaries to restart positions; note this does not stop
            attention from crossing the boundary.

        Returns logits (B, T, V) in the compute dtype when labels is None, else the scalar mean
        cross-entropy over labelled positions, computed in float32.
        """
        B, T = input_ids.shape
        if T > self.cfg.max_seq_len:
            raise ValueError(f"sequence length {T} exceeds ModelConfig.max_seq_len={self.cfg.max_seq_len}")
        if position_ids is None:
            # (1, T) broadcasts over the batch without materialising B copies.
            position_ids = torch.arange(T, device=input_ids.device).unsqueeze(0)  # (1, T)
        x = self.tok_emb(input_ids) + self.pos_emb(position_ids)  # (B, T, C)
        for block in self.blocks:
            x = block(x)  # (B, T, C)
        x = self.ln_f(x)  # (B, T, C)
        logits = F.linear(x, self.tok_emb.weight)  # (B, T, V)
        if labels is None:
            return logits
        # float32 because log-softmax over ~50k entries in bf16 loses the small probabilities.
        return F.cross_entropy(
            logits.float().view(-1, logits.size(-1)), labels.reshape(-1), ignore_index=IGNORE_INDEX
        )

    def param_groups(self, weight_decay: float) -> list[dict]:
        """Two AdamW groups: Linear weights decayed; biases, LayerNorms and embeddings not.

        Decaying embeddings (and so the tied head) or LayerNorm gains pulls them toward zero for no
        regularising benefit; only the matmul weights are decayed, as in OPT and nanoGPT.
        """
        decay = [m.weight for m in self.modules() if isinstance(m, nn.Linear)]
        decay_ids = {id(p) for p in decay}
        no_decay = [p for p in self.parameters() if id(p) not in decay_ids]
        return [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]

    def num_params(self, exclude_embeddings: bool = False) -> int:
        """Parameter count, each shared parameter once. exclude_embeddings drops the token
        (= head) and positional embeddings: Kaplan et al.'s "non-embedding" count."""
        n = sum(p.numel() for p in self.parameters())
        if exclude_embeddings:
            n -= self.tok_emb.weight.numel() + self.pos_emb.weight.numel()
        return n

    def flops_per_token(self, seq_len: int) -> int:
        """Training (forward + backward) FLOPs per token, for MFU: 6 N + 12 L H Q T.

        As nanoGPT's estimate_mfu (PaLM appendix B): N counts every parameter except the positional
        embedding, which is a lookup, not a matmul; the token embedding stays in because it is also
        the output head's (V, C) matmul. 12 L H Q T is the attention score and value matmuls
        (H heads of size Q over T keys), counted without halving for the causal mask.
        """
        cfg = self.cfg
        n = self.num_params() - self.pos_emb.weight.numel()
        return 6 * n + 12 * cfg.n_layers * cfg.n_heads * cfg.head_dim * seq_len
