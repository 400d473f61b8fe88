"""The FineWeb quality filter (Penedo et al. 2024): lines ending in punctuation, short lines, repeated lines and
line breaks per word, as datatrove's `FineWebQualityFilter`; off unless configured."""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from tokenmill.config_base import StrictModel
from tokenmill.stages.clean.filter import Batch, Case, Filter, Setting
from tokenmill.text.quality.words import TERMINAL_PUNCTUATION, split_words

_STOPS = tuple(sorted(TERMINAL_PUNCTUATION))


class FineWebConfig(StrictModel):
    """FineWeb's thresholds (datatrove's defaults); each rule drops a document past it."""

    line_punct_thr: float = Field(default=0.12, ge=0, le=1)
    """Drop below this share of non-blank lines ending in terminal punctuation (`line_punct_ratio`)."""
    line_punct_exclude_zero: bool = False
    """Keep a document with no such line at all (FineWeb's option for text without punctuation)."""
    short_line_thr: float = Field(default=0.67, ge=0, le=1)
    """Drop above this share of non-blank lines of at most `short_line_length` characters (`short_line_ratio`)."""
    short_line_length: int = Field(default=30, ge=0)
    char_duplicates_ratio: float = Field(default=0.01, ge=0)
    """Drop above this share of the characters (line breaks left out) in lines equal to an earlier line
    (`char_dup_ratio`)."""
    new_line_ratio: float = Field(default=0.3, ge=0)
    """Drop above this many line breaks per word (`list_ratio`: lists, menus, tables)."""
    languages: tuple[str, ...] = ("en",)
    """The documents' languages (as identified) the rules apply to: FineWeb tuned them on English web text."""


class FineWebFilter(Filter):
    """FineWeb's line-level rules (datatrove's `FineWebQualityFilter`, the same decisions on the same words), on the
    documents of `languages` the filters before it kept."""

    name = "fineweb"
    order = 80
    settings = Setting("fineweb", Optional[FineWebConfig], None, doc=(
        "FineWeb's line rules (`line_punct_ratio`, `short_line_ratio`, `char_dup_ratio`, `list_ratio`); null (the "
        "default) turns them off, `{}` applies FineWeb's thresholds, e.g. `{short_line_thr: 0.8}` in an override "
        "for a source of poetry or lyrics."))
    drop_reasons = ("line_punct_ratio", "short_line_ratio", "char_dup_ratio", "list_ratio")
    cases = {
        "line_punct_ratio": Case("no line here ends with a stop\nnor does this one\nor this", settings=FineWebConfig()),
        "short_line_ratio": Case("Home.\nNews.\nAbout us.\nA longer line that ends the page properly.",
                                 settings=FineWebConfig()),
        "char_dup_ratio": Case("The same sentence comes back again here.\nThe same sentence comes back again here.",
                               settings=FineWebConfig()),
        "list_ratio": Case("We sell the following fine products.\n\n\n\nApples.", settings=FineWebConfig()),
    }

    def process(self, batch: Batch, rows: list[int], settings: FineWebConfig) -> list[str | None]:
        return [fineweb_reason(batch.texts[i], settings) if batch.langs[i] in settings.languages else None
                for i in rows]


def fineweb_reason(text: str, config: FineWebConfig) -> str | None:
    """datatrove's `FineWebQualityFilter.filter` on one text: the first rule it fails, or None. A text with no
    non-blank line never gets here (`empty_after_cleaning` dropped it first), so it is kept."""
    lines = [line for line in text.split("\n") if line.strip() != ""]
    if not lines:
        return None
    ratio = sum(1 for line in lines if line.endswith(_STOPS)) / len(lines)
    if ratio < config.line_punct_thr and not (ratio == 0 and config.line_punct_exclude_zero):
        return "line_punct_ratio"
    if sum(1 for line in lines if len(line) <= config.short_line_length) / len(lines) > config.short_line_thr:
        return "short_line_ratio"
    unique = set(lines)  # datatrove's find_duplicates: the characters of the lines equal to an earlier one
    duplicated = sum(map(len, lines)) - sum(map(len, unique)) if len(unique) < len(lines) else 0
    if duplicated / len(text.replace("\n", "")) > config.char_duplicates_ratio:
        return "char_dup_ratio"
    words = split_words(text)
    if words and text.count("\n") / len(words) > config.new_line_ratio:
        return "list_ratio"
    return None
