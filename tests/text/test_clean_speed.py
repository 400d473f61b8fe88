"""The clean stage's faster normalization, escape, PII and language-ID paths give every byte their previous forms gave.

Each previous form is copied here as the reference (the filters' per-document loops, `normalize_document`, the
language ID's call through fastText's Python wrapper), and run against the new one on real text of
`../shared/data` (Common Crawl pages and WET records, Pile, Reddit, THUCNews, CMRC, ChnSentiCorp, Chinese through
GB18030 read in the wrong encoding) and on hostile strings (empty, blanks only, one huge line, lone surrogates,
`\\r\\n` and `\\r` alone, Unicode spaces, zero-width and control characters, tabs in code).
"""

from __future__ import annotations

import csv
import gzip
import json
import random
import re
import unicodedata
from pathlib import Path

import ftfy
import numpy as np
import pytest

from tests.conftest import SHARED_DATA
from tokenmill.stages.clean.filter import Batch
from tokenmill.stages.clean.filters.escapes import EscapeFilter, _count_leak
from tokenmill.stages.clean.filters.langid import LangidFilter
from tokenmill.stages.clean.filters.normalize import NormalizeFilter
from tokenmill.stages.clean.filters.pii import PiiFilter
from tokenmill.documents import canonical_json
from tokenmill.text import normalize as n
from tokenmill.text.escapes import EscapePolicy, apply_policy, may_leak, scan_escapes
from tokenmill.text.langid import PREFIX_CHARS, UNDETERMINED, LangidConfig, identify, load_model, mismatch
from tokenmill.text.mojibake import may_be_mojibake
from tokenmill.text.pii import PiiConfig, phone_candidates, pii_candidates, replace_pii
from tokenmill.text.re2_batch import may_match

# ---------------------------------------------------------------------------------------------------------------
# The texts
# ---------------------------------------------------------------------------------------------------------------

SPECIAL = ("\r\n", "\r", "\n", "\n\n\n\n\n", "\t", "\f", "\v", "\x00", "\x1c", "\x7f", "\x85", "\x9f", "\u00a0",
           "\u1680", "\u2000", "\u2003", "\u2009", "\u200a", "\u200b", "\u200c", "\u200d", "\u2028", "\u2029",
           "\u202f", "\u205f", "\u2060", "\u180e", "\ufeff", "\u3000", "  ", " ", "    ", "\t\t", "ＡＢ１", "，",
           "Ã©", "â€™", "e\u0301", "\ud800", "\\n", "\\\"", "&amp;", "&#39;", "%20%3A", "@", "a@b.co", "8.8.8.8",
           "10.0.0.1", "2001:db8::1", "12:30:45", "+1 555 123 4567", "(555) 123-4567", "٣٤٥-٦٧٨-٩٠١٢")
WORDS = ("the", "word", "def", "f(x):", "return", "{", "}", "x = 1;", "printf(\"%d\\n\", x);", "中文", "文本",
         "Ελλάδα", "привет", "naïve", "code", "#include", "<b>", "</b>")


def hostile() -> list[str]:
    """Edge cases, then fuzz: words, blanks and special characters in every order, at both ends."""
    line = "word " * 60_000
    texts = ["", " ", "\n", "\t", "\r", "\r\n", "  \n \t ", "\u00a0", "\u200b", "\ufeff", "\ud800", "a\udc80b",
             line, line.strip(), "\r\n".join(["a line"] * 500), "\r".join(["old mac line"] * 300),
             "def f(x):\n\treturn x\t# tab\n\n\n\n\tpass\n", "\ufeffimport os\r\n\r\nprint(os.sep)  \r\n",
             "text\u00a0with\u00a0nbsp and\u2009thin\u2003spaces", "zero\u200bwidth\u2060joiner\u200dkept",
             "«\u00a0quoted\u00a0»", "\f page \f break", "a\x85b\u2028c\u2029d", "\n\n  indented first\n",
             "trailing   \nspaces\t\n", "ＡＢＣ１２３ full width, 全角，标点", "Ã©tÃ© mojibake â€™s"]
    rng = random.Random(35)
    for _ in range(3_000):
        texts.append("".join(rng.choice(SPECIAL if rng.random() < 0.06 else WORDS) + rng.choice((" ", " ", "", "\n"))
                             for _ in range(rng.randint(1, 16))))
    return texts


def _warc_records(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8", errors="replace", newline="") as f:
        return ["WARC/1.0\r\n" + r for r in f.read().split("WARC/1.0\r\n") if r]


def real(shared: Path) -> list[str]:
    """Real text of every kind the shared data holds (about 6,000 documents, each file sampled)."""
    texts: list[str] = []
    with gzip.open(next((shared / "commoncrawl").glob("dolma_CC-MAIN-*.jsonl.gz")), "rt", encoding="utf-8") as f:
        texts += [json.loads(line)["text"] for line in f if line.strip()]
    texts += _warc_records(shared / "commoncrawl" / "CC-MAIN-2016-50_filter_test_1.warc.wet.gz")
    texts += json.loads((shared / "pile" / "pearl_pile_texts.json").read_text(encoding="utf-8"))[::2]
    for name, key in (("pushshift_test_comments.ndjson", "body"), ("pushshift_test_submissions.ndjson", "selftext")):
        for line in (shared / "reddit" / name).read_text(encoding="utf-8").splitlines():
            texts.append(json.loads(line).get(key) or "")
    with open(shared / "reddit" / "reddit_lifestyle_drunk.csv", newline="", encoding="utf-8") as f:
        texts += [row[1] for row in list(csv.reader(f))[1::10] if len(row) > 1]
    news = [line.split("\t", 1)[1] for line in
            (shared / "chinese" / "thucnews_cnews.val.txt").read_text(encoding="utf-8").splitlines()[::4]]
    texts += news
    data = json.loads((shared / "chinese" / "cmrc2018_dev.json").read_text(encoding="utf-8"))
    texts += [p["context"] for article in data["data"] for p in article["paragraphs"]][::4]
    with open(shared / "chinese" / "ChnSentiCorp_htl_all.csv", newline="", encoding="utf-8") as f:
        texts += [row[1] for row in list(csv.reader(f))[1::8] if len(row) > 1]
    for text in news[:60]:  # Chinese through GB18030, read in the wrong encoding: mojibake, C1 controls
        raw = text[:600].encode("gb18030")
        texts += [raw.decode("latin-1"), raw.decode("cp1252", "replace"), text[:600].encode().decode("gb18030", "replace")]
    return texts


@pytest.fixture(scope="module")
def all_texts() -> list[str]:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real-data samples not found at {SHARED_DATA} (they sit beside the repository in CI)")
    return real(SHARED_DATA) + hostile()


@pytest.fixture(scope="module")
def texts(all_texts) -> list[str]:
    """A third of the real texts (every file still in it) and every hostile one: `make test`'s share."""
    cut = len(all_texts) - len(hostile())
    return all_texts[:cut:3] + all_texts[cut:]


def test_the_texts_hold_every_case():
    """The hostile set reaches each path: plain ASCII, plain non-ASCII, whitespace work, surrogates, huge lines."""
    texts = hostile()
    busy = may_match(texts, n._WHITESPACE_WORK_RE2)
    assert 500 < busy.sum() < len(texts) - 500
    assert any(not b and not t.isascii() for t, b in zip(texts, busy))
    assert any(not b and t.isascii() and t != t.strip() for t, b in zip(texts, busy))
    assert sum("\ud800" in t for t in texts) > 20 and max(map(len, texts)) > 250_000


def batch(texts, sources=None, langs=None) -> Batch:
    k = len(texts)
    return Batch(ids=[f"d{i}" for i in range(k)], texts=list(texts), sources=sources or ["s"] * k,
                 subsets=[None] * k, metas=["{}"] * k, langs=langs or ["en"] * k,
                 lang_scores=np.zeros(k, dtype=np.float32))


def state(b: Batch) -> tuple:
    """Everything a filter can write to a batch."""
    columns = {k: (v.tobytes() if isinstance(v, np.ndarray) else list(v)) for k, v in b.columns.items()}
    return (b.texts, b.langs, b.lang_scores.tobytes(), b.steps, columns, json.dumps(b.stats.to_json()))


# ---------------------------------------------------------------------------------------------------------------
# RE2 over a batch
# ---------------------------------------------------------------------------------------------------------------


def test_a_text_arrow_cannot_hold_is_left_to_its_caller_and_the_others_are_still_searched():
    texts = ["no digits", "a \ud800 b", "call 555-123-4567", "", "\udc80"]
    assert may_match(texts, r"\d").tolist() == [False, True, True, False, True]
    assert may_match([], r"\d").tolist() == []


# ---------------------------------------------------------------------------------------------------------------
# Normalization
# ---------------------------------------------------------------------------------------------------------------


def old_normalize_document(text: str, config: n.NormalizeConfig) -> n.Normalized:
    """`normalize_document` before the batch scan (95de848), copied as the reference."""
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
    if config.whitespace:
        fixed, kept = n._whitespace(done.text, config.code, is_code)
        step("whitespace", fixed)
        if kept is not None:
            done.layout = "code_layout:" + kept
    if config.fullwidth and not done.text.isascii() and n._FULLWIDTH_CHAR.search(done.text):
        step("fullwidth", done.text.translate(n._FULLWIDTH))
    return done


def old_normalize_process(b: Batch, rows: list[int], settings: n.NormalizeConfig) -> None:
    """NormalizeFilter.process before: one `normalize_document` per row."""
    for i in rows:
        done = old_normalize_document(b.texts[i], settings)
        b.texts[i] = done.text
        b.steps[i] += done.changed
        b.stats.count("normalize", done.counted())


def test_the_whitespace_scan_finds_every_character_the_step_acts_on():
    """On every code point: RE2's class holds exactly the characters the whitespace step changes or weighs (the
    table, line breaks but `\\n`, tab, form feed)."""
    points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    busy = may_match([f"a{chr(c)}b" for c in points], n._WHITESPACE_WORK_RE2)
    expected = set(n._CHARACTER_TABLE) | {0x0D, 0x85, 0x2028, 0x09, 0x0C}
    assert {c for c, b in zip(points, busy.tolist()) if b} == expected
    # and those are what the whitespace step's own regexes and tests act on
    found = n._TABLE_CHARACTER.match
    assert {c for c in points if found(chr(c))} | {0x0D, 0x85, 0x2028, 0x09, 0x0C} == expected


def _refuse_judging() -> bool:
    raise AssertionError("a plain text asked for a code judgement")


@pytest.mark.parametrize("code", ["detect", "document", "blocks", "off"])
def test_a_text_with_no_whitespace_work_inside_is_only_stripped(code):
    """Where the scan finds nothing, the whitespace step returns the text stripped of its end blanks, keeps no
    layout and never asks whether the text is code: on short strings of every blank and a few characters."""
    rng = random.Random(11)
    alphabet = [" ", " ", "\n", "\n", "\t", "\f", "\r", "a", "b", "\u00a0", "\u3000", "{", "#", "é"]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 10))) for _ in range(10_000)]
    busy = may_match(texts, n._WHITESPACE_WORK_RE2).tolist()
    plain = [t for t, b in zip(texts, busy) if not b]
    assert len(plain) > 1_000
    for text in plain:
        assert n._whitespace(text, code, _refuse_judging) == (text.strip(" \t\n"), None), repr(text)
    for text, b in zip(texts, busy):  # and each busy text holds something the scan looks for
        if b:
            assert re.search("[\t\f\r\u00a0]|  | \n|\n\n\n\n|\\A\n*[ \t]", text), repr(text)


def check_normalization(texts: list[str], config: n.NormalizeConfig) -> None:
    """The filter's batch path against the old loop: the same texts, steps and counts, byte for byte; and
    `normalize_documents` against the old function document by document."""
    rows = [i for i in range(len(texts)) if i % 7 != 3]  # rows a filter before dropped are left alone
    new, old = batch(texts), batch(texts)
    NormalizeFilter().process(new, rows, config)
    old_normalize_process(old, rows, config)
    assert state(new) == state(old)
    for text, done, before in zip(texts, n.normalize_documents(texts, config), old.texts):
        if done is None:
            assert before == text and old_normalize_document(text, config).counted() == []
        elif before is not text:  # a row the filter changed: the old function's result, whole
            was = old_normalize_document(text, config)
            assert (done.text, done.changed, done.layout, done.kept) == (was.text, was.changed, was.layout, was.kept)


def test_normalization_of_a_batch_is_the_old_one_document_at_a_time(texts):
    check_normalization(texts, n.NormalizeConfig())


@pytest.mark.slow
@pytest.mark.parametrize("config", [n.NormalizeConfig(), n.NormalizeConfig(code="document"),
                                    n.NormalizeConfig(code="blocks"), n.NormalizeConfig(code="off"),
                                    n.NormalizeConfig(ftfy=False, nfc=False), n.NormalizeConfig(whitespace=False),
                                    n.NormalizeConfig(fullwidth=False)], ids=lambda c: json.dumps(c.model_dump()))
def test_normalization_of_a_batch_is_the_old_one_in_every_mode_on_every_text(all_texts, config):
    check_normalization(all_texts, config)


def test_a_batch_with_no_rows_writes_nothing():
    b = batch(["a  b"])
    NormalizeFilter().process(b, [], n.NormalizeConfig())
    assert "normalize" not in b.stats.to_json() and b.texts == ["a  b"]


# ---------------------------------------------------------------------------------------------------------------
# Escapes
# ---------------------------------------------------------------------------------------------------------------


def old_escapes_process(b: Batch, rows: list[int], settings: EscapePolicy) -> list[str | None]:
    """EscapeFilter.process before: `apply_policy` on every row."""
    reasons = []
    for i in rows:
        outcome = apply_policy(b.texts[i], settings)
        scan = outcome.scan
        b.columns["escape_score"][i] = scan.score
        if scan.counts:
            b.columns["escape_counts"][i] = canonical_json(dict(sorted(scan.counts.items())))
            _count_leak(b, i, scan, outcome)
        if outcome.repaired:
            b.steps[i].append("escape_repair:" + "+".join(outcome.repaired))
        if outcome.drop_reason is None:
            b.texts[i] = outcome.text
        reasons.append(outcome.drop_reason)
    return reasons


@pytest.mark.parametrize("policy", [EscapePolicy(), pytest.param(EscapePolicy(mode="drop", threshold=0.0),
                                    marks=pytest.mark.slow), pytest.param(EscapePolicy(mode="flag"),
                                    marks=pytest.mark.slow)], ids=["repair", "drop", "flag"])
def test_the_escape_filter_skips_only_texts_with_nothing_to_scan(texts, policy):
    rows = [i for i in range(len(texts)) if i % 5 != 1]
    new, old = batch(texts), batch(texts)
    for b in (new, old):
        EscapeFilter().start(b)
    assert EscapeFilter().process(new, rows, policy) == old_escapes_process(old, rows, policy)
    assert state(new) == state(old)
    assert sum(not may_leak(texts[i]) for i in rows) > 1_000 and sum(may_leak(texts[i]) for i in rows) > 500


def test_may_leak_is_false_only_where_the_scan_finds_nothing(texts):
    for text in texts:
        if not may_leak(text):
            scan = scan_escapes(text)
            assert (scan.counts, scan.benign, scan.chars, scan.score) == ({}, {}, 0, 0.0)


# ---------------------------------------------------------------------------------------------------------------
# PII
# ---------------------------------------------------------------------------------------------------------------


def old_pii_process(b: Batch, rows: list[int], settings: PiiConfig) -> None:
    """PiiFilter.process before: the phone pre-scan over the batch, then `replace_pii` on every row."""
    maybe = phone_candidates([b.texts[i] for i in rows]) if settings.phone else None
    for k, i in enumerate(rows):
        b.texts[i], found = replace_pii(b.texts[i], settings, True if maybe is None else bool(maybe[k]))
        if found:
            b.steps[i].append("pii:" + "+".join(sorted(found)))
            b.stats.add("pii", found)


def _pii_fuzz() -> list[str]:
    rng = random.Random(9)
    groups = ["1", "23", "456", "7890", "٣٤", "१२३", "a", "F", "(", ")", " ", ".", "-", ":", "::", "@", "x.org",
              "bob", "+44 ", "8.8.8.8", "\ud800"]
    return ["".join(rng.choice(groups) for _ in range(rng.randint(0, 14))) for _ in range(8_000)]


@pytest.mark.parametrize("config", [PiiConfig(), PiiConfig(ip_placeholder="(555) 123-4567"), *(
    pytest.param(c, marks=pytest.mark.slow) for c in (
        PiiConfig(email_placeholder="call 555-123-4567 now"), PiiConfig(phone=False), PiiConfig(ip=False),
        PiiConfig(email=False), PiiConfig(email=False, ip=False, phone=False)))],
    ids=["default", "ip-as-phone", "email-as-phone", "no-phone", "no-ip", "no-email", "none"])
def test_the_pii_filter_replaces_what_the_old_loop_replaced(texts, config):
    everything = texts + _pii_fuzz()
    rows = [i for i in range(len(everything)) if i % 6 != 2]
    new, old = batch(everything), batch(everything)
    PiiFilter().process(new, rows, config)
    old_pii_process(old, rows, config)
    assert state(new) == state(old)
    candidates, maybe_phone = pii_candidates(everything, config)
    for text, candidate, phone in zip(everything, candidates.tolist(), maybe_phone.tolist()):
        if not candidate:
            assert replace_pii(text, config) == (text, {})
        assert phone <= candidate
    if config.email or config.ip or config.phone:
        assert 1_000 < candidates.sum() < len(everything) - 1_000


# ---------------------------------------------------------------------------------------------------------------
# Language ID
# ---------------------------------------------------------------------------------------------------------------

_LABEL = "__label__"


def old_predict(model, text: str, chars: int) -> tuple[str, float]:
    """langid._predict before: through fastText's Python wrapper (`model.predict`)."""
    line = text[:chars].replace("\n", " ")
    if not line or line.isspace():
        return UNDETERMINED, 0.0
    try:
        labels, probs = model.predict(line, k=1)
    except TypeError:
        labels, probs = model.predict(line.encode("utf-8", "replace").decode("utf-8"), k=1)
    if not labels:
        return UNDETERMINED, 0.0
    label = labels[0]
    return label[len(_LABEL):] if label.startswith(_LABEL) else label, min(float(probs[0]), 1.0)


def old_identify(texts, quick_chars=None, quick_min_score=1.0):
    model = load_model()
    langs, scores = [], np.zeros(len(texts), dtype=np.float32)
    for i, text in enumerate(texts):
        if quick_chars is not None and len(text) > quick_chars:
            lang, score = old_predict(model, text, quick_chars)
            if score < quick_min_score:
                lang, score = old_predict(model, text, PREFIX_CHARS)
        else:
            lang, score = old_predict(model, text, PREFIX_CHARS)
        langs.append(lang)
        scores[i] = score
    return langs, scores


def old_langid_process(b: Batch, rows: list[int], settings: LangidConfig) -> list[str | None]:
    found, scores = old_identify([b.texts[i] for i in rows], settings.quick_chars, settings.quick_min_score)
    reasons = []
    for i, lang, score in zip(rows, found, scores):
        expected = b.langs[i]
        b.langs[i], b.lang_scores[i] = lang, score
        reasons.append("wrong_language" if mismatch(expected, lang, float(score), settings) else None)
    from collections import Counter
    languages = b.stats.section("languages")
    for (source, lang), k in Counter((b.sources[i], b.langs[i]) for i in rows).items():
        per = languages.setdefault(source, {})
        per[lang] = per.get(lang, 0) + k
    return reasons


def test_language_ids_and_scores_are_the_wrappers_bit_for_bit(texts):
    """The binding's C++ call made directly gives the wrapper's labels and probabilities, lone surrogates
    (replaced, then identified) and texts with nothing to identify included; the quick prefix path too."""
    sample = texts[::3]
    langs, scores = identify(sample)
    old_langs, old_scores = old_identify(sample)
    assert langs == old_langs and scores.tobytes() == old_scores.tobytes()
    assert {"en", "zh", UNDETERMINED} <= set(langs) and any("\ud800" in t for t in sample)
    long = [t for t in texts if len(t) > 600][:300]
    quick, quick_scores = identify(long, 500, 0.9)
    old_quick, old_quick_scores = old_identify(long, 500, 0.9)
    assert quick == old_quick and quick_scores.tobytes() == old_quick_scores.tobytes()


def test_the_language_filter_writes_what_the_old_loop_wrote(texts):
    sample = texts[1::4]
    k = len(sample)
    sources = [("news", "web", "chat")[i % 3] for i in range(k)]
    langs = [("en", "zh", "any", "nb", "en-US")[i % 5] for i in range(k)]
    rows = [i for i in range(k) if i % 4 != 0]
    new, old = batch(sample, sources, list(langs)), batch(sample, sources, list(langs))
    settings = LangidConfig()
    assert LangidFilter().process(new, rows, settings) == old_langid_process(old, rows, settings)
    assert state(new) == state(old)
