"""Deliberately broken records planted in the demo corpus, and the registry of planters that make them."""

from __future__ import annotations

import json
import re
import random
from dataclasses import dataclass, field
from typing import Callable

# To add a planted kind: write one small function below decorated with
# @planter(...). It receives a freshly generated, valid record of its source
# (which it may modify or replace) and returns what to write instead. The
# corpus writer picks the file (of the planter's stream) and position, records
# the record's 0-based index (and the 1-based line, for line formats) in
# ground_truth.json, and counts the record as valid or not. Records are what
# the source's writer takes: a JSON object, or a page dict for WARC/WET files.


@dataclass(frozen=True)
class PlantContext:
    rnd: random.Random  # for planters that need randomness; seeded per source
    text_path: tuple[str, ...]  # where the text lives in a record, e.g. ("post", "body")
    id_path: tuple[str, ...] | None  # None where records carry no id of their own (Pile lines)


@dataclass
class Planted:
    raw: bytes | None = None  # a raw line, written verbatim (JSON lines sources only)
    record: dict | None = None  # or a record, written like every other record
    valid: bool = False  # True when ingest should keep it (e.g. a planted near-duplicate)
    info: dict = field(default_factory=dict)  # extra fields for the ground-truth entry


@dataclass(frozen=True)
class Planter:
    kind: str
    source: str
    stage: str  # pipeline stage expected to catch it
    expect_drop_reason: str | None  # None for planted records that should be kept
    make: Callable[[dict, PlantContext], Planted]
    stream: str = "main"  # which of the source's record streams (and so files) it goes to


PLANTERS: list[Planter] = []


def planter(kind: str, *, source: str, stage: str = "ingest", drop_reason: str | None = "same as kind",
            stream: str = "main"):
    """Register a planter function; the registration order is the planting order (part of determinism)."""

    def register(make: Callable[[dict, PlantContext], Planted]):
        reason = kind if drop_reason == "same as kind" else drop_reason
        PLANTERS.append(Planter(kind, source, stage, reason, make, stream))
        return make

    return register


def get_path(record: dict, path: tuple[str, ...]):
    for key in path:
        record = record[key]
    return record


def set_path(record: dict, path: tuple[str, ...], value) -> None:
    get_path(record, path[:-1])[path[-1]] = value


def dumps(record) -> str:
    """The one JSON encoding used for every JSON lines record (UTF-8 text, not \\u escapes)."""
    return json.dumps(record, ensure_ascii=False)


@planter("bad_json", source="forum_en")
def bad_json(record: dict, ctx: PlantContext) -> Planted:
    # A writer killed mid-line: cutting a JSON object in half always leaves it unbalanced.
    line = dumps(record)
    return Planted(raw=line[: len(line) // 2].encode("utf-8"))


@planter("decode_error", source="forum_en")
def decode_error(record: dict, ctx: PlantContext) -> Planted:
    # A Latin-1 "é" (byte 0xE9) inside otherwise valid JSON: only strict UTF-8 decoding catches it.
    set_path(record, ctx.text_path, get_path(record, ctx.text_path) + " We met at the café afterwards.")
    line = dumps(record).encode("utf-8").replace("café".encode("utf-8"), "café".encode("latin-1"))
    return Planted(raw=line)


@planter("empty_text", source="forum_en")
def empty_text(record: dict, ctx: PlantContext) -> Planted:
    set_path(record, ctx.text_path, " \n\t  ")  # whitespace only, so a plain `if not text` check misses it
    return Planted(record=record)


@planter("missing_text", source="forum_en")
def missing_text(record: dict, ctx: PlantContext) -> Planted:
    del get_path(record, ctx.text_path[:-1])[ctx.text_path[-1]]
    return Planted(record=record)


@planter("not_an_object", source="forum_en")
def not_an_object(record: dict, ctx: PlantContext) -> Planted:
    return Planted(raw=dumps([get_path(record, ctx.id_path), get_path(record, ctx.text_path)]).encode("utf-8"))


# -- Reddit: what moderators and users leave behind (the reddit reader drops these) ---------


def _sorted(record: dict) -> dict:
    return dict(sorted(record.items()))  # Pushshift lines keep their keys sorted


@planter("deleted_comment", source="reddit", stream="comments", drop_reason="deleted_content")
def deleted_comment(record: dict, ctx: PlantContext) -> Planted:
    record.update(body="[deleted]", author="[deleted]")
    record.pop("author_fullname", None)
    record.pop("author_flair_text", None)
    return Planted(record=_sorted(record))


@planter("removed_comment", source="reddit", stream="comments", drop_reason="removed_content")
def removed_comment(record: dict, ctx: PlantContext) -> Planted:
    record.update(body="[removed]", author="[deleted]")  # as in the dumps: a removed comment's author is gone too
    record.pop("author_fullname", None)
    return Planted(record=_sorted(record))


@planter("removed_submission", source="reddit", stream="submissions", drop_reason="removed_content")
def removed_submission(record: dict, ctx: PlantContext) -> Planted:
    record.update(selftext="[removed]", is_self=True, removed_by_category="moderator",
                  url="https://www.reddit.com" + record["permalink"], domain="self." + record["subreddit"])
    return Planted(record=_sorted(record))


# -- Common Crawl: captures that hold no page text -------------------------------------


@planter("not_html", source="cc_html")
def not_html(record: dict, ctx: PlantContext) -> Planted:
    from .web import png_image

    site = record["site"]
    record.update(kind="png", payload=png_image(ctx.rnd.randrange(256)),
                  url=f"https://{site.host}/wp-content/uploads/2024/05/header-{ctx.rnd.randrange(10**4)}.png")
    return Planted(record=record)


@planter("http_error", source="cc_html")
def http_error(record: dict, ctx: PlantContext) -> Planted:
    record.update(kind="not_found")  # a 404 page: HTML, but not the page that was asked for
    return Planted(record=record)


@planter("empty_text", source="cc_wet")
def empty_conversion(record: dict, ctx: PlantContext) -> Planted:
    record.update(text="", language=None)  # a page with no text at all: Content-Length 0
    return Planted(record=record)


# -- Clean stage: escape leaks (the OPT lesson), mojibake, personal data ----------------------------------
# Valid records for ingest; the clean stage must repair, fix or drop them as registered. A planted record
# that clean should keep has expect_drop_reason None and says in `expect` which step must change it.


def _planted_text(record: dict, ctx: PlantContext, text: str, expect: str, step: str) -> Planted:
    set_path(record, ctx.text_path, text)
    return Planted(record=record, valid=True, info={"expect": expect, "clean_step": step})


@planter("escaped_json_once", source="web_en", stage="clean", drop_reason=None)
def escaped_json_once(record: dict, ctx: PlantContext) -> Planted:
    # A document that went through json.dumps once too often: every line break is a literal "\n".
    text = json.dumps(get_path(record, ctx.text_path), ensure_ascii=False)[1:-1]
    return _planted_text(record, ctx, text, "repaired", "escape_repair")


@planter("escaped_json_twice", source="pile", stage="clean", drop_reason=None)
def escaped_json_twice(record: dict, ctx: PlantContext) -> Planted:
    once = json.dumps(get_path(record, ctx.text_path), ensure_ascii=False)[1:-1]
    return _planted_text(record, ctx, json.dumps(once, ensure_ascii=False)[1:-1], "repaired", "escape_repair")


@planter("html_entities", source="forum_en", stage="clean", drop_reason=None)
def html_entities(record: dict, ctx: PlantContext) -> Planted:
    text = get_path(record, ctx.text_path)
    text = f"Tom &amp; Jerry&#39;s &quot;classic&quot; episodes &mdash; still great. {text}"
    return _planted_text(record, ctx, text, "repaired", "escape_repair")


@planter("literal_escapes", source="forum_en", stage="clean", drop_reason="escape_literal_newline")
def literal_escapes(record: dict, ctx: PlantContext) -> Planted:
    # Real line breaks and literal ones mixed: no single unescaping undoes it, so clean must drop it.
    text = get_path(record, ctx.text_path)
    words = text.split(" ")
    leaked = " ".join(w + ("\\n" if i % 6 == 5 else "") for i, w in enumerate(words))
    set_path(record, ctx.text_path, "First line of the post.\n\n" + leaked + "\nLast line.\\n\\n")
    return Planted(record=record, valid=True, info={"expect": "dropped"})


@planter("mojibake", source="web_en", stage="clean", drop_reason=None)
def mojibake(record: dict, ctx: PlantContext) -> Planted:
    # UTF-8 read as Windows-1252 somewhere upstream: ftfy must restore it.
    clean = "Our café served crème brûlée — the naïve critic’s favourite. " + get_path(record, ctx.text_path)
    return _planted_text(record, ctx, clean.encode("utf-8").decode("cp1252", errors="replace"), "fixed", "ftfy")


@planter("pii", source="forum_en", stage="clean", drop_reason=None)
def pii(record: dict, ctx: PlantContext) -> Planted:
    text = get_path(record, ctx.text_path)
    text += " You can reach me at jane.doe@example.com or +1 415-555-0134 if the board is down."
    return _planted_text(record, ctx, text, "replaced", "pii")


# -- Dedup stage: near-duplicate pairs at known Jaccard, and an exact copy across sources ---------------------
# Jaccard is over word 5-gram shingles (lowercase runs of letters and digits), as the dedup stage measures it. A copy
# is its base plus k new words at the end: each adds one shingle, so Jaccard = n / (n + k) for a base of n shingles,
# whatever cleaning does to whitespace. The keep rule keeps the longer document, so the base is the one removed.

_DEDUP_BASES: dict[str, str] = {}


def clean_article(ctx: PlantContext) -> str:
    """A web article of 300+ words that the clean stage keeps at its defaults: a pair that cleaning halves tests
    nothing about dedup."""
    import numpy as np

    from tokenmill.text.quality import QualityConfig, quality

    from .documents import DocumentMaker

    maker = DocumentMaker(ctx.rnd, np.random.default_rng(ctx.rnd.getrandbits(64)))
    while True:
        title, text = maker.web_article("science")
        text = f"{title}\n\n{text}"
        if len(_WORD.findall(text)) >= 300 and quality([text], ["en"], QualityConfig())[1][0] is None:
            return text
NEAR_DUP_TARGETS = (0.99, 0.97, 0.93, 0.85)
_WORD = re.compile(r"[^\W_]+")


def shingle_set(text: str, n: int = 5) -> set[tuple[str, ...]]:
    words = [w.lower() for w in _WORD.findall(text)]
    return {tuple(words[i:i + n]) for i in range(max(1, len(words) - n + 1))}


def jaccard(a: str, b: str) -> float:
    x, y = shingle_set(a), shingle_set(b)
    return len(x & y) / len(x | y) if x | y else 0.0


def _near_dup_pair(target: float):
    tag = f"{target:.2f}"

    @planter(f"near_duplicate_base_{tag}", source="web_en", stage="dedup",
             drop_reason="near_duplicate" if target > 0.95 else None)
    def base(record: dict, ctx: PlantContext) -> Planted:
        text = clean_article(ctx)
        set_path(record, ctx.text_path, text)
        _DEDUP_BASES[tag] = text
        return Planted(record=record, valid=True, info={"pair": tag})

    @planter(f"near_duplicate_copy_{tag}", source="web_en", stage="dedup", drop_reason=None)
    def copy(record: dict, ctx: PlantContext) -> Planted:
        text = _DEDUP_BASES[tag]
        n = len(shingle_set(text))
        k = max(1, round(n * (1 - target) / target))
        pool = sorted(set(w.lower() for w in _WORD.findall(text)))
        extra = " ".join(ctx.rnd.choice(pool) for _ in range(k))
        edited = f"{text}\n\nUpdated: {extra}."
        # "updated" and the new words make k + 1 shingles at most; measure rather than trust the arithmetic.
        set_path(record, ctx.text_path, edited)
        return Planted(record=record, valid=True, info={"pair": tag, "jaccard": round(jaccard(text, edited), 4)})


for _target in NEAR_DUP_TARGETS:
    _near_dup_pair(_target)


@planter("exact_copy_base", source="web_en", stage="dedup", drop_reason="exact_duplicate")
def exact_copy_base(record: dict, ctx: PlantContext) -> Planted:
    text = clean_article(ctx)
    set_path(record, ctx.text_path, text)
    _DEDUP_BASES["exact"] = text
    return Planted(record=record, valid=True, info={"pair": "exact", "note": "removed: its reddit copy sorts first"})


@planter("exact_copy_cross_source", source="reddit", stream="comments", stage="dedup", drop_reason=None)
def exact_copy_cross_source(record: dict, ctx: PlantContext) -> Planted:
    # A Reddit comment that pastes a whole web article: a duplicate across sources.
    record["body"] = _DEDUP_BASES["exact"]
    return Planted(record=_sorted(record), valid=True, info={"pair": "exact"})


# -- Decontaminate stage: a generated evaluation set, and passages of it planted in documents -----------------

DEMO_EVALSET = "evalsets/demo_qa.jsonl"
_QA_SUBJECTS = ("the lighthouse keeper", "a retired pilot", "the village baker", "two young chemists", "the harbor master",
                "an old violinist", "the museum guard", "a patient gardener", "the night nurse", "a travelling clockmaker")
_QA_ACTS = ("counted the copper coins hidden under", "carried twelve wooden crates across", "painted the narrow blue door of",
            "measured the cold water flowing through", "repaired the broken silver bell inside",
            "planted forty small apple trees behind", "wrote a long careful letter about")
_QA_PLACES = ("the abandoned railway station", "the quiet northern monastery", "the flooded salt market",
              "the tallest granite tower", "the forgotten orchard by the river")


def demo_eval_items() -> list[dict]:
    """Fifty question/answer items, the same for every seed: the evaluation set the demo protects. Words are drawn
    freely (no template), so no 13-word run is shared by two items and a hit names exactly one item."""
    rnd = random.Random("tokenmill-demo/evalset")
    vocab = sorted({w for phrase in (*_QA_SUBJECTS, *_QA_ACTS, *_QA_PLACES) for w in phrase.split()})
    items = []
    for i in range(50):
        who, act, where = rnd.choice(_QA_SUBJECTS), rnd.choice(_QA_ACTS), rnd.choice(_QA_PLACES)
        detail = " ".join(rnd.choice(vocab) for _ in range(14))
        n = rnd.randrange(3, 60)
        question = f"If {who} {act} {where} {n} times, {detail}, how many times in all?"
        items.append({"id": f"qa-{i:03d}", "question": question, "answer": f"It happened {n * 3} times in all."})
    return items


def write_demo_evalset(out_dir) -> str:
    from pathlib import Path

    path = Path(out_dir) / DEMO_EVALSET
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(item) + "\n" for item in demo_eval_items()), encoding="utf-8")
    return DEMO_EVALSET


def _contaminate(item_index: int):
    def make(record: dict, ctx: PlantContext) -> Planted:
        item = demo_eval_items()[item_index]
        text = clean_article(ctx)  # a host the clean stage keeps: the passage must reach decontamination
        middle = len(text) // 2
        cut = text.rfind(" ", 0, middle) + 1 or middle
        # A final newline, as WET bodies end; harmless elsewhere (cleaning strips it).
        set_path(record, ctx.text_path, f"{text[:cut]}{item['question']} {text[cut:]}\n")
        return Planted(record=record, valid=True,
                       info={"evalset": "demo_qa", "item": item["id"], "field": "question", "expect": "excised"})
    return make


for _source, _item in (("web_en", 4), ("forum_en", 17), ("cc_wet", 31)):
    planter(f"eval_passage_{_item}", source=_source, stage="decontaminate", drop_reason=None)(_contaminate(_item))
