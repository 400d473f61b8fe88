"""Reddit Pushshift dumps (NDJSON, plain or .zst): comments (`body`) and submissions (`title` + `selftext`).

Field sets vary from line to line across dump eras, so nothing beyond the text is required: the
id is the fullname (`t1_...` comments, `t3_...` submissions), `subreddit` becomes `subset`, and
a few stable fields go to `meta`, `created_utc` as integer seconds whether the dump wrote a number
or a string. Deleted and removed content becomes a named drop.
"""

from __future__ import annotations

from typing import Any, Iterator

from tokenmill.readers.base import PREVIEW_CHARS, get_path, is_missing
from tokenmill.readers.jsonl import JSON_DROP_REASONS, iter_json_lines
from tokenmill.sources.reader import Reader, Record

GONE = {"[deleted]": "deleted_content", "[removed]": "removed_content"}
META_FIELDS = ("author", "score", "created_utc", "retrieved_on", "edited", "link_id", "parent_id", "permalink",
               "url", "domain", "num_comments", "is_self", "over_18", "controversiality", "gilded")
TIME_FIELDS = ("created_utc", "retrieved_on")
"""META_FIELDS made integer seconds (`_seconds`)."""


def _seconds(value: Any) -> Any:
    """Pushshift writes times as int, float or numeric string, by era; all become integer seconds."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str):
        try:
            return int(float(value))
        except ValueError:
            return value
    return value


_PRESENT: dict[tuple[str, ...], tuple[str, ...]] = {}
"""META_FIELDS present in an object, by the object's keys in order: a dump's lines share a few layouts."""
_PRESENT_MAX = 4096
"""Layouts remembered, at most (a dump whose lines all differ reads as before past it)."""


def _present(obj: dict[str, Any]) -> tuple[str, ...]:
    """The META_FIELDS that `obj` has, in META_FIELDS' order: looked up by its layout, not tested field by field."""
    layout = tuple(obj)
    present = _PRESENT.get(layout)
    if present is None:
        present = tuple(k for k in META_FIELDS if k in obj)
        if len(_PRESENT) < _PRESENT_MAX:
            _PRESENT[layout] = present
    return present


def reddit_record(obj: Any, index: int, source, where: str) -> Record:
    if not isinstance(obj, dict):
        return Record(index, str(obj)[:PREVIEW_CHARS], drop="not_an_object", message=f"{where}: not a JSON object")
    if "body" in obj:
        kind, prefix, texts = "comment", "t1_", (("body", obj["body"]),)
    elif "title" in obj or "selftext" in obj:
        kind, prefix, texts = "submission", "t3_", (("title", obj.get("title")), ("selftext", obj.get("selftext")))
    else:
        return Record(index, "", drop="missing_text", message=f"{where}: neither a comment body nor a submission title")
    for field, value in texts:
        if value is not None and not isinstance(value, str):
            return Record(index, str(value)[:PREVIEW_CHARS], drop="bad_text_type",
                          message=f"{where}: {field} is a {type(value).__name__}, not a string")
    if source.id_field is not None:
        raw = get_path(obj, source.id_field)
        doc_id = None if is_missing(raw) or raw in (None, "") else str(raw)
        if doc_id is None:
            return Record(index, "", drop="missing_id", message=f"{where}: no field {source.id_field!r}")
    else:
        doc_id = obj.get("name") or (prefix + str(obj["id"]) if obj.get("id") else None)
    meta = {k: obj[k] for k in _present(obj)}
    for k in TIME_FIELDS:  # in place: the keys keep META_FIELDS' order
        value = meta.get(k)
        if value is not None and type(value) is not int:  # an int is its own seconds
            meta[k] = _seconds(value)
    meta["kind"] = kind
    subset = obj.get("subreddit")
    subset = None if subset is None else str(subset)
    body = texts[-1][1] or ""
    stripped = body.strip()
    if stripped in GONE:
        return Record(index, texts[0][1] or "", doc_id, subset, meta, drop=GONE[stripped],
                      message=f"{where}: {kind} {texts[-1][0]} is {stripped}")
    if len(texts) == 1:  # a comment: its body, unless blank (then no text, as the join below gives)
        text, blank = (body, False) if stripped else ("", True)
    else:
        text = "\n\n".join(v for _, v in texts if v and v.strip())
        blank = not text.strip()
    if blank:
        return Record(index, text, doc_id, subset, meta, drop="empty_text", message=f"{where}: empty {kind}")
    return Record(index, text, doc_id, subset, meta)


def read_reddit(path: str, source, display: str) -> Iterator[Record]:
    for item in iter_json_lines(path, source, display):
        yield item if isinstance(item, Record) else reddit_record(item[2], item[0], source, item[1])


REDDIT = Reader("reddit", read_reddit, (*JSON_DROP_REASONS, "deleted_content", "removed_content"))
