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
from tokenmill.classifier.score import score_texts
from tokenmill.classifier.train import Example, deduplicate, split_keys, train_classifier, valid_mask
from tokenmill.fasttext.binding import load_model
from tokenmill.sources.formats import READERS
from tokenmill.text.normalize import NormalizeConfig, normalize
from tokenmill.text.pii import PiiConfig, replace_pii


def test_the_installed_fasttext_trains_and_is_fasttext_numpy2():
    """The project's one fastText binding is fasttext-numpy2 (nothing it depends on brings fasttext-predict, which
    ships the same files): the module imported is fasttext-numpy2's own, by its RECORD hash."""
    from tokenmill.fasttext.binding import fasttext_distribution, fasttext_module

    assert hasattr(fasttext_module(), "train_supervised")
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


def test_a_training_that_read_unwritten_memory_trains_and_gives_the_same_bytes(tmp_path):
    """fastText initializes a tenth of its input matrix with one thread and reads the rest as malloc left it: 2,000
    short lines with bucket 1000 and dim 8 stopped with "Encountered NaN" on the first training of a fresh process.
    With every allocation zeroed (fit.py), it trains, and to the same bytes again."""
    from tokenmill.classifier.fit import fit

    lines = "".join(f"__label__{'a' if i % 2 else 'b'} {'alpha beta' if i % 2 else 'gamma delta'} w{i % 7} x{i % 13}\n"
                    for i in range(2000))
    (tmp_path / "train.txt").write_text(lines)
    arguments = {"epoch": 5, "thread": 1, "seed": 1, "verbose": 0, "dim": 8, "bucket": 1000}
    for name in ("a.bin", "b.bin"):
        fit(tmp_path / "train.txt", tmp_path / name, arguments)
    assert (tmp_path / "a.bin").read_bytes() == (tmp_path / "b.bin").read_bytes()
    assert load_model(str(tmp_path / "a.bin")).predict("alpha beta")[0] == ("__label__a",)


def test_auto_passes_are_fastTexts_default_for_large_sets_and_more_for_small_ones():
    from tokenmill.classifier.train import fit_epochs

    assert [fit_epochs(n) for n in (10, 250, 346, 1_000, 5_000, 100_000)] == [100, 100, 73, 25, 5, 5]


def _paragraphs(path: Path, texts, count: int) -> Path:
    """The first `count` paragraphs (lines) of 100 characters or more, as JSON lines with ids."""
    found = [p.strip() for t in texts for p in t.split("\n") if len(p.strip()) >= 100][:count]
    path.write_text("".join(json.dumps({"id": f"{path.stem}-{i}", "text": t}) + "\n" for i, t in enumerate(found)))
    return path


@pytest.fixture(scope="module")
def paragraphs(tmp_path_factory):
    """Issue 31's small real set: 780 Pile paragraphs (abstracts, patents) against 390 Common Crawl page
    paragraphs (menus, shop and forum text), 2:1; and a config with fastText's options except a small model."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real-data samples not found at {SHARED_DATA} (they sit beside the repository in CI)")
    import gzip

    root = tmp_path_factory.mktemp("paragraphs")
    _paragraphs(root / "pile.jsonl", json.loads((SHARED_DATA / "pile" / "pearl_pile_texts.json").read_text()), 780)
    cc = SHARED_DATA / "commoncrawl" / "dolma_CC-MAIN-20190717121559-20190717143559-00140.jsonl.gz"
    with gzip.open(cc, "rt", encoding="utf-8") as f:
        pages = [json.loads(line)["text"] for line in f.read().split("\n") if line.strip()]
    _paragraphs(root / "cc.jsonl", pages, 390)
    return root, {
        "output": "model", "seed": 0,
        "positives": [{"name": "pile", "format": "jsonl", "paths": ["pile.jsonl"], "id_field": "id"}],
        "negatives": [{"name": "cc", "format": "jsonl", "paths": ["cc.jsonl"], "id_field": "id", "language": "any"}],
        "fasttext": {"dim": 16, "bucket": 100000},
    }


def test_auto_passes_separate_a_small_real_set(paragraphs):
    """Issue 31: on such a set, fastText's 5 passes gave a valid ROC AUC of 0.67 (here 0.818 at seed 0, 0.818 to
    0.881 over seeds 0-4, 23 to 30 of about 40 valid negatives scoring >= 0.5). `epoch: auto` makes 76 passes
    (25,000 updates over the smaller class's 330 training paragraphs): 0.982 at seed 0, 0.982 to 0.993 over seeds
    0-4 (3 to 5 negatives >= 0.5). The floor, 0.95, is far above 5 passes' best. The sidecar says how the passes
    were chosen, and warns about the 2:1 balance."""
    root, data = paragraphs
    result = train_classifier(parse_train_config(data, root))
    s = result.sidecar
    print(f"epoch auto: {s['fasttext']['epoch']} passes, valid ROC AUC {s['valid']['roc_auc']:.4f}")
    assert s["valid"]["roc_auc"] >= 0.95
    from tokenmill.classifier.train import fit_epochs

    smaller = min(s["counts"]["train"].values())
    assert s["fit"] == {"epoch": fit_epochs(smaller), "smaller_class_documents": smaller,
                        "rule": s["fit"]["rule"]} and s["fit"]["rule"].startswith("auto:")
    assert s["fasttext"]["epoch"] == fit_epochs(smaller) > 5
    train = s["counts"]["train"]
    assert len(s["warnings"]) == 1 and s["warnings"][0].startswith(
        f"the classes are unbalanced: {train['__label__hq']} __label__hq against {train['__label__lq']} __label__lq")
    assert json.loads(result.sidecar_path.read_text())["warnings"] == s["warnings"]


def test_a_classifier_that_barely_separates_is_warned_about(paragraphs, tmp_path, capsys):
    """fastText's default 5 passes on the same set, set by hand: the summary and the sidecar say the AUC is below
    the floor, besides the balance."""
    root, data = paragraphs
    config = tmp_path / "classifier.yaml"
    config.write_text(yaml.safe_dump({**data, "output": str(tmp_path / "model"),
                                      "positives": [{**data["positives"][0], "paths": [str(root / "pile.jsonl")]}],
                                      "negatives": [{**data["negatives"][0], "paths": [str(root / "cc.jsonl")]}],
                                      "fasttext": {**data["fasttext"], "epoch": 5}}))
    assert cli.main(["quality", "train", str(config)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    sidecar = json.loads((tmp_path / "model" / "model.json").read_text())
    assert sidecar["fit"] == {"epoch": 5, "rule": "configured"} and sidecar["valid"]["roc_auc"] < 0.9
    assert [w.split(":")[0] for w in sidecar["warnings"]] == ["the valid ROC AUC is "
                                                             f"{sidecar['valid']['roc_auc']:.3f}, below 0.9",
                                                             "the classes are unbalanced"]
    assert out.count("warning:") == 2 and "below 0.9: the model barely tells the classes apart" in out
