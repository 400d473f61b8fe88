"""What the OPT and Llama decoders share: the base class the trainer sees, the document mask, attention, the loss."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["IGNORE_INDEX", "Decoder", "attention", "check_positive_ints", "document_mask", "lm_loss"]

IGNORE_INDEX = -100
"""Label value that the loss skips (the `F.cross_entropy` default), e.g. for padding."""


def check_positive_ints(cfg: object, names: tuple[str, ...]) -> None:
    """Raise ValueError naming the first of ``names`` that is not a positive int on ``cfg``."""
    for name in names:
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{type(cfg).__name__}.{name} must be a positive int, got {value!r}")


def document_mask(position_ids: torch.Tensor, T: int) -> torch.Tensor:
    """The block-diagonal causal mask of packed samples, (B, 1, T, T) bool, True where query t may attend key s:
    s <= t and both in the same document.

    A document starts where its position id is 0 (the loader's ``position_ids`` restart there; packed-sequence
    flash-attention finds its boundaries the same way). The tokens before a row's first 0 are the tail of a
    document begun in an earlier sample: one document of their own. Every query keeps at least itself, so no row
    of the softmax is empty.
    """
    doc = (position_ids == 0).cumsum(dim=-1)  # (B, T): document number within the row
    causal = torch.ones(T, T, dtype=torch.bool, device=position_ids.device).tril()  # (T, T)
    return ((doc.unsqueeze(-1) == doc.unsqueeze(-2)) & causal).unsqueeze(1)  # (B, 1, T, T)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, dropout_p: float = 0.0,
              scale: float | None = None) -> torch.Tensor:
    """Causal attention (B, nh, T, hs), within documents when ``mask`` (from `document_mask`) is given.

    Without a mask, ``is_causal`` lets SDPA pick its fastest kernel (flash on GPU); a boolean mask rules flash out
    (2.4x its time on an H200, docs/train.md). FlexAttention, which skips whole masked blocks, has no backward on
    CPU in torch 2.13."""
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p, scale=scale)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale)


def lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over labelled positions, (B, T, V) against (B, T)."""
    # float32 because log-softmax over ~50k entries in bf16 loses the small probabilities.
    return F.cross_entropy(logits.float().view(-1, logits.size(-1)), labels.reshape(-1), ignore_index=IGNORE_INDEX)


class Decoder(nn.Module):
    """A decoder-only transformer as the trainer uses it: ``blocks`` (an nn.ModuleList, which FSDP2 shards block by
    block), ``init_weights(generator)``, ``forward(input_ids, labels, position_ids)``, AdamW groups, parameter
    counts and FLOPs per token. Subclasses say which parameters are embeddings and which are only looked up."""

    cfg: object
    blocks: nn.ModuleList

    def init_weights(self, generator: torch.Generator | None = None) -> None:
        raise NotImplementedError

    def embedding_params(self) -> int:
        """Parameters of the input embedding tables (token, and positions where learned)."""
        raise NotImplementedError

    def lookup_params(self) -> int:
        """Parameters used only as a table lookup, never in a matmul (a learned position table, an untied token
        embedding): left out of the FLOPs."""
        raise NotImplementedError

    def param_groups(self, weight_decay: float) -> list[dict]:
        """Two AdamW groups: Linear weights decayed; biases, norms and embeddings not.

        Decaying embeddings (and so a tied head) or norm gains pulls them toward zero for no regularising benefit;
        only the matmul weights are decayed, as in OPT and nanoGPT.
        """
        decay = [m.weight for m in self.modules() if isinstance(m, nn.Linear)]
        decay_ids = {id(p) for p in decay}
        no_decay = [p for p in self.parameters() if id(p) not in decay_ids]
        return [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]

    def num_params(self, exclude_embeddings: bool = False) -> int:
        """Parameter count, each shared parameter once. exclude_embeddings drops the input embedding tables (token
        and positions; a tied head with them): Kaplan et al.'s "non-embedding" count."""
        n = sum(p.numel() for p in self.parameters())
        return n - self.embedding_params() if exclude_embeddings else n

    def flops_per_token(self, seq_len: int) -> int:
        """Training (forward + backward) FLOPs per token, for MFU: 6 N + 12 L H Q T.

        As nanoGPT's estimate_mfu (PaLM appendix B): N counts every parameter that takes part in a matmul, so
        every one but the lookup-only tables (`lookup_params`); a tied token embedding stays in, since it is also
        the output head's (V, C) matmul. 12 L H Q T is the attention score and value matmuls (H query heads of
        size Q over T keys; grouped key/value heads do not shrink them), counted in full: neither the causal mask
        nor a document mask is subtracted, as the kernels that apply them (SDPA with a mask) compute the masked
        blocks anyway.
        """
        cfg = self.cfg
        n = self.num_params() - self.lookup_params()
        return 6 * n + 12 * cfg.n_layers * cfg.n_heads * cfg.head_dim * seq_len
