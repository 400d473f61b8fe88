"""The Reader a source format declares, and the record it yields; a Reader registers itself under its format name."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Optional

from pydantic import ValidationError

from tokenmill.config_base import StrictModel
from tokenmill.sources import uris

COMMON_DROP_REASONS = (
    "read_error",  # the file is damaged from here on (truncated or corrupt compression, I/O error)
    "decode_error",  # the record's bytes are not valid in the source's encoding
    "missing_text",  # the text field is absent or null
    "bad_text_type",  # the text field is not a string
    "empty_text",  # the text is empty or whitespace only
    "missing_id",  # `id_field` is configured but absent in this record
    "record_too_large",  # the record exceeds `max_record_bytes`; skipped without being held in memory
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a source file: a document, or a drop with its reason and a message naming file and line."""

    index: int
    """0-based position in the file (line, row, or WARC record); the default id uses it."""
    text: str
    id: Optional[str] = None
    subset: Optional[str] = None
    meta: Optional[dict[str, Any]] = None
    drop: Optional[str] = None
    message: Optional[str] = None


class NoOptions(StrictModel):
    """This reader takes no `options`."""


# The source is a `tokenmill.sources.config.SourceConfig`: typed `Any` here because that config looks its format
# up in this registry, and the registry must not depend on the config back.
ReadFn = Callable[[str, Any, str], Iterator[Record]]

_REGISTRY: dict[str, "Reader"] = {}


@dataclass(frozen=True)
class Reader:
    """A source format: its name, how to read one file into records, and what it may drop records for.

    Declaring one registers it under `format`, the value a source's `format:` names; `tokenmill.sources.formats`
    imports every module of `tokenmill.readers`, so a new format is its module (with its test and its doc)."""

    format: str
    """The name a source's `format:` gives (`jsonl`); one per Reader, a module may declare several."""
    read: ReadFn
    """`read(path, source, display)`: records of one file; `display` names the file in messages."""
    drop_reasons: tuple[str, ...] = ()
    """Reasons beyond COMMON_DROP_REASONS that this reader may emit."""
    options: type[StrictModel] = NoOptions
    """Model of the source's `options` block."""
    line_based: bool = True
    """It splits bytes on b"\\n", so the encoding must be ASCII-compatible."""

    libraries: tuple[str, ...] = ()
    """Distributions whose version can change what this reader yields (an HTML extractor): part of ingest's identity."""

    def __post_init__(self) -> None:
        if not hasattr(self.read, "__wrapped__"):
            object.__setattr__(self, "read", contained(self.read))
        other = _REGISTRY.get(self.format)
        if other is not None and _origin(other) != _origin(self):
            raise TypeError(f"format name {self.format!r} is taken by the reader {_origin(other)}")
        _REGISTRY[self.format] = self

    def library_versions(self) -> dict[str, str]:
        from importlib.metadata import PackageNotFoundError, version

        out = {}
        for name in self.libraries:
            try:
                out[name] = version(name)
            except PackageNotFoundError:
                out[name] = "absent"
        return out

    def parse_options(self, options: dict[str, Any]) -> StrictModel:
        try:
            return self.options.model_validate(options)
        except ValidationError as err:
            problems = "; ".join(
                f"options.{'.'.join(str(p) for p in e['loc'])}: "
                + ("unknown key" if e["type"] == "extra_forbidden" else e["msg"].removeprefix("Value error, "))
                for e in err.errors()
            )
            raise ValueError(problems) from None


def _origin(reader: Reader) -> str:
    """The read function a Reader was declared with, by module and name: the same module imported again may
    declare its format again, another module may not take it."""
    read = getattr(reader.read, "__wrapped__", reader.read)
    return f"{read.__module__}.{read.__qualname__}"


def registered() -> Mapping[str, Reader]:
    """The Readers declared so far, by format name (see `tokenmill.sources.formats` for discovery)."""
    return _REGISTRY


def contained(read: ReadFn) -> ReadFn:
    """`read`, ending a file with one counted `read_error` that names the exception wherever `read` would raise.

    Every reader turns the damage it knows into drops itself; this is the net under them (every Reader's `read` is
    wrapped in it), so a file that breaks a reader in a way nobody foresaw costs its remaining records, counted and
    named in the manifest, never the run.
    """

    def read_contained(path: str, source: Any, display: str) -> Iterator[Record]:
        index = -1
        try:
            for record in read(path, source, display):
                index = max(index, record.index)
                yield record
        except uris.ObjectUnreadable:
            raise  # the store failed, not the file: the task fails and is retried, nothing is dropped
        except Exception as err:  # noqa: BLE001 - the point: no exception of one file ends the run
            log.warning("%s: the %s reader failed after record %d", display, source.format, index, exc_info=True)
            yield Record(index + 1, "", drop="read_error",
                         message=f"{display}: the {source.format} reader failed after record {index}: "
                                 f"{type(err).__name__}: {str(err)[:500]}; the rest of the file is not read")

    read_contained.__wrapped__ = read  # type: ignore[attr-defined]
    return read_contained
