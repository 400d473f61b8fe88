"""JSON lines, plain or compressed (.gz, .zst): one document per line."""

from __future__ import annotations

import json
from typing import Iterator

from tokenmill.readers.base import PREVIEW_CHARS, Record, record_from_object
from tokenmill.readers.compression import open_binary
from tokenmill.readers.lines import iter_lines


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


# One decoder for every line: json.loads with options builds a new one per call.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def read_jsonl(path: str, source, max_doc_bytes: int, display: str) -> Iterator[Record]:
    """Yield one record per non-blank line; `display` names the file in messages."""
    with open_binary(path) as stream:
        for line in iter_lines(stream, max_doc_bytes):
            where = f"{display}:{line.number}"
            index = line.number - 1
            if line.data is None:
                yield Record(index, "", drop=line.problem, message=f"{where}: {line.message}")
                continue
            if not line.data.strip():
                continue  # a blank line holds no record
            try:
                text = line.data.decode("utf-8")
            except UnicodeDecodeError as err:
                yield Record(index, line.data.decode("utf-8", "replace")[:PREVIEW_CHARS], drop="decode_error",
                             message=f"{where}: invalid UTF-8 at byte {err.start} of the line")
                continue
            try:
                obj = _DECODER.decode(text)
            except (ValueError, RecursionError) as err:
                yield Record(index, text[:PREVIEW_CHARS], drop="bad_json", message=f"{where}: invalid JSON: {err}")
                continue
            yield record_from_object(obj, index, source, where)
