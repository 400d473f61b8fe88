"""The scorer against the model's own loss, and the task readers on the shared eval-set files."""

from __future__ import annotations

import math

import pytest
import torch

from tokenmill.ablate.config import TaskConfig
from tokenmill.ablate.scoring import Scorer, item_metrics
from tokenmill.ablate.tasks import Item, read_items


@pytest.fixture(scope="module")
def scorer():
    from tokenmill.tokenize.tokenizer import train_bpe
    from tokenmill.train.model import build_model, model_config

    tok = train_bpe(["the cat sees the dog. a bird flies over the house."] * 20, 300)
    model = build_model(model_config("opt-tiny", vocab_size=320, max_seq_len=16))
    model.init_weights(torch.Generator().manual_seed(0))
    model.eval()  # the reference losses below: no dropout (the scorer switches to eval mode itself)
    return Scorer(model, tok, seq_len=16, batch=3)


def test_document_nll_is_the_models_loss_over_windows_of_seq_len(scorer):
    text = "the cat sees the dog. a bird flies over the house. the dog sees the bird."
    ids = [scorer.tok.eos_id, *scorer.encode(text)]
    assert len(ids) > 17  # more than one window
    expected = 0.0
    for start in range(0, len(ids) - 1, 16):
        window = torch.tensor([ids[start:start + 17]])
        with torch.no_grad():
            loss = scorer.model(window[:, :-1], labels=window[:, 1:])
        expected += float(loss) * (window.shape[1] - 1)
    (nll, n_bytes), = scorer.document_nll([text])
    assert nll == pytest.approx(expected, rel=1e-5) and n_bytes == len(text.encode())


def test_loglikelihood_moves_the_contexts_trailing_space_and_batches_rows_of_any_length(scorer):
    pairs = [("the cat ", "sees"), ("the cat", " sees"), ("", "the dog"), ("a bird flies over the", " house.")]
    out = scorer.loglikelihoods(pairs)
    assert out[0] == out[1]  # the harness's `_encode_pair`: the same tokens either way
    alone = [scorer.loglikelihoods([p])[0] for p in pairs]  # padding in a batch changes nothing
    assert [round(a, 4) for a, _ in out] == [round(a, 4) for a, _ in alone]
    assert all(ll < 0 for ll, _ in out)


def test_item_metrics_follow_the_harness_conventions():
    item = Item("0", ("q",) * 3, (" a", " bbbbbb", " cc"), 1, ("a", "bbbbbb", "cc"))
    m = item_metrics(item, [-2.0, -3.0, -5.0])
    assert m["acc"] == 0.0  # argmax of the log-likelihoods: choice 0
    assert m["acc_norm"] == 1.0  # per character: -2, -0.5, -2.5
    assert m["p_correct"] == pytest.approx(math.exp(-3) / (math.exp(-2) + math.exp(-3) + math.exp(-5)))


@pytest.mark.parametrize("file,fmt,choices", [("llmfoundry_arc_easy.jsonl", "arc", 4), ("llmfoundry_piqa.jsonl", "piqa", 2),
                                              ("hellaswag_val_full.txt.gz", "hellaswag_text", 4),
                                              ("llmfoundry_winogrande.jsonl", "winogrande", 2)])
def test_readers_take_the_gold_and_the_harness_prompt(shared_data, file, fmt, choices):
    path = shared_data / "evalsets" / file
    items = read_items(TaskConfig(name=fmt, path=str(path), format=fmt, max_items=25), path)
    assert len(items) == 25
    for item in items:
        assert len(item.continuations) == len(item.contexts) >= choices - (fmt == "arc")  # a few ARC items have 3
        assert 0 <= item.gold < len(item.continuations)
        assert all(c.startswith(" ") for c in item.continuations)
    if fmt in ("arc", "piqa"):
        assert items[0].contexts[0].startswith("Question: ") and items[0].contexts[0].endswith("\nAnswer:")
    if fmt == "winogrande":
        assert items[0].contexts[0] != items[0].contexts[1] and items[0].continuations[0] == items[0].continuations[1]


def test_a_record_without_its_gold_is_an_error_naming_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"query": "Question: x", "choices": ["a", "b"], "gold": 0}\n{"query": "Question: y"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not a piqa item"):
        read_items(TaskConfig(name="p", path=str(path), format="piqa"), path)
