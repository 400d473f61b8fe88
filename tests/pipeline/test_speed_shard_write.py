"""The shard write's hashes and the metadata filter, rewritten for speed (issue 35), against frozen copies of their
old forms (HEAD 0c3789d) on real text of `../shared/data`, the standard library's sources and hostile text (empty,
lone surrogates, NUL, `\\r`, Unicode spaces, a 300 KB line, Chinese, combining marks), in every chunking Arrow gives:
`text_hashes` and `column_digest` read each chunk in place (no combined copy, no cast); the metadata filter parses
`meta` only for rows a rule on it looks at, by the JSON decoder's scanner."""

from __future__ import annotations

import hashlib
import json
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from tests.conftest import SHARED_DATA
from tests.text.test_clean_speed import hostile, real
from tokenmill import documents
from tokenmill.documents import column_digest, content_hash, text_hashes, text_hashes_at, utf8_lengths
from tokenmill.stages import metadata_filter as mf
from tokenmill.stages.metadata_filter import MetadataRule, apply_rules, parse_meta


# ---------------------------------------------------------------------------------------------------------------
# Frozen old forms
# ---------------------------------------------------------------------------------------------------------------


def old_column_digest(hasher, column) -> None:
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks else pa.array([], pa.string())
    column = column.cast(pa.large_string())
    hasher.update(utf8_lengths(column).astype("<i8").tobytes())
    offsets_buf, data_buf = column.buffers()[1], column.buffers()[2]
    if data_buf is None or len(column) == 0:
        return
    offsets = np.frombuffer(offsets_buf, dtype="<i8")[column.offset : column.offset + len(column) + 1]
    hasher.update(memoryview(data_buf)[offsets[0] : offsets[-1]])


def old_text_hashes(column) -> pa.Array:
    import xxhash

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks else pa.array([], pa.string())
    if column.null_count:
        raise ValueError(f"{column.null_count} null text(s): `text` must be a string in every row")
    column = column.cast(pa.large_string())
    n = len(column)
    if n == 0:
        return pa.array([], pa.uint64())
    offsets = np.frombuffer(column.buffers()[1], dtype="<i8")[column.offset : column.offset + n + 1].tolist()
    data = memoryview(column.buffers()[2] or b"")
    h = xxhash.xxh3_64_intdigest
    return pa.array(np.fromiter((h(data[offsets[i] : offsets[i + 1]]) for i in range(n)), np.uint64, n), pa.uint64())


def old_apply_rules(table: pa.Table, rules: list[MetadataRule]):
    n = table.num_rows
    needs_meta = any(r.field not in (*mf.COLUMNS, mf.TEXT_CHARS) for r in rules)
    metas = [json.loads(m) for m in table.column("meta").to_pylist()] if needs_meta else None
    sources, subsets = table.column("source").to_pylist(), table.column("subset").to_pylist()
    reasons: list[str | None] = [None] * n
    dropped: dict[str, dict[str, int]] = {}
    for index, rule in enumerate(rules):
        values = mf.field_values(table, rule.field, metas)
        for i in range(n):
            if reasons[i] is not None or (rule.source is not None and sources[i] != rule.source) \
                    or (rule.subset is not None and subsets[i] != rule.subset):
                continue
            reason = mf.verdict(rule, values[i])
            if reason is not None:
                reasons[i] = reason
                per_source = dropped.setdefault(str(index), {})
                per_source[sources[i]] = per_source.get(sources[i], 0) + 1
    return pa.array(reasons, pa.string()), dropped


# ---------------------------------------------------------------------------------------------------------------
# Text
# ---------------------------------------------------------------------------------------------------------------

MORE = ["", "\x00", "a\x00b", "\r", "\r\n\r", "\u3000全角\u3000", "e\u0301\u0301 combining", "中文文本，标点。",
        "x" * 300_000, "\u2028\u2029\x85", "\ufeff"]


def stdlib_sources() -> list[str]:
    files = sorted(Path(re.__file__).parent.parent.glob("*.py"))[::9]
    return [f.read_text(encoding="utf-8", errors="replace") for f in files]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    found = hostile()[:600] + MORE + stdlib_sources()
    if SHARED_DATA.is_dir():
        found += real(SHARED_DATA)
    return found


def utf8(texts: list[str]) -> pa.Array:
    """Texts as an Arrow string array; lone surrogates kept as their (invalid) UTF-8 bytes, as a hostile file may."""
    raw = pa.array([t.encode("utf-8", "surrogatepass") for t in texts], pa.binary())
    return raw.view(pa.string())


def chunkings(array: pa.Array) -> list[Any]:
    """The same strings as Arrow gives them: whole, sliced, chunked at random (empty chunks too), large offsets."""
    rng = random.Random(35)
    n = len(array)
    cuts = sorted(rng.sample(range(n + 1), min(n + 1, 7))) if n else []
    chunks = [array.slice(a, b - a) for a, b in zip([0, *cuts], [*cuts, n])]
    return [array, array.slice(0, 0), array.slice(min(3, n)), pa.chunked_array(chunks, pa.string()),
            pa.chunked_array([], pa.string()), pa.chunked_array([array.cast(pa.large_string())]),
            array.cast(pa.large_string()).slice(min(1, n))]


def test_text_hashes_are_the_old_ones(texts):
    for column in chunkings(utf8(texts)):
        assert text_hashes(column).equals(old_text_hashes(column))
    column = pa.chunked_array([pa.array(["a"]), pa.array([None, "b"], pa.string())])
    with pytest.raises(ValueError, match="1 null text"):
        text_hashes(column)


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast")  # the old form's nulls, kept as they were
def test_hashes_of_chosen_rows_are_those_of_the_rows_taken(texts):
    """`text_hashes_at` (subdoc's long lines, read in place) gives `text_hashes` of the rows taken, for both string
    types, a sliced array, repeated and unsorted rows, an empty array; nulls are refused."""
    rng = np.random.default_rng(3)
    for kind in (pa.string(), pa.large_string()):
        column = utf8(texts).cast(kind)
        for array in (column, column.slice(7, len(texts) - 20)):
            rows = rng.integers(0, len(array), 500)
            assert text_hashes_at(array, rows).tolist() == text_hashes(array.take(pa.array(rows))).to_pylist()
        assert text_hashes_at(pa.array([], kind), np.zeros(0, np.int64)).tolist() == []
    with pytest.raises(ValueError, match="null"):
        text_hashes_at(pa.array(["a", None]), np.array([0]))


def test_column_digest_is_the_old_one(texts):
    columns = chunkings(utf8(texts)) + [pa.array(["a", None, "b"]), pa.array([1, 2, 3]),
                                        pa.array([b"\xff", b"x"], pa.binary())]
    for column in columns:
        new, old = hashlib.sha256(), hashlib.sha256()
        try:
            old_column_digest(old, column)
        except pa.ArrowInvalid:
            with pytest.raises(pa.ArrowInvalid):
                column_digest(new, column)
            continue
        column_digest(new, column)
        assert new.hexdigest() == old.hexdigest()


def test_content_hash_does_not_depend_on_chunking(texts):
    ids = [str(i) for i in range(len(texts))]
    whole = pa.table({"id": ids, "text": utf8(texts)})
    rechunked = pa.concat_tables([whole.slice(0, 5), whole.slice(5, 0), whole.slice(5)])
    assert rechunked.column("text").num_chunks > 1
    expected = hashlib.sha256()
    old_column_digest(expected, whole.column("id"))
    old_column_digest(expected, whole.column("text"))
    assert content_hash(whole) == content_hash(rechunked) == expected.hexdigest()


def test_with_text_hash_matches_xxhash_per_row(texts):
    import xxhash

    table = documents.with_text_hash(pa.table({"text": utf8(texts[:500])}))
    assert table.column("text_hash").to_pylist() == [
        xxhash.xxh3_64_intdigest(t.encode("utf-8", "surrogatepass")) for t in texts[:500]]


# ---------------------------------------------------------------------------------------------------------------
# The metadata filter
# ---------------------------------------------------------------------------------------------------------------

METAS = ['{"score":3}', '{"score":-1}', '{"score":"2"}', '{"score":true}', '{}', 'null', '[1]', ' {"score":1} ',
         '{"score":1}\n', '{"score":-5,"score":5}', '{"post":{"author":"x","score":0}}', '{"score":1e400}',
         '{"score":12345678901234567890123}', '{"url":"https://i.imgur.com/a"}', '{"domain":"self.AskReddit"}',
         '{"score":NaN}', '{"over_18":false}', '{"s\\u0063ore":-2}', '"score"', '{"score":null}', '\t[]']


def metadata_table(n: int, seed: int) -> pa.Table:
    rng = random.Random(seed)
    sources = [rng.choice(["reddit", "forum_en", "web_en"]) for _ in range(n)]
    subsets = [rng.choice(["a", "b", None]) for _ in range(n)]
    texts = [rng.choice(["", "short", "中文" * rng.randint(0, 30), "x" * rng.randint(0, 300)]) for _ in range(n)]
    return pa.table({"id": [f"d{i}" for i in range(n)], "text": texts, "source": sources,
                     "subset": pa.array(subsets, pa.string()), "meta": [rng.choice(METAS) for _ in range(n)]})


RULES = [
    [MetadataRule(field="score", min=0.0, source="reddit"), MetadataRule(field="score", min=0.0, source="forum_en")],
    [MetadataRule(field="score", min=0, max=4, missing="drop")],
    [MetadataRule(field="text_chars", min=3, source="web_en", subset="a"), MetadataRule(field="id", blocked=["d7"]),
     MetadataRule(field="post.score", allowed=[0, 1], subset="b"), MetadataRule(field="score", max=2)],
    [MetadataRule(field="url", domain=True, blocked=["imgur.com"]), MetadataRule(field="over_18", allowed=[False]),
     MetadataRule(field="subset", allowed=["a"], source="reddit"), MetadataRule(field="source", blocked=["forum_en"])],
    [MetadataRule(field="domain", domain=True, allowed=["self.askreddit"], source="nowhere")],
]


@pytest.mark.parametrize("rules", RULES)
def test_apply_rules_is_the_old_one(rules):
    for seed in range(6):
        table = metadata_table(400, seed)
        if seed % 2:
            table = pa.concat_tables([table.slice(0, 150), table.slice(150)])
        reasons, dropped = apply_rules(table, rules)
        old_reasons, old_dropped = old_apply_rules(table, rules)
        assert reasons.equals(old_reasons)
        assert json.dumps(dropped) == json.dumps(old_dropped)  # the same keys in the same order too


def test_a_broken_meta_fails_only_where_a_rule_reads_it():
    """The one intended difference: a `meta` that is not JSON in a row no `meta` rule looks at is left alone (the
    old form parsed every row and failed the task); in a row a rule reads, it fails as `json.loads` fails."""
    table = pa.table({"id": ["a", "b"], "text": ["x", "y"], "source": ["reddit", "web_en"],
                      "subset": pa.array([None, None], pa.string()), "meta": ['{"score":3}', '{"score":']})
    reasons, _ = apply_rules(table, [MetadataRule(field="score", min=0.0, source="reddit")])
    assert reasons.to_pylist() == [None, None]
    with pytest.raises(json.JSONDecodeError):
        old_apply_rules(table, [MetadataRule(field="score", min=0.0, source="reddit")])
    with pytest.raises(json.JSONDecodeError, match="Expecting value"):
        apply_rules(table, [MetadataRule(field="score", min=0.0, source="web_en")])


def test_apply_rules_on_real_reddit_metadata():
    if not SHARED_DATA.is_dir():
        pytest.skip("real-data samples not found")
    lines = (SHARED_DATA / "reddit" / "pushshift_test_comments.ndjson").read_text(encoding="utf-8").splitlines()
    metas = [json.dumps(json.loads(line), sort_keys=True) for line in lines if line.strip()]
    n = len(metas)
    table = pa.table({"id": [str(i) for i in range(n)], "text": ["t"] * n, "source": ["reddit"] * n,
                      "subset": pa.nulls(n, pa.string()), "meta": metas})
    for rules in ([MetadataRule(field="score", min=2)], [MetadataRule(field="author", blocked=["[deleted]"]),
                                                         MetadataRule(field="controversiality", max=0)]):
        reasons, dropped = apply_rules(table, rules)
        old_reasons, old_dropped = old_apply_rules(table, rules)
        assert reasons.equals(old_reasons) and dropped == old_dropped


def test_parse_meta_is_json_loads(texts):
    for text in METAS + ['{"a":1} x', "", " ", "{", '{"a":"\\ud800"}', "\ufeff{}", "1 2", "[] "] + texts[:300]:
        try:
            expected = json.loads(text)
        except json.JSONDecodeError as err:
            with pytest.raises(json.JSONDecodeError) as got:
                parse_meta(text)
            assert str(got.value) == str(err)
            continue
        value = parse_meta(text)
        assert json.dumps(value) == json.dumps(expected) and type(value) is type(expected)
