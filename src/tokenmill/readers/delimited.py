"""CSV and TSV files: one document per row; column names from a header row or from `options.columns`."""

from __future__ import annotations

import csv
import io
from typing import Iterator, Literal, Optional

from tokenmill.config_base import StrictModel
from tokenmill.readers.base import PREVIEW_CHARS, decode, open_source, record_from_object
from tokenmill.readers.compression import DECOMPRESSION_ERRORS
from tokenmill.sources.reader import Reader, Record


class DelimitedOptions(StrictModel):
    """Options of the `csv` and `tsv` readers."""

    delimiter: Optional[str] = None
    """Field separator; default `,` for csv and a tab for tsv."""
    header: bool = True
    """The first row holds column names."""
    columns: Optional[list[str]] = None
    """Column names to use; with `header: true` they replace the header row's (for files whose header is wrong)."""
    quoting: Literal["minimal", "none"] = "minimal"
    """`minimal`: fields may be quoted (RFC 4180); `none`: quote characters are ordinary text (many TSV dumps)."""


class _LineTooLong(Exception):
    pass


class _BoundedLines:
    """The text's lines for csv.reader, none longer than `limit` characters: a longer one (a 1 GB line with no
    newline) is skipped chunk by chunk and raises _LineTooLong instead of being held whole."""

    CHUNK = 1 << 20

    def __init__(self, text: io.TextIOBase, limit: int):
        self.text, self.limit = text, limit
        self.line = 0  # physical lines handed out or skipped

    def __iter__(self):
        return self

    def __next__(self) -> str:
        line = self.text.readline(self.limit + 1)
        if not line:
            raise StopIteration
        self.line += 1
        if len(line) > self.limit and not line.endswith(("\n", "\r")):
            while line and not line.endswith(("\n", "\r")):
                line = self.text.readline(self.CHUNK)
            raise _LineTooLong(f"line of more than {self.limit} characters")
        return line


def _undecodable(fields: list[str]) -> bool:
    return any("\udc80" <= ch <= "\udcff" for f in fields for ch in f if ch >= "\udc80")


def _read(path: str, source, display: str, default_delimiter: str) -> Iterator[Record]:
    options: DelimitedOptions = source.reader_options()
    # Bytes that do not fit the encoding survive as lone surrogates, so the row can be re-tried
    # (encoding `auto`) or dropped as decode_error, instead of ending the whole file.
    encoding = "utf-8-sig" if source.encoding in ("auto", "utf-8", "utf8") else source.encoding
    csv.field_size_limit(source.max_record_bytes)
    text = io.TextIOWrapper(open_source(path, source), encoding=encoding, errors="surrogateescape", newline="")
    lines = _BoundedLines(text, source.max_record_bytes)
    rows = csv.reader(lines, delimiter=options.delimiter or default_delimiter,
                      quoting=csv.QUOTE_NONE if options.quoting == "none" else csv.QUOTE_MINIMAL, strict=False)
    names = options.columns
    header_pending = options.header
    index = 0
    with text:
        while True:
            where = f"{display}:{lines.line + 1}"
            try:
                row = next(rows)
            except StopIteration:
                return
            except _LineTooLong as err:
                yield Record(index, "", drop="record_too_large", message=f"{where}: {err}")
                index += 1
                continue
            except csv.Error as err:
                if "field larger than field limit" in str(err):
                    yield Record(index, "", drop="record_too_large", message=f"{where}: {err}")
                    index += 1
                    continue
                yield Record(index, "", drop="read_error", message=f"{where}: {err}")
                return
            except DECOMPRESSION_ERRORS as err:
                yield Record(index, "", drop="read_error", message=f"{where}: damaged stream: {err}")
                return
            if not row:
                continue  # a blank line holds no record
            if _undecodable(row):
                raw = [f.encode("utf-8", "surrogateescape") for f in row]
                try:
                    if source.encoding != "auto":
                        raise UnicodeDecodeError(source.encoding, b"", 0, 1, "invalid bytes")
                    row = [decode(b, "auto") for b in raw]
                except UnicodeDecodeError:
                    preview = " | ".join(b.decode("utf-8", "replace") for b in raw)[:PREVIEW_CHARS]
                    yield Record(index, preview, drop="decode_error", message=f"{where}: invalid {source.encoding} bytes")
                    index += 1
                    continue
            if header_pending:
                header_pending = False
                names = names or [name.strip() for name in row]
                continue
            if names is None:
                names = [f"column_{i}" for i in range(len(row))]
            if len(row) != len(names):
                yield Record(index, " | ".join(row)[:PREVIEW_CHARS], drop="bad_row",
                             message=f"{where}: {len(row)} fields, expected {len(names)}")
            else:
                yield record_from_object(dict(zip(names, row)), index, source, where)
            index += 1


def read_csv(path: str, source, display: str) -> Iterator[Record]:
    return _read(path, source, display, ",")


def read_tsv(path: str, source, display: str) -> Iterator[Record]:
    return _read(path, source, display, "\t")


CSV = Reader("csv", read_csv, ("bad_row",), DelimitedOptions, line_based=False)
TSV = Reader("tsv", read_tsv, ("bad_row",), DelimitedOptions, line_based=False)
