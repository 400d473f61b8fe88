"""What readers share: opening and decoding a source's bytes, field access, and the stamps of unchanged files."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any, BinaryIO

from tokenmill.digest import file_sha256
from tokenmill.errors import TokenmillError
from tokenmill.readers.compression import open_binary
from tokenmill.sources import uris
from tokenmill.sources.reader import Record

if TYPE_CHECKING:
    from tokenmill.sources.config import SourceConfig

PREVIEW_CHARS = 2000
"""How much of a bad record's raw text is kept in `dropped/` to show what it was."""

_MISSING = object()


def open_source(path: str, source: "SourceConfig") -> BinaryIO:
    """A file (or object URI) of this source as a decompressed byte stream, within the source's zstd window limit."""
    return open_binary(path, zstd_window_log=source.max_window_log)


AUTO_CANDIDATES = ["cp1252", "gb18030", "big5", "shift_jis", "euc_jp", "euc_kr", "cp1251", "koi8_r"]
"""Legacy encodings `auto` chooses among when bytes are not UTF-8. Short texts are ambiguous between
sibling code pages (cp1250 vs cp1252 differ in a few letters), so detection is held to the encodings
real dumps mix in; pin `encoding` for a source known to use another."""


def decode(data: bytes, encoding: str) -> str:
    """Bytes to text in the source's encoding; `auto` is UTF-8 when valid, else the detected codec.

    Raises UnicodeDecodeError when the bytes fit no encoding, so the caller drops the record as
    `decode_error` (never a silent replacement character).
    """
    if encoding != "auto":
        return data.decode(encoding)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        from charset_normalizer import from_bytes

        best = from_bytes(data, cp_isolation=AUTO_CANDIDATES).best()
        if best is None:
            raise err
        return str(best)


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


def json_safe(value: Any) -> Any:
    """`value` as canonical JSON can write it: a NaN or infinite float becomes its text (`"nan"`, `"inf"`), and a
    value JSON has no type for (a Parquet timestamp, decimal or binary column) its `str`. A column of pandas NaNs
    or a JSON `1e999` must not stop the record's meta from being written."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def is_missing(value: Any) -> bool:
    return value is _MISSING


def text_fields(source: "SourceConfig") -> list[str]:
    return [source.text_field] if isinstance(source.text_field, str) else list(source.text_field)


def record_from_object(obj: Any, index: int, source: "SourceConfig", where: str) -> Record:
    """Turn one parsed object into a record, or a drop naming what is wrong with it.

    With several text fields, the present non-empty ones are joined by a blank line (title + body).
    """
    if not isinstance(obj, dict):
        return Record(index, str(obj)[:PREVIEW_CHARS], drop="not_an_object",
                      message=f"{where}: a JSON {type(obj).__name__}, not an object")
    fields = text_fields(source)
    parts, meta = [], obj
    for field in fields:
        value = get_path(obj, field)
        if is_missing(value) or value is None:
            continue
        if not isinstance(value, str):
            return Record(index, str(value)[:PREVIEW_CHARS], drop="bad_text_type",
                          message=f"{where}: field {field!r} is a {type(value).__name__}, not a string")
        parts.append(value)
        meta = without_path(meta, field)
    if not parts:
        return Record(index, "", drop="missing_text", message=f"{where}: no field {' or '.join(map(repr, fields))}")
    text = "\n\n".join(p for p in parts if p.strip()) if len(parts) > 1 else parts[0]
    doc_id = None
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


class InputChangedError(TokenmillError):
    """A source file changed (or went away) between the run's listing of it and the commit of the task that read it."""


def file_stamp(path: str, kind: str = "mtime", size: int | None = None) -> dict[str, Any]:
    """What says a source file is unchanged: its size, and its modification time (`mtime`) or the sha256 of its
    bytes (`content`, for copies that keep times: `cp -p`, `rsync -t`). `size`, when given, is the size to record
    (the one the run's listing saw)."""
    if uris.is_remote(path):  # an object: the size and mtime its store gives, or the sha256 of its bytes streamed
        if kind == "content":  # no HEAD when the listing's size is given (a gone object fails the read)
            return {"bytes": uris.stat(path)[0] if size is None else size, "sha256": uris.object_sha256(path)}
        now, mtime_ns = uris.stat(path)
        return {"bytes": now if size is None else size, "mtime_ns": mtime_ns}
    st = os.stat(path)
    if kind == "content":
        return {"bytes": st.st_size if size is None else size, "sha256": file_sha256(path)}
    return {"bytes": st.st_size if size is None else size, "mtime_ns": st.st_mtime_ns}


def check_unchanged(path: str, display: str, expected: dict[str, Any]) -> None:
    """Raise InputChangedError, naming the file and what changed, unless it still has the stamp `expected`.

    Ingest calls it when a task has read its file and before it commits: a file appended to mid-run would else
    leave a manifest listing its old size beside shards holding the new records.
    """
    kind = "content" if "sha256" in expected else "mtime"
    try:
        now = file_stamp(path, "mtime")
        if kind == "content" and now["bytes"] == expected["bytes"]:
            now = file_stamp(path, "content")
    except FileNotFoundError:
        raise InputChangedError(f"{display} ({path}) was deleted while this run read it; restore it or remove it "
                                f"from the source's paths, then rerun") from None
    changed = [f"{k} {expected[k]} -> {now.get(k)}" for k in sorted(expected) if k in now and now[k] != expected[k]]
    if now["bytes"] != expected["bytes"] and not any(c.startswith("bytes") for c in changed):
        changed.insert(0, f"bytes {expected['bytes']} -> {now['bytes']}")
    if changed:
        raise InputChangedError(
            f"{display} ({path}) changed while this run read it ({'; '.join(changed)}): its shards would not match "
            f"the file the manifest lists. Let whatever writes it finish (or read a copy nothing writes to), then "
            f"rerun: only this file is read again")
