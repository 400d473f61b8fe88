"""The demo's real-format files are what real Pile, Common Crawl, Pushshift and GB18030 files look like."""

from __future__ import annotations

import collections
import html as html_module
import json
import re
from pathlib import Path

import pytest
import yaml
import zstandard

from tests.demo.parse import (
    decompress,
    gzip_members,
    http_response,
    json_lines,
    source_items,
    warc_records,
    zstd_window_log,
)
from tokenmill.demo import write_demo_corpus

_UUID = re.compile(r"^<urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}>$")
_DATE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("demo_formats")
    write_demo_corpus(root, seed=1234, docs_per_source=120)
    return root


@pytest.fixture(scope="module")
def truth(root) -> dict:
    return json.loads((root / "ground_truth.json").read_text(encoding="utf-8"))


# -- The Pile ----------------------------------------------------------------------------


def test_pile_lines_are_ascii_json_with_a_set_name(root):
    sets, escaped = collections.Counter(), 0
    files = sorted((root / "pile").glob("*.jsonl.zst"))
    assert len(files) == 3
    for path in files:
        assert zstd_window_log(path.read_bytes()) is None  # one-shot frame with its content size, like the Pile's
        lines, final = json_lines(decompress(path))
        assert final
        for line in lines:
            assert line.isascii()  # ensure_ascii: non-ASCII only as \uXXXX escapes
            record = json.loads(line)
            assert list(record) == ["text", "meta"] and list(record["meta"]) == ["pile_set_name"]
            assert line.startswith(b'{"text": "')  # json.dumps' default separators, as the Pile's lines
            sets[record["meta"]["pile_set_name"]] += 1
            escaped += not record["text"].isascii()
    assert len(sets) >= 6 and sets["Pile-CC"] == max(sets.values())
    assert escaped >= 10  # µ, ±, –, §, ° and accented names come back from their escapes


# -- Common Crawl WET ----------------------------------------------------------------------


def test_wet_files_are_warcinfo_then_conversion_records(root, truth):
    files = sorted((root / "cc").glob("*.warc.wet.gz"))
    assert [p.relative_to(root).as_posix() for p in files] == sorted(truth["sources"]["cc_wet"]["files"])
    ids, conversions = set(), 0
    for path in files:
        records = warc_records(decompress(path))  # checks CRLF headers, Content-Length, separators, digests
        assert records[0].type == "warcinfo" and records[0].block.endswith(b"\r\n\r\n")
        assert {r.type for r in records[1:]} == {"conversion"}
        for r in records[1:]:
            h = r.headers
            assert list(h)[:5] == ["WARC-Type", "WARC-Target-URI", "WARC-Date", "WARC-Record-ID", "WARC-Refers-To"]
            assert h["Content-Type"] == "text/plain" and int(h["Content-Length"]) == len(r.block)
            assert _UUID.match(h["WARC-Record-ID"]) and _UUID.match(h["WARC-Refers-To"]) and _DATE.match(h["WARC-Date"])
            assert h["WARC-Target-URI"].startswith("https://") and ".example." in h["WARC-Target-URI"]
            body = r.block.decode("utf-8")
            assert body == "" or (body.endswith("\n") and "\r" not in body)  # bodies use LF
            ids.add(h["WARC-Record-ID"])
            conversions += 1
    assert len(ids) == conversions == truth["sources"]["cc_wet"]["records"]


def test_wet_gzip_one_member_per_record_and_one_for_a_whole_file(root):
    per_record, single = sorted((root / "cc").glob("*.warc.wet.gz"))
    n_records = len(warc_records(decompress(per_record)))
    assert gzip_members(per_record.read_bytes()) == n_records > 10
    assert gzip_members(single.read_bytes()) == 1 and len(warc_records(decompress(single))) > 10


def test_wet_bodies_are_multilingual(root):
    counts = collections.Counter()
    for path in sorted((root / "cc").glob("*.warc.wet.gz")):
        for r in warc_records(decompress(path))[1:]:
            lang = r.headers.get("WARC-Identified-Content-Language")
            counts[lang] += 1
            if lang == "zho":
                assert re.search(r"[\u4e00-\u9fff]", r.block.decode("utf-8"))
            # Content-Length counts UTF-8 bytes, not characters.
            assert int(r.headers["Content-Length"]) == len(r.block.decode("utf-8").encode("utf-8"))
    assert counts["eng"] > counts["zho"] > 0 and counts["eng,zho"] > 0 and counts[None] == 1  # the empty page


# -- Common Crawl WARC with HTML ---------------------------------------------------------------


def test_warc_records_come_as_request_response_metadata(root, truth):
    files = sorted((root / "cc_html").glob("*.warc.gz"))
    statuses, types = collections.Counter(), collections.Counter()
    for path in files:
        data = path.read_bytes()
        records = warc_records(decompress(path))
        assert gzip_members(data) == len(records)  # one gzip member per record, as Common Crawl writes
        assert records[0].type == "warcinfo"
        info_id = records[0].headers["WARC-Record-ID"]
        assert [r.type for r in records[1:]] == ["request", "response", "metadata"] * ((len(records) - 1) // 3)
        for request, response, metadata in zip(records[1::3], records[2::3], records[3::3]):
            uri = request.headers["WARC-Target-URI"]
            assert response.headers["WARC-Target-URI"] == uri == metadata.headers["WARC-Target-URI"]
            assert response.headers["WARC-Concurrent-To"] == request.headers["WARC-Record-ID"]
            assert metadata.headers["WARC-Concurrent-To"] == response.headers["WARC-Record-ID"]
            assert response.headers["WARC-Warcinfo-ID"] == info_id
            assert request.block.startswith(b"GET /") and request.block.endswith(b"\r\n\r\n")
            assert response.headers["Content-Type"] == "application/http; msgtype=response"
            http = http_response(response.block)
            assert int(http.headers["content-length"]) == len(http.payload)
            statuses[http.status, http.headers["content-type"]] += 1
        types.update(r.type for r in records)
    n_pages = truth["sources"]["cc_html"]["records"]
    assert types["response"] == n_pages and types["metadata"] == n_pages and types["warcinfo"] == len(files)
    assert statuses == {(200, "text/html; charset=utf-8"): n_pages - 2, (200, "image/png"): 1,
                        (404, "text/html; charset=utf-8"): 1}


def test_html_pages_have_boilerplate_around_an_article(root):
    src = {"name": "cc_html", "format": "cc_warc"}
    responses = [http_response(item.value.block)
                 for path in sorted((root / "cc_html").glob("*.warc.gz")) for item in source_items(root, src, path)]
    pages = [r.payload.decode("utf-8") for r in responses if r.headers["content-type"].startswith("text/html")]
    pages = [p for p in pages if "<article" in p]
    assert len(pages) == len(responses) - 2 == 30  # not the image, not the 404 page
    for page in pages:
        assert page.startswith("<!DOCTYPE html>") and '<meta charset="utf-8">' in page
        for part in ("<nav", "<header", "<article", "<aside", "<footer", "cookie-banner", "</html>"):
            assert part in page
        assert page.count("<p>") >= 3
        assert re.search(r'<time datetime="20\d\d-\d\d-\d\d">', page)


@pytest.mark.parametrize("folder, pattern", [("cc", "*.warc.wet.gz"), ("cc_html", "*.warc.gz")])
def test_a_warc_library_reads_every_record_with_valid_digests(root, folder, pattern):
    warc = pytest.importorskip("fastwarc.warc")
    for path in sorted((root / folder).glob(pattern)):
        ours = warc_records(decompress(path))
        with open(path, "rb") as fh:
            theirs = [(str(r.record_type).rsplit(".", 1)[-1], r.record_id, r.content_length, r.verify_block_digest())
                      for r in warc.ArchiveIterator(fh, parse_http=False, record_types=warc.WarcRecordType.any_type)]
        assert theirs == [(r.type, r.headers["WARC-Record-ID"], len(r.block), True) for r in ours]


@pytest.mark.parametrize("library", ["resiliparse", "trafilatura"])
def test_extractors_find_each_article(root, library):
    if library == "resiliparse":
        html2text = pytest.importorskip("resiliparse.extract.html2text")

        def extract(html):
            return html2text.extract_plain_text(html, main_content=True)
    else:
        trafilatura = pytest.importorskip("trafilatura")

        def extract(html):
            return trafilatura.extract(html) or ""
    src = {"name": "cc_html", "format": "cc_warc"}
    for path in sorted((root / "cc_html").glob("*.warc.gz")):
        for item in source_items(root, src, path):
            http = http_response(item.value.block)
            if http.status != 200 or not http.headers["content-type"].startswith("text/html"):
                continue
            html = http.payload.decode("utf-8")
            text = extract(html)
            first = re.search(r'<div class="entry-content">\n<p>(.*?)</p>', html).group(1)
            assert html_module.unescape(first)[:60] in text.replace("\n", " "), path.name
            assert "We use cookies" not in text  # the banner is boilerplate


# -- Reddit (Pushshift) ----------------------------------------------------------------------------


def _reddit(root: Path) -> dict[str, tuple[bytes, list[dict], bool]]:
    out = {}
    for path in sorted((root / "reddit").glob("*.ndjson.zst")):
        lines, final = json_lines(decompress(path))
        out[path.name] = (path.read_bytes(), [json.loads(line) for line in lines], final)
    return out


def test_reddit_dump_files(root):
    files = _reddit(root)
    assert sorted(files) == ["RC_2023-01.ndjson.zst", "RC_2023-02.ndjson.zst", "RS_2023-01.ndjson.zst",
                             "RS_2023-02.ndjson.zst"]
    assert [name for name, (_, _, final) in files.items() if not final] == ["RS_2023-01.ndjson.zst"]


def test_reddit_large_window_file_needs_long_31(root):
    raw = (root / "reddit" / "RC_2023-01.ndjson.zst").read_bytes()
    assert zstd_window_log(raw) == 31
    assert zstandard.get_frame_parameters(raw).window_size == 2**31
    with pytest.raises(zstandard.ZstdError):  # a reader with the default 128 MB cap refuses it
        zstandard.ZstdDecompressor().decompressobj().decompress(raw)
    assert zstandard.ZstdDecompressor(max_window_size=2**31).decompressobj().decompress(raw).count(b"\n") > 10
    other = (root / "reddit" / "RC_2023-02.ndjson.zst").read_bytes()
    assert zstd_window_log(other) is None  # readable with any window cap
    config = yaml.safe_load((root / "demo.yaml").read_text())
    assert next(s for s in config["sources"] if s["name"] == "reddit")["max_window_log"] == 31


def test_reddit_comments_vary_like_real_dumps(root):
    comments = [c for name, (_, rows, _) in _reddit(root).items() if name.startswith("RC_") for c in rows]
    key_sets = collections.Counter(frozenset(c) for c in comments)
    assert len(key_sets) >= 3
    for c in comments:
        assert list(c) == sorted(c)  # dumps keep keys sorted
        assert {"body", "id", "author", "score", "subreddit", "created_utc", "link_id", "parent_id"} <= set(c)
        assert c["link_id"].startswith("t3_") and c["parent_id"][:3] in ("t1_", "t3_")
        assert c.get("name", "t1_" + c["id"]) == "t1_" + c["id"]
        assert isinstance(c["created_utc"], (float, str)) and float(c["created_utc"]) > 1.6e9
    types = collections.Counter(type(c["created_utc"]).__name__ for c in comments)
    assert types["float"] > types["str"] > 0
    assert sum("permalink" in c for c in comments) > sum("permalink" not in c for c in comments) > 0
    assert sum("_meta" in c for c in comments) > 0 and sum("name" not in c for c in comments) > 0
    bodies = collections.Counter(c["body"] for c in comments)
    assert bodies["[deleted]"] == 1 and bodies["[removed]"] == 1


def test_reddit_submissions_self_and_link_posts(root):
    posts = [s for name, (_, rows, _) in _reddit(root).items() if name.startswith("RS_") for s in rows]
    for s in posts:
        assert {"title", "selftext", "url", "id", "name", "subreddit", "score", "num_comments", "created_utc",
                "is_self"} <= set(s)
        assert s["name"] == "t3_" + s["id"] and s["title"].strip()
        if not s["is_self"]:
            assert s["selftext"] == "" and not s["url"].startswith("https://www.reddit.com")
    assert sum(s["selftext"] == "" for s in posts) > 5 and sum(s["selftext"] == "[removed]" for s in posts) == 1
    assert sum(s["is_self"] and s["selftext"] not in ("", "[removed]") for s in posts) > 5


# -- GB18030 news ------------------------------------------------------------------------------


def test_gb18030_file_is_not_utf8(root):
    (path,) = sorted((root / "news_zh_gb").glob("*.jsonl"))
    data = path.read_bytes()
    with pytest.raises(UnicodeDecodeError):
        data.decode("utf-8")
    text = data.decode("gb18030")
    assert text.encode("gb18030") == data
    assert "©".encode("gb18030") in data  # a four-byte GB18030 sequence, outside GBK
    for line in text.splitlines():
        record = json.loads(line)
        assert record["id"].startswith("gbnews-") and re.search(r"[\u4e00-\u9fff]", record["content"])
