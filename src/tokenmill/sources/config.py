"""A source of a run (or of a classifier's training): one format's files, named by patterns, and how to read them."""

from __future__ import annotations

import codecs
import re
from typing import Any, Literal, Optional, Union

from pydantic import Field, field_validator, model_validator

from tokenmill.config_base import StrictModel
from tokenmill.sources.formats import READERS

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class SourceConfig(StrictModel):
    """One input source: files of one format, read into documents by one reader."""

    name: str
    """Short name, written to the `source` column and used in shard names (letters, digits, `_.-`)."""
    format: str
    """Reader: a registered format (`tokenmill.sources.formats.READERS`: `jsonl`, `parquet`, `cc_warc`, ...), as
    docs/readers.md lists them."""
    paths: list[str] = Field(min_length=1)
    """Glob patterns (`**` allowed), relative to the config file's folder, or URIs (`s3://bucket/prefix/*.jsonl.zst`,
    `gs://...`, `file://...`: see docs/sources.md); each must match a file."""
    root: Optional[str] = None
    """Folder (or folder URI) that document ids are relative to; default: the deepest folder common to `paths`."""
    text_field: Union[str, list[str]] = "text"
    """Field holding the text; a dotted path reaches into nested objects (`post.body`); a list of fields is joined by a blank line."""
    id_field: Optional[str] = None
    """Field holding the source's own document id (kept unchanged); default: source/path/record-index."""
    subset_field: Optional[str] = None
    """Field whose value becomes the `subset` column (e.g. a subreddit); dotted path allowed."""
    fraction: float = Field(default=1.0, gt=0.0, le=1.0)
    """Share of documents the `sample` stage keeps, in (0, 1]. Upsampling is the loader's job."""
    language: str = "en"
    """Language of the source (ISO 639-1 such as `en`, `zh`), or `any`: what clean expects, and what stages use when none detected one.
    Checked against the language identifier's codes, case-insensitively; a region or script is dropped (`en-US` is
    `en`); a name (`english`) is refused with the code to write."""
    encoding: str = "utf-8"
    """Text encoding: `utf-8`, a codec name (`gb18030`, `cp1252` ...), or `auto` (UTF-8 when valid, else detected per record)."""
    max_window_log: int = Field(default=27, ge=10, le=31)
    """Largest zstd window (log2 bytes) a file may ask for; Pushshift dumps need 31. Caps decompression memory."""
    max_record_bytes: int = Field(default=64 * 2**20, ge=1024)
    """A record longer than this is dropped as `record_too_large` without being held in memory."""
    options: dict[str, Any] = {}
    """Options of the reader (e.g. csv `delimiter`, `header`, `columns`; json `items`); see docs/readers.md."""
    stamp: Literal["mtime", "content"] = "mtime"
    """What says a file is unchanged since it was read: `mtime` (size and modification time) or `content` (size and
    sha256 of the bytes, read once more per run: for files copied with their times kept, `cp -p`, `rsync -t`)."""

    @field_validator("name")
    @classmethod
    def _name_is_safe(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"{value!r} must be letters, digits, '_', '.', '-' (it names files)")
        return value

    @field_validator("format")
    @classmethod
    def _format_known(cls, value: str) -> str:
        if value not in READERS:
            raise ValueError(f"unknown format {value!r}; known: {', '.join(sorted(READERS))}")
        return value

    @field_validator("language")
    @classmethod
    def _language_known(cls, value: str) -> str:
        from tokenmill.text.langid import canonical_language

        return canonical_language(value)

    @field_validator("encoding")
    @classmethod
    def _encoding_known(cls, value: str) -> str:
        if value != "auto":
            try:
                codecs.lookup(value)
            except LookupError:
                raise ValueError(f"unknown encoding {value!r}; use a Python codec name or 'auto'") from None
        return value

    @model_validator(mode="after")
    def _reader_fits(self) -> "SourceConfig":
        reader = READERS[self.format]
        if reader.line_based and self.encoding != "auto" and "\n".encode(self.encoding) != b"\n":
            raise ValueError(f"encoding {self.encoding!r} cannot be split into lines; re-encode the files as UTF-8")
        reader.parse_options(self.options)  # raises ValueError naming the option
        return self

    def reader_options(self) -> Any:
        """This source's `options`, validated by its reader's own model."""
        return READERS[self.format].parse_options(self.options)
