"""The `json` reader's lone surrogates: a `\\u` escape of half a pair is a `decode_error` of its own record (ijson's
C backend turned a lone high one into '?' silently and a lone low one into an error that ended the file); pairs,
escaped backslashes and every other record come out as Python's own `json` reads them, wherever the 64 KiB reads
cut the file."""

from __future__ import annotations

import json

import pytest

from tokenmill.readers.json_array import BUF
from tokenmill.sources.config import SourceConfig
from tokenmill.sources.formats import READERS


def read(tmp_path, data: bytes, **kwargs):
    path = tmp_path / "a.json"
    path.write_bytes(data)
    source = SourceConfig(name="s", format="json", paths=["x"], **kwargs)
    return list(READERS["json"].read(str(path), source, "s:a.json"))


def kept(records):
    return [r.text for r in records if r.drop is None]


def test_a_lone_surrogate_drops_its_record_alone(tmp_path):
    items = [r'{"text": "a\ud800b"}', r'{"text": "pair \ud83d\ude00 kept"}', r'{"text": "\udc00\ud800"}',
             r'{"text": "an escaped backslash: \\ud800 is text"}', r'{"text": "low then high \uDC00\uD83D\uDE00"}',
             r'{"text": "ok", "meta": {"k\udfff": 1}}', r'"a string item \ud800"', r'{"text": "tail"}']
    data = ("[" + ", ".join(items) + "]").encode()
    records = read(tmp_path, data)
    assert [r.drop for r in records] == ["decode_error", None, "decode_error", None, "decode_error", "decode_error",
                                         "decode_error", None]
    # What is kept is what Python's json makes of the same items
    assert kept(records) == [json.loads(items[i])["text"] for i in (1, 3, 7)]
    assert kept(records)[1] == "an escaped backslash: \\ud800 is text"
    assert all("item" in r.message and "lone surrogate" in r.message for r in records if r.drop)
    assert "U+FFFF" not in records[0].message


@pytest.mark.parametrize("shift", range(-14, 15))
def test_escapes_cut_by_a_read_are_seen_whole(tmp_path, shift):
    """A pair, a lone surrogate and a run of backslashes placed across the first read's end at every offset."""
    head = '["' + "x" * (BUF - 12 + shift)
    for body, drops in ((r"\ud83d\ude00", [None]), (r"\ud800", ["decode_error"]), (r"\\\\\ud800", ["decode_error"]),
                        (r"\\\\ud800\\", [None]), (r"\ud800\udc00\ud800", ["decode_error"])):
        data = (head + body + '", "tail"]').encode()
        records = read(tmp_path, data)
        assert [r.drop for r in records] == drops + [None], (shift, body)
        expected = json.loads(head + body + '", "tail"]')
        assert kept(records) == [t for t, d in zip(expected, drops + [None]) if d is None], (shift, body)


def test_the_noncharacter_u_ffff_is_text_unless_the_file_has_lone_surrogates(tmp_path):
    """U+FFFF is what a lone surrogate is rewritten to: kept in a file with no lone surrogate; in one with both, a
    record holding it after the first lone surrogate was read (ijson reads 64 KiB ahead) is dropped, saying so."""
    plain = read(tmp_path, '["raw \uffff", "escaped \\uffff", "tail"]'.encode())
    assert kept(plain) == ["raw \uffff", "escaped \uffff", "tail"]
    mixed = read(tmp_path, '["before \uffff", "lone \\ud800", "after \uffff", "tail"]'.encode())
    assert [r.drop for r in mixed] == ["decode_error"] * 3 + [None]
    assert all("or the noncharacter U+FFFF, which this file also has" in r.message for r in mixed[:3])
    far = read(tmp_path, ('["before \uffff", "' + "x" * 3 * BUF + '", "lone \\ud800"]').encode())
    assert [r.drop for r in far] == [None, None, "decode_error"]


def test_a_long_run_of_backslashes(tmp_path):
    value = "\\" * (3 * BUF + 7) + "\U0001F600" + "\\" * 5
    data = json.dumps([value, "tail"]).encode()  # ensure_ascii: the emoji as a pair of escapes
    assert kept(read(tmp_path, data)) == [value, "tail"]


def test_real_array_reads_as_python_s_json(shared_data):
    path = shared_data / "pile/pearl_pile_texts.json"
    source = SourceConfig(name="s", format="json", paths=["x"])
    records = list(READERS["json"].read(str(path), source, "s:pearl"))
    assert kept(records) == json.loads(path.read_bytes())
