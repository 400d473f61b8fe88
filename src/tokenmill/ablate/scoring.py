"""Scores of one model: log-likelihoods of continuations (multiple choice) and bits per byte of held-out documents."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from tokenmill.ablate.tasks import Item


class Scorer:
    """A trained decoder and its tokenizer (`LoadedTokenizer`), scored in eval mode, without gradients, on CPU or
    wherever the model lies; windows of at most `seq_len` tokens, `batch` of them per forward."""

    def __init__(self, model: torch.nn.Module, tokenizer, seq_len: int, batch: int = 16):
        self.model = model
        self.tok = tokenizer
        self.seq_len = seq_len
        self.batch = batch
        self.device = next(model.parameters()).device

    def encode(self, text: str) -> list[int]:
        """Token ids of a text, with no special tokens (an `<|endoftext|>` in the text is text)."""
        return list(self.tok.text_encoder.encode(text, add_special_tokens=False).ids)

    def _logprobs(self, rows: Sequence[list[int]]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per row of at most seq_len + 1 ids: log P(ids[t+1] | ids[:t+1]) for each t, float32 (len - 1,), and whether
        ids[t+1] is the most likely next id (bool, len - 1)."""
        out: list[tuple[torch.Tensor, torch.Tensor]] = []
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                for start in range(0, len(rows), self.batch):
                    chunk = rows[start:start + self.batch]
                    width = max(len(r) for r in chunk) - 1
                    ids = torch.zeros((len(chunk), width), dtype=torch.long)  # (B, T), right-padded
                    for i, r in enumerate(chunk):
                        ids[i, :len(r) - 1] = torch.tensor(r[:-1])
                    logits = self.model(ids.to(self.device)).float()  # (B, T, V)
                    logp = torch.log_softmax(logits, dim=-1)
                    for i, r in enumerate(chunk):
                        target = torch.tensor(r[1:], device=self.device)
                        row = logp[i, :len(r) - 1]  # (len - 1, V)
                        out.append((row.gather(-1, target[:, None])[:, 0].cpu(), (row.argmax(-1) == target).cpu()))
        finally:
            self.model.train(was_training)
        return out

    def loglikelihoods(self, pairs: Sequence[tuple[str, str]]) -> list[tuple[float, bool]]:
        """(log P(continuation | context), whether it is the greedy continuation) per pair, tokenized as the harness's
        `HFLM._encode_pair` does: trailing spaces of the context moved to the continuation, the continuation's tokens
        those of context + continuation after the context's own; an empty context starts from end-of-text; the
        left of a pair longer than seq_len + 1 tokens cut off."""
        rows, lengths = [], []
        for context, continuation in pairs:
            spaces = len(context) - len(context.rstrip())
            if spaces:
                continuation, context = context[-spaces:] + continuation, context[:-spaces]
            whole = self.encode(context + continuation)
            ctx = self.encode(context)
            cont = whole[len(ctx):]
            if not ctx:
                ctx = [self.tok.eos_id]
            if not cont:
                raise ValueError(f"continuation {continuation!r} has no token of its own after {context[-40:]!r}")
            rows.append((ctx + cont)[-(self.seq_len + 1):])
            lengths.append(len(cont))
        out = []
        for n, (lp, top) in zip(lengths, self._logprobs(rows)):
            out.append((float(lp[-n:].sum()), bool(top[-n:].all())))
        return out

    def document_nll(self, texts: Sequence[str]) -> list[tuple[float, int]]:
        """(negative log-likelihood in nats, UTF-8 bytes) of each text, its ids after an end-of-text id, scored in
        consecutive windows of seq_len predictions (each window restarts its context)."""
        rows, owner = [], []
        for k, text in enumerate(texts):
            ids = [self.tok.eos_id, *self.encode(text)]
            for start in range(0, len(ids) - 1, self.seq_len):
                rows.append(ids[start:start + self.seq_len + 1])
                owner.append(k)
        nll = [0.0] * len(texts)
        for k, (lp, _) in zip(owner, self._logprobs(rows)):
            nll[k] -= float(lp.sum())
        return [(nll[k], len(text.encode("utf-8"))) for k, text in enumerate(texts)]


def item_metrics(item: Item, lls: Sequence[float]) -> dict[str, float]:
    """`acc` and `acc_norm` as the harness computes them for a multiple-choice task (argmax of the log-likelihoods,
    and of the log-likelihoods over each choice's length in characters, first index on a tie), and `p_correct`:
    the probability of the gold choice normalised over the choices."""
    ll = np.asarray(lls, dtype=np.float64)
    lengths = np.array([float(len(c)) for c in item.choices])
    top = ll.max()
    p = np.exp(ll - top)
    return {"acc": float(int(np.argmax(ll)) == item.gold), "acc_norm": float(int(np.argmax(ll / lengths)) == item.gold),
            "p_correct": float(p[item.gold] / p.sum())}


def score_items(scorer: Scorer, items: Sequence[Item]) -> list[dict[str, float]]:
    """Every item's metrics (`item_metrics`), all of its choices scored in one batch of pairs."""
    pairs = [(c, x) for item in items for c, x in zip(item.contexts, item.continuations)]
    lls = [ll for ll, _ in scorer.loglikelihoods(pairs)]
    out, at = [], 0
    for item in items:
        n = len(item.continuations)
        out.append(item_metrics(item, lls[at:at + n]))
        at += n
    return out


def bits_per_byte(nll: float, n_bytes: int) -> float:
    """Nats over bytes as bits per byte; nan for no bytes."""
    return nll / (math.log(2) * n_bytes) if n_bytes else math.nan
