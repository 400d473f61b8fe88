"""The Reddit record and the JSON-lines splitter against frozen copies of their forms at 17e2797, on real and hostile
input: the same records (text, id, subset, meta and its key order, drop and message) and the same lines."""

from __future__ import annotations

import gzip
import json
import random
from dataclasses import astuple, dataclass
from typing import Any, BinaryIO, Iterator, Optional

import pytest

from tokenmill.readers import reddit
from tokenmill.readers.base import PREVIEW_CHARS, get_path, is_missing
from tokenmill.readers.compression import DECOMPRESSION_ERRORS, Members
from tokenmill.readers.lines import BOM, CHUNK, iter_lines
from tokenmill.sources.reader import Record

from tests.readers.test_speed_ingest import HOSTILE_TEXTS, compressed, open_with

# ------------------------------------------------------------------------------------------- the frozen old forms


def old_reddit_record(obj: Any, index: int, source, where: str) -> Record:
    if not isinstance(obj, dict):
        return Record(index, str(obj)[:PREVIEW_CHARS], drop="not_an_object", message=f"{where}: not a JSON object")
    if "body" in obj:
        kind, prefix, texts = "comment", "t1_", [("body", obj["body"])]
    elif "title" in obj or "selftext" in obj:
        kind, prefix, texts = "submission", "t3_", [("title", obj.get("title")), ("selftext", obj.get("selftext"))]
    else:
        return Record(index, "", drop="missing_text", message=f"{where}: neither a comment body nor a submission title")
    for field, value in texts:
        if value is not None and not isinstance(value, str):
            return Record(index, str(value)[:PREVIEW_CHARS], drop="bad_text_type",
                          message=f"{where}: {field} is a {type(value).__name__}, not a string")
    if source.id_field is not None:
        raw = get_path(obj, source.id_field)
        doc_id = None if is_missing(raw) or raw in (None, "") else str(raw)
        if doc_id is None:
            return Record(index, "", drop="missing_id", message=f"{where}: no field {source.id_field!r}")
    else:
        doc_id = obj.get("name") or (prefix + str(obj["id"]) if obj.get("id") else None)
    meta = {k: obj[k] for k in reddit.META_FIELDS if k in obj}
    for k in reddit.TIME_FIELDS:
        if k in meta:
            meta[k] = reddit._seconds(meta[k])
    meta["kind"] = kind
    subset = obj.get("subreddit")
    subset = None if subset is None else str(subset)
    body = texts[-1][1] or ""
    if body.strip() in reddit.GONE:
        return Record(index, texts[0][1] or "", doc_id, subset, meta, drop=reddit.GONE[body.strip()],
                      message=f"{where}: {kind} {texts[-1][0]} is {body.strip()}")
    text = "\n\n".join(v for _, v in texts if v and v.strip())
    if not text.strip():
        return Record(index, text, doc_id, subset, meta, drop="empty_text", message=f"{where}: empty {kind}")
    return Record(index, text, doc_id, subset, meta)


@dataclass(frozen=True, slots=True)
class OldLine:
    number: int
    data: Optional[bytes]
    offset: int
    problem: Optional[str] = None
    message: Optional[str] = None


def old_iter_lines(stream: BinaryIO, max_bytes: int) -> Iterator[OldLine]:
    number, offset = 0, 0
    while True:
        try:
            line = stream.readline(max_bytes + 1)
        except DECOMPRESSION_ERRORS as err:
            yield OldLine(number + 1, None, offset, "read_error", f"damaged stream after byte {offset}: {err}")
            return
        if not line:
            return
        number += 1
        start = offset
        offset += len(line)
        if len(line) > max_bytes and not line.endswith(b"\n"):
            try:
                while not line.endswith(b"\n"):
                    line = stream.readline(CHUNK)
                    if not line:
                        break
                    offset += len(line)
            except DECOMPRESSION_ERRORS as err:
                yield OldLine(number, None, start, "read_error", f"damaged stream after byte {offset}: {err}")
                return
            yield OldLine(number, None, start, "record_too_large", f"line of more than {max_bytes} bytes")
            continue
        if number == 1 and line.startswith(BOM):
            line = line[len(BOM):]
        if line.endswith(b"\n"):
            line = line[:-1]
            if line.endswith(b"\r"):
                line = line[:-1]
        yield OldLine(number, line, start)


# ------------------------------------------------------------------------------------------------- helpers


class _Source:
    def __init__(self, id_field: Optional[str] = None):
        self.id_field = id_field


def outcome(obj: Any, source) -> list:
    """Both readers' records of `obj`, with the order of their meta keys (dict equality ignores it)."""
    got = []
    for fn in (reddit.reddit_record, old_reddit_record):
        record = fn(obj, 7, source, "f.ndjson:8")
        got.append((record, None if record.meta is None else list(record.meta)))
    return got


def hostile_objects() -> list[Any]:
    texts = [*HOSTILE_TEXTS, None, "[deleted]", " [removed]\n", "\u3000[deleted]\u3000", "[Deleted]", 5, 1.5, ["x"],
             {"a": 1}, True]
    objs: list[Any] = [None, 3, "body", ["body"], {}, {"id": "x"}, {"subreddit": "a"}]
    for text in texts:
        objs += [{"body": text}, {"body": text, "id": "abc", "subreddit": 12}, {"title": text},
                 {"selftext": text}, {"title": text, "selftext": text}, {"title": "t", "selftext": text},
                 {"title": text, "selftext": "s"}, {"title": None, "selftext": text, "name": "t3_n"},
                 {"body": text, "title": "ignored", "selftext": "ignored"}]
    times = ["1672531200", "1.67e9", "soon", "", 1.5, -0.5, 10**30, True, False, None, [1], {"a": 1}, 0, 1672531200]
    for value in times:
        objs += [{"body": "x", "created_utc": value}, {"body": "x", "retrieved_on": value, "created_utc": 3},
                 {"title": "t", "retrieved_on": value}]
    # One layout seen twice with different values, and the same keys in other orders: the remembered fields are
    # those of the keys, whatever their values.
    objs += [{"body": "a", "score": None, "author": "x"}, {"body": "b", "score": 3, "author": None},
             {"author": "x", "body": "c", "score": 1}, {"score": 1, "author": "x", "body": "d", "gilded": 0},
             {"body": "e", "score": 1}, {"body": "f", "score": 1, "id": "", "name": ""},
             {"body": "g", "id": 0}, {"body": "h", "id": "0", "name": None}]
    objs += [{"body": "x", **{k: v for k, v in zip(reddit.META_FIELDS, range(len(reddit.META_FIELDS))) if v % 2}},
             {"body": "x", **{k: k for k in reversed(reddit.META_FIELDS)}}]
    return objs


def real_objects(shared_data) -> list[Any]:
    return [json.loads(line) for name in ("pushshift_test_comments.ndjson", "pushshift_test_submissions.ndjson")
            for line in (shared_data / "reddit" / name).read_text().splitlines() if line.strip()]


# --------------------------------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("id_field", [None, "id", "author", "missing.path"])
def test_reddit_records_are_the_old_records(shared_data, id_field):
    source = _Source(id_field)
    objs = real_objects(shared_data) + hostile_objects()
    for obj in objs:
        new, old = outcome(obj, source)
        assert new == old, obj
    # Read again: the layouts are now remembered, and must give the same records as on first sight.
    for obj in objs:
        new, old = outcome(obj, source)
        assert new == old, obj


def test_reddit_records_past_the_remembered_layouts(monkeypatch):
    monkeypatch.setattr(reddit, "_PRESENT", {})
    monkeypatch.setattr(reddit, "_PRESENT_MAX", 3)
    rng = random.Random(5)
    for i in range(200):
        keys = rng.sample([*reddit.META_FIELDS, "x", "y", "z"], rng.randrange(0, 12))
        obj = {"body": f"text {i}", **{k: rng.choice([1, "2", None, 1.5, True]) for k in keys}}
        new, old = outcome(obj, _Source())
        assert new == old, obj
    assert len(reddit._PRESENT) == 3


def lines(iterate, stream, max_bytes: int) -> list:
    return [(line.number, line.data, line.offset, line.problem, line.message) for line in iterate(stream, max_bytes)]


def test_lines_are_the_old_lines(shared_data):
    """The same lines, problems and messages, by name and by position, over real, hostile, cut and corrupt streams."""
    texts = [gzip.decompress((shared_data / "commoncrawl" /
                              "dolma_CC-MAIN-20190717121559-20190717143559-00140.jsonl.gz").read_bytes()),
             (shared_data / "reddit" / "pushshift_test_submissions.ndjson").read_bytes(),
             BOM + "\n".join(HOSTILE_TEXTS).encode("utf-8", "surrogatepass") + b"\r\n\r\r\n\n",
             b"", b"\n", b"no newline at the end", b"x" * 5_000 + b"\r\n" + b"y" * 4_999 + b"\n" + b"z" * 5_001]
    for data in texts:
        for kind in ("gzip", "zstd"):
            raw = compressed(data, kind)
            damaged = [raw, raw[: len(raw) // 3], raw[:-3]]
            if len(raw) > 40:
                at = random.Random(len(raw)).randrange(len(raw) // 2, len(raw) - 10)
                damaged.append(raw[:at] + bytes([raw[at] ^ 0xFF]) + raw[at + 1:])
            for packed in damaged:
                for max_bytes in (1, 100, 5_000, 10**8):
                    new = list(iter_lines(open_with(Members, packed, kind), max_bytes))
                    old = list(old_iter_lines(open_with(Members, packed, kind), max_bytes))
                    assert [tuple(n) for n in new] == [astuple(o) for o in old]
                    assert lines(iter_lines, open_with(Members, packed, kind), max_bytes) == \
                        lines(old_iter_lines, open_with(Members, packed, kind), max_bytes)
