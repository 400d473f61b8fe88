"""Short evaluation items (issue 16, item 4): GPT-3's n per set, short fields matched whole, coverage counted.

Fields of 1 to 12 words are taken from the real evaluation sets and planted into real Pile documents; every one that
the rule can check is found, by the rule it says, and the others are counted as too short to check."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tokenmill.stages.decontaminate.evalsets import EvalSetConfig, load_evalset
from tokenmill.stages.decontaminate.ngrams import build_index, find_matches, normalize_tokens

# (name, file under shared data, preset): the sets whose fields run short.
SETS = [("arc_easy", "evalsets/llmfoundry_arc_easy.jsonl", "arc"),
        ("arc_challenge", "evalsets/llmfoundry_arc_challenge.jsonl", "arc"),
        ("piqa", "evalsets/llmfoundry_piqa.jsonl", "piqa"),
        ("winogrande", "evalsets/llmfoundry_winogrande.jsonl", "winogrande"),
        ("triviaqa", "evalsets/llmfoundry_triviaqa_sm_sub.jsonl", "triviaqa"),
        ("gsm8k", "evalsets/gsm8k_test.jsonl", "gsm8k")]


@pytest.fixture(scope="module")
def real_fields():
    from tests.conftest import SHARED_DATA

    if not SHARED_DATA.is_dir():
        pytest.skip(f"real-data samples not found at {SHARED_DATA} (they sit beside the repository in CI)")
    fields = [(name, f.item, f.field, f.text, "en") for name, rel, fmt in SETS
              for f in load_evalset(EvalSetConfig(name=name, path=rel, format=fmt), str(SHARED_DATA / rel))]
    hosts = [t for t in json.loads(Path(SHARED_DATA / "pile" / "pearl_pile_texts.json").read_text(encoding="utf-8"))
             if len(t) > 1500]
    return fields, hosts


@pytest.fixture(scope="module")
def real_index(real_fields):
    return build_index(real_fields[0])


def _plant(host: str, text: str, style: int) -> tuple[str, int]:
    """`text` as a segment of its own (a line, or a quoted sentence) between two sentences in the middle of `host`;
    returns the document and where `text` starts in it."""
    cut = host.find(". ", len(host) // 2)
    cut = len(host) // 2 if cut < 0 else cut + 2
    before = host[:cut] + ("\n" if style == 0 else 'They asked: "')
    after = ("\n" if style == 0 else '" ') + host[cut:]
    return before + text + after, len(before)


def _picks(fields, words: int, per_set: int = 2):
    """Per set, the first `per_set` distinct fields of exactly `words` normalised words."""
    out, seen = [], set()
    count: dict[str, int] = {}
    for name, item, field, text, _ in fields:
        if len(text) > 15 * words + 20 or count.get(name, 0) >= per_set:  # cheap checks first
            continue
        tokens = normalize_tokens(text)[0]
        if len(tokens) != words or " ".join(tokens) in seen:
            continue
        seen.add(" ".join(tokens))
        count[name] = count.get(name, 0) + 1
        out.append((name, item, field, text.strip()))
    return out


def test_an_evaluation_item_is_found_whatever_its_length(real_fields, real_index):
    fields, hosts = real_fields
    planted = found = too_short = 0
    lengths_found: dict[int, int] = {}
    for words in range(1, 13):
        for i, (name, item, field, text) in enumerate(_picks(fields, words)):
            doc, start = _plant(hosts[(7 * words + i) % len(hosts)], text, i % 2)
            tokens = normalize_tokens(text)[0]
            checkable = words >= 3 and len(" ".join(tokens).encode()) >= 12
            matches = [(s, e) for s, e, h in find_matches(doc, "en", real_index)
                       if (name, item, field) in real_index.owners_of(h)]
            planted += 1
            if not checkable:  # 1- and 2-word fields, "ice box": not indexed, counted (below)
                too_short += 1
                assert matches == [], (name, text)
                continue
            found += 1
            lengths_found[words] = lengths_found.get(words, 0) + 1
            assert matches, f"{name} {item} {field} ({words} words) planted and not found: {text!r}"
            # The matches cover exactly the planted words (punctuation at the ends is not a word).
            spans = normalize_tokens(doc[start:])[1]
            assert min(s for s, _ in matches) == start + spans[0][0]
            assert max(e for _, e in matches) == start + spans[words - 1][1]
    assert found >= 50 and too_short >= 4 and planted == found + too_short
    # Every length from 3 to 12 words was planted and found, from at least two sets.
    assert {w for w, k in lengths_found.items() if k >= 4} == set(range(3, 13))


def test_n_per_set_by_the_gpt3_rule(real_fields, real_index):
    fields, _ = real_fields
    lengths: dict[str, list[int]] = {}
    for name, _, _, text, _ in fields:
        lengths.setdefault(name, []).append(len(normalize_tokens(text)[0]))
    for name, values in lengths.items():
        p5 = int(np.percentile(values, 5, method="inverted_cdf"))  # the nearest-rank 5th percentile
        cov = real_index.coverage[name]
        assert (cov.p5_length, cov.n, cov.n_rule) == (p5, min(13, max(8, p5)), "gpt3"), name
    assert real_index.n == {"arc_easy": 8, "arc_challenge": 8, "piqa": 8, "winogrande": 13, "triviaqa": 8,
                            "gsm8k": 13}


def test_coverage_counts_every_field_and_item(real_fields, real_index):
    fields, _ = real_fields
    n = real_index.n
    expected: dict[str, dict[str, int]] = {}
    items: dict[str, dict[str, set]] = {}
    for name, item, _, text, _ in fields:
        tokens = normalize_tokens(text)[0]
        rule = ("no_text" if not tokens else "ngram" if len(tokens) >= n[name]
                else "too_short" if len(tokens) < 3 or len(" ".join(tokens).encode()) < 12 else "whole")
        expected.setdefault(name, dict.fromkeys(("ngram", "whole", "too_short", "no_text"), 0))[rule] += 1
        items.setdefault(name, {}).setdefault(item, set()).add(rule)
    for name, cov in real_index.coverage.items():
        assert cov.fields == expected[name], name
        best = [next(r for r in ("ngram", "whole", "too_short", "no_text") if r in rules)
                for rules in items[name].values()]
        assert cov.items == {"total": len(items[name]), **{r: best.count(r) for r in cov.fields}}, name
    # The sets: most items are now checked, the rest counted, none silently skipped.
    arc, piqa, trivia = (real_index.coverage[k].items for k in ("arc_easy", "piqa", "triviaqa"))
    assert arc["whole"] > 100 and piqa["whole"] > 300 and trivia["whole"] > 200
    assert piqa["too_short"] > 0 and trivia["no_text"] == 0
    assert real_index.coverage["triviaqa"].fields["too_short"] > 2000  # 1- and 2-word answers


def test_whole_matches_need_whole_words(real_fields, real_index):
    # Real 3-word fields matched whole: found as the same three words, never glued into others or with one missing.
    fields, _ = real_fields
    filler = "Our gardening club met on Tuesday to discuss compost. "
    short = [(n, i, f, normalize_tokens(t)[0]) for n, i, f, t, _ in fields if n in ("piqa", "arc_easy", "triviaqa")
             and len(normalize_tokens(t)[0]) == 3 and len(" ".join(normalize_tokens(t)[0])) >= 12][:30]
    assert len(short) == 30

    def owned(doc, key):
        return [(s, e) for s, e, h in find_matches(doc, "en", real_index)
                if (*key, "whole") in real_index.owners_with_rule(h)]

    for name, item, field, (a, b, c) in short:
        key = (name, item, field)
        doc = f"{filler}{a.upper()}, {b} -- {c}! {filler}"
        assert owned(doc, key) == [(len(filler), doc.index("!"))], key
        assert owned(f"Answer key:\n(B) {a} {b} {c}\n(C) ...", key), key
        for near in (f"x{a} {b} {c}", f"{a} {b} {c}x", f"{a} {b}", f"{b} {c}", f"{a}{b} {c}"):
            assert owned(f"{filler}{near}. {filler}", key) == [], (key, near)
        # Inside a sentence it is a phrase, not the item: "we found that in the brain, cells ..."
        assert owned(f"{filler}We found that {a} {b} {c} was the case, mostly. {filler}", key) == [], key


def test_config_checks_the_n_range_before_any_work():
    from pydantic import ValidationError

    from tokenmill.stages.decontaminate.config import DecontaminateConfig

    evalsets = [{"name": "qa", "path": "q.jsonl", "fields": ["q"]}]
    config = DecontaminateConfig(evalsets=evalsets)
    assert (config.word_n, config.char_n, config.min_n, config.max_n) == (None, None, 8, 13)
    assert (config.min_whole_words, config.min_whole_bytes) == (3, 12)
    with pytest.raises(ValidationError, match="min_n"):
        DecontaminateConfig(evalsets=evalsets, min_n=14)
    with pytest.raises(ValidationError, match="word_n"):
        DecontaminateConfig(evalsets=evalsets, word_n=2)
