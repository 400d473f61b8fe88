"""The four demo sources: file layout, record shape and the stream of records each one writes."""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from typing import Callable, Iterator

import pyarrow as pa

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


@dataclass(frozen=True)
class SourceSpec:
    name: str
    file_name: str  # format string with the 0-based file index, relative to the corpus folder
    format: str  # "jsonl" or "parquet"
    compression: str | None
    text_path: tuple[str, ...]
    id_path: tuple[str, ...]
    n_files: int
    share: float  # fraction of target_bytes this source provides
    records: Callable[[DocumentMaker, Unique], Records]
    schema: pa.Schema | None = None


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


SOURCES: tuple[SourceSpec, ...] = (
    SourceSpec("web_en", "web_en/part-{:05d}.jsonl.zst", "jsonl", "zstd", ("text",), ("id",), 4, 0.35, web_records),
    SourceSpec(
        "books_en", "books_en/books-{:05d}.parquet", "parquet", None, ("text",), ("doc_id",), 3, 0.35, book_records,
        schema=pa.schema([("doc_id", pa.string()), ("text", pa.string()), ("genre", pa.string()), ("year", pa.int32())]),
    ),
    SourceSpec("news_zh", "news_zh/news-{:05d}.jsonl.gz", "jsonl", "gzip", ("content",), ("id",), 3, 0.2, news_records),
    SourceSpec(
        "forum_en", "forum_en/threads-{:05d}.jsonl", "jsonl", None, ("post", "body"), ("post", "id"), 4, 0.1,
        forum_records,
    ),
)
