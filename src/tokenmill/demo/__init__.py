"""Generated multi-source demo corpus in real source formats (JSON lines, Parquet, Pile, Common Crawl WET/WARC,
Pushshift Reddit, GB18030 news) with planted faults and ground truth; and single-format files for benchmarks."""

from .corpus import GROUND_TRUTH_NAME, write_demo_corpus
from .format_files import FORMAT_SOURCES, FORMATS, write_format_files
from .config import CONFIG_NAME
from .catalog import SOURCES
from .sources import BOOK_GENRES, FORUM_BOARDS, NEWS_CATEGORIES, TOPICS

__all__ = [
    "write_demo_corpus",
    "write_format_files",
    "FORMATS",
    "FORMAT_SOURCES",
    "CONFIG_NAME",
    "GROUND_TRUTH_NAME",
    "SOURCES",
    "TOPICS",
    "BOOK_GENRES",
    "FORUM_BOARDS",
    "NEWS_CATEGORIES",
]
