"""Tests for tokenmill.demo: determinism, ground truth, planted faults, variety and size scaling of the demo corpus."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
import yaml

from tests.demo.parse import http_response, source_items
from tokenmill.demo import BOOK_GENRES, FORUM_BOARDS, NEWS_CATEGORIES, SOURCES, TOPICS, write_demo_corpus
from tokenmill.demo import planted as planted_mod

SOURCE_NAMES = ["web_en", "books_en", "news_zh", "forum_en", "pile", "cc_wet", "cc_html", "reddit", "news_zh_gb"]
EXPECTED_KINDS = {
    "forum_en": {"bad_json", "decode_error", "empty_text", "missing_text", "not_an_object"},
    "reddit": {"deleted_comment", "removed_comment", "removed_submission"},
    "cc_html": {"not_html", "http_error"},
    "cc_wet": {"empty_text"},
}
# Records per source at the default docs_per_source=600 (catalog.py `scale`).
DEFAULT_DOCS = {"web_en": 600, "books_en": 600, "news_zh": 600, "forum_en": 600, "pile": 300, "cc_wet": 300,
                "cc_html": 150, "reddit": 600, "news_zh_gb": 150}
ZH_SOURCES = {"news_zh", "news_zh_gb"}
_CJK = re.compile(r"[\u4e00-\u9fff]")
_ASCII_LETTER = re.compile(r"[A-Za-z]")


# -- helpers ------------------------------------------------------------------


def _sha256_tree(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _config(root: Path) -> dict:
    return yaml.safe_load((root / "demo.yaml").read_text(encoding="utf-8"))


def _truth(root: Path) -> dict:
    return json.loads((root / "ground_truth.json").read_text(encoding="utf-8"))


def _files(root: Path, source_cfg: dict) -> list[Path]:
    return sorted(p for pattern in source_cfg["paths"] for p in root.glob(pattern))


def _items(root: Path) -> dict[str, list[tuple[str, object]]]:
    """source -> (file, Item) for every record its reader will see."""
    return {src["name"]: [(p.relative_to(root).as_posix(), item) for p in _files(root, src)
                          for item in source_items(root, src, p)]
            for src in _config(root)["sources"]}


def _valid_records(root: Path) -> dict[str, list[dict]]:
    """source -> records that are not planted, each checked to be a whole record with text (and id, if configured)."""
    planted = {(p["file"], p["record_index"]) for p in _truth(root)["planted"]}
    cfg = {s["name"]: s for s in _config(root)["sources"]}
    out: dict[str, list[dict]] = {}
    for name, items in _items(root).items():
        src, rows = cfg[name], []
        for rel, item in items:
            if (rel, item.index) in planted:
                continue
            if src["format"] == "cc_warc":
                response = http_response(item.value.block)
                assert response.status == 200 and response.headers["content-type"].startswith("text/html"), rel
                rows.append({"text": None, "id": item.value.headers["WARC-Record-ID"], "subset": None,
                             "record": item.value, "html": response.payload.decode("utf-8")})
                continue
            rec = item.value
            assert isinstance(item.text, str) and item.text.strip(), (rel, item.index)
            if src["format"] == "cc_wet":
                rows.append({"text": item.text, "id": rec.headers["WARC-Record-ID"],
                             "subset": rec.headers.get("WARC-Identified-Content-Language"), "record": rec})
                continue
            assert isinstance(rec, dict), (rel, rec)
            record_id = rec["id"] if src["format"] == "reddit" else None
            if src.get("id_field"):
                record_id = rec.get(src["id_field"]) if "." not in src["id_field"] else rec["post"]["id"]
                assert isinstance(record_id, str), (rel, rec)
            subset = {"pile": lambda r: r["meta"]["pile_set_name"], "reddit": lambda r: r["subreddit"]}.get(
                src["format"], lambda r: _dotted(r, src["subset_field"]) if src.get("subset_field") else None)(rec)
            rows.append({"text": item.text, "id": record_id, "subset": subset, "record": rec})
        out[name] = rows
    return out


def _dotted(record, path: str):
    for key in path.split("."):
        if not isinstance(record, dict) or key not in record:
            return None
        record = record[key]
    return record


# -- fixtures: a handful of small corpora, built once per module ---------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("demo_a")
    return root, write_demo_corpus(root, seed=1234)


@pytest.fixture(scope="module")
def valid(corpus) -> dict[str, list[dict]]:
    return _valid_records(corpus[0])


@pytest.fixture(scope="module")
def items(corpus):
    return _items(corpus[0])


# -- determinism ----------------------------------------------------------------


def test_same_seed_gives_byte_identical_files(corpus, tmp_path):
    root, summary = corpus
    again = tmp_path / "again"
    write_demo_corpus(again, seed=1234)
    first, second = _sha256_tree(root), _sha256_tree(again)
    assert set(first) == set(summary["files"])
    assert "quality/model.bin" in first and "quality/model.json" in first  # the classifier's files too
    assert first == second


def test_different_seed_gives_different_text(valid, tmp_path):
    other = tmp_path / "other"
    write_demo_corpus(other, seed=99, docs_per_source=60)
    ours = {r["text"] for rows in valid.values() for r in rows if r["text"]}
    theirs = {r["text"] for rows in _valid_records(other).values() for r in rows if r["text"]}
    assert len(theirs) >= 6 * 60
    assert not ours & theirs


def test_rewriting_a_folder_removes_stale_files(tmp_path):
    write_demo_corpus(tmp_path, seed=3, docs_per_source=20)
    (tmp_path / "pile" / "99.jsonl.zst").write_bytes(b"stale")
    (tmp_path / "reddit" / "RC_1999-01.ndjson.zst").write_bytes(b"stale")
    summary = write_demo_corpus(tmp_path, seed=3, docs_per_source=20)
    assert set(_sha256_tree(tmp_path)) == set(summary["files"])


# -- layout, config and ground truth ------------------------------------------------


def test_demo_yaml_names_every_source_with_its_reader(corpus):
    root, _ = corpus
    cfg = _config(root)
    assert (root / "demo.yaml").read_text().startswith("# tokenmill demo run")
    assert cfg["seed"] == 1234 and cfg["output"] == "run" and list(cfg["stages"]) == ["sample", "clean", "dedup", "decontaminate", "tokenize"]
    assert {o["source"] for o in cfg["stages"]["clean"]["overrides"]} == {"reddit", "forum_en", "pile"}
    assert [s["name"] for s in cfg["sources"]] == SOURCE_NAMES == [s.name for s in SOURCES]
    by_name = {s["name"]: s for s in cfg["sources"]}
    assert all(tuple(by_name[spec.name]["paths"]) == spec.clean for spec in SOURCES)  # what a rerun cleans
    assert by_name["pile"] == {"name": "pile", "format": "pile", "paths": ["pile/*.jsonl.zst"], "language": "en"}
    assert by_name["cc_wet"] == {"name": "cc_wet", "format": "cc_wet", "paths": ["cc/*.warc.wet.gz"], "language": "any"}
    assert by_name["cc_html"] == {"name": "cc_html", "format": "cc_warc", "paths": ["cc_html/*.warc.gz"],
                                  "language": "en"}
    assert by_name["reddit"] == {"name": "reddit", "format": "reddit", "paths": ["reddit/*.ndjson.zst"],
                                 "max_window_log": 31, "language": "en"}
    assert by_name["news_zh_gb"] == {"name": "news_zh_gb", "format": "jsonl", "paths": ["news_zh_gb/*.jsonl"],
                                     "encoding": "gb18030", "text_field": "content", "id_field": "id",
                                     "subset_field": "category", "language": "zh"}


def test_demo_yaml_is_a_valid_run_config(corpus):
    from tokenmill.pipeline.config import load_config
    from tokenmill.sources.formats import READERS

    missing = {s["format"] for s in _config(corpus[0])["sources"]} - set(READERS)
    if missing:
        pytest.skip(f"readers not registered yet: {sorted(missing)}")
    config = load_config(corpus[0] / "demo.yaml")
    assert config.source("reddit").max_window_log == 31 and config.source("news_zh_gb").encoding == "gb18030"


def _later_plant_bytes(root: Path, items, name: str | None = None) -> int:
    """Text bytes of the plants that ingest keeps (a later stage must catch them): the corpus counts them as text."""
    out = 0
    for p in _truth(root)["planted"]:
        if p["stage"] != "ingest" and (name is None or p["source"] == name):
            item = next(it for rel, it in items[p["source"]] if rel == p["file"] and it.index == p["record_index"])
            out += len(item.text.encode("utf-8"))
    return out


def test_ground_truth_counts_what_the_readers_will_see(corpus, valid, items):
    root, summary = corpus
    cfg, truth = _config(root), _truth(root)
    assert truth["version"] == 2 and truth["seed"] == 1234
    for src in cfg["sources"]:
        name = src["name"]
        gt = truth["sources"][name]
        globbed = [p.relative_to(root).as_posix() for p in _files(root, src)]
        assert globbed == sorted(gt["files"]), name
        assert gt["records"] == len(items[name]) == summary["sources"][name]["records"], name
        n_broken = sum(p["source"] == name and p["stage"] == "ingest" for p in truth["planted"])
        n_later = sum(p["source"] == name and p["stage"] != "ingest" for p in truth["planted"])  # valid for ingest
        assert gt["valid_documents"] == len(valid[name]) + n_later == summary["sources"][name]["documents"], name
        assert gt["records"] == gt["valid_documents"] + n_broken, name
        assert gt["valid_documents"] == DEFAULT_DOCS[name] + n_later, name
        if name != "cc_html":  # for HTML the text is what an extractor makes of the page
            text_bytes = sum(len(r["text"].encode("utf-8")) for r in valid[name]) + _later_plant_bytes(root, items, name)
            assert gt["text_bytes"] == text_bytes == summary["sources"][name]["text_bytes"], name
    assert summary["documents"] == sum(DEFAULT_DOCS.values()) + sum(p["stage"] != "ingest" for p in truth["planted"])


def test_every_planted_entry_names_its_record(corpus):
    root, _ = corpus
    planted = [p for p in _truth(root)["planted"] if p["stage"] == "ingest"]
    assert {s: {p["kind"] for p in planted if p["source"] == s} for s in EXPECTED_KINDS} == EXPECTED_KINDS
    assert {p["source"] for p in planted} == set(EXPECTED_KINDS)
    line_formats = {s["name"] for s in _config(root)["sources"] if s["format"] not in ("cc_wet", "cc_warc", "parquet")}
    for p in planted:
        assert p["stage"] == "ingest" and p["expect_drop_reason"], p
        assert isinstance(p["record_index"], int) and p["record_index"] >= 0, p
        if p["source"] in line_formats:
            assert p["line"] == p["record_index"] + 1, p
        else:
            assert "line" not in p, p
    assert len({(p["file"], p["record_index"]) for p in planted}) == len(planted)


def test_planted_records_are_where_ground_truth_says_and_broken_as_stated(corpus, items):
    root, _ = corpus
    cfg = {s["name"]: s for s in _config(root)["sources"]}
    reasons = {"deleted_comment": "deleted_content", "removed_comment": "removed_content",
               "removed_submission": "removed_content"}
    for p in _truth(root)["planted"]:
        if p["stage"] != "ingest":
            continue
        kind, src = p["kind"], cfg[p["source"]]
        assert p["expect_drop_reason"] == reasons.get(kind, kind), p
        item = next(it for rel, it in items[p["source"]] if rel == p["file"] and it.index == p["record_index"])
        value = item.value
        if kind == "decode_error":
            with pytest.raises(UnicodeDecodeError):
                item.line.decode("utf-8")
            # Only the encoding is wrong: read as Latin-1 it is a complete, valid record.
            assert _dotted(json.loads(item.line.decode("latin-1")), src["id_field"]) == p["id"]
        elif kind == "bad_json":
            with pytest.raises(json.JSONDecodeError):
                json.loads(item.line.decode("utf-8"))
        elif kind == "not_an_object":
            assert isinstance(value, list) and value
        elif kind == "empty_text" and p["source"] == "forum_en":
            assert isinstance(value, dict) and _dotted(value, src["id_field"]) == p["id"]
            body = _dotted(value, src["text_field"])
            assert isinstance(body, str) and body.strip() == ""
        elif kind == "missing_text":
            assert isinstance(value, dict) and _dotted(value, src["id_field"]) == p["id"]
            assert _dotted(value, src["text_field"]) is None
        elif kind in ("deleted_comment", "removed_comment"):
            assert value["id"] == p["id"] and value["name"] == "t1_" + p["id"]
            assert value["body"] == ("[deleted]" if kind == "deleted_comment" else "[removed]")
        elif kind == "removed_submission":
            assert value["id"] == p["id"] and value["title"].strip() and value["selftext"] == "[removed]"
        elif kind == "empty_text":  # cc_wet
            assert value.type == "conversion" and value.block == b"" and value.headers["Content-Length"] == "0"
            assert value.headers["WARC-Record-ID"] == p["warc_record_id"]
        elif kind in ("not_html", "http_error"):
            assert value.type == "response" and value.headers["WARC-Record-ID"] == p["warc_record_id"]
            assert value.headers["WARC-Target-URI"] == p["url"]
            response = http_response(value.block)
            if kind == "not_html":
                assert response.status == 200 and response.headers["content-type"] == "image/png"
                assert response.payload.startswith(b"\x89PNG\r\n\x1a\n")
            else:
                assert response.status == 404 and response.headers["content-type"].startswith("text/html")
        else:
            pytest.fail(f"unexpected planted kind {kind}")


def test_nothing_but_the_planted_records_would_be_dropped(valid):
    # _valid_records already checked every other record parses and has text; the reader-specific
    # drops must not occur by chance either.
    for r in valid["reddit"]:
        text = r["record"].get("body", r["record"].get("selftext"))
        assert text.strip() not in ("[deleted]", "[removed]"), r["id"]
    assert any(r["record"]["author"] == "[deleted]" for r in valid["reddit"])  # account gone, text kept: not a drop


def test_ids_are_unique_within_each_source(valid):
    for name, rows in valid.items():
        ids = [r["id"] for r in rows if r["id"] is not None]
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
    src = next(s for s in _config(tmp_path)["sources"] if s["name"] == "web_en")
    item = source_items(tmp_path, src, tmp_path / entry["file"])[entry["record_index"]]
    assert item.value["id"] == entry["id"]
    # a valid planted record counts as a document (web_en also holds the clean-stage plants)
    assert summary["sources"]["web_en"]["documents"] == 21 + sum(p.source == "web_en" and p.stage != "ingest" for p in planted_mod.PLANTERS[:-1])


# -- variety ----------------------------------------------------------------------


def test_no_exact_duplicate_documents(valid):
    texts = [r["text"] for rows in valid.values() for r in rows if r["text"] is not None]
    assert len(texts) == sum(DEFAULT_DOCS.values()) - DEFAULT_DOCS["cc_html"]
    assert len(set(texts)) == len(texts)
    pages = [r["html"] for r in valid["cc_html"]]
    assert len(set(pages)) == len(pages)


def test_lengths_are_long_tailed(valid):
    english = ("web_en", "books_en", "forum_en", "pile", "reddit")
    words = {name: sorted(len(valid[name][i]["text"].split()) for i in range(len(valid[name]))) for name in english}
    every = sorted(n for counts in words.values() for n in counts)
    assert every[-1] >= 100 * every[0]
    assert words["books_en"][-1] >= 3000  # several thousand words
    assert words["forum_en"][0] <= 30 and words["reddit"][0] <= 10  # a couple of sentences
    for name in ("web_en", "pile"):
        counts = words[name]
        assert counts[-1] >= 20 * counts[0], name  # long tail within one source too
        assert counts[len(counts) // 2] < sum(counts) / len(counts), name  # mean above median: right-skewed
    for name in ZH_SOURCES:
        chars = sorted(len(r["text"]) for r in valid[name])
        assert chars[-1] >= 20 * chars[0], name


def test_every_topic_and_subset_appears(valid):
    from tokenmill.demo.styles import PILE_SETS
    from tokenmill.demo.streams import SUBREDDITS

    assert {r["record"]["topic"] for r in valid["web_en"]} == set(TOPICS)
    assert {r["subset"] for r in valid["books_en"]} == set(BOOK_GENRES)
    assert {r["subset"] for r in valid["news_zh"]} == set(NEWS_CATEGORIES.values())
    assert {r["subset"] for r in valid["news_zh_gb"]} == set(NEWS_CATEGORIES.values())
    assert {r["subset"] for r in valid["forum_en"]} == set(FORUM_BOARDS.values())
    assert {r["subset"] for r in valid["pile"]} == set(PILE_SETS)
    assert {r["subset"] for r in valid["reddit"]} == set(SUBREDDITS.values())
    assert {r["subset"] for r in valid["cc_wet"]} == {"eng", "zho", "eng,zho"}  # multilingual pages


def test_chinese_is_mostly_cjk_and_english_mostly_ascii_letters(valid):
    # Per document a little slack (a short story can be half dates); on average clearly dominant.
    for name, rows in valid.items():
        if name in ("cc_html", "cc_wet"):
            continue
        shares = []
        for r in rows:
            chars = "".join(r["text"].split())
            if name in ZH_SOURCES:
                shares.append(len(_CJK.findall(chars)) / len(chars))
                assert "，" in r["text"] or "。" in r["text"], r["id"]  # full-width punctuation
            else:
                shares.append(len(_ASCII_LETTER.findall(chars)) / len(chars))
                assert not _CJK.search(chars), r["id"]
        assert min(shares) >= 0.5, name
        assert sum(shares) / len(shares) >= 0.8, name


def test_wet_pages_match_their_language_header(valid):
    for r in valid["cc_wet"]:
        cjk = len(_CJK.findall(r["text"]))
        if r["subset"] == "zho":
            assert cjk > len(_ASCII_LETTER.findall(r["text"])), r["id"]
        elif r["subset"] == "eng":
            assert cjk == 0, r["id"]
        else:
            assert cjk > 0 and len(_ASCII_LETTER.findall(r["text"])) > cjk, r["id"]


def test_structure_is_varied(valid):
    web, books, forum, pile = valid["web_en"], valid["books_en"], valid["forum_en"], valid["pile"]
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
    assert share(valid["reddit"], r"&gt; ") > 0.02  # Reddit's escaped markdown quotes
    by_set = {}
    for r in pile:
        by_set.setdefault(r["subset"], []).append(r)
    assert share(by_set["PubMed Abstracts"], r"95% CI|p < 0\.0") > 0.9
    assert share(by_set["USPTO Backgrounds"], r"^(1\. Field of the Invention|BACKGROUND OF THE INVENTION)") == 1
    assert share(by_set["FreeLaw"], r"^UNITED STATES COURT OF APPEALS") == 1
    assert share(by_set["Wikipedia (en)"], r"^(See also|References)$") == 1


def _shingles(text: str, n: int, chars: bool) -> set:
    units = [c for c in text if not c.isspace()] if chars else text.split()
    return {tuple(units[i : i + n]) for i in range(max(1, len(units) - n + 1))}


def test_no_accidental_near_duplicates(valid):
    # Later stages plant near-duplicates on purpose; the generated background must not have any.
    for name, rows in valid.items():
        if name == "cc_html":
            continue
        sample = [_shingles(r["text"], 5, name in ZH_SOURCES) for r in rows[:120]]
        worst = max(
            len(a & b) / len(a | b) for i, a in enumerate(sample) for b in sample[i + 1 :]
        )
        assert worst < 0.5, (name, worst)


# -- size scaling ------------------------------------------------------------------


def test_target_bytes_scales_every_source(tmp_path):
    target = 2_000_000
    summary = write_demo_corpus(tmp_path, seed=5, docs_per_source=20, target_bytes=target)
    rows = _valid_records(tmp_path)
    written = sum(len(r["text"].encode("utf-8")) for name, source in rows.items() for r in source if r["text"])
    written += _later_plant_bytes(tmp_path, _items(tmp_path))
    assert written + summary["sources"]["cc_html"]["text_bytes"] == summary["text_bytes"]
    assert target <= summary["text_bytes"] < 1.5 * target
    for spec in SOURCES:
        got = summary["sources"][spec.name]
        assert got["text_bytes"] >= spec.share * target, spec.name  # every source grows
        assert got["documents"] > 10, spec.name
    kinds = {(p["source"], p["kind"]) for p in _truth(tmp_path)["planted"] if p["stage"] == "ingest"}
    assert kinds == {(s, k) for s, ks in EXPECTED_KINDS.items() for k in ks}


def test_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError):
        write_demo_corpus(tmp_path, docs_per_source=3)
    with pytest.raises(ValueError):
        write_demo_corpus(tmp_path, target_bytes=0)


CLEAN_KINDS = {"escaped_json_once": ("web_en", "\\n"), "escaped_json_twice": ("pile", "\\\\n"),
               "html_entities": ("forum_en", "&amp;"), "literal_escapes": ("forum_en", "\\n"),
               "mojibake": ("web_en", "Ã©"), "pii": ("forum_en", "jane.doe@example.com")}


def test_clean_stage_plants_carry_their_fault(corpus, items):
    root, _ = corpus
    planted = [p for p in _truth(root)["planted"] if p["stage"] == "clean"]
    assert {p["kind"] for p in planted} == set(CLEAN_KINDS)
    for p in planted:
        source, marker = CLEAN_KINDS[p["kind"]]
        assert p["source"] == source, p
        item = next(it for rel, it in items[source] if rel == p["file"] and it.index == p["record_index"])
        assert marker in item.text, p
        assert p["expect_drop_reason"] is None or p["expect_drop_reason"].startswith("escape_"), p
