"""Document masking: attention and positions restart at each document of a packed sample, in the models and the trainer."""

from __future__ import annotations

import pytest
import torch

from tokenmill.loader import TokenLoader
from tokenmill.train.config import parse_train_config
from tokenmill.train.decoder import document_mask
from tokenmill.train.distributed import setup
from tokenmill.train.gradients import forward_backward
from tokenmill.train.model import build_model, model_config
from tokenmill.train.report import LogReporter
from tokenmill.train.run import Run, padded_vocab
from tokenmill.train.trainer import evaluate
from tests.train.runs import config, write_tokens

V, S = 97, 32
LENGTHS = (9, 12, 11)
"""Three documents packed in one sample of S tokens."""


def packed(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows of three documents: tokens (2, S) and position ids restarting at each document, as the loader's."""
    x = torch.randint(0, V, (2, S), generator=torch.Generator().manual_seed(seed))
    positions = torch.cat([torch.arange(n) for n in LENGTHS]).expand(2, S)
    return x, positions


def span(i: int) -> slice:
    start = sum(LENGTHS[:i])
    return slice(start, start + LENGTHS[i])


def model(preset: str, document_mask: bool):
    m = build_model(model_config({"preset": preset, "document_mask": document_mask}, vocab_size=V, max_seq_len=S))
    m.init_weights(torch.Generator().manual_seed(0))
    return m.eval()


def test_the_mask_is_block_diagonal_and_causal():
    positions = torch.tensor([[3, 4, 0, 1, 2, 0]])  # the tail of a document begun earlier, then two
    want = torch.tensor([[1, 0, 0, 0, 0, 0],
                         [1, 1, 0, 0, 0, 0],
                         [0, 0, 1, 0, 0, 0],
                         [0, 0, 1, 1, 0, 0],
                         [0, 0, 1, 1, 1, 0],
                         [0, 0, 0, 0, 0, 1]], dtype=torch.bool)
    mask = document_mask(positions, 6)
    assert mask.shape == (1, 1, 6, 6) and torch.equal(mask[0, 0], want)


@pytest.mark.parametrize("preset", ["llama-tiny", "opt-tiny"])
@pytest.mark.parametrize("changed", [0, 1])
def test_a_changed_document_leaves_the_others_logits_alone(preset, changed):
    """Document ``changed`` rewritten (same length): with masking, every other document's logits are bit for bit
    the same; without, the documents after it move (attention crossed the boundary)."""
    x, positions = packed()
    y = x.clone()
    y[:, span(changed)] = (y[:, span(changed)] + 1 + torch.arange(LENGTHS[changed])) % V
    masked, unmasked = model(preset, True), model(preset, False)
    with torch.no_grad():
        a, b = masked(x, position_ids=positions), masked(y, position_ids=positions)
        assert not torch.equal(a[:, span(changed)], b[:, span(changed)])
        for other in {0, 1, 2} - {changed}:
            assert torch.equal(a[:, span(other)], b[:, span(other)]), other
        a, b = unmasked(x, position_ids=positions), unmasked(y, position_ids=positions)
        for later in range(changed + 1, 3):
            assert not torch.allclose(a[:, span(later)], b[:, span(later)]), later


@pytest.mark.parametrize("preset", ["llama-tiny", "opt-tiny"])
def test_each_packed_document_reads_as_if_alone(preset):
    """With masking, a document's logits in the packed sample are its logits run by itself (to float rounding:
    the kernels see other shapes); the mask needs position ids, without them attention is plain causal."""
    x, positions = packed()
    m = model(preset, True)
    with torch.no_grad():
        whole = m(x, position_ids=positions)
        for i in range(3):
            alone = m(x[:, span(i)])
            assert torch.allclose(whole[:, span(i)], alone, rtol=0, atol=1e-5), i
        assert torch.equal(m(x), model(preset, False)(x))


def test_the_trainer_feeds_position_ids_in_training_and_validation(tmp_path):
    """llama-tiny in the trainer (one process): the step's loss and the validation loss are the model's with the
    loader's position ids (documents masked), not without."""
    tokens = write_tokens(tmp_path / "tokens")
    cfg = parse_train_config(config(tokens, tmp_path / "run", model="llama-tiny", eval_batches=1))
    run, d = Run(cfg, LogReporter(cfg.log_every)), setup()
    try:
        run.build(d)
        run.iterator = iter(run.loader)
        loss, batch = forward_backward(run, 1)
        valid_loss = evaluate(run)
    finally:
        run.close()
        d.close()
    reference = build_model(cfg.resolved_model(padded_vocab(256)))
    reference.init_weights(torch.Generator().manual_seed(cfg.seed))
    for split, k, got in (("train", batch, loss), ("valid", 0, valid_loss)):
        loader = TokenLoader([str(tokens)], seq_len=32, global_batch_size=12, seed=cfg.seed, position_ids=True,
                             split=split, shuffle=split == "train")
        micro = loader.micro_batch(k, 0)
        assert (micro["position_ids"][:, 1:] == 0).any()  # several documents in a sample
        with torch.no_grad():
            want = reference(micro["input_ids"], labels=micro["labels"], position_ids=micro["position_ids"])
            plain = reference(micro["input_ids"], labels=micro["labels"])
        assert abs(got - want.item()) < 1e-6 and abs(got - plain.item()) > 1e-4, (split, got, want, plain)
