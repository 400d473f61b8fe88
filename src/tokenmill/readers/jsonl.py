"""JSON lines, plain or compressed (.gz, .zst): one document per line."""

from __future__ import annotations

import json
import math
import re
from typing import Any, Iterator, Union

from tokenmill.readers.base import PREVIEW_CHARS, decode, open_source, record_from_object
from tokenmill.readers.lines import iter_lines
from tokenmill.sources.reader import Reader, Record

JSON_DROP_REASONS = (
    "bad_json",  # the line is not valid JSON
    "not_an_object",  # valid JSON, but not an object with fields
)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> Any:
    # `1e999` parses to inf, which no manifest or meta column can hold (canonical JSON refuses it): keep the
    # number's text instead, as a string.
    value = float(text)
    return value if math.isfinite(value) else text


# A \u escape of a surrogate (U+D800-U+DFFF): json decodes a lone one into a str that no UTF-8 writer takes.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _lone_surrogate(text: str, value: Any) -> bool:
    """Whether the parsed `value` of line `text` holds a lone surrogate (a pair decodes to one character); the
    regex spares the check to lines with no surrogate escape, nearly all."""
    if "\\u" not in text or _SURROGATE_ESCAPE.search(text) is None:
        return False
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


# One decoder for every line: json.loads with options builds a new one per call.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def iter_json_lines(path: str, source, display: str) -> Iterator[Union[Record, tuple[int, str, Any]]]:
    """Parsed lines as (index, where, value), or a Record dropping a line that could not be read, decoded or parsed."""
    with open_source(path, source) as stream:
        for line in iter_lines(stream, source.max_record_bytes):
            where = f"{display}:{line.number}"
            index = line.number - 1
            if line.data is None:
                yield Record(index, "", drop=line.problem, message=f"{where}: {line.message}")
                continue
            if not line.data.strip():
                continue  # a blank line holds no record
            try:
                text = decode(line.data, source.encoding)
            except UnicodeDecodeError as err:
                yield Record(index, line.data.decode("utf-8", "replace")[:PREVIEW_CHARS], drop="decode_error",
                             message=f"{where}: invalid {source.encoding} at byte {err.start} of the line")
                continue
            try:
                value = _DECODER.decode(text)
            except (ValueError, RecursionError) as err:
                yield Record(index, text[:PREVIEW_CHARS], drop="bad_json", message=f"{where}: invalid JSON: {err}")
                continue
            if _lone_surrogate(text, value):  # else the whole file's task would fail at the first UTF-8 encode
                yield Record(index, text[:PREVIEW_CHARS], drop="decode_error", message=f"{where}: a \\u escape of a "
                             "lone surrogate (U+D800-U+DFFF without its pair): not Unicode text")
                continue
            yield index, where, value


def read_jsonl(path: str, source, display: str) -> Iterator[Record]:
    """One record per non-blank line; fields by `text_field`, `id_field`, `subset_field`."""
    for item in iter_json_lines(path, source, display):
        yield item if isinstance(item, Record) else record_from_object(item[2], item[0], source, item[1])


JSONL = Reader("jsonl", read_jsonl, JSON_DROP_REASONS)
