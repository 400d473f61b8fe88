"""Turn the raw word lists into per-topic slot -> phrase lists (inflection, articles, combinations)."""

from __future__ import annotations

from . import words_en, words_zh

# Phrases are combined ahead of time (adjective x noun, determiner x noun, ...)
# so that filling a sentence template costs one list lookup per slot instead of
# one per word: that is what makes generation fast enough for 200 MB corpora.

_AN_EXCEPTIONS = {"useful", "unique", "university", "european", "one", "uniform"}


def _split(text: str, sep: str = ", ") -> list[str]:
    return [w.strip() for w in text.split(sep) if w.strip()]


def _article(phrase: str) -> str:
    first = phrase.split(" ", 1)[0].lower()
    if first in _AN_EXCEPTIONS:
        return "a"
    return "an" if first[0] in "aeiou" else "a"


def _plural(noun: str) -> str:
    head, _, last = noun.rpartition(" ")
    if last in words_en.IRREGULAR_PLURAL:
        last = words_en.IRREGULAR_PLURAL[last]
    elif last.endswith(("s", "sh", "ch", "x", "z")):
        last += "es"
    elif last.endswith("y") and last[-2] not in "aeiou":
        last = last[:-1] + "ies"
    else:
        last += "s"
    return f"{head} {last}" if head else last


def _verb_forms(verb: str) -> tuple[str, str, str, str]:
    """(base, third person, past, -ing) for a possibly multi-word verb such as 'listen to'."""
    word, sep, rest = verb.partition(" ")
    tail = sep + rest
    double = word in words_en.DOUBLE_FINAL_CONSONANT
    if word.endswith(("s", "sh", "ch", "x", "z")):
        third = word + "es"
    elif word.endswith("y") and word[-2] not in "aeiou":
        third = word[:-1] + "ies"
    else:
        third = word + "s"
    if word in words_en.IRREGULAR_PAST:
        past = words_en.IRREGULAR_PAST[word]
    elif double:
        past = word + word[-1] + "ed"
    elif word.endswith("e"):
        past = word + "d"
    elif word.endswith("y") and word[-2] not in "aeiou":
        past = word[:-1] + "ied"
    else:
        past = word + "ed"
    if double:
        ing = word + word[-1] + "ing"
    elif word.endswith("e") and not word.endswith(("ee", "ye", "oe")):
        ing = word[:-1] + "ing"
    else:
        ing = word + "ing"
    return verb, third + tail, past + tail, ing + tail


def _shared_en() -> dict[str, list[str]]:
    first = _split(words_en.FIRST_NAMES)
    last = _split(words_en.LAST_NAMES)
    months = _split(words_en.MONTHS)
    full_names = [f"{given} {family}" for given in first for family in last]
    years = [str(y) for y in range(1890, 2025)]
    # Dates mix recent and historical years; day 1..28 keeps every month valid.
    dates = [f"{months[i % 12]} {1 + (i * 7) % 28}, {1950 + (i * 13) % 75}" for i in range(1200)]
    times = _split(words_en.TIME_PHRASES) + [f"in {m} {y}" for m in months for y in (1998, 2007, 2016, 2021, 2023)]
    return {
        "NAME": full_names + first,
        "FIRST": first,
        "CONN": [c + "," for c in _split(words_en.CONNECTORS)],
        "TIME": times,
        "REASON": _split(words_en.REASONS),
        "ADV": _split(words_en.ADVERBS),
        "GADJ": _split(words_en.GENERAL_ADJECTIVES),
        "OUTCOME": _split(words_en.OUTCOMES),
        "ORD": _split(words_en.ORDINALS),
        "NUMWORD": _split(words_en.NUMBER_WORDS),
        "PERIOD": _split(words_en.PERIODS),
        "COUNT": [str(n) for n in range(2, 61)] + [str(n) for n in range(70, 1000, 35)],
        "PCT": [str(n) for n in range(3, 98)],
        "YEAR": years,
        "DATE": dates,
        "MONTH": months,
    }


def english_lexicons() -> dict[str, dict[str, list[str]]]:
    """topic -> slot name -> phrases, for the English templates."""
    shared = _shared_en()
    out = {}
    for topic, raw in words_en.TOPICS.items():
        nouns = _split(raw["nouns"])
        adjs = _split(raw["adjectives"])
        verbs = [_verb_forms(v) for v in _split(raw["verbs"])]
        roles = _split(raw["roles"])
        first = shared["FIRST"]
        np_ = [f"the {n}" for n in nouns] + [f"the {a} {n}" for a in adjs for n in nouns]
        np_ += [f"{d} {n}" for d in ("this", "that", "our", "their", "my", "every") for n in nouns]
        np_ += [f"{f}'s {n}" for f in first[::3] for n in nouns]
        npa = [f"{_article(n)} {n}" for n in nouns] + [f"{_article(a)} {a} {n}" for a in adjs for n in nouns]
        plurals = [_plural(n) for n in nouns]
        lex = dict(shared)
        lex.update(
            NOUN=nouns,
            NOUNS=plurals + [f"{a} {p}" for a in adjs for p in plurals],
            NP=np_,
            NPA=npa,
            ADJ=adjs,
            VBASE=[v[0] for v in verbs],
            VTHIRD=[v[1] for v in verbs],
            VPAST=[v[2] for v in verbs],
            VING=[v[3] for v in verbs],
            ROLE=roles,
            # Repeat roles so that about half of all agents are topic people, not names.
            AGENT=roles * 25 + shared["NAME"][::7] + ["she", "he", "we", "they"] * 5,
            GROUP=_split(raw["groups"]),
            PLACE=_split(raw["places"]),
        )
        out[topic] = lex
    return out


_ZH_DIGITS = "零一二三四五六七八九"


def chinese_number(n: int) -> str:
    """1..999 written with Chinese numerals (used instead of Arabic digits to keep text CJK-heavy)."""
    hundreds, rest = divmod(n, 100)
    tens, ones = divmod(rest, 10)
    out = ""
    if hundreds:
        out += _ZH_DIGITS[hundreds] + "百"
        if rest and tens == 0:
            out += "零"
    if tens:
        out += ("" if tens == 1 and not hundreds else _ZH_DIGITS[tens]) + "十"
    if ones:
        out += _ZH_DIGITS[ones]
    return out


def _shared_zh() -> dict[str, list[str]]:
    surnames = words_zh.SURNAMES.split()
    given = words_zh.GIVEN_NAMES.split()
    names = [s + g for s in surnames for g in given]
    names += [p + s for p in ("老", "小") for s in surnames]
    return {
        "NAME": names,
        "CITY": words_zh.CITIES.split(),
        "CONN": [c + "，" for c in words_zh.CONNECTORS.split()],
        "TIME": words_zh.TIME_PHRASES.split(),
        "SEASON": words_zh.SEASONS.split(),
        "SOURCE": words_zh.SOURCES.split(),
        "DEG": words_zh.DEGREES.split(),
        "ADV": words_zh.ADVERBS.split(),
        "REASON": words_zh.REASONS.split(),
        "EMO": words_zh.EMOTIONS.split(),
        "RESOURCE": words_zh.RESOURCES.split(),
        "PERIOD": words_zh.PERIODS.split(),
        "NUMZH": [chinese_number(n) for n in range(2, 100)],
        "PCTZH": [chinese_number(n) for n in range(3, 98)],
        "YEAR": [str(y) for y in range(1950, 2025)],
        "DATE": [f"{2015 + i % 10}年{1 + i % 12}月{1 + (i * 11) % 28}日" for i in range(600)],
        "MONTHDAY": [f"{m}月{d}日" for m in range(1, 13) for d in range(1, 29)],
    }


def chinese_lexicons() -> dict[str, dict[str, list[str]]]:
    """topic -> slot name -> phrases, for the Chinese templates."""
    shared = _shared_zh()
    out = {}
    for topic, raw in words_zh.TOPICS.items():
        nouns = raw["nouns"].split()
        adjs = raw["adjectives"].split()
        roles = raw["roles"].split()
        lex = dict(shared)
        lex.update(
            NOUN=nouns,
            NP=nouns + [f"{a}的{n}" for a in adjs for n in nouns],
            ADJ=adjs,
            VERB=raw["verbs"].split(),
            ROLE=roles,
            AGENT=roles * 18 + shared["NAME"][::5],
            GROUP=raw["groups"].split(),
            PLACE=raw["places"].split(),
            CATEGORY=[raw["category"]],
        )
        out[topic] = lex
    return out
