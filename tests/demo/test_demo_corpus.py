"""Tests for tokenmill.demo: determinism, planted faults, variety and size scaling of the demo corpus."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
import zstandard

from tokenmill.demo import BOOK_GENRES, FORUM_BOARDS, NEWS_CATEGORIES, TOPICS, write_demo_corpus
from tokenmill.demo import planted as planted_mod

EXPECTED_KINDS = {"bad_json", "decode_error", "empty_text", "missing_text", "not_an_object"}
_CJK = re.compile(r"[\u4e00-\u9fff]")
_ASCII_LETTER = re.compile(r"[A-Za-z]")


# -- helpers ------------------------------------------------------------------


def _sha256_tree(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _raw_lines(path: Path) -> list[bytes]:
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.decompress(data)
    elif path.name.endswith(".zst"):
        data = zstandard.ZstdDecompressor().decompress(data)
    assert data.endswith(b"\n")
    return data[:-1].split(b"\n")


def _dotted(record, path: str):
    for key in path.split("."):
        if not isinstance(record, dict) or key not in record:
            return None
        record = record[key]
    return record


def _config(root: Path) -> dict:
    return yaml.safe_load((root / "demo.yaml").read_text(encoding="utf-8"))


def _truth(root: Path) -> dict:
    return json.loads((root / "ground_truth.json").read_text(encoding="utf-8"))


def _files(root: Path, source_cfg: dict) -> list[Path]:
    return sorted(p for pattern in source_cfg["paths"] for p in root.glob(pattern))


def _valid_records(root: Path) -> dict[str, list[dict]]:
    """source -> records that are not planted, each checked to be a dict with text and id."""
    planted = {(p["file"], p["line"]) for p in _truth(root)["planted"]}
    out: dict[str, list[dict]] = {}
    for src in _config(root)["sources"]:
        rows = []
        for path in _files(root, src):
            rel = path.relative_to(root).as_posix()
            if src["format"] == "parquet":
                records = pq.read_table(path).to_pylist()
            else:
                records = [
                    json.loads(line.decode("utf-8"))
                    for n, line in enumerate(_raw_lines(path), 1)
                    if (rel, n) not in planted
                ]
            for rec in records:
                assert isinstance(rec, dict), (rel, rec)
                text = _dotted(rec, src["text_field"])
                assert isinstance(text, str) and text.strip(), (rel, rec)
                assert isinstance(_dotted(rec, src["id_field"]), str), (rel, rec)
                rows.append({"text": text, "id": _dotted(rec, src["id_field"]),
                             "subset": _dotted(rec, src.get("subset_field", "")) if src.get("subset_field") else None,
                             "record": rec})
        out[src["name"]] = rows
    return out


# -- fixtures: a handful of small corpora, built once per module ---------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("demo_a")
    return root, write_demo_corpus(root, seed=1234)


@pytest.fixture(scope="module")
def valid(corpus) -> dict[str, list[dict]]:
    return _valid_records(corpus[0])


# -- determinism ----------------------------------------------------------------


def test_same_seed_gives_byte_identical_files(corpus, tmp_path):
    root, summary = corpus
    again = tmp_path / "again"
    write_demo_corpus(again, seed=1234)
    first, second = _sha256_tree(root), _sha256_tree(again)
    assert set(first) == set(summary["files"])
    assert first == second


def test_different_seed_gives_different_text(valid, tmp_path):
    other = tmp_path / "other"
    write_demo_corpus(other, seed=99, docs_per_source=60)
    ours = {r["text"] for rows in valid.values() for r in rows}
    theirs = {r["text"] for rows in _valid_records(other).values() for r in rows}
    assert len(theirs) >= 4 * 60
    assert not ours & theirs


# -- layout, config and ground truth ------------------------------------------------


def test_config_and_ground_truth_describe_the_files(corpus, valid):
    root, summary = corpus
    cfg, truth = _config(root), _truth(root)
    assert (root / "demo.yaml").read_text().startswith("# tokenmill demo run")
    assert cfg["seed"] == 1234 and cfg["output"] == "run" and cfg["stages"] == {"sample": {}}
    assert [s["name"] for s in cfg["sources"]] == ["web_en", "books_en", "news_zh", "forum_en"]
    assert truth["version"] == 1 and truth["seed"] == 1234
    for src in cfg["sources"]:
        gt = truth["sources"][src["name"]]
        globbed = [p.relative_to(root).as_posix() for p in _files(root, src)]
        assert globbed == sorted(gt["files"]) and len(globbed) >= 3
        assert gt["valid_documents"] == len(valid[src["name"]]) == summary["sources"][src["name"]]["documents"]
        n_planted = sum(p["source"] == src["name"] for p in truth["planted"])
        assert gt["records"] == gt["valid_documents"] + n_planted
        text_bytes = sum(len(r["text"].encode("utf-8")) for r in valid[src["name"]])
        assert gt["text_bytes"] == text_bytes == summary["sources"][src["name"]]["text_bytes"]
    assert summary["documents"] == 4 * 600


def test_planted_records_are_where_ground_truth_says_and_broken_as_stated(corpus):
    root, _ = corpus
    planted = _truth(root)["planted"]
    assert {p["kind"] for p in planted} == EXPECTED_KINDS
    cfg = {s["name"]: s for s in _config(root)["sources"]}
    for p in planted:
        assert p["expect_drop_reason"] == p["kind"] and p["stage"] == "ingest"
        src = cfg[p["source"]]
        lines = _raw_lines(root / p["file"])
        assert p["line"] >= 1
        line = lines[p["line"] - 1]
        kind = p["kind"]
        if kind == "decode_error":
            with pytest.raises(UnicodeDecodeError):
                line.decode("utf-8")
            # Only the encoding is wrong: read as Latin-1 it is a complete, valid record.
            assert _dotted(json.loads(line.decode("latin-1")), src["id_field"]) == p["id"]
            continue
        text = line.decode("utf-8")
        if kind == "bad_json":
            with pytest.raises(json.JSONDecodeError):
                json.loads(text)
            continue
        value = json.loads(text)
        if kind == "not_an_object":
            assert isinstance(value, list) and value
        elif kind == "empty_text":
            assert isinstance(value, dict) and _dotted(value, src["id_field"]) == p["id"]
            body = _dotted(value, src["text_field"])
            assert isinstance(body, str) and body.strip() == ""
        elif kind == "missing_text":
            assert isinstance(value, dict) and _dotted(value, src["id_field"]) == p["id"]
            assert _dotted(value, src["text_field"]) is None
        else:
            pytest.fail(f"unexpected planted kind {kind}")


def test_ids_are_unique_within_each_source(valid):
    for name, rows in valid.items():
        ids = [r["id"] for r in rows]
        assert len(set(ids)) == len(ids), name


def test_adding_a_planter_is_one_function(tmp_path, monkeypatch):
    monkeypatch.setattr(planted_mod, "PLANTERS", list(planted_mod.PLANTERS))
    import tokenmill.demo.corpus as corpus_mod

    monkeypatch.setattr(corpus_mod, "PLANTERS", planted_mod.PLANTERS)

    @planted_mod.planter("exact_copy", source="web_en", stage="dedup", drop_reason="duplicate")
    def exact_copy(record, ctx):
        return planted_mod.Planted(record=record, valid=True, info={"note": "kept by ingest"})

    summary = write_demo_corpus(tmp_path, seed=7, docs_per_source=20)
    entry = next(p for p in _truth(tmp_path)["planted"] if p["kind"] == "exact_copy")
    assert entry["stage"] == "dedup" and entry["expect_drop_reason"] == "duplicate" and entry["note"]
    line = _raw_lines(tmp_path / entry["file"])[entry["line"] - 1]
    assert json.loads(line)["id"] == entry["id"]
    assert summary["sources"]["web_en"]["documents"] == 21  # a valid planted record counts as a document


# -- variety ----------------------------------------------------------------------


def test_no_exact_duplicate_documents(valid):
    texts = [r["text"] for rows in valid.values() for r in rows]
    assert len(texts) == 4 * 600
    assert len(set(texts)) == len(texts)


def test_lengths_are_long_tailed(valid):
    words = {name: sorted(len(r["text"].split()) for r in rows) for name, rows in valid.items() if name != "news_zh"}
    every = sorted(n for counts in words.values() for n in counts)
    assert every[-1] >= 100 * every[0]
    assert words["books_en"][-1] >= 3000  # several thousand words
    assert words["forum_en"][0] <= 30  # a couple of sentences
    web = words["web_en"]
    assert web[-1] >= 30 * web[0]  # long tail within one source too
    assert web[len(web) // 2] < sum(web) / len(web)  # mean above median: right-skewed
    chars = sorted(len(r["text"]) for r in valid["news_zh"])
    assert chars[-1] >= 30 * chars[0]


def test_every_topic_and_subset_appears(valid):
    assert {r["record"]["topic"] for r in valid["web_en"]} == set(TOPICS)
    assert {r["subset"] for r in valid["books_en"]} == set(BOOK_GENRES)
    assert {r["subset"] for r in valid["news_zh"]} == set(NEWS_CATEGORIES.values())
    assert {r["subset"] for r in valid["forum_en"]} == set(FORUM_BOARDS.values())


def test_chinese_is_mostly_cjk_and_english_mostly_ascii_letters(valid):
    # Per document a little slack (a short story can be half dates); on average clearly dominant.
    for name, rows in valid.items():
        shares = []
        for r in rows:
            chars = "".join(r["text"].split())
            if name == "news_zh":
                shares.append(len(_CJK.findall(chars)) / len(chars))
                assert "，" in r["text"] or "。" in r["text"], r["id"]  # full-width punctuation
            else:
                shares.append(len(_ASCII_LETTER.findall(chars)) / len(chars))
                assert not _CJK.search(chars), r["id"]
        assert min(shares) >= 0.6, name
        assert sum(shares) / len(shares) >= 0.85, name


def test_structure_is_varied(valid):
    web, books, forum = valid["web_en"], valid["books_en"], valid["forum_en"]
    english = web + books + forum

    def share(rows, pattern):
        return sum(bool(re.search(pattern, r["text"], re.M)) for r in rows) / len(rows)

    assert share(english, r"\n\n") > 0.5  # paragraphs separated by blank lines
    assert share(english, r"\?") > 0.3  # questions
    assert share(english, r"\d") > 0.3  # numbers and dates
    assert share(web, r"^(- |\d+\. )") > 0.05  # lists
    assert share(books, r'^"|, "') > 0.2  # dialogue
    assert share(forum, r"^> ") > 0.02  # quoted replies
    assert share(valid["news_zh"], r"“") > 0.1  # Chinese quotations


def _shingles(text: str, n: int, chars: bool) -> set:
    units = [c for c in text if not c.isspace()] if chars else text.split()
    return {tuple(units[i : i + n]) for i in range(max(1, len(units) - n + 1))}


def test_no_accidental_near_duplicates(valid):
    # Later stages plant near-duplicates on purpose; the generated background must not have any.
    for name, rows in valid.items():
        sample = [_shingles(r["text"], 5, name == "news_zh") for r in rows[:120]]
        worst = max(
            len(a & b) / len(a | b) for i, a in enumerate(sample) for b in sample[i + 1 :]
        )
        assert worst < 0.5, (name, worst)


# -- size scaling ------------------------------------------------------------------


def test_target_bytes_scales_the_corpus(tmp_path):
    target = 2_000_000
    summary = write_demo_corpus(tmp_path, seed=5, docs_per_source=20, target_bytes=target)
    rows = _valid_records(tmp_path)
    written = sum(len(r["text"].encode("utf-8")) for source in rows.values() for r in source)
    assert written == summary["text_bytes"]
    assert target <= written < 1.5 * target
    assert summary["documents"] > 4 * 20  # scaled up from docs_per_source
    assert {p["kind"] for p in _truth(tmp_path)["planted"]} == EXPECTED_KINDS


def test_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError):
        write_demo_corpus(tmp_path, docs_per_source=3)
    with pytest.raises(ValueError):
        write_demo_corpus(tmp_path, target_bytes=0)
