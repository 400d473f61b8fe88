"""Document styles of the real-format sources: Pile sets, web pages (WET text, HTML), Reddit comments and posts.

Every function takes a DocumentMaker and draws only from its generators, so the text is a pure
function of the seed. Styles are loose imitations: enough furniture (headings, labels, citations,
boilerplate) that a reader of the text can tell the sets apart, filled with the template prose.
"""

from __future__ import annotations

from .documents import DocumentMaker

# Pile sets written by the demo (a subset of the 22 real ones), with their shares.
PILE_SETS: dict[str, float] = {
    "Pile-CC": 0.30,
    "PubMed Abstracts": 0.15,
    "Wikipedia (en)": 0.15,
    "USPTO Backgrounds": 0.15,
    "FreeLaw": 0.12,
    "HackerNews": 0.13,
}
# Topics that fit a set; Pile-CC, Wikipedia and HackerNews take any.
PILE_TOPICS: dict[str, tuple[str, ...]] = {
    "PubMed Abstracts": ("science", "health", "cooking", "sports"),
    "USPTO Backgrounds": ("technology", "science", "cooking", "gardening", "music"),
    "FreeLaw": ("finance", "travel", "technology", "health", "history"),
}

_STUDY_DESIGNS = (
    "a randomized controlled trial", "a retrospective cohort study", "a cross-sectional survey",
    "a systematic review and meta-analysis", "a pilot study", "a prospective multicenter study",
)
_ABSTRACT_LABELS = ("BACKGROUND", "METHODS", "RESULTS", "CONCLUSIONS")
_UNITS = ("mg/kg", "\u00b5g/mL", "mmol/L", "ng/mL", "IU/L")  # µg: non-ASCII, escaped by the Pile's JSON
# Accented names give Wikipedia and FreeLaw some non-ASCII letters, as the real sets have.
_ACCENTED = ("M\u00fcller", "Nu\u00f1ez", "Dvo\u0159\u00e1k", "Lef\u00e8vre", "\u00c5str\u00f6m", "Jos\u00e9",
             "Bj\u00f6rk", "Ol\u00e1h", "Gon\u00e7alves", "Ko\u00e7")
_BIO_SECTIONS = ("Early life", "Career", "Later years", "Legacy", "Personal life", "Selected works")
_TOPIC_SECTIONS = ("History", "Types", "Uses", "Reception", "In popular culture", "Research")
_CIRCUITS = ("First", "Second", "Third", "Fourth", "Fifth", "Sixth", "Seventh", "Eighth", "Ninth", "Tenth")
_STATES = ("Delaware", "New Jersey", "Oregon", "Nevada", "Vermont", "Kansas", "Maine", "Idaho", "Ohio", "Utah")
_FIRMS = ("INC.", "LLC", "CORPORATION", "HOLDINGS, INC.", "& SONS CO.")
_LEGAL = (
    "The District Court granted summary judgment, and this appeal followed.",
    "We review the District Court\u2019s grant of summary judgment de novo.",
    "We have jurisdiction under 28 U.S.C. \u00a7 1291.",
    "Because we write primarily for the parties, we recount only the facts necessary to our decision.",
    "The parties do not dispute the material facts.",
    "That argument was not raised below, and it is therefore forfeited.",
    "We agree with the District Court that the claim fails as a matter of law.",
    "The standard is a demanding one, and it was not met here.",
)
_HN_NAMES = ("throwaway", "dang", "pg", "tptacek", "patio", "jacquesm", "kragen", "nostrademons", "rayiner",
             "Animats", "scott_s", "mixmax", "amelius", "walterbell")


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _bare(role: str) -> str:
    """'the chemist' -> 'chemist', 'a home cook' -> 'home cook'."""
    for article in ("the ", "a ", "an ", "my ", "our "):
        if role.startswith(article):
            return role[len(article):]
    return role


def _pick(m: DocumentMaker, items):
    return items[m.rnd.randrange(len(items))]


def _paragraphs(m: DocumentMaker, topic: str, n: int, lo: int = 2, hi: int = 5) -> list[str]:
    return m._chunks(m.en.take(topic, ("s", "s", "s", "s", "q"), n), lo, hi, " ")


# -- The Pile ------------------------------------------------------------------


def pubmed_abstract(m: DocumentMaker, topic: str) -> str:
    en, rnd = m.en, m.rnd
    lex = en.lexicon(topic)
    title = (f"{_cap(_pick(m, lex['NOUN']))} and {_pick(m, lex['NOUNS'])} among {_pick(m, lex['GROUP'])}: "
             f"{_pick(m, _STUDY_DESIGNS)}.")
    n = rnd.randint(40, 900)
    low, high = sorted((round(rnd.uniform(0.4, 1.6), 2), round(rnd.uniform(1.7, 4.2), 2)))
    stats = [
        f"A total of {n} {_pick(m, lex['GROUP'])} were included (mean age {rnd.randint(19, 78)} \u00b1 "
        f"{rnd.randint(3, 15)} years).",
        f"The odds ratio was {round((low + high) / 2, 2)} (95% CI {low}\u2013{high}; p < 0.0{rnd.randint(1, 5)}).",
        f"Median levels rose from {rnd.randint(2, 40)} to {rnd.randint(41, 90)} {_pick(m, _UNITS)} (n = {n}).",
    ]
    sentences = en.take(topic, ("s",), rnd.randint(4, 12))
    parts = [sentences[:2], sentences[2:-1] + stats[:1], stats[1:] + sentences[-1:], en.take(topic, ("s",), 1)]
    if rnd.random() < 0.5:
        body = "\n".join(f"{label}: {' '.join(p)}" for label, p in zip(_ABSTRACT_LABELS, parts) if p)
    else:
        body = " ".join(s for p in parts for s in p)
    return f"{title}\n{body}"


def wikipedia_article(m: DocumentMaker, topic: str) -> str:
    en, rnd = m.en, m.rnd
    lex = en.lexicon(topic)
    if rnd.random() < 0.6:
        first, last = _pick(m, lex["FIRST"]), _pick(m, lex["NAME"]).split()[-1]
        if rnd.random() < 0.3:
            last = _pick(m, _ACCENTED)
        title = f"{first} {last}"
        born = rnd.randint(1820, 1960)
        lead = (f"{title} ({born}\u2013{born + rnd.randint(35, 95)}) was a {_bare(_pick(m, lex['ROLE']))} "
                f"known for work on {_pick(m, lex['NOUNS'])}.")
        sections = _BIO_SECTIONS
    else:
        title = _cap(_pick(m, lex["NOUNS"]))
        lead = (f"{title} are {_pick(m, lex['NOUNS'])} that {_pick(m, lex['GROUP'])} {_pick(m, lex['VBASE'])} "
                f"{_pick(m, lex['PLACE'])}.")
        sections = _TOPIC_SECTIONS
    out = [title, lead + " " + " ".join(en.take(topic, ("s",), rnd.randint(1, 4)))]
    for section in rnd.sample(sections, rnd.randint(1, 4)):
        out.append(section)
        out.extend(_paragraphs(m, topic, rnd.randint(2, 14)))
    out.append("See also")
    out.append("\n".join(_cap(_pick(m, lex["NOUNS"])) for _ in range(rnd.randint(1, 3))))
    out.append("References")
    return "\n\n".join(out)


def uspto_background(m: DocumentMaker, topic: str) -> str:
    en, rnd = m.en, m.rnd
    lex = en.lexicon(topic)
    nouns = _pick(m, lex["NOUNS"])
    field = (f"The present invention relates to {nouns}, and more particularly, to a method of "
             f"{_pick(m, lex['VING'])} {_pick(m, lex['NOUNS'])} {_pick(m, lex['PLACE'])}.")
    related = en.take(topic, ("s",), rnd.randint(3, 14))
    related.insert(rnd.randint(0, len(related)),
                   f"Conventional {nouns} are typically treated at a temperature of {rnd.randint(60, 180)} to "
                   f"{rnd.randint(181, 400)}\u00b0 C. for {rnd.randint(2, 90)} minutes.")
    related.append(f"However, conventional {nouns} have a problem in that {_pick(m, lex['NP'])} "
                   f"{_pick(m, lex['VTHIRD'])} {_pick(m, lex['NP'])}.")
    related.append(f"Therefore, there is a need for {nouns} that can be made {_pick(m, lex['ADJ'])} at a low cost.")
    paragraphs = m._chunks(related, 2, 5, " ")
    if rnd.random() < 0.7:
        return "1. Field of the Invention\n" + field + "\n2. Description of the Related Art\n" + "\n".join(paragraphs)
    return "BACKGROUND OF THE INVENTION\n" + field + "\n" + "\n".join(paragraphs)


def freelaw_opinion(m: DocumentMaker, topic: str) -> str:
    en, rnd = m.en, m.rnd
    lex = en.lexicon(topic)
    last = [n.split()[-1] for n in (_pick(m, lex["NAME"]) for _ in range(8)) if " " in n] or ["Doe"]
    if rnd.random() < 0.3:
        last.append(_pick(m, _ACCENTED))
    judges = [_pick(m, last).upper() for _ in range(3)]
    party_a = f"{_pick(m, lex['FIRST'])} {_pick(m, last)}".upper()
    party_b = _pick(m, (f"STATE OF {_pick(m, _STATES).upper()}", f"{_pick(m, last).upper()} {_pick(m, _FIRMS)}",
                        "UNITED STATES OF AMERICA", "COMMISSIONER OF SOCIAL SECURITY"))
    year = rnd.randint(1995, 2020)
    head = [
        "NOT PRECEDENTIAL" if rnd.random() < 0.6 else "PRECEDENTIAL",
        f"UNITED STATES COURT OF APPEALS\nFOR THE {_pick(m, _CIRCUITS).upper()} CIRCUIT",
        f"No. {year % 100:02d}-{rnd.randint(1000, 4999)}",
        f"{party_a},\nAppellant\n\nv.\n\n{party_b}",
        f"On Appeal from the United States District Court for the District of {_pick(m, _STATES)}\n"
        f"(D.C. Civil No. {rnd.randint(1, 3)}:{(year - 1) % 100:02d}-cv-{rnd.randint(100, 9999):05d})",
        f"Before: {judges[0]}, {judges[1]}, and {judges[2]}, Circuit Judges.",
        "OPINION",
        f"{judges[0]}, Circuit Judge.",
    ]
    body = []
    for numeral in ("I.", "II.", "III.")[: rnd.randint(1, 3)]:
        body.append(numeral)
        sentences = en.take(topic, ("s",), rnd.randint(3, 16))
        sentences.insert(rnd.randint(0, len(sentences)), _pick(m, _LEGAL))
        sentences.append(f"See {_pick(m, last)} v. {_pick(m, last)}, {rnd.randint(100, 999)} F.3d "
                         f"{rnd.randint(1, 1400)}, {rnd.randint(1, 1400)} (3d Cir. {rnd.randint(1990, year)}).")
        body.extend(m._chunks(sentences, 2, 6, " "))
    body.append("For the foregoing reasons, we will affirm the judgment of the District Court.")
    return "\n\n".join(head + body)


def hackernews_thread(m: DocumentMaker, topic: str) -> str:
    en, rnd = m.en, m.rnd
    title = en.one(topic, "t")
    if rnd.random() < 0.3:
        title = f"{_pick(m, ('Ask HN', 'Show HN', 'Tell HN'))}: {title}"
    out = [title]
    quote = None
    for _ in range(rnd.randint(1, 7)):
        depth = rnd.randint(0, 2) if len(out) > 1 else 0
        user = f"{_pick(m, _HN_NAMES)}{rnd.randint(1, 999) if rnd.random() < 0.5 else ''}"
        text, quote = m.forum_post(topic, quote)
        indent = "  " * depth
        out.append(f"{indent}{user}\n" + "\n".join(indent + line if line else line for line in text.split("\n")))
    return "\n\n".join(out)


PILE_STYLES = {
    "Pile-CC": lambda m, topic: m.web_article(topic)[1],
    "PubMed Abstracts": pubmed_abstract,
    "Wikipedia (en)": wikipedia_article,
    "USPTO Backgrounds": uspto_background,
    "FreeLaw": freelaw_opinion,
    "HackerNews": hackernews_thread,
}


# -- Web pages (Common Crawl) ---------------------------------------------------


def article(m: DocumentMaker, topic: str, min_sentences: int) -> tuple[str, list[str]]:
    """(title, paragraphs) of a web article; long enough that an extractor sees a main text."""
    en, rnd = m.en, m.rnd
    n = m.length(22, 0.9, min_sentences, 400)
    paragraphs = _paragraphs(m, topic, n, 2, 6)
    if n >= 10 and rnd.random() < 0.25:
        m._insert(paragraphs, m._english_list(topic))
    return en.one(topic, "t"), paragraphs


def chinese_article(m: DocumentMaker, topic: str) -> tuple[str, list[str]]:
    headline, text = m.news_story(topic)
    paragraphs = text.split("\n\n")
    if paragraphs[0] == headline:
        paragraphs = paragraphs[1:]
    while len(paragraphs) < 3:  # a page needs a body an extractor can find
        paragraphs.append("".join(m.zh.take(topic, ("s",), 3)))
    return headline, paragraphs


# -- Reddit ---------------------------------------------------------------------


def reddit_comment(m: DocumentMaker, topic: str, parent: str | None) -> str:
    """A short markdown comment; quotes come as `&gt;` (Reddit escapes its markdown that way)."""
    en, rnd = m.en, m.rnd
    n = m.length(2, 0.9, 1, 40)
    parts = m._chunks(en.take(topic, ("s", "s", "q"), n), 1, 3, " ")
    r = rnd.random()
    if parent and r < 0.15:
        parts.insert(0, f"&gt; {parent}")
    elif r < 0.22:
        parts[0] = f"**{parts[0]}**"
    elif r < 0.28:
        lex = en.lexicon(topic)
        parts.append(f"[{_cap(_pick(m, lex['NOUNS']))}](https://wiki.example.org/{topic}/{rnd.randrange(10**6)}) "
                     f"has more on this &amp; related things.")
    if rnd.random() < 0.05:
        parts.append("Edit: thanks for the gold, kind stranger!" if rnd.random() < 0.3 else "Edit: typo.")
    return "\n\n".join(parts)


def reddit_selftext(m: DocumentMaker, topic: str) -> str:
    text, _ = m.forum_post(topic, None)
    return text
