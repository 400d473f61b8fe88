"""Every reader on the real samples of ../shared/data: counts match SOURCES.md, real field names, no mojibake."""

from __future__ import annotations

from collections import Counter

import pytest

from tokenmill.sources.config import SourceConfig
from tokenmill.sources.formats import READERS

DRUNK_COLUMNS = ["index", "text", "id", "subreddit", "meta", "time", "author", "ups", "downs", "authorlinkkarma",
                 "authorkarma", "authorisgold"]


def read(shared_data, fmt, path, **kwargs):
    source = SourceConfig(name="s", format=fmt, paths=["x"], **kwargs)
    return list(READERS[fmt].read(str(shared_data / path), source, f"s:{path}"))


def drops(records):
    return Counter(r.drop for r in records)


def test_pile_jsonl_zst(shared_data):
    (train,) = read(shared_data, "pile", "pile/the_pile_hf_dummy_train00.jsonl.zst")
    (val,) = read(shared_data, "pile", "pile/the_pile_hf_dummy_val.jsonl.zst")
    assert (train.subset, val.subset) == ("Pile-CC", "OpenWebText2")
    assert len(train.text) == 13_274


def test_pile_json_array_of_strings(shared_data):
    records = read(shared_data, "json", "pile/pearl_pile_texts.json")
    assert len(records) == 1000 and drops(records) == {None: 1000}


def test_reddit_comments_and_submissions(shared_data):
    comments = read(shared_data, "reddit", "reddit/pushshift_test_comments.ndjson")  # no newline at the end
    submissions = read(shared_data, "reddit", "reddit/pushshift_test_submissions.ndjson")
    assert len(comments) == 27 and len(submissions) == 31
    assert drops(comments) == {None: 23, "deleted_content": 2, "removed_content": 2}
    assert drops(submissions) == {None: 30, "removed_content": 1}
    kept = [r for r in comments + submissions if r.drop is None]
    assert all(r.id.startswith(("t1_", "t3_")) and r.subset for r in kept)
    assert len({r.id for r in kept}) == len(kept)
    assert all(isinstance(r.meta["created_utc"], int) for r in kept)  # a float in these dumps
    assert {r.meta["kind"] for r in kept} == {"comment", "submission"}


def test_reddit_csv_with_a_wrong_header_row(shared_data):
    records = read(shared_data, "csv", "reddit/reddit_lifestyle_drunk.csv", id_field="id", subset_field="subreddit",
                   options={"columns": DRUNK_COLUMNS})
    assert len(records) == 21_924
    assert set(drops(records)) == {None, "empty_text"}  # empty or space-only text cells
    kept = [r for r in records if r.drop is None]
    assert {r.subset for r in kept} == {"drunk"}
    assert kept[0].meta["author"] and kept[0].id == "d02u4j6"


def test_chinese_csv_tsv_and_squad_json(shared_data):
    senti = read(shared_data, "csv", "chinese/ChnSentiCorp_htl_all.csv", text_field="review", subset_field="label")
    assert len(senti) == 7766 and drops(senti)[None] >= 7765
    assert '"蔡陆线"' in senti[0].text  # doubled quotes inside a quoted field
    news = read(shared_data, "tsv", "chinese/thucnews_cnews.val.txt", subset_field="label",
                options={"header": False, "columns": ["label", "text"], "quoting": "none"})
    assert len(news) == 1000 and drops(news) == {None: 1000}
    assert news[0].subset == "体育" and "\u00a0" in "".join(r.text for r in news)
    cmrc = read(shared_data, "json", "chinese/cmrc2018_dev.json", text_field="context", id_field="id",
                options={"items": "data.item.paragraphs.item"})
    assert len(cmrc) == 848 and drops(cmrc) == {None: 848}
    for records in (senti, news, cmrc):
        text = "".join(r.text for r in records[:50])
        cjk = sum("\u4e00" <= ch <= "\u9fff" for ch in text)
        assert cjk / len(text) > 0.5, "mojibake would not be mostly CJK"
        assert "\ufffd" not in text and "Ã" not in text


def test_tsv_with_bom_unquoted_quotes_and_two_text_fields(shared_data):
    records = read(shared_data, "tsv", "dups/msr_paraphrase_train.txt", text_field=["#1 String", "#2 String"],
                   id_field="#1 ID", options={"quoting": "none"})
    assert len(records) == 4076 and drops(records) == {None: 4076}
    assert records[0].meta["Quality"] in ("0", "1")  # the BOM did not stick to the first column name
    assert records[0].text.count("\n\n") == 1


@pytest.mark.parametrize("name, lines", [("textreuse_legal/ca1851-match.txt", 80), ("textreuse_ats/remember00palm.txt", 3035)])
def test_text_one_document_per_file(shared_data, name, lines):
    (record,) = read(shared_data, "text", f"dups/{name}")
    assert record.drop is None and not record.text.startswith("\ufeff")
    assert record.text.count("\n") in (lines - 1, lines)
