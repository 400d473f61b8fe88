"""Topics, subsets and the record streams of the four JSON/Parquet demo sources (layout: catalog.py)."""

from __future__ import annotations

import hashlib

import datetime
import re
from typing import Callable, Iterator

from . import words_zh
from .documents import DocumentMaker

TOPICS = ("science", "cooking", "travel", "sports", "finance", "history", "technology", "health", "gardening", "music")

# Book genres are the `subset_field` of books_en; each draws on some topics.
BOOK_GENRES: dict[str, tuple[str, ...]] = {
    "fiction": TOPICS,
    "history": ("history",),
    "popular_science": ("science", "technology", "health"),
    "travel_writing": ("travel",),
    "cookery": ("cooking", "gardening"),
    "memoir": ("music", "sports", "finance"),
}
FORUM_BOARDS = {
    "science": "ask-science", "cooking": "home-cooking", "travel": "travel-tips", "sports": "sports-talk",
    "finance": "personal-finance", "history": "history-buffs", "technology": "tech-support",
    "health": "health-and-fitness", "gardening": "garden-club", "music": "music-makers",
}
NEWS_CATEGORIES = {topic: words_zh.TOPICS[topic]["category"] for topic in TOPICS}
_DOMAINS = ("example.org", "example.com", "example.net", "blog.example.org", "news.example.com")
_FIRST_NEWS_DAY = datetime.date(2023, 1, 1).toordinal()

Records = Iterator[tuple[dict, str]]  # (record as written, its text)
Unique = Callable[[str], bool]  # True the first time a text is seen corpus-wide


def unique_texts() -> Unique:
    """A fresh corpus-wide guard against accidental exact duplicates (templates can collide on short texts);
    planted duplicates are added on purpose by planters, never by chance."""
    seen: set[bytes] = set()

    def unique(text: str) -> bool:
        key = hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()
        if key in seen:
            return False
        seen.add(key)
        return True

    return unique


class _Cover:
    """Every item once, shuffled, for the first len(items) picks, then random: small corpora still see all."""

    def __init__(self, maker: DocumentMaker, items):
        self.rnd = maker.rnd
        self.items = tuple(items)
        self.order = list(items)
        self.rnd.shuffle(self.order)

    def __call__(self) -> str:
        if self.order:
            return self.order.pop()
        return self.items[self.rnd.randrange(len(self.items))]


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:60]


def web_records(maker: DocumentMaker, unique: Unique) -> Records:
    cover = _Cover(maker, TOPICS)
    i = 0
    while True:
        topic = cover()
        title, text = maker.web_article(topic)
        if not unique(text):
            continue
        url = f"https://{_DOMAINS[i % len(_DOMAINS)]}/{topic}/{_slug(title)}-{i}"
        yield {"id": f"web-{i:06d}", "text": text, "url": url, "topic": topic}, text
        i += 1


def book_records(maker: DocumentMaker, unique: Unique) -> Records:
    cover = _Cover(maker, BOOK_GENRES)
    i = 0
    while True:
        genre = cover()
        topics = BOOK_GENRES[genre]
        topic = topics[maker.rnd.randrange(len(topics))]
        text = maker.book(topic, dialogue_rate=0.6 if genre == "fiction" else 0.15)
        if not unique(text):
            continue
        year = 1850 + maker.rnd.randrange(175)
        yield {"doc_id": f"book-{i:05d}", "text": text, "genre": genre, "year": year}, text
        i += 1


def news_records(maker: DocumentMaker, unique: Unique) -> Records:
    cover = _Cover(maker, TOPICS)
    i = 0
    while True:
        topic = cover()
        _, text = maker.news_story(topic)
        if not unique(text):
            continue
        date = datetime.date.fromordinal(_FIRST_NEWS_DAY + maker.rnd.randrange(730)).isoformat()
        yield {"id": f"news-{i:06d}", "content": text, "category": NEWS_CATEGORIES[topic], "date": date}, text
        i += 1


def forum_records(maker: DocumentMaker, unique: Unique) -> Records:
    """Threads of 1-8 posts on one board; replies may quote the post before them."""
    cover = _Cover(maker, TOPICS)
    thread = 0
    while True:
        topic = cover()
        thread += 1
        quote = None
        n_posts = min(8, 1 + int(maker.rnd.expovariate(0.5)))
        post = 1
        while post <= n_posts:
            text, quote_next = maker.forum_post(topic, quote)
            if not unique(text):
                continue
            quote = quote_next
            score = int(maker.rnd.paretovariate(1.3)) - 1
            if maker.rnd.random() < 0.1:
                score = -maker.rnd.randint(1, 9)  # downvoted posts exist too
            record = {"post": {"id": f"t{thread}-p{post}", "body": text, "board": FORUM_BOARDS[topic]}, "score": score}
            yield record, text
            post += 1
