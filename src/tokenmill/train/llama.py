"""A Llama-family decoder-only transformer in one file (nanoGPT style): RMSNorm, rotary positions, SwiGLU, no biases.

Architecture as in Llama (Touvron et al. 2023; Llama 3, Grattafiori et al. 2024): pre-RMSNorm blocks, rotary position
embeddings (RoPE) on queries and keys, a SwiGLU MLP, no bias anywhere, grouped-query attention when n_kv_heads <
n_heads, no dropout, and an output head untied from the token embedding unless `tie_embeddings` (Llama-3.2-1B ties).
Rotary in the "rotate half" layout of the Hugging Face port, so its checkpoints map weight for weight (a test holds
the logits equal to `transformers`' LlamaForCausalLM). Document masking is on by default: with position ids (which
restart at 0 at each document of a packed sample) attention stays within each document.

Deliberate differences from Meta's Llama:
  * q, k, v in one fused Linear and the SwiGLU's gate and up in another (fewer, larger GEMMs);
  * init N(0, init_std) with the residual projections scaled by 1/sqrt(2 * n_layers), as the OPT model here (not
    torchtitan's per-layer depth init);
  * no Llama-3.1 rope scaling (for contexts beyond the pretraining length).

The model holds no dtype (mixed precision is the trainer's business). Shapes in comments: B batch, T sequence, C
d_model, nh query heads, nkv key/value heads, hs head size, V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tokenmill.train.decoder import Decoder, attention, check_positive_ints, document_mask, lm_loss

__all__ = ["LlamaConfig", "LlamaDecoder", "RMSNorm", "rotary"]


@dataclass(frozen=True, kw_only=True, slots=True)
class LlamaConfig:
    """Sizes and options of a `LlamaDecoder`; checked on construction."""

    vocab_size: int
    """Rows of the token embedding and of the output head. Pad to a multiple of 64 for speed."""
    n_layers: int
    """Number of transformer blocks."""
    d_model: int
    """Width of the residual stream; must be divisible by `n_heads`."""
    n_heads: int
    """Query heads per block; head size is `d_model // n_heads`, and must be even (rotary turns pairs)."""
    max_seq_len: int
    """The longest sequence the model is run on (rotary needs no table, so this is a check only)."""
    n_kv_heads: int | None = None
    """Key/value heads (grouped-query attention): each serves `n_heads // n_kv_heads` query heads. None means
    `n_heads` (multi-head attention)."""
    ffn_dim: int | None = None
    """Hidden width of the SwiGLU MLP; None means Llama's rule, 8/3 * d_model rounded up to a multiple of 256."""
    rope_theta: float = 500000.0
    """Rotary base: the wavelengths run from 2 pi to about 2 pi * rope_theta (Llama 3's 500000; Llama 2: 10000)."""
    norm_eps: float = 1e-5
    """RMSNorm epsilon."""
    tie_embeddings: bool = False
    """The output head reads the token embedding (Llama-3.2-1B and 3B) instead of a (V, C) matrix of its own."""
    document_mask: bool = True
    """Attention only within each document of a packed sample, when the forward is given position ids (a document
    starts where they are 0). The trainer then asks the loader for them (`loader.position_ids`)."""
    init_std: float = 0.02
    """Std of the normal init of every weight and embedding (residual projections: divided by sqrt(2 n_layers))."""

    def __post_init__(self) -> None:
        # Frozen, so the defaults have to be written past __setattr__.
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        if self.ffn_dim is None and isinstance(self.d_model, int):
            object.__setattr__(self, "ffn_dim", 256 * math.ceil(8 * self.d_model / 3 / 256))
        self.validate()

    def validate(self) -> None:
        """Raise ValueError naming the field to change."""
        check_positive_ints(self, ("vocab_size", "n_layers", "d_model", "n_heads", "max_seq_len", "n_kv_heads",
                                   "ffn_dim"))
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(f"LlamaConfig.d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}) "
                             f"into an even head size (rotary turns pairs of dimensions); change d_model or n_heads")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"LlamaConfig.n_heads ({self.n_heads}) must be a multiple of n_kv_heads "
                             f"({self.n_kv_heads}); change n_kv_heads")
        for name in ("rope_theta", "norm_eps", "init_std"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"LlamaConfig.{name} must be > 0, got {value!r}")
        for name in ("tie_embeddings", "document_mask"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"LlamaConfig.{name} must be true or false, got {getattr(self, name)!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


class RMSNorm(nn.Module):
    """x / rms(x) * weight, the mean square taken in float32 whatever the compute dtype (a bf16 sum of squares over
    thousands of channels loses the small ones), the result in x's dtype."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x.float(), (x.size(-1),), eps=self.eps).type_as(x) * self.weight

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)


def rotary(position_ids: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of every position's rotation angles, each (B or 1, 1, T, hs), in float32.

    Computed from the position ids at each forward rather than kept as a buffer: positions restart at each document
    of a packed sample, and a buffer would need filling again after a meta-device build (`to_empty`). Once per
    forward for all the blocks: (B, T, hs) elements, nothing next to the matmuls."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=position_ids.device).float() / head_dim)  # (hs/2,)
    angles = position_ids.float().unsqueeze(-1) * inv_freq  # (B, T, hs/2)
    angles = torch.cat((angles, angles), dim=-1).unsqueeze(1)  # (B, 1, T, hs)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, nh, T, hs) rotated pairwise: dimension i turns with dimension i + hs/2 ("rotate half")."""
    x1, x2 = x.chunk(2, dim=-1)  # each (B, nh, T, hs/2)
    return (x * cos + torch.cat((-x2, x1), dim=-1) * sin).type_as(x)  # (B, nh, T, hs)


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        # One fused matmul for q, k and v: fewer, larger GEMMs.
        self.qkv = nn.Linear(cfg.d_model, (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim, bias=False)
        self.out_proj = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None
                ) -> torch.Tensor:
        B, T, C = x.shape  # (B, T, C)
        nh, nkv, hs = self.n_heads, self.n_kv_heads, self.head_dim
        q, k, v = self.qkv(x).split((nh * hs, nkv * hs, nkv * hs), dim=2)
        q = q.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, nkv, hs).transpose(1, 2)  # (B, nkv, T, hs)
        v = v.view(B, T, nkv, hs).transpose(1, 2)  # (B, nkv, T, hs)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if nkv < nh:
            # Each key/value head serves nh // nkv query heads: repeated explicitly (torchtitan's repeat_kv), so
            # that every SDPA kernel takes it, masked or not.
            k = k.repeat_interleave(nh // nkv, dim=1)  # (B, nh, T, hs)
            v = v.repeat_interleave(nh // nkv, dim=1)  # (B, nh, T, hs)
        y = attention(q, k, v, mask)  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, nh * hs)  # (B, T, nh * hs)
        return self.out_proj(y)  # (B, T, C)


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)) (Shazeer 2020): gate and up in one fused matmul."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.gate_up = nn.Linear(cfg.d_model, 2 * cfg.ffn_dim, bias=False)
        self.down = nn.Linear(cfg.ffn_dim, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)  # each (B, T, ffn_dim)
        return self.down(F.silu(gate) * up)  # (B, T, C)


class Block(nn.Module):
    """Pre-RMSNorm block: the residual stream itself is never normalised."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = SwiGLU(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None = None
                ) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin, mask)  # (B, T, C)
        x = x + self.mlp(self.mlp_norm(x))  # (B, T, C)
        return x


class LlamaDecoder(Decoder):
    """Decoder-only transformer; `blocks` is an nn.ModuleList so FSDP2 can shard it block by block.

    Construct on the meta device for large sizes, shard, `to_empty(device=...)`, then call `init_weights()`;
    construction on a real device initialises at once.
    """

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        # Tied: no head module, the head reads tok_emb.weight (as OPTDecoder), so the tie survives to_empty(),
        # load_state_dict() and sharding, and the state dict holds the matrix once.
        self.output = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.init_weights()

    @property
    def output_weight(self) -> nn.Parameter:
        """The output head's weight, (V, C): the token embedding's when tied."""
        return self.tok_emb.weight if self.output is None else self.output.weight

    @torch.no_grad()
    def init_weights(self, generator: torch.Generator | None = None) -> None:
        """N(0, init_std) weights and embeddings, RMSNorm gains 1; the residual projections (attention out_proj,
        MLP down) get init_std / sqrt(2 * n_layers), since each block adds two branches to the residual stream
        (GPT-2 / Megatron). `generator` makes the init reproducible without touching the global RNG."""
        std = self.cfg.init_std
        resid_std = std / math.sqrt(2 * self.cfg.n_layers)
        nn.init.normal_(self.tok_emb.weight, 0.0, std, generator=generator)
        for block in self.blocks:
            for linear, s in ((block.attn.qkv, std), (block.attn.out_proj, resid_std), (block.mlp.gate_up, std),
                              (block.mlp.down, resid_std)):
                nn.init.normal_(linear.weight, 0.0, s, generator=generator)
            block.attn_norm.reset_parameters()
            block.mlp_norm.reset_parameters()
        self.norm.reset_parameters()
        if self.output is not None:
            nn.init.normal_(self.output.weight, 0.0, std, generator=generator)

    def forward(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits, or the loss when labels are given.

        input_ids: LongTensor (B, T), T <= max_seq_len.
        labels: LongTensor (B, T) aligned with input_ids (already shifted by the caller: input = tokens[:-1],
            labels = tokens[1:]); positions labelled -100 are skipped.
        position_ids: LongTensor (B, T); default 0..T-1 for every row. The rotary angles follow them; with
            `LlamaConfig.document_mask`, a new document starts at each 0, and attention stays within documents.

        Returns logits (B, T, V) in the compute dtype when labels is None, else the scalar mean cross-entropy over
        labelled positions, computed in float32.
        """
        B, T = input_ids.shape
        if T > self.cfg.max_seq_len:
            raise ValueError(f"sequence length {T} exceeds LlamaConfig.max_seq_len={self.cfg.max_seq_len}")
        mask = document_mask(position_ids, T) if self.cfg.document_mask and position_ids is not None else None
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device).unsqueeze(0)  # (1, T)
        cos, sin = rotary(position_ids, self.cfg.head_dim, self.cfg.rope_theta)  # each (B or 1, 1, T, hs)
        x = self.tok_emb(input_ids)  # (B, T, C)
        for block in self.blocks:
            x = block(x, cos, sin, mask)  # (B, T, C)
        x = self.norm(x)  # (B, T, C)
        logits = F.linear(x, self.output_weight)  # (B, T, V)
        return logits if labels is None else lm_loss(logits, labels)

    def embedding_params(self) -> int:
        return self.tok_emb.weight.numel()

    def lookup_params(self) -> int:
        # Untied, the token embedding is only looked up (the head is a matmul of its own); tied, it is the head.
        return 0 if self.cfg.tie_embeddings else self.tok_emb.weight.numel()
