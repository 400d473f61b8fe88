"""Build whole documents (web page, book, Chinese news story, forum post) from template sentences."""

from __future__ import annotations

import math
import random
from functools import lru_cache

import numpy as np

from . import lexicon, templates, words_en
from .grammar import Grammar, SentenceSource


@lru_cache(maxsize=None)
def english() -> Grammar:
    return Grammar(lexicon.english_lexicons(), templates.ENGLISH)


@lru_cache(maxsize=None)
def chinese() -> Grammar:
    return Grammar(lexicon.chinese_lexicons(), templates.CHINESE)


_FORUM_OPENERS = words_en.FORUM_OPENERS.split("|")
_FORUM_CLOSERS = words_en.FORUM_CLOSERS.split("|")
_SPEECH_VERBS = [v.strip() for v in words_en.SPEECH_VERBS.split(",")]
_ROMAN = "I II III IV V VI VII VIII IX X XI XII XIII XIV XV XVI XVII XVIII XIX XX".split()

# Weighted template kinds: repeating a kind makes it more likely.
_WEB_KINDS = ("s", "s", "s", "s", "q")
_BOOK_KINDS = ("s", "s", "s", "s", "s", "q")
_FORUM_KINDS = ("s", "s", "q")
_NEWS_KINDS = ("s", "s", "s", "s", "s", "q")


class DocumentMaker:
    """All randomness comes from the two generators passed in, so output depends only on the seed."""

    def __init__(self, rnd: random.Random, rng: np.random.Generator):
        # rnd: cheap scalar decisions (lengths, layout); rng: bulk draws for sentence filling.
        self.rnd = rnd
        self.en = SentenceSource(english(), rng)
        self.zh = SentenceSource(chinese(), rng)

    # -- shared helpers -------------------------------------------------

    def length(self, median: float, sigma: float, lo: int, hi: int) -> int:
        """Long-tailed (log-normal) sentence count, clipped to [lo, hi]."""
        return min(hi, max(lo, int(self.rnd.lognormvariate(math.log(median), sigma))))

    def _chunks(self, sentences: list[str], lo: int, hi: int, sep: str) -> list[str]:
        """Group sentences into paragraphs of lo..hi sentences."""
        # random() arithmetic instead of randint(): randint costs ~5x more per call.
        random, span = self.rnd.random, hi - lo + 1
        out = []
        i, n = 0, len(sentences)
        while i < n:
            k = lo + int(random() * span)
            out.append(sep.join(sentences[i : i + k]))
            i += k
        return out

    def _insert(self, paragraphs: list[str], block: str) -> None:
        paragraphs.insert(self.rnd.randint(1, max(1, len(paragraphs))), block)

    def _pick(self, items: list[str]) -> str:
        return items[self.rnd.randrange(len(items))]

    def _name(self, source: SentenceSource, topic: str, slot: str = "NAME") -> str:
        """One entry of a lexicon slot (a name, a date, a city) picked with the scalar generator."""
        return self._pick(source.lexicon(topic)[slot])

    # -- English ----------------------------------------------------------

    def _english_list(self, topic: str) -> str:
        en = self.en
        intro = en.one(topic, "intro")
        items = en.take(topic, ("l",), self.rnd.randint(3, 7))
        if self.rnd.random() < 0.5:
            lines = [f"- {item}" for item in items]
        else:
            lines = [f"{i}. {item}" for i, item in enumerate(items, 1)]
        return intro + "\n" + "\n".join(lines)

    def web_article(self, topic: str) -> tuple[str, str]:
        """(title, text) of a web page: title line, optional byline, paragraphs, maybe a list or Q&A."""
        en, rnd = self.en, self.rnd
        n = self.length(18, 1.0, 2, 450)
        paragraphs = self._chunks(en.take(topic, _WEB_KINDS, n), 1, 6, " ")
        if n >= 8 and rnd.random() < 0.3:
            self._insert(paragraphs, self._english_list(topic))
        if n >= 6 and rnd.random() < 0.15:
            q = en.one(topic, "q")
            a = " ".join(en.take(topic, ("s",), 2))
            self._insert(paragraphs, f"Q: {q}\nA: {a}")
        title = en.one(topic, "t")
        head = []
        if rnd.random() < 0.8:
            head.append(title)
        if rnd.random() < 0.3:
            date = self._name(en, topic, "DATE")
            head.append(f"Posted on {date} by {self._name(en, topic, 'NAME')}")
        if head:
            paragraphs.insert(0, "\n".join(head))
        return title, "\n\n".join(paragraphs)

    def _dialogue(self, topic: str, k: int) -> str:
        """k lines of reported speech, one speaker turn per line."""
        rnd = self.rnd
        first = self.en.lexicon(topic)["FIRST"]
        lines = []
        for s in self.en.take(topic, ("s", "s", "q"), k):
            who = first[rnd.randrange(len(first))]
            verb = _SPEECH_VERBS[rnd.randrange(len(_SPEECH_VERBS))]
            if s.endswith("?"):
                lines.append(f'"{s}" asked {who}.')
            elif rnd.random() < 0.6:
                lines.append(f'"{s[:-1]}," {who} {verb}.')
            else:
                lines.append(f'{who} {verb}, "{s}"')
        return "\n".join(lines)

    def book(self, topic: str, dialogue_rate: float) -> str:
        """A long narrative: optional chapter heading, paragraphs of 2-8 sentences, dialogue blocks."""
        en, rnd = self.en, self.rnd
        n = self.length(100, 0.85, 20, 700)
        paragraphs = self._chunks(en.take(topic, _BOOK_KINDS, n), 2, 8, " ")
        for _ in range(max(1, n // 40)):
            if rnd.random() < dialogue_rate:
                self._insert(paragraphs, self._dialogue(topic, rnd.randint(2, 6)))
        if rnd.random() < 0.6:
            number = rnd.randrange(len(_ROMAN))
            heading = f"Chapter {_ROMAN[number]}" if rnd.random() < 0.5 else f"CHAPTER {number + 1}"
            paragraphs.insert(0, heading)
        return "\n\n".join(paragraphs)

    def forum_post(self, topic: str, quote: str | None) -> tuple[str, str]:
        """(text, a quotable sentence) of a short post: greeting, a few sentences, maybe a quote and sign-off."""
        en, rnd = self.en, self.rnd
        n = self.length(4, 0.8, 2, 60)
        sentences = en.take(topic, _FORUM_KINDS, n)
        paragraphs = self._chunks(sentences, 1, 3, " ")
        if quote and rnd.random() < 0.3:
            # Replies sometimes quote a sentence of the post they answer, as on real forums.
            paragraphs.insert(0, f"> {quote}")
        if rnd.random() < 0.35:
            paragraphs.insert(0, self._pick(_FORUM_OPENERS))
        if rnd.random() < 0.4:
            paragraphs.append(self._pick(_FORUM_CLOSERS))
        if rnd.random() < 0.2:
            paragraphs.append(f"-- {self._name(en, topic, 'FIRST')}")
        return "\n\n".join(paragraphs), sentences[0]

    # -- Chinese ----------------------------------------------------------

    def news_story(self, topic: str) -> tuple[str, str]:
        """(headline, text) of a Chinese news story with dateline, quotes and 一是/二是 lists."""
        zh, rnd = self.zh, self.rnd
        n = self.length(12, 0.8, 2, 300)
        body = zh.take(topic, _NEWS_KINDS, n)
        style = rnd.random()
        if style < 0.35:
            body[0] = f"本报讯（记者{self._name(zh, topic)}）{body[0]}"
        elif style < 0.6:
            body[0] = f"{self._name(zh, topic, 'CITY')}{self._name(zh, topic, 'MONTHDAY')}电　{body[0]}"
        paragraphs = self._chunks(body, 1, 4, "")
        if rnd.random() < 0.2:
            items = zh.take(topic, ("l",), 3)
            self._insert(paragraphs, f"具体来看，一是{items[0]}；二是{items[1]}；三是{items[2]}。")
        if rnd.random() < 0.3:
            quote = "".join(zh.take(topic, ("quote",), rnd.randint(1, 3)))
            self._insert(paragraphs, f"{self._name(zh, topic)}说：“{quote}”")
        if rnd.random() < 0.2:
            paragraphs.append(f"（责任编辑：{self._name(zh, topic)}）")
        headline = zh.one(topic, "t")
        if rnd.random() < 0.7:
            paragraphs.insert(0, headline)
        return headline, "\n\n".join(paragraphs)
