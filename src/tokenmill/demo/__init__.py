"""Generated multi-source demo corpus (English web/books/forum, Chinese news) with planted faults and ground truth."""

from .corpus import GROUND_TRUTH_NAME, write_demo_corpus
from .config import CONFIG_NAME
from .sources import BOOK_GENRES, FORUM_BOARDS, NEWS_CATEGORIES, SOURCES, TOPICS

__all__ = [
    "write_demo_corpus",
    "CONFIG_NAME",
    "GROUND_TRUTH_NAME",
    "SOURCES",
    "TOPICS",
    "BOOK_GENRES",
    "FORUM_BOARDS",
    "NEWS_CATEGORIES",
]
