"""The clean stage's batch reuse and normalization shortcuts of issue 35's second clean round give every byte their
previous forms gave.

Each previous form is copied here as the reference: the space-run regex with its leading look-behind, the separate
mojibake and full-width scans of `normalize_document`, the batch's row list and per-filter (source, subset) set, and
the conversion of every text to Arrow for each RE2 pre-scan and for the stage's output column. Each is run against
the new one on real text of `../shared/data` and the hostile strings of `test_clean_speed.py` (empty, blanks only,
one huge line, lone surrogates, `\\r\\n` and `\\r` alone, Unicode spaces, zero-width and control characters, NUL,
Chinese, combining marks, mojibake), and the Python standard library's own sources for code.
"""

from __future__ import annotations

import io
import random
import re
import sys
import unicodedata
from pathlib import Path

import ftfy
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.text.test_clean_speed import batch, hostile, real, state
from tests.conftest import SHARED_DATA
from tokenmill.stages.clean.filter import Batch
from tokenmill.stages.clean.filters.normalize import NormalizeFilter
from tokenmill.stages.clean.filters.pii import PiiFilter
from tokenmill.text import normalize as n
from tokenmill.text.mojibake import _SIGNAL, is_bad, may_be_mojibake
from tokenmill.text.pii import PiiConfig, pii_candidates
from tokenmill.text.re2_batch import may_match

OLD_RUN = re.compile(r"(?<![ \t])(?: *+\t[ \t]*+| {2,}+)")
"""`normalize._RUN` before (17e2797): a run with a tab, or of two spaces or more, found from its start."""

MORE = ["ï¼¡ï¼¢ï¼£ mojibake of full width", "Ã©tÃ© ＡＢＣ both", "ＡＢ１", "e\u0301 ＡＢ\u0301", "\x00\x00 ＡＢ",
        "\t\t \t a \t\t b  \t", " \t", "\t", "a\t", "\ta", "  ", " a ", "a  \n  b", "全角　空格ＡＢＣ，标点。",
        "\u00a0\t\u00a0 ＡＢ", "x" * 300_000 + "  ＡＢ  \t", "Ａ" * 1000 + "â€™"]


def stdlib_sources() -> list[str]:
    """The Python standard library's own sources (a sample): code of every layout."""
    files = sorted(Path(re.__file__).parent.parent.glob("*.py"))[::6]
    return [f.read_text(encoding="utf-8", errors="surrogateescape") for f in files]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    found = hostile() + MORE + stdlib_sources()
    if SHARED_DATA.is_dir():
        found += real(SHARED_DATA)
    return found


# ---------------------------------------------------------------------------------------------------------------
# The space-run regex
# ---------------------------------------------------------------------------------------------------------------


def old_prose(text: str) -> str:
    """`normalize._prose` before, with `OLD_RUN`."""
    if "\f" in text:
        text = text.replace("\f", "")
    if n._has_trailing(text, " \t"):
        text = n._PROSE_TRAILING.sub("", text)
    if "\t" in text or "  " in text:
        text = OLD_RUN.sub(n._inside_line, text)
    return text


def test_the_space_run_regex_finds_the_runs_the_old_one_found(texts):
    rng = random.Random(35)
    fuzz = ["".join(rng.choice(" \t\n\fa\u00a0") for _ in range(rng.randint(0, 14))) for _ in range(100_000)]
    for text in fuzz + texts:
        assert [m.span() for m in n._RUN.finditer(text)] == [m.span() for m in OLD_RUN.finditer(text)], repr(text)
        assert n._prose(text) == old_prose(text)
    assert sum(bool(OLD_RUN.search(t)) for t in texts) > 1_000


# ---------------------------------------------------------------------------------------------------------------
# One scan for the mojibake pre-check and the width step
# ---------------------------------------------------------------------------------------------------------------


def old_normalize_document(text: str, config: n.NormalizeConfig, *, plain: bool = False) -> n.Normalized:
    """`normalize_document` before (17e2797): the mojibake pre-check and the width step each scan the text."""
    done = n.Normalized(text)
    judged: list[bool] = []

    def is_code() -> bool:
        if not judged:
            judged.append(n.judge_code(text, config.code))
        return judged[0]

    def step(name: str, fixed: str) -> None:
        if fixed == done.text:
            return
        if name in n.CHARACTER_STEPS and is_code():
            done.kept.append("code_kept:" + name)
        else:
            done.changed.append(name)
            done.text = fixed

    if config.ftfy and may_be_mojibake(done.text):
        step("ftfy", ftfy.fix_text(done.text, n.FTFY_CONFIG))
    if config.nfc and not unicodedata.is_normalized("NFC", done.text):
        step("nfc", unicodedata.normalize("NFC", done.text))
    if config.whitespace and plain and not done.changed:
        step("whitespace", done.text.strip(" \t\n"))
    elif config.whitespace:
        fixed, kept = n._whitespace(done.text, config.code, is_code)
        step("whitespace", fixed)
        if kept is not None:
            done.layout = "code_layout:" + kept
    if config.fullwidth and not done.text.isascii() and n._FULLWIDTH_CHAR.search(done.text):
        step("fullwidth", done.text.translate(n._FULLWIDTH))
    return done


def _fields(done: n.Normalized) -> tuple:
    return done.text, done.changed, done.layout, done.kept


@pytest.mark.parametrize("config", [n.NormalizeConfig(), *(pytest.param(c, marks=pytest.mark.slow) for c in (
    n.NormalizeConfig(code="document"), n.NormalizeConfig(code="off"), n.NormalizeConfig(nfc=False),
    n.NormalizeConfig(whitespace=False), n.NormalizeConfig(ftfy=False), n.NormalizeConfig(fullwidth=False)))],
    ids=lambda c: str(c.model_dump()))
def test_normalize_document_gives_what_it_gave_with_two_scans(texts, config):
    for text in texts:
        assert _fields(n.normalize_document(text, config)) == _fields(old_normalize_document(text, config))
        plain = n.normalize_document(text, config, plain=True)
        assert _fields(plain) == _fields(old_normalize_document(text, config, plain=True))
    width = [t for t in texts if n._FULLWIDTH_CHAR.search(t)]
    assert len(width) > 20 and any(n.normalize_document(t, n.NormalizeConfig()).changed[:1] == ["ftfy"]
                                   for t in texts)


def test_ftfy_may_make_a_full_width_character_so_its_change_is_searched_again():
    text = "ï¼¡ï¼¢ï¼£ mojibake of full width"
    assert ftfy.fix_text(text, n.FTFY_CONFIG).startswith("ＡＢＣ")
    assert n.normalize_document(text, n.NormalizeConfig()).changed == ["ftfy", "fullwidth"]


def test_nfc_neither_makes_nor_takes_a_full_width_character():
    """On every code point: no canonical decomposition holds a full-width letter or digit, and none has one, so NFC
    (decompose, then compose) keeps exactly the full-width characters a text holds."""
    wide = set(map(chr, n._FULLWIDTH))
    for c in range(0x110000):
        if 0xD800 <= c <= 0xDFFF:
            continue
        for form in ("NFD", "NFC"):
            assert bool(set(unicodedata.normalize(form, chr(c))) & wide) == (chr(c) in wide), (hex(c), form)


def test_the_mojibake_check_reads_its_characters_from_the_shared_scan(texts):
    assert _SIGNAL is not None
    for text in texts:
        seen = set(n._SIGNAL_OR_FULLWIDTH.findall(text))
        assert may_be_mojibake(text, seen) == may_be_mojibake(text)
        if not text.isascii() and may_be_mojibake(text, seen) is False:
            assert not is_bad(text)


# ---------------------------------------------------------------------------------------------------------------
# The batch: its rows, its keys and its Arrow column
# ---------------------------------------------------------------------------------------------------------------


def shard(texts: list[str], sources: list[str] | None = None) -> pa.Table:
    k = len(texts)
    return pa.table({"id": [f"d{i}" for i in range(k)], "text": pa.array(texts, pa.string()),
                     "source": sources or ["s"] * k, "subset": pa.array([None] * k, pa.string()),
                     "meta": ["{}"] * k})


def readable(texts: list[str]) -> list[str]:
    return [t for t in texts if "\ud800" not in t and "\udc80" not in t]


def test_kept_and_keys_are_the_old_ones():
    rng = random.Random(3)
    sources = [rng.choice("abc") for _ in range(5_000)]
    b = Batch.from_table(shard([str(i) for i in range(5_000)], sources), {"a": "en", "b": "en", "c": "zh"})
    for _ in range(30):
        for i in rng.sample(range(5_000), 100):
            b.reasons[i] = rng.choice(["x", "", None])
        assert b.kept() == [i for i, r in enumerate(b.reasons) if r is None]
        assert b.keys() == set(zip(b.sources, b.subsets))


def test_the_text_column_is_the_batch_s_texts_as_arrow(texts):
    texts = readable(texts)[:4_000]
    b = Batch.from_table(shard(texts), {"s": "en"})
    assert b.text_column() is b.column  # nothing edited: the shard's own column
    rng = random.Random(5)
    rows = sorted(rng.sample(range(len(texts)), 3_000))
    for step in range(4):
        for i in rng.sample(range(len(texts)), 50):
            b.texts[i] = b.texts[i] + "  \t" * step if step % 2 else "edited ＡＢ " + b.texts[i]
        for chosen in (None, rows, list(range(len(texts))), []):
            want = b.texts if chosen is None else [b.texts[i] for i in chosen]
            got = b.text_column(chosen)
            assert got.type == pa.string() and got.to_pylist() == want
            assert got.equals(pa.array(want, pa.string()))
    b.texts[7] = "a \ud800 b"  # a text Arrow cannot hold: the caller converts the texts itself
    assert b.text_column() is None and b.text_column([6, 8]) is not None
    assert batch(["a"]).text_column() is None  # a batch made without a table has no column


def test_the_pre_scans_answer_the_same_from_the_column(texts):
    texts = readable(texts)
    b = Batch.from_table(shard(texts), {"s": "en"})
    for i in range(0, len(texts), 9):
        b.texts[i] = b.texts[i].replace(" ", "  ") + " 555-123-4567 a@b.co"
    rows = [i for i in range(len(texts)) if i % 11 != 4]
    chosen = [b.texts[i] for i in rows]
    column = b.text_column(rows)
    assert (may_match(chosen, n._WHITESPACE_WORK_RE2, column) == may_match(chosen, n._WHITESPACE_WORK_RE2)).all()
    for config in (PiiConfig(), PiiConfig(phone=False), PiiConfig(email=False, ip=False)):
        for new, old in zip(pii_candidates(chosen, config, column), pii_candidates(chosen, config)):
            assert (new == old).all()


@pytest.mark.parametrize("filter_class, config", [(NormalizeFilter, n.NormalizeConfig()), (PiiFilter, PiiConfig())])
def test_a_filter_on_a_shard_s_batch_writes_what_it_writes_on_a_batch_of_texts(texts, filter_class, config):
    texts = readable(texts)
    from_shard, plain = Batch.from_table(shard(texts), {"s": "en"}), batch(texts)
    for b in (from_shard, plain):
        for i in range(0, len(texts), 13):  # an earlier filter's edit
            b.texts[i] = "\u00a0 " + b.texts[i] + " tel 555 123 4567"
    rows = [i for i in range(len(texts)) if i % 5 != 2]
    filter_class().process(from_shard, rows, config)
    filter_class().process(plain, rows, config)
    assert state(from_shard) == state(plain)
    assert from_shard.text_column().to_pylist() == plain.texts


def test_the_stage_s_text_column_has_the_bytes_of_the_old_conversion(texts):
    texts = readable(texts)
    b = Batch.from_table(shard(texts), {"s": "en"})
    NormalizeFilter().process(b, list(range(len(texts))), n.NormalizeConfig())
    assert sum(t is not c for t, c in zip(b.texts, texts)) > 100
    new, old = b.text_column(), pa.array(b.texts, pa.string())
    assert new.equals(old) and new.type == old.type and new.null_count == old.null_count == 0
    assert parquet_bytes(new) == parquet_bytes(old)


def parquet_bytes(column: pa.Array) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"text": column}), sink)
    return sink.getvalue()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
