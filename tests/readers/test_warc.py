"""cc_wet and cc_warc: real Common Crawl and wget samples, then generated quirks and damage.

Damage anywhere (truncation, a corrupt byte, a header that does not parse, a Content-Length past the end) must give
every whole record before it, then exactly one read_error naming the file and the byte offset, never an exception.
"""

from __future__ import annotations

import base64
import codecs
import gzip
import hashlib
import io
import tracemalloc
import zlib
from pathlib import Path

import brotli  # installed with fastwarc, which resiliparse requires
import pytest
import zstandard

from tokenmill.sources.config import SourceConfig
from tokenmill.sources.formats import READERS, reader_drop_reasons
from tokenmill.readers.base import open_source
from tokenmill.readers.warc import CC_WARC, CC_WET, html_payload, read_warc, read_wet
from tokenmill.readers.warc_records import iter_warc_records

WET = SourceConfig(name="s", format="cc_wet", paths=["x"])
WARC = SourceConfig(name="s", format="cc_warc", paths=["x"])
CC_2016 = "CC-MAIN-2016-50_filter_test_1.warc.wet.gz"


def cc(shared_data: Path, name: str) -> Path:
    return shared_data / "commoncrawl" / name


def read(path, source=WET, display="s:f"):
    reader = read_wet if source.format == "cc_wet" else read_warc
    return list(reader(str(path), source, display))


def docs(records):
    return [r for r in records if r.drop is None]


def digest(body: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(body).digest()).decode()


def warc_record(warc_type: str, body: bytes, uri: str = "http://example.com/", content_type: str = "text/plain",
                record_id: str = "<urn:uuid:0>", length: int | None = None, extra: str = "",
                with_digest: bool = True) -> bytes:
    headers = (f"WARC/1.0\r\nWARC-Type: {warc_type}\r\nWARC-Target-URI: {uri}\r\nWARC-Date: 2024-05-18T01:58:10Z\r\n"
               f"WARC-Record-ID: {record_id}\r\nContent-Type: {content_type}\r\n"
               + (f"WARC-Block-Digest: {digest(body)}\r\n" if with_digest else "") + extra
               + f"Content-Length: {len(body) if length is None else length}\r\n\r\n")
    return headers.encode() + body + b"\r\n\r\n"


def http(payload: bytes, status: str = "200 OK", headers: str = "Content-Type: text/html; charset=utf-8") -> bytes:
    return f"HTTP/1.1 {status}\r\n{headers}\r\n\r\n".encode() + payload


def response(payload: bytes, n: int = 0, **kw) -> bytes:
    return warc_record("response", http(payload, **kw), uri=f"https://example.com/{n}",
                       content_type="application/http; msgtype=response", record_id=f"<urn:uuid:{n}>")


WARCINFO = warc_record("warcinfo", b"software: test\r\n", content_type="application/warc-fields")
PAGE = (b"<html><head><title>T</title></head><body><nav><a href='/'>Home</a></nav><article><h1>Heading</h1><p>"
        + b"The quick brown fox jumps over the lazy dog near the river bank. " * 8 + b"</p></article></body></html>")


def members(records: list[bytes]) -> bytes:
    return b"".join(gzip.compress(r, mtime=0) for r in records)


def raw_records(path: Path) -> list[bytes]:
    """The bytes of each WARC record of a real file (decompressed), cut at record offsets."""
    with open_source(str(path), WET) as stream:
        data = stream.read()
    offsets = [h.offset for h, _ in iter_warc_records(io.BufferedReader(io.BytesIO(data)))]
    return [data[a:b] for a, b in zip(offsets, offsets[1:] + [len(data)])]


# ---------------------------------------------------------------------------------------------- real samples


def test_cc_2016_wet_single_member_25_conversions_multilingual(shared_data):
    records = read(cc(shared_data, CC_2016))
    assert len(records) == 25 and all(r.drop is None for r in records)
    assert [r.index for r in records] == list(range(1, 26))  # record 0 is the warcinfo
    assert all(r.id.startswith("<urn:uuid:") and r.subset is None for r in records)
    assert records[0].meta["url"] == "http://100-things-to-do-before-high-school.wikia.com/wiki/File:Say_yes_28.PNG"
    assert records[0].meta["offset"] == 540 and records[0].meta["date"] == "2016-12-02T17:55:01Z"
    assert all(r.meta["content_type"] == "text/plain" and r.meta["refers_to"].startswith("<urn:uuid:")
               for r in records)
    offsets = [r.meta["offset"] for r in records]
    assert offsets == sorted(offsets)
    menu = next(r for r in records if "accuweather.com" in r.meta["url"]).text  # a language menu
    for word in ("русский", "Українське", "български", "中文", "日本語"):
        assert word in menu
    for mojibake in ("Ã", "Ð", "â€", "Ñ€"):
        assert not any(mojibake in r.text for r in records)


def test_whirlwind_wet_and_warc_are_the_same_capture(shared_data):
    (wet,) = read(cc(shared_data, "whirlwind.warc.wet.gz"))
    (page,) = read(cc(shared_data, "whirlwind.warc.gz"), WARC)  # warcinfo, request, response, metadata
    assert wet.index == 1 and page.index == 2
    assert wet.meta["url"] == page.meta["url"] == "https://an.wikipedia.org/wiki/Escopete"
    assert wet.meta["language"] == "spa"
    assert wet.meta["refers_to"] == page.id  # the WET text says which WARC response it came from
    assert page.meta["http_status"] == 200 and page.meta["charset"] == "utf-8"
    assert page.meta["content_type"] == "text/html; charset=UTF-8" and page.meta["extractor"] == "resiliparse"
    assert "Escopete ye un municipio d'a provincia de Guadalachara" in page.text
    assert "<div" not in page.text and "Menú principal" not in page.text  # markup and navigation gone
    assert "Menú principal" in wet.text  # CC's own WET keeps the page chrome


@pytest.mark.parametrize("extractor", ["resiliparse", "trafilatura"])
def test_dolma_wget_warc_22_html_responses_2_text_resources(shared_data, extractor):
    source = WARC.model_copy(update={"options": {"extractor": extractor}})
    records = read(cc(shared_data, "dolma_wget_sample-0000.warc.gz"), source, "s:wget.warc.gz")
    assert len(records) == 24  # 22 responses + 2 resources; 22 requests, warcinfo and metadata skipped
    pages = docs(records)
    assert len(pages) == 22 and all(r.meta["warc_type"] == "response" for r in pages)
    assert all(r.meta["url"].startswith("https://") for r in pages)  # `<https://...>` in the file
    assert {r.meta["extractor"] for r in pages} == {extractor}
    # wget's two resource records are its arguments and its log, text/plain: not pages
    assert [(r.index, r.drop) for r in records if r.drop] == [(46, "not_html"), (47, "not_html")]
    assert records[-1].meta["url"] == "metadata://gnu.org/software/wget/warc/wget.log"
    assert "s:wget.warc.gz: record 46 at byte 781679" in records[-2].message
    weld = next(r for r in pages if r.meta["url"].endswith("/weld"))  # sent with Transfer-Encoding: chunked
    assert "visiting professor at Griffith University" in weld.text
    # trafilatura loses the bio's first paragraph here; resiliparse keeps it (see benchmarks/html_extraction.py)
    assert ("Daniel S. Weld is Professor Emeritus" in weld.text) == (extractor == "resiliparse")


def test_chunked_payloads_are_dechunked(shared_data):
    with open_source(str(cc(shared_data, "dolma_wget_sample-0000.warc.gz")), WARC) as stream:
        chunked = []
        for header, body in iter_warc_records(stream):
            block = body.read()
            if header.type == "response" and b"Transfer-Encoding: chunked" in block[:2000]:
                meta = {}
                chunked.append((block.split(b"\r\n\r\n", 1)[1], html_payload(header, block, 1 << 26, meta)))
    assert len(chunked) == 2
    for raw, payload in chunked:
        assert not raw.lstrip()[:1] == b"<"  # a hex chunk size comes first
        assert payload.lstrip()[:1] == b"<" and len(payload) < len(raw)


def test_readers_are_registered_with_their_reasons():
    assert READERS["cc_wet"] is CC_WET and READERS["cc_warc"] is CC_WARC
    assert not CC_WET.line_based and not CC_WARC.line_based
    assert {"not_html", "http_error", "bad_http", "extraction_failed"} <= set(reader_drop_reasons())
    with pytest.raises(ValueError, match="extractor"):
        SourceConfig(name="s", format="cc_warc", paths=["x"], options={"extractor": "lynx"})
    with pytest.raises(ValueError, match="unknown key"):
        SourceConfig(name="s", format="cc_wet", paths=["x"], options={"extractor": "trafilatura"})


# ------------------------------------------------------------------------------------ compression layouts


def test_single_member_per_record_members_zstd_and_plain_read_the_same(shared_data, tmp_path):
    real = cc(shared_data, CC_2016)
    recs = raw_records(real)
    assert len(recs) == 26
    layouts = {
        "members.warc.wet.gz": members(recs),
        "frames.warc.wet.zst": b"".join(zstandard.ZstdCompressor().compress(r) for r in recs),
        "plain.warc.wet": b"".join(recs),
    }
    expected = [(r.index, r.id, r.text, r.meta) for r in read(real)]
    for name, data in layouts.items():
        (tmp_path / name).write_bytes(data)
        assert [(r.index, r.id, r.text, r.meta) for r in read(tmp_path / name)] == expected, name


# ---------------------------------------------------------------------------------------------- damage


def assert_prefix_then_read_error(records, expected, display, first_bad: int, offset: int):
    """Every whole record before the damage, equal to the original, then exactly one read_error."""
    *good, last = records
    want = [r for r in expected if r.index < first_bad]
    assert [(r.index, r.id, r.text) for r in good] == [(r.index, r.id, r.text) for r in want]
    assert len(want) >= 5  # the test means something
    assert last.drop == "read_error" and last.index == first_bad
    assert f"{display}: record {first_bad} at byte {offset}:" in last.message


def test_single_member_cut_in_half(shared_data, tmp_path):
    real = cc(shared_data, CC_2016)
    data = real.read_bytes()
    (tmp_path / "half.warc.wet.gz").write_bytes(data[: len(data) // 2])
    prefix = len(zlib.decompressobj(31).decompress(data[: len(data) // 2]))  # bytes that survive, independently
    recs = raw_records(real)
    ends = [sum(map(len, recs[: i + 1])) for i in range(len(recs))]
    first_bad = next(i for i, end in enumerate(ends) if end > prefix)  # first record not whole in the prefix
    records = read(tmp_path / "half.warc.wet.gz", display="s:half")
    assert_prefix_then_read_error(records, read(real), "s:half", first_bad, ends[first_bad - 1])
    assert "truncated" in records[-1].message


def test_per_record_members_cut_mid_member(shared_data, tmp_path):
    real = cc(shared_data, CC_2016)
    parts = [gzip.compress(r, mtime=0) for r in raw_records(real)]
    cut = sum(map(len, parts[:12])) + len(parts[12]) // 2
    (tmp_path / "cut.warc.wet.gz").write_bytes(b"".join(parts)[:cut])
    offset = sum(map(len, raw_records(real)[:12]))
    records = read(tmp_path / "cut.warc.wet.gz", display="s:cut")
    assert_prefix_then_read_error(records, read(real), "s:cut", 12, offset)


def test_corrupt_byte_in_single_member_is_caught_by_the_block_digest(shared_data, tmp_path):
    # deflate decodes the flipped byte into plausible garbage; only the record's sha1 digest notices
    real = cc(shared_data, CC_2016)
    data = bytearray(real.read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "bad.warc.wet.gz").write_bytes(bytes(data))
    records = read(tmp_path / "bad.warc.wet.gz", display="s:bad")
    original = read(real)
    assert_prefix_then_read_error(records, original, "s:bad", 14, original[13].meta["offset"])
    assert "WARC-Block-Digest" in records[-1].message
    # without the digest check the garbage would have been a document
    garbled = read(tmp_path / "bad.warc.wet.gz",
                   WET.model_copy(update={"options": {"verify_digests": False}}))
    assert garbled[13].drop is None and garbled[13].text != original[13].text


def test_corrupt_byte_in_a_per_record_member(shared_data, tmp_path):
    real = cc(shared_data, CC_2016)
    recs = raw_records(real)
    parts = [gzip.compress(r, mtime=0) for r in recs]
    damaged = bytearray(parts[8])
    damaged[len(damaged) // 2] ^= 0x55
    (tmp_path / "m.warc.wet.gz").write_bytes(b"".join(parts[:8]) + bytes(damaged) + b"".join(parts[9:]))
    records = read(tmp_path / "m.warc.wet.gz", display="s:m")
    assert_prefix_then_read_error(records, read(real), "s:m", 8, sum(map(len, recs[:8])))


def test_content_length_past_the_end_of_the_last_record(tmp_path):
    recs = [WARCINFO] + [warc_record("conversion", f"text {i}".encode(), record_id=f"<urn:uuid:{i}>")
                         for i in range(1, 4)]
    recs[-1] = warc_record("conversion", b"text 3", record_id="<urn:uuid:3>", length=5000)
    for name, data in (("long.warc.wet.gz", members(recs)), ("long.warc.wet", b"".join(recs))):
        (tmp_path / name).write_bytes(data)
        records = read(tmp_path / name, display=f"s:{name}")
        assert [r.text for r in docs(records)] == ["text 1", "text 2"]
        assert records[-1].drop == "read_error" and records[-1].index == 3
        offset = sum(map(len, recs[:3]))
        assert f"s:{name}: record 3 at byte {offset}: Content-Length 5000 runs past the end" in records[-1].message


def test_malformed_header_stops_the_file_after_the_good_records(tmp_path):
    recs = [WARCINFO] + [warc_record("conversion", f"text {i}".encode(), record_id=f"<urn:uuid:{i}>")
                         for i in range(1, 6)]
    recs[3] = recs[3].replace(b"Content-Length: ", b"Content-Length ", 1)  # no colon
    (tmp_path / "h.warc.wet.gz").write_bytes(members(recs))
    records = read(tmp_path / "h.warc.wet.gz", display="s:h")
    assert [r.text for r in records[:-1]] == ["text 1", "text 2"]
    assert records[-1].drop == "read_error" and records[-1].index == 3
    assert f"record 3 at byte {sum(map(len, recs[:3]))}" in records[-1].message
    recs[3] = b"GARBAGE\r\n" + recs[3]
    (tmp_path / "g.warc.wet").write_bytes(b"".join(recs))
    assert [r.drop for r in read(tmp_path / "g.warc.wet")] == [None, None, "read_error"]
    # A header line of only b"\r"s (an IndexError once, its message Python's): the same named damage
    recs[3] = recs[3].replace(b"GARBAGE\r\n", b"").replace(b"Content-Length ", b"\r\r\r\nContent-Length: ", 1)
    (tmp_path / "r.warc.wet").write_bytes(b"".join(recs))
    records = read(tmp_path / "r.warc.wet")
    assert [r.drop for r in records] == [None, None, "read_error"]
    assert "a WARC header line without a field name: b'\\r\\r\\r\\n'" in records[-1].message


def test_record_over_max_record_bytes_is_skipped_in_bounded_memory(tmp_path):
    big = b"x" * (24 << 20)
    recs = [WARCINFO, warc_record("conversion", b"before", record_id="<urn:uuid:1>"),
            warc_record("conversion", big, record_id="<urn:uuid:2>"),
            warc_record("conversion", b"after", record_id="<urn:uuid:3>")]
    path = tmp_path / "big.warc.wet"
    with open(path, "wb") as f:
        for r in recs:
            f.write(r)
    del recs, big
    source = WET.model_copy(update={"max_record_bytes": 1 << 20})
    tracemalloc.start()
    records = read(path, source, "s:big")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [(r.index, r.drop, r.text) for r in records] == [(1, None, "before"), (2, "record_too_large", ""),
                                                            (3, None, "after")]
    assert records[1].id == "<urn:uuid:2>" and "s:big: record 2 at byte" in records[1].message
    assert f"Content-Length {24 << 20}" in records[1].message
    assert peak < 8 << 20  # the 24 MiB body was never held


def test_wrong_digest_is_damage_unless_checks_are_off(tmp_path):
    recs = [WARCINFO, warc_record("conversion", b"fine", record_id="<urn:uuid:1>"),
            warc_record("conversion", b"original", record_id="<urn:uuid:2>").replace(b"\r\n\r\noriginal",
                                                                                       b"\r\n\r\nOriginal")]
    (tmp_path / "d.warc.wet").write_bytes(b"".join(recs))
    assert [r.drop for r in read(tmp_path / "d.warc.wet")] == [None, "read_error"]
    unchecked = WET.model_copy(update={"options": {"verify_digests": False}})
    assert [r.text for r in read(tmp_path / "d.warc.wet", unchecked)] == ["fine", "Original"]


# ------------------------------------------------------------------------------------------ WET records


def test_wet_encodings_and_empty_bodies(tmp_path):
    recs = [WARCINFO,
            warc_record("conversion", "Привет, мир".encode("cp1251"), record_id="<urn:uuid:1>"),
            warc_record("conversion", b" \n ", record_id="<urn:uuid:2>"),
            warc_record("conversion", "中文".encode(), record_id="<urn:uuid:3>"),
            warc_record("request", b"GET / HTTP/1.1\r\n\r\n")]
    (tmp_path / "e.warc.wet").write_bytes(b"".join(recs))
    records = read(tmp_path / "e.warc.wet", display="s:e")
    assert [(r.index, r.drop) for r in records] == [(1, "decode_error"), (2, "empty_text"), (3, None)]
    assert "invalid utf-8" in records[0].message and records[2].text == "中文"
    cp1251 = WET.model_copy(update={"encoding": "cp1251"})
    assert read(tmp_path / "e.warc.wet", cp1251)[0].text == "Привет, мир"


# ----------------------------------------------------------------------------------------- WARC records


def test_warc_http_cases(tmp_path):
    cyrillic = ("<html><body><article><p>" + "Съешь же ещё этих мягких французских булок, да выпей чаю. " * 6
                + "</p></article></body></html>")
    meta_sjis = ('<html><head><meta charset="shift_jis"></head><body><article><p>'
                 + "日本語の文章です。これは十分に長い段落で、本文として抽出されるべきものです。" * 5
                 + "</p></article></body></html>")
    gz = gzip.compress(PAGE, mtime=0)
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(gz[i:i + 100]), gz[i:i + 100]) for i in range(0, len(gz), 100))
    recs = [
        WARCINFO,                                                                                  # 0 skipped
        warc_record("request", b"GET / HTTP/1.1\r\n\r\n", content_type="application/http; msgtype=request"),
        response(PAGE, 2),                                                                         # 2 page
        response(PAGE, 3, status="404 Not Found"),                                                 # 3
        response(b"\x89PNG\r\n\x1a\n" + bytes(100), 4, headers="Content-Type: image/png"),         # 4
        response(b"%PDF-1.4 ...", 5, headers="Content-Type: application/pdf"),                     # 5
        response(chunked + b"0\r\n\r\n", 6,
                 headers="Content-Type: text/html\r\nTransfer-Encoding: chunked\r\nContent-Encoding: gzip"),
        response(cyrillic.encode("cp1251"), 7, headers="Content-Type: text/html; charset=windows-1251"),
        response(meta_sjis.encode("shift_jis"), 8, headers="Content-Type: text/html"),
        response(b"<html><body>  </body></html>", 9),                                              # 9
        warc_record("response", b"garbage\r\n\r\n<html></html>", content_type="application/http; msgtype=response"),
        warc_record("resource", PAGE, uri="<file:///page.html>", content_type="text/html"),       # 11 page
        warc_record("metadata", b"via: x\r\n", content_type="application/warc-fields"),
        response(PAGE, 13, headers="Content-Type: application/octet-stream"),                      # 13 sniffed
        response(PAGE, 14, status="301 Moved Permanently", headers="Location: /x"),
    ]
    (tmp_path / "w.warc.gz").write_bytes(members(recs))
    records = read(tmp_path / "w.warc.gz", WARC, "s:w")
    assert [(r.index, r.drop) for r in records] == [
        (2, None), (3, "http_error"), (4, "not_html"), (5, "not_html"), (6, None), (7, None), (8, None),
        (9, "empty_text"), (10, "bad_http"), (11, None), (13, None), (14, "http_error")]
    by = {r.index: r for r in records}
    assert "quick brown fox" in by[2].text and "<p>" not in by[2].text
    assert by[2].meta["url"] == "https://example.com/2" and by[2].id == "<urn:uuid:2>"
    assert by[3].meta["http_status"] == 404 and "HTTP 404 Not Found" in by[3].message
    assert "image/png" in by[4].message
    assert by[6].text == by[2].text  # chunked, then gzip, undone
    assert "мягких французских булок" in by[7].text and by[7].meta["charset"] == "cp1251"
    assert "日本語の文章です" in by[8].text and by[8].meta["charset"] == "shift_jis"  # from the meta tag
    assert by[11].meta["url"] == "file:///page.html" and "quick brown fox" in by[11].text
    assert all("replaced_chars" not in r.meta for r in records)


def test_stray_invalid_bytes_are_replaced_and_counted_a_wrong_charset_is_a_decode_error(tmp_path):
    stray = PAGE.replace(b"lazy", b"l\xffzy", 1)  # one bad byte in a UTF-8 page
    wrong = PAGE.replace(b"lazy", b"l\xff\xfezy")  # 16 of ~700: a charset that does not fit
    (tmp_path / "r.warc").write_bytes(WARCINFO + response(stray, 1) + response(wrong, 2))
    records = read(tmp_path / "r.warc", WARC, "s:r")
    assert records[0].drop is None and "l\ufffdzy" in records[0].text and records[0].meta["replaced_chars"] == 1
    assert records[1].drop == "decode_error" and records[1].meta["replaced_chars"] == 16
    assert "s:r: record 2 at byte" in records[1].message and "utf-8" in records[1].message


def test_trafilatura_option_on_generated_pages(tmp_path):
    (tmp_path / "t.warc").write_bytes(WARCINFO + response(PAGE, 1))
    source = WARC.model_copy(update={"options": {"extractor": "trafilatura"}})
    (record,) = read(tmp_path / "t.warc", source)
    assert "quick brown fox" in record.text and "Home" not in record.text
    assert record.meta["extractor"] == "trafilatura"


def test_missing_file_is_a_read_error_not_an_exception(tmp_path):
    (record,) = read(tmp_path / "gone.warc.gz", WARC, "s:gone")
    assert record.drop == "read_error" and "s:gone" in record.message


def test_content_encodings_are_bounded_and_checked(tmp_path):
    bomb = gzip.compress(b"<html><body><p>" + b" " * (4 << 20) + b"</p></body></html>", mtime=0)  # 4 KiB -> 4 MiB
    recs = [WARCINFO,
            response(bomb, 1, headers="Content-Type: text/html\r\nContent-Encoding: gzip"),
            response(b"\x1f\x8b\x08\x00broken", 2, headers="Content-Type: text/html\r\nContent-Encoding: gzip"),
            response(PAGE, 3, headers="Content-Type: text/html\r\nContent-Encoding: gzip"),  # stored decoded
            response(PAGE, 4),
            response(brotli.compress(PAGE), 5, headers="Content-Type: text/html\r\nContent-Encoding: br"),
            response(codecs.BOM_UTF16_LE + PAGE.decode().encode("utf-16-le"), 6, headers="Content-Type: text/html")]
    (tmp_path / "c.warc.gz").write_bytes(members(recs))
    source = WARC.model_copy(update={"max_record_bytes": 1 << 20})
    records = read(tmp_path / "c.warc.gz", source, "s:c")
    assert [(r.index, r.drop) for r in records] == [(1, "record_too_large"), (2, "bad_http"), (3, None), (4, None),
                                                    (5, None), (6, None)]
    assert "inflates to more than 1048576 bytes" in records[0].message
    assert "Content-Encoding gzip does not decode" in records[1].message
    assert records[2].text == records[3].text == records[4].text == records[5].text
