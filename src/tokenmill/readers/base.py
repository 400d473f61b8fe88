"""The record a reader yields, the reader-level drop reasons, and field access by dotted path."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

READER_DROP_REASONS = (
    "read_error",  # the file is damaged from here on (truncated or corrupt compression, I/O error)
    "decode_error",  # the record's bytes are not valid UTF-8
    "bad_json",  # the line is not valid JSON
    "not_an_object",  # valid JSON, but not an object with fields
    "missing_text",  # the text field is absent or null
    "bad_text_type",  # the text field is not a string
    "empty_text",  # the text is empty or whitespace only
    "missing_id",  # `id_field` is configured but absent in this record
    "too_large",  # the record exceeds `ingest.max_doc_bytes`; skipped without being held in memory
)

PREVIEW_CHARS = 2000
"""How much of a bad record's raw text is kept in `dropped/` to show what it was."""

_MISSING = object()


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a source file: a document, or a drop with its reason and a message naming file and line."""

    index: int
    """0-based position in the file (line for line formats, row for tables); the default id uses it."""
    text: str
    id: Optional[str] = None
    subset: Optional[str] = None
    meta: Optional[dict[str, Any]] = None
    drop: Optional[str] = None
    message: Optional[str] = None


def get_path(obj: Any, dotted: str, default: Any = _MISSING) -> Any:
    """`get_path({"post": {"body": "x"}}, "post.body") == "x"`; `default` (or a sentinel) when absent."""
    for part in dotted.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return default
        obj = obj[part]
    return obj


def without_path(obj: dict[str, Any], dotted: str) -> dict[str, Any]:
    """A copy of `obj` without the field at `dotted` (copying only the dicts on the way)."""
    head, _, rest = dotted.partition(".")
    if head not in obj:
        return obj
    out = dict(obj)
    if rest:
        if isinstance(out[head], dict):
            out[head] = without_path(out[head], rest)
            if not out[head]:
                del out[head]
    else:
        del out[head]
    return out


def is_missing(value: Any) -> bool:
    return value is _MISSING


def record_from_object(obj: Any, index: int, source, where: str) -> Record:
    """Turn one parsed object into a record, or a drop naming what is wrong with it."""
    if not isinstance(obj, dict):
        return Record(index, "", drop="not_an_object", message=f"{where}: a JSON {type(obj).__name__}, not an object")
    text = get_path(obj, source.text_field)
    if is_missing(text) or text is None:
        return Record(index, "", drop="missing_text", message=f"{where}: no field {source.text_field!r}")
    if not isinstance(text, str):
        return Record(index, str(text)[:PREVIEW_CHARS], drop="bad_text_type",
                      message=f"{where}: field {source.text_field!r} is a {type(text).__name__}, not a string")
    doc_id = None
    meta = without_path(obj, source.text_field)
    if source.id_field is not None:
        raw_id = get_path(obj, source.id_field)
        if is_missing(raw_id) or raw_id is None or raw_id == "":
            return Record(index, text[:PREVIEW_CHARS], drop="missing_id", message=f"{where}: no field {source.id_field!r}")
        doc_id = str(raw_id)
        meta = without_path(meta, source.id_field)
    subset = None
    if source.subset_field is not None:
        value = get_path(obj, source.subset_field, None)
        subset = None if value is None else str(value)
    if not text.strip():
        return Record(index, text[:PREVIEW_CHARS], doc_id, subset, meta, drop="empty_text", message=f"{where}: empty text")
    return Record(index, text, doc_id, subset, meta)
