"""Ingest's faster forms against frozen copies of the forms they replaced, on real files and hostile ones.

Each rewritten function must give what the old one gave, byte for byte: the records, the drop messages, the damage
a broken stream reports and where. The old forms are copied here as they were (commit 406a5c2).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import io
import json
import math
import random
import zlib
from collections.abc import Mapping
from typing import Any, Optional

import pytest
import zstandard

from tokenmill.documents import canonical_json
from tokenmill.readers import compression, reddit, warc_records
from tokenmill.readers.compression import BUFFER, Members
from tokenmill.readers.lines import iter_lines
from tokenmill.readers.warc_records import (
    _HASHES,
    _VERSION,
    MAX_HEADER_BYTES,
    MAX_LINE,
    Body,
    WarcHeader,
    iter_warc_records,
)
from tokenmill.sources.reader import Record
from tokenmill.stages.ingest import SourceFile, _parts, records_table

# ------------------------------------------------------------------------------------------- the frozen old forms


def old_digest_check(value: Optional[str]):
    if not value:
        return None
    algo, _, encoded = value.partition(":")
    name = _HASHES.get(algo.strip().lower())
    if name is None or not encoded.strip():
        return None
    hasher = hashlib.new(name)
    encoded = encoded.strip()
    for decode in (lambda e: base64.b32decode(e.upper() + "=" * (-len(e) % 8)), bytes.fromhex,
                   lambda e: base64.b64decode(e, validate=True)):
        try:
            expected = decode(encoded)
        except (ValueError, binascii.Error):
            continue
        if len(expected) == hasher.digest_size:
            return hasher, expected
    return None


class OldParser:
    def __init__(self, stream):
        self.stream = stream
        self.offset = 0
        self.record_offset = 0

    def damage(self, message):
        return warc_records.WarcDamage(self.record_offset, message)

    def readline(self, limit):
        try:
            line = self.stream.readline(limit)
        except compression.DECOMPRESSION_ERRORS as err:
            raise self.damage(f"damaged stream after byte {self.offset}: {err}") from None
        self.offset += len(line)
        return line

    def read_exact(self, size, body):
        parts, got = [], 0
        while got < size:
            try:
                data = self.stream.read(size - got)
            except compression.DECOMPRESSION_ERRORS as err:
                raise self.damage(f"damaged stream after byte {self.offset + got}: {err}") from None
            if not data:
                read = body.length - body.remaining + got
                raise self.damage(f"Content-Length {body.length} runs past the end of the stream "
                                  f"({read} body bytes there)")
            parts.append(data)
            got += len(data)
        self.offset += got
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def header(self):
        while True:
            self.record_offset = self.offset
            line = self.readline(MAX_LINE)
            if not line:
                return None
            if line not in (b"\r\n", b"\n"):
                break
        match = _VERSION.match(line)
        if match is None:
            raise self.damage(f"no WARC record here: the line is {line[:60]!r}")
        fields: dict[str, str] = {}
        size, last = len(line), None
        while True:
            line = self.readline(MAX_LINE)
            size += len(line)
            if not line.endswith(b"\n"):
                if not line or len(line) < MAX_LINE:
                    raise self.damage("the stream ends inside the WARC header")
                raise self.damage(f"a WARC header line of more than {MAX_LINE} bytes")
            if size > MAX_HEADER_BYTES:
                raise self.damage(f"a WARC header of more than {MAX_HEADER_BYTES} bytes")
            if line in (b"\r\n", b"\n"):
                break
            text = line.decode("utf-8", "replace").rstrip("\r\n")
            if text[0] in " \t" and last is not None:
                fields[last] += " " + text.strip()
                continue
            name, colon, value = text.partition(":")
            if not colon or not name.strip():
                raise self.damage(f"a WARC header line without a field name: {line[:60]!r}")
            last = name.strip().lower()
            fields.setdefault(last, value.strip())
        raw_length = fields.get("content-length")
        if raw_length is None or not raw_length.isdigit():
            raise self.damage(f"no valid Content-Length ({raw_length!r})")
        return WarcHeader(self.record_offset, match.group(1).decode("ascii"), fields, int(raw_length))


def old_iter_warc_records(stream, verify_digests=True):
    parser = OldParser(stream)
    while True:
        header = parser.header()
        if header is None:
            return
        check = old_digest_check(header.get("WARC-Block-Digest")) if verify_digests else None
        body = Body(parser, header.content_length, check)
        yield header, body
        body.skip()


class OldMembers(Members):
    """Members with its old `readinto`: one compressed step per call."""

    def readinto(self, buffer) -> int:
        while not self.pending:
            if self.error is not None:
                raise self.error
            chunk = self.raw.read(self.STEP)
            if not chunk:
                if self.in_member:
                    raise compression.CorruptStream(f"{self.kind} stream ends inside a {self.kind} member at "
                                                    f"compressed byte {self.consumed} (the file is truncated)")
                return 0
            self.pending = memoryview(self._feed(chunk))
            self.consumed += len(chunk)
        n = min(len(buffer), len(self.pending))
        buffer[:n] = self.pending[:n]
        self.pending = self.pending[n:]
        return n


def old_canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def old_records_table(source, records):
    ids, texts, subsets, metas, reasons = [], [], [], [], []
    for file, r in records:
        ids.append(r.id if r.id is not None else f"{source}/{file.relpath}/{r.index}")
        texts.append(r.text)
        subsets.append(r.subset)
        meta = dict(r.meta or {})
        if r.drop is not None:
            meta = {"error": r.message, "record_index": r.index, **({"record": meta} if meta else {})}
        metas.append(old_canonical_json(meta))
        reasons.append(r.drop)
    return ids, texts, subsets, metas, reasons


def old_parts(records, size, max_bytes, text=lambda r: r.text):
    part, part_bytes, emitted = [], 0, False
    for record in records:
        part.append(record)
        t = text(record)
        part_bytes += len(t.encode("utf-8")) if t else 0
        if len(part) == size or part_bytes >= max_bytes:
            yield part
            emitted, part, part_bytes = True, [], 0
    if part or not emitted:
        yield part


def old_reddit_meta(obj):
    return {k: (reddit._seconds(obj[k]) if k in ("created_utc", "retrieved_on") else obj[k])
            for k in reddit.META_FIELDS if k in obj}


# ------------------------------------------------------------------------------------------------- helpers

HOSTILE_TEXTS = ["", " ", "plain ascii words", "a\ud800b", "nul\x00byte", "cr\rlf\r\n", "\u00a0\u2003\u3000spaces",
                 "x" * 300_000, "中文的文本，还有标点。", "e\u0301 combining \u0308marks", "\U0001f600 emoji"]


def outcome(fn):
    """What `fn()` returns, or the exception it raises (type and message)."""
    try:
        return ("ok", fn())
    except Exception as err:  # noqa: BLE001 - the comparison is of the errors too
        return ("raised", type(err).__name__, str(err))


def record(fields: list[bytes], body: bytes, eol: bytes = b"\r\n", digest: bool = True, version=b"WARC/1.0") -> bytes:
    head = [version] + list(fields)
    if digest:
        head.append(b"WARC-Block-Digest: sha1:" + base64.b32encode(hashlib.sha1(body).digest()))
    head.append(b"Content-Length: " + str(len(body)).encode())
    return eol.join(head) + eol + eol + body + eol + eol


def conversion(n: int, body: bytes, eol: bytes = b"\r\n", **kw) -> bytes:
    fields = [b"WARC-Type: conversion", b"WARC-Record-ID: <urn:uuid:%d>" % n, b"WARC-Target-URI: http://x/%d" % n]
    return record(fields, body, eol, **kw)


def synthetic_warcs() -> dict[str, bytes]:
    """Hostile WARC streams (uncompressed): odd but valid framing, and every kind of damage the parser names."""
    body = "中文 text\x00 with \r and \u00a0 spaces\n".encode() * 20
    ok = conversion(1, body) + conversion(2, b"second")
    big = b"y" * (BUFFER - 300)  # the next header straddles the parser's and the stream's first megabyte
    out = {
        "plain": ok,
        "lf_only": conversion(1, body, b"\n") + conversion(2, b"b", b"\n"),
        "mixed_eol": conversion(1, body, b"\r\n") + conversion(2, b"b", b"\n") + conversion(3, b"c", b"\r\n"),
        "no_blank_between": record([b"WARC-Type: conversion"], b"a")[:-4] + conversion(2, b"b"),
        "many_blank_between": conversion(1, b"a") + b"\r\n\n\r\n\n" + conversion(2, b"b"),
        "folded": record([b"WARC-Type: conversion", b"WARC-Target-URI: http://a", b"  /folded/part",
                          b"\tand-tab"], b"x"),
        "fold_first": record([b" leading-space: v", b"WARC-Type: conversion"], b"x"),
        "repeated_field": record([b"WARC-Type: conversion", b"WARC-Type: response", b"warc-type: other"], b"x"),
        "non_utf8_header": record([b"WARC-Type: conversion", b"WARC-Target-URI: http://\xff\xfe/\xe4\xb8"], b"x"),
        "chinese_header": record([b"WARC-Type: conversion", "WARC-Target-URI: http://例子.测试/路径".encode()], b"x"),
        "nul_in_header": record([b"WARC-Type: conversion", b"X-Odd: a\x00b"], b"x"),
        "spaces_around": record([b"  WARC-Type  :   conversion   ", b"Content-Type:text/plain"], b"x"),
        "cr_only_line": record([b"WARC-Type: conversion", b"\r"], b"x"),
        "crcr_line": ok + record([b"WARC-Type: conversion", b"X: y\r"], b"x"),
        "no_colon": ok + record([b"WARC-Type: conversion", b"no colon here"], b"x"),
        "empty_name": record([b"WARC-Type: conversion", b": value"], b"x"),
        "no_fields": b"WARC/1.0\r\n\r\n" + ok,
        "no_length": b"WARC/1.0\r\nWARC-Type: conversion\r\n\r\nbody",
        "bad_length": b"WARC/1.0\r\nContent-Length: 12a\r\n\r\nbody",
        "length_past_end": ok + b"WARC/1.0\r\nWARC-Type: conversion\r\nContent-Length: 999\r\n\r\nshort",
        "ends_in_header": ok + b"WARC/1.0\r\nWARC-Type: conversion\r\nContent-Le",
        "ends_after_version": ok + b"WARC/1.0\r\n",
        "not_warc": ok + b"HTTP/1.1 200 OK\r\n\r\n",
        "long_line": record([b"WARC-Type: conversion", b"X-Long: " + b"z" * (MAX_LINE + 10)], b"x"),
        "line_at_limit": record([b"WARC-Type: conversion", b"X-Long: " + b"z" * (MAX_LINE - 10)], b"x"),
        "header_4k_edge": record([b"WARC-Type: conversion"] + [b"X-F%d: " % i + b"v" * 30 for i in range(110)], b"x"),
        "huge_header": record([b"WARC-Type: conversion"] + [b"X-F%d: " % i + b"v" * 1000 for i in range(1100)], b"x"),
        "bad_digest": conversion(1, b"a") + conversion(2, b"b")[:-5] + b"X\r\n\r\n",
        "lower_digest": record([b"WARC-Type: conversion", b"WARC-Block-Digest: sha1:"
                                + base64.b32encode(hashlib.sha1(b"x").digest()).lower()], b"x", digest=False),
        "sha256_hex": record([b"WARC-Type: conversion", b"WARC-Block-Digest: sha256:"
                              + hashlib.sha256(b"x").hexdigest().encode()], b"x", digest=False),
        "straddle": conversion(1, big) + conversion(2, b"b") + conversion(3, body),
        "body_over_chunk": conversion(1, b"z" * (3 * BUFFER + 17)) + conversion(2, b"b"),
        "version_2": record([b"WARC-Type: conversion"], b"x", version=b"WARC/1.1"),
        "empty": b"",
        "only_blanks": b"\r\n\n\r\n",
    }
    return out


def real_warcs(shared_data) -> dict[str, bytes]:
    names = ["whirlwind.warc.gz", "whirlwind.warc.wet.gz", "whirlwind.warc.wat.gz", "dolma_wget_sample-0000.warc.gz",
             "CC-MAIN-2016-50_filter_test_1.warc.wet.gz"]
    return {name: gzip.decompress((shared_data / "commoncrawl" / name).read_bytes()) for name in names}


def variants(name: str, data: bytes) -> dict[str, bytes]:
    """The stream, cut short at several places (inside headers and bodies), and with one byte changed."""
    out = {name: data}
    rng = random.Random(len(data))
    for cut in sorted({len(data) // 2, len(data) - 1, *(rng.randrange(len(data)) for _ in range(4))} if data else []):
        out[f"{name}/cut{cut}"] = data[:cut]
    if len(data) > 100:
        at = rng.randrange(len(data))
        out[f"{name}/flip{at}"] = data[:at] + bytes([data[at] ^ 0x20]) + data[at + 1:]
    return out


def walk(iterate, stream, verify: bool, mode: int) -> list:
    """Every record a parser yields (header and what is read of its body), then the error that ended it."""
    out: list = []
    try:
        for i, (header, body) in enumerate(iterate(stream, verify)):
            way = (i + mode) % 3  # read all, read a little and leave the rest, or skip
            data = body.read() if way == 0 else body.read(7) if way == 1 else b""
            out.append((header.offset, header.version, dict(header.fields), header.content_length, data))
    except Exception as err:  # noqa: BLE001 - the error is part of what is compared
        out.append((type(err).__name__, str(err)))
    return out


def compressed(data: bytes, kind: str) -> bytes:
    if kind == "gzip":
        return gzip.compress(data, mtime=0)
    if kind == "gzip_members":  # one member per 50 KB, NUL padding between some, as writers do
        pieces = [gzip.compress(data[i:i + 50_000], mtime=0) for i in range(0, len(data), 50_000)] or [b""]
        return b"\x00\x00".join(pieces)
    if kind == "zstd":
        return b"".join(zstandard.ZstdCompressor().compress(data[i:i + 200_000]) for i in range(0, max(len(data), 1),
                                                                                            200_000))
    return data


def open_with(members_class, raw: bytes, kind: str):
    """A stream as `open_binary` makes it, its decompressor given: the old or the new Members."""
    f = io.BytesIO(raw)
    if kind.startswith("gzip"):
        return io.BufferedReader(members_class(f, lambda: zlib.decompressobj(31), "gzip", skip_padding=True), BUFFER)
    if kind == "zstd":
        dctx = zstandard.ZstdDecompressor(max_window_size=2**27)
        return io.BufferedReader(members_class(f, dctx.decompressobj, "zstd"), BUFFER)
    return io.BufferedReader(f, BUFFER)


def same_but_mended(new: list, old: list) -> bool:
    """`new == old`, but where the old parser raised an IndexError on a header line of only b"\r"s: the new one names
    that damage as it names other header lines without a field (e06be28); what came before is the same."""
    if old and old[-1] == ("IndexError", "string index out of range"):
        return (new[:-1] == old[:-1] and new[-1][0] == "WarcDamage"
                and "a WARC header line without a field name" in new[-1][1])
    return new == old


# -------------------------------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("source", ["synthetic", "real"])
def test_the_warc_parser_gives_what_the_old_one_gave(source, request):
    """Headers, bodies and damage messages of the new parser (over the new decompressing stream) equal the old
    parser's (over the old stream), however the stream is compressed, cut or corrupted, and however bodies are read."""
    streams = synthetic_warcs() if source == "synthetic" else real_warcs(request.getfixturevalue("shared_data"))
    checked = 0
    for name, data in streams.items():
        for label, stream_bytes in variants(name, data).items():
            for kind in ("plain", "gzip", "gzip_members", "zstd"):
                raw = compressed(stream_bytes, kind)
                cuts = [raw] if kind == "plain" or len(raw) < 64 else [raw, raw[: len(raw) * 2 // 3]]
                for packed in cuts:
                    for verify in (True, False):
                        for mode in (0, 1, 2):
                            old = walk(old_iter_warc_records, open_with(OldMembers, packed, kind), verify, mode)
                            new = walk(iter_warc_records, open_with(Members, packed, kind), verify, mode)
                            assert same_but_mended(new, old), (label, kind, verify, mode)
                            checked += 1
    # And over an uncompressed stream that is not a buffered reader (no read1 buffering of its own).
    for name, data in streams.items():
        assert same_but_mended(walk(iter_warc_records, io.BytesIO(data), True, 0),
                               walk(old_iter_warc_records, io.BytesIO(data), True, 0)), name
    assert checked > 100


def test_the_fast_header_path_is_taken_on_common_crawl_records():
    """The block-at-once path parses plain headers (else the speed-up is gone and only the fallback runs)."""
    data = b"".join(conversion(i, b"body %d" % i) for i in range(50))
    parser = warc_records._Parser(io.BufferedReader(io.BytesIO(data)))
    assert parser.readline(MAX_LINE) == b"WARC/1.0\r\n"
    fields = parser._buffered_fields()
    assert fields == {"warc-type": "conversion", "warc-record-id": "<urn:uuid:0>", "warc-target-uri": "http://x/0",
                      "warc-block-digest": fields["warc-block-digest"], "content-length": "6"}
    assert parser.offset == data.index(b"\r\n\r\n") + 4


def test_the_digest_check_decodes_as_before():
    rng = random.Random(7)
    values = [None, "", "sha1:", "sha1: ", "crc32:ABCD", "sha1:" + "A" * 31, "sha1:" + "A" * 33, "sha1:" + "1" * 32]
    for _ in range(300):
        digest = rng.randbytes(20)
        enc = base64.b32encode(digest).decode()
        values += [f"sha1:{enc}", f"SHA-1:{enc.lower()}", f"sha1: {enc} ", f"sha1:{digest.hex()}",
                   f"sha1:{base64.b64encode(digest).decode()}", f"sha256:{base64.b32encode(rng.randbytes(32)).decode()}",
                   f"md5:{base64.b32encode(rng.randbytes(16)).decode()}"]
    values += ["sha1:" + "ſ" * 32, "sha1:" + "ı" * 32, "sha1:" + "Ａ" * 32, "sha1:" + "A" * 24 + "========"]
    for value in values:
        old, new = old_digest_check(value), warc_records._digest_check(value)
        assert (old is None) == (new is None), value
        if old is not None:
            assert (old[0].name, old[1]) == (new[0].name, new[1]), value


def lines_of(stream, max_bytes: int) -> list:
    return [(line.number, line.data, line.offset, line.problem, line.message) for line in iter_lines(stream, max_bytes)]


def reads_of(stream, size: int) -> list:
    out: list = []
    try:
        while chunk := stream.read(size):
            out.append(chunk)
    except Exception as err:  # noqa: BLE001 - compared
        out.append((type(err).__name__, str(err)))
    return out


def test_the_decompressing_stream_hands_out_what_it_did(shared_data):
    """Lines (and the read_error that ends them) and reads of every size, over real and cut or corrupted streams."""
    texts = [(shared_data / "commoncrawl" / "dolma_CC-MAIN-20190717121559-20190717143559-00140.jsonl.gz").read_bytes(),
             (shared_data / "reddit" / "pushshift_test_submissions.ndjson").read_bytes()]
    plain = [gzip.decompress(texts[0]), texts[1], "\n".join(HOSTILE_TEXTS).encode("utf-8", "surrogatepass")]
    for data in plain:
        for kind in ("gzip", "gzip_members", "zstd"):
            raw = compressed(data, kind)
            rng = random.Random(len(raw))
            damaged = [raw, raw[: len(raw) // 3], raw[:-3]]
            at = rng.randrange(len(raw) // 2, len(raw))
            damaged.append(raw[:at] + bytes([raw[at] ^ 0xFF]) + raw[at + 1:])
            for packed in damaged:
                for max_bytes in (100, 5_000, 10**8):
                    assert (lines_of(open_with(Members, packed, kind), max_bytes)
                            == lines_of(open_with(OldMembers, packed, kind), max_bytes))
                for size in (1, 1000, BUFFER, 3 * BUFFER + 5):
                    assert reads_of(open_with(Members, packed, kind), size) == reads_of(open_with(OldMembers, packed,
                                                                                                   kind), size)


def test_canonical_json_is_the_old_string():
    values = [{}, {"b": 1, "a": [1, 2.5, None, True]}, {"x": {"z": 1, "y": "中文"}}, [1e300, -0.0, 10**30],
              {f"s{i}": t for i, t in enumerate(HOSTILE_TEXTS)}, {t: i for i, t in enumerate(HOSTILE_TEXTS)}, "str", 5, None,
              {"nan": math.nan}, {"inf": math.inf}, {1: "int key", "1": "str key"}, {"a": 1, 2: "mixed"},
              {"set": {1}}, {"bytes": b"x"}]
    for value in values:
        assert outcome(lambda: canonical_json(value)) == outcome(lambda: old_canonical_json(value)), value


class _Meta(Mapping):
    def __init__(self, d):
        self.d = d

    def __getitem__(self, k):
        return self.d[k]

    def __iter__(self):
        return iter(self.d)

    def __len__(self):
        return len(self.d)


def test_records_table_holds_the_old_columns():
    file = SourceFile("web", "/x/a.jsonl", "a.jsonl", 1, 1)
    records = []
    for i, text in enumerate(HOSTILE_TEXTS):
        records += [Record(i, text), Record(i, text, f"id{i}", "sub", {"k": text, "n": i}),
                    Record(i, text, None, None, {}, drop="bad_json", message=f"a.jsonl:{i}: bad"),
                    Record(i, text, None, None, {"record": 1}, drop="empty_text", message=text),
                    Record(i, text, meta=_Meta({"m": i}))]
    records += [Record(99, "x", meta=_Meta({})), Record(100, "y", meta=_Meta({"a": 1}), drop="missing_id", message="m")]
    pairs = [(file, r) for r in records if "\ud800" not in r.text]  # Arrow refuses lone surrogates, old and new
    table, reasons = records_table("web", pairs)
    ids, texts, subsets, metas, old_reasons = old_records_table("web", pairs)
    assert table.column("id").to_pylist() == ids and table.column("text").to_pylist() == texts
    assert table.column("subset").to_pylist() == subsets and table.column("meta").to_pylist() == metas
    assert reasons.to_pylist() == old_reasons and table.column("source").to_pylist() == ["web"] * len(ids)
    surrogate = [(file, r) for r in records if "\ud800" in r.text]
    assert outcome(lambda: records_table("web", surrogate)[0].num_rows)[0] == "raised"


def test_parts_cut_where_they_did():
    rng = random.Random(3)
    pool = HOSTILE_TEXTS[:3] + HOSTILE_TEXTS[4:] + ["é" * 40, "a" * 40, ""]
    records = [Record(i, rng.choice(pool)) for i in range(400)]
    for size, max_bytes in ((1, 10), (7, 100), (1000, 150), (50, 300_000), (10**6, 10**9)):
        assert [[r.index for r in p] for p in _parts(iter(records), size, max_bytes)] == \
            [[r.index for r in p] for p in old_parts(iter(records), size, max_bytes)]
    surrogate = [Record(0, "a\ud800b")]
    assert outcome(lambda: list(_parts(iter(surrogate), 5, 5)))[:2] == outcome(lambda: list(old_parts(iter(surrogate),
                                                                                                   5, 5)))[:2]


def test_reddit_meta_is_the_old_meta(shared_data):
    objs = [json.loads(line) for name in ("pushshift_test_comments.ndjson", "pushshift_test_submissions.ndjson")
            for line in (shared_data / "reddit" / name).read_text().splitlines() if line.strip()]
    objs += [{"body": "x", "created_utc": v, "retrieved_on": v} for v in ("1672531200", "1.67e9", "soon", 1.5, True,
                                                                            None, [1], {"a": 1})]
    objs += [{"body": "x"}, {"title": "t", "selftext": "中文", "score": 3, "edited": False}]
    for i, obj in enumerate(objs):
        new = reddit.reddit_record(obj, i, type("S", (), {"id_field": None})(), "where")
        assert new.meta is None or {k: v for k, v in new.meta.items() if k != "kind"} == old_reddit_meta(obj), obj
        if new.meta is not None:
            assert list(new.meta)[:-1] == list(old_reddit_meta(obj))  # the same order of keys


class _FailingFile(io.BytesIO):
    """A file whose reads fail from byte `at` on (a disk error, a store that stops answering)."""

    def __init__(self, data: bytes, at: int, once: bool = False):
        super().__init__(data)
        self.at = at
        self.once = once  # the read after the failing one works again (a store that answers on retry)

    def read(self, size=-1):
        if self.tell() >= self.at:
            at, self.at = self.tell(), (len(self.getbuffer()) + 1 if self.once else self.at)
            raise OSError(f"I/O error at {at}")
        return super().read(size if size is not None and 0 <= size <= self.at - self.tell() else self.at - self.tell())


def test_a_failing_read_of_the_file_ends_the_stream_where_it_did(shared_data):
    """The bytes decoded before a read of the compressed file fails are all handed out, then its error, as before."""
    data = (shared_data / "reddit" / "pushshift_test_submissions.ndjson").read_bytes()
    warc = gzip.decompress((shared_data / "commoncrawl" / "dolma_wget_sample-0000.warc.gz").read_bytes())
    for payload, kind in ((data, "gzip"), (data, "zstd"), (warc, "gzip_members")):
        raw = compressed(payload, kind)
        for at, once in ((0, False), (1000, False), (len(raw) // 3, False), (len(raw) - 10, False), (1000, True),
                         (len(raw) // 2, True)):
            def stream(cls, at=at, raw=raw, kind=kind, once=once):
                s = open_with(cls, b"", kind)
                s.raw.raw = _FailingFile(raw, at, once)
                return s
            if payload is warc:
                for mode in (0, 1, 2):
                    assert walk(iter_warc_records, stream(Members), True, mode) == \
                        walk(old_iter_warc_records, stream(OldMembers), True, mode)
            else:
                assert lines_of(stream(Members), 10**6) == lines_of(stream(OldMembers), 10**6)
                assert reads_of(stream(Members), 4096) == reads_of(stream(OldMembers), 4096)
