"""The model registry (`PRESETS`, `model_config`, `build_model`) and the OPT-style decoder, in one file (nanoGPT style).

The registry names every model the trainer builds: OPT's sizes here, the Llama family's (`llama.py`) beside them.

Architecture as in OPT (Zhang et al. 2022, metaseq): learned positional embeddings, pre-LayerNorm
blocks, ReLU MLP, a final LayerNorm, the output head tied to the token embedding, biases on every
Linear, weights normal(0, 0.006) with residual projections scaled down by sqrt(2 * n_layers).

Deliberate differences from the Hugging Face OPT port:
  * positions run 0..T-1 (HF offsets them by 2, a fairseq padding leftover);
  * no dropout on the embeddings;
  * opt-350m uses the same shape as its siblings (no 512-wide projection in and out);
  * document masking (attention only within each packed document) is offered, off by default.

The model holds no dtype: mixed precision (autocast, or FSDP2's MixedPrecisionPolicy) is the
trainer's business. Shapes in comments: B batch, T sequence, C d_model, nh heads, hs head size,
V vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tokenmill.train.decoder import IGNORE_INDEX, Decoder, attention, check_positive_ints, document_mask, lm_loss
from tokenmill.train.llama import LlamaConfig, LlamaDecoder

__all__ = ["ARCHS", "IGNORE_INDEX", "PRESETS", "Block", "CausalSelfAttention", "Decoder", "MLP", "ModelConfig",
           "OPTDecoder", "build_model", "model_config"]


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
    document_mask: bool = False
    """Attention only within each document of a packed sample, when the forward is given position ids (a document
    starts where they are 0). Off by default: OPT was trained with attention across the packed documents."""

    def __post_init__(self) -> None:
        if self.ffn_dim is None:
            # Frozen, so the default has to be written past __setattr__.
            object.__setattr__(self, "ffn_dim", 4 * self.d_model)
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the field to change."""
        check_positive_ints(self, ("vocab_size", "n_layers", "d_model", "n_heads", "max_seq_len", "ffn_dim"))
        if self.d_model % self.n_heads:
            raise ValueError(
                f"ModelConfig.d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}); "
                f"change d_model or n_heads"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"ModelConfig.dropout must be in [0, 1), got {self.dropout!r}")
        if not self.init_std > 0.0:
            raise ValueError(f"ModelConfig.init_std must be > 0, got {self.init_std!r}")
        if not isinstance(self.document_mask, bool):
            raise ValueError(f"ModelConfig.document_mask must be true or false, got {self.document_mask!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


PRESETS: dict[str, dict[str, Any]] = {
    # A CPU test size: a forward+backward takes milliseconds.
    "opt-tiny": dict(arch="opt", n_layers=2, d_model=64, n_heads=4, ffn_dim=256),
    "opt-125m": dict(arch="opt", n_layers=12, d_model=768, n_heads=12, ffn_dim=3072),
    # The real opt-350m projects 1024 <-> 512 around the decoder; this one does not.
    "opt-350m": dict(arch="opt", n_layers=24, d_model=1024, n_heads=16, ffn_dim=4096),
    "opt-1.3b": dict(arch="opt", n_layers=24, d_model=2048, n_heads=32, ffn_dim=8192),
    "opt-2.7b": dict(arch="opt", n_layers=32, d_model=2560, n_heads=32, ffn_dim=10240),
    "opt-6.7b": dict(arch="opt", n_layers=32, d_model=4096, n_heads=32, ffn_dim=16384),
    # Llama family (llama.py). The CPU test size has grouped key/value heads, so the tests cover them.
    "llama-tiny": dict(arch="llama", n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, ffn_dim=192),
    # OPT-125m's and OPT-350m's shapes with Llama's SwiGLU width (8/3 d, rounded up to a multiple of 256).
    "llama-125m": dict(arch="llama", n_layers=12, d_model=768, n_heads=12, ffn_dim=2048),
    "llama-350m": dict(arch="llama", n_layers=24, d_model=1024, n_heads=16, ffn_dim=2816),
    # Llama-3.2-1B's shape: 8 key/value heads for 32 query heads, and its head tied to the token embedding.
    "llama-1b": dict(arch="llama", n_layers=16, d_model=2048, n_heads=32, n_kv_heads=8, ffn_dim=8192,
                     tie_embeddings=True),
}
"""Model sizes by name: the family (``arch``) and its sizes, without vocab_size and max_seq_len (those come from the
tokenizer and data)."""


def model_config(
    preset_or_sizes: str | Mapping[str, Any], vocab_size: int, max_seq_len: int, **overrides
) -> ModelConfig | LlamaConfig:
    """Build a config from a preset name (see `PRESETS`) or a dict, plus overrides; `build_model` makes its model.

    The dict is sizes (an OPT model unless it says ``arch: llama``), or ``preset`` and fields to change:
    `model_config("opt-125m", vocab_size=50272, max_seq_len=2048, dropout=0.0)`,
    `model_config({"preset": "llama-125m", "document_mask": False}, vocab_size=50304, max_seq_len=2048)`,
    `model_config({"arch": "llama", "n_layers": 4, "d_model": 256, "n_heads": 4}, ...)`.
    """
    if isinstance(preset_or_sizes, str):
        sizes = dict(_preset(preset_or_sizes))
    elif isinstance(preset_or_sizes, Mapping):
        sizes = dict(preset_or_sizes)
        if "preset" in sizes:
            base = _preset(sizes.pop("preset"))
            if sizes.get("arch", base["arch"]) != base["arch"]:
                raise ValueError(f"arch {sizes['arch']!r} contradicts the preset's ({base['arch']!r}); leave arch out")
            sizes = {**base, **sizes}
    else:
        raise ValueError(f"model preset must be a preset name or a dict of sizes, got {type(preset_or_sizes).__name__}")
    sizes.update(overrides)
    arch = sizes.pop("arch", "opt")
    if not isinstance(arch, str) or arch not in ARCHS:
        raise ValueError(f"unknown model arch {arch!r}; choose one of {', '.join(ARCHS)}")
    cls = ARCHS[arch][0]
    known = {f.name for f in fields(cls)} - {"vocab_size", "max_seq_len"}
    unknown = sorted(set(sizes) - known)
    if unknown:
        raise ValueError(f"unknown {arch} model field(s) {unknown}; known: {sorted(known)}")
    missing = sorted(f.name for f in fields(cls) if f.name in known and f.name not in sizes
                     and f.default is MISSING)
    if missing:
        raise ValueError(f"{arch} model sizes need {', '.join(missing)}")
    return cls(vocab_size=vocab_size, max_seq_len=max_seq_len, **sizes)


def _preset(name: Any) -> dict[str, Any]:
    if not isinstance(name, str) or name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]


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

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, T, C); mask (B, 1, T, T) from `document_mask`, or None for plain causal attention."""
        B, T, C = x.shape  # (B, T, C)
        q, k, v = self.qkv(x).split(C, dim=2)  # each (B, T, C)
        q = q.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, nh, T, hs)
        # softmax(q k^T / sqrt(hs)) computed as (q * hs^-1/4)(k * hs^-1/4)^T: OPT's rearrangement,
        # which keeps the unscaled q k^T product from overflowing in half precision.
        s = self.head_dim**-0.25
        dropout = self.dropout if self.training else 0.0
        y = attention(q * s, k * s, v, mask, dropout_p=dropout, scale=1.0)  # (B, nh, T, hs)
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

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln_attn(x), mask)  # (B, T, C)
        x = x + self.mlp(self.ln_mlp(x))  # (B, T, C)
        return x


class OPTDecoder(Decoder):
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
            Reset them at document boundaries to restart positions; attention also stops at the
            boundaries (where they are 0) only with `ModelConfig.document_mask`.

        Returns logits (B, T, V) in the compute dtype when labels is None, else the scalar mean
        cross-entropy over labelled positions, computed in float32.
        """
        B, T = input_ids.shape
        if T > self.cfg.max_seq_len:
            raise ValueError(f"sequence length {T} exceeds ModelConfig.max_seq_len={self.cfg.max_seq_len}")
        # Without document masking the blocks get no mask at all: is_causal, OPT's computation unchanged.
        mask = document_mask(position_ids, T) if self.cfg.document_mask and position_ids is not None else None
        if position_ids is None:
            # (1, T) broadcasts over the batch without materialising B copies.
            position_ids = torch.arange(T, device=input_ids.device).unsqueeze(0)  # (1, T)
        x = self.tok_emb(input_ids) + self.pos_emb(position_ids)  # (B, T, C)
        for block in self.blocks:
            x = block(x, mask)  # (B, T, C)
        x = self.ln_f(x)  # (B, T, C)
        logits = F.linear(x, self.tok_emb.weight)  # (B, T, V)
        return logits if labels is None else lm_loss(logits, labels)

    def embedding_params(self) -> int:
        return self.tok_emb.weight.numel() + self.pos_emb.weight.numel()

    def lookup_params(self) -> int:
        # The token embedding is also the head's matmul: only the position table is a mere lookup.
        return self.pos_emb.weight.numel()


ARCHS: dict[str, tuple[type, type[Decoder]]] = {"opt": (ModelConfig, OPTDecoder), "llama": (LlamaConfig, LlamaDecoder)}
"""Each family's config and model class, by the ``arch`` of `PRESETS`."""


def build_model(cfg: ModelConfig | LlamaConfig) -> Decoder:
    """The model of a config from `model_config`, initialised (on the meta device: shapes only, for sharding)."""
    for config_cls, model_cls in ARCHS.values():
        if type(cfg) is config_cls:
            return model_cls(cfg)
    raise TypeError(f"no model for a {type(cfg).__name__}")
