"""`tokens.json`, the dataset index of the tokenize stage's token files: its one reader, writer and validator.

The tokenize stage writes it beside its token files (``<run>/tokenize/tokens.json``); the loader, the trainer's
config, ``tokenmill tokens stats/verify`` and ``tokenmill.inspect.tokens`` read it through `read`. Layout
(version 1; a file without ``version`` is read as version 1)::

    {"format": "megatron-mmidx", "version": 1, "dtype": "uint16",
     "tokenizer": {"file": "tokenizer.json", "sha256": ..., "vocab_size": ..., "eos_id": ..., "eos_token": ...},
     "splits": {"train": {"documents": ..., "tokens": ..., "files": [
         {"prefix": "train/<source>.00000", "documents": ..., "tokens": ...,
          "by_source": {"<source>": {"documents": ..., "tokens": ..., "subsets": {...}}},
          "engine": "tiktoken", "sha256": {".bin": ..., ".idx": ..., ".docs.parquet": ...},
          "head": {"bytes": 131072, "sha256": ...}}, ...]}, "valid": ...}}

Each file entry's ``prefix`` names its ``.bin``/``.idx``/``.docs.parquet`` relative to the folder of the index
(`bundle`, which names these files and makes each entry); files are sorted by prefix, the order of the loader's
streams. ``head`` (optional; written for a ``.bin`` longer than `bundle.HEAD_BYTES`) is the sha256 of the ``.bin``'s
first ``bytes``: a streaming loader fetches that range alone, verified, for the one sample that runs from the previous
file into this one, instead of the whole file. Only numpy is imported: the loader needs no pyarrow.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from tokenmill.errors import TokenmillError
from tokenmill.tokenize.bundle import HASHED

FILE = "tokens.json"
FORMAT = "megatron-mmidx"
VERSION = 1
"""The layout this module writes; `read` refuses a newer one (written by a newer tokenmill)."""
TOKENIZER_FILE = "tokenizer.json"
SHA256 = re.compile(r"[0-9a-f]{64}")
"""A recorded sha256: 64 lowercase hex characters, as hashlib's ``hexdigest`` writes it. The streaming loader's cache
names its files by them, so nothing else may pass."""
_PART = re.compile(r"[A-Za-z0-9_.+=@,-]+")
"""One part of a recorded name: source and shard names (`pipeline.config`) and split names are made of these."""


class DataError(TokenmillError, ValueError):
    """The token data on disk is missing, malformed, or disagrees with its `tokens.json`."""


def locate(path: str | Path) -> Path:
    """The `tokens.json` that ``path`` means: the file itself, the folder holding it, or a run folder (its
    ``tokenize/tokens.json``). Nothing is checked: a path that names none comes back as ``path/tokens.json``."""
    p = Path(path)
    if p.is_dir():
        return p / "tokenize" / FILE if (p / "tokenize" / FILE).is_file() else p / FILE
    return p


# ------------------------------------------------------------------------------------------------------------------
# Write
# ------------------------------------------------------------------------------------------------------------------


def build(tokenizer: Mapping[str, Any], dtype: str, splits: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict:
    """The index of the given token files (per split, file entries as the stage made them), sorted by prefix, with
    the totals per split."""
    out = {"format": FORMAT, "version": VERSION, "tokenizer": dict(tokenizer), "dtype": str(dtype), "splits": {}}
    for split, entries in splits.items():
        files = sorted((dict(e) for e in entries), key=lambda e: e["prefix"])
        out["splits"][split] = {"documents": sum(e["documents"] for e in files),
                                "tokens": sum(e["tokens"] for e in files), "files": files}
    return validate(out, FILE)


def dumps(index: Mapping[str, Any]) -> bytes:
    """The bytes of the file: canonical JSON (sorted keys, no spaces, as `pipeline.documents.canonical_json`) and a
    newline, so the same run writes the same bytes."""
    text = json.dumps(index, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return (text + "\n").encode("utf-8")


# ------------------------------------------------------------------------------------------------------------------
# Validate and read
# ------------------------------------------------------------------------------------------------------------------


def _fail(where: str, key: str, problem: str) -> DataError:
    return DataError(f"{where}: {key}: {problem} (the tokenize stage writes it; rerun it if the file was edited)")


def _mapping(value: Any, where: str, key: str) -> dict:
    if not isinstance(value, dict):
        raise _fail(where, key, f"expected an object, found {type(value).__name__}")
    return value


def _count(value: Any, where: str, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _fail(where, key, f"expected a count (an integer >= 0), found {value!r:.80}")
    return value


def _string(value: Any, where: str, key: str) -> str:
    if not isinstance(value, str):
        raise _fail(where, key, f"expected a string, found {value!r:.80}")
    return value


def _counts(value: Any, where: str, key: str) -> dict:
    """{documents, tokens, subsets?}: a source's (or subset's) share of a file."""
    cell = _mapping(value, where, key)
    for name in ("documents", "tokens"):
        _count(cell.get(name), where, f"{key}.{name}")
    for subset, sub in _mapping(cell.get("subsets", {}), where, f"{key}.subsets").items():
        _counts(sub, where, f"{key}.subsets.{subset}")
    return cell


def _sha256(value: Any, where: str, key: str) -> str:
    if not isinstance(value, str) or not SHA256.fullmatch(value):
        raise _fail(where, key, f"expected a sha256 (64 lowercase hex characters), found {value!r:.80}")
    return value


def _name(value: Any, where: str, key: str) -> str:
    """A recorded path relative to the index's folder: parts of letters, digits and ``_.+=@,-`` joined by ``/``,
    none ``.`` or ``..``. No absolute path, no backslash, no URI escape (``%``), query (``?``) or fragment (``#``):
    joined to a folder or a URI, it names a file inside that folder and nothing else."""
    text = _string(value, where, key)
    parts = text.split("/")
    if not all(_PART.fullmatch(p) and p not in (".", "..") for p in parts):
        # An edited index must not make a reader open (or a cache write) files outside the index's folder.
        raise _fail(where, key, f"{text!r:.200} is not a path inside the index's folder (a relative path: parts of "
                                "letters, digits and _.+=@,- joined by /, none of them . or ..)")
    return text


def _file(value: Any, where: str, key: str, itemsize: int) -> dict:
    entry = dict(_mapping(value, where, key))
    _name(entry.get("prefix"), where, f"{key}.prefix")
    for name in ("documents", "tokens"):
        _count(entry.get(name), where, f"{key}.{name}")
    entry["by_source"] = {_string(s, where, f"{key}.by_source"): _counts(c, where, f"{key}.by_source.{s}")
                          for s, c in _mapping(entry.get("by_source", {}), where, f"{key}.by_source").items()}
    hashes = _mapping(entry.get("sha256", {}), where, f"{key}.sha256")
    for ext in hashes:
        if ext not in HASHED:
            raise _fail(where, f"{key}.sha256", f"{ext!r:.80} is not one of the files of an entry {HASHED}")
    entry["sha256"] = {ext: _sha256(h, where, f"{key}.sha256.{ext}") for ext, h in hashes.items()}
    if "head" in entry:
        head = entry["head"] = dict(_mapping(entry["head"], where, f"{key}.head"))
        size = _count(head.get("bytes"), where, f"{key}.head.bytes")
        if not size or size % itemsize:
            raise _fail(where, f"{key}.head.bytes", f"expected a positive multiple of the dtype's {itemsize} bytes, "
                                                    f"found {size}")
        _sha256(head.get("sha256"), where, f"{key}.head.sha256")
    return entry


def validate(data: Any, where: str | Path = FILE) -> dict:
    """``data`` (a parsed `tokens.json`) checked key by key; a copy with the optional keys filled (version 1,
    ``tokenizer.file``, each file's ``by_source`` and ``sha256``). Raises DataError naming ``where`` and the key.
    Every recorded sha256 is 64 lowercase hex characters and every recorded name (``tokenizer.file``, each file's
    ``prefix``) a relative path that stays inside the index's folder (`_name`): an index from someone else
    cannot make a reader, or the streaming loader's cache, touch a file outside it."""
    where = str(where)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise DataError(f"{where}: not a tokenmill tokens.json (format {FORMAT} expected)")
    out = dict(data)
    version = out.setdefault("version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise _fail(where, "version", f"expected an integer >= 1, found {version!r:.80}")
    if version > VERSION:
        raise DataError(f"{where}: version {version} is newer than this tokenmill reads ({VERSION}); "
                        "upgrade tokenmill")
    tok = out["tokenizer"] = dict(_mapping(out.get("tokenizer"), where, "tokenizer"))
    tok["file"] = _name(tok.get("file", TOKENIZER_FILE), where, "tokenizer.file")
    if "sha256" in tok:
        _sha256(tok["sha256"], where, "tokenizer.sha256")
    for name in ("vocab_size", "eos_id"):
        _count(tok.get(name), where, f"tokenizer.{name}")
    try:
        itemsize = np.dtype(_string(out.get("dtype"), where, "dtype")).itemsize
    except TypeError:
        raise _fail(where, "dtype", f"{out['dtype']!r:.80} is not a numpy dtype") from None
    splits = out["splits"] = dict(_mapping(out.get("splits"), where, "splits"))
    for split, value in splits.items():
        entry = splits[split] = dict(_mapping(value, where, f"splits.{split}"))
        for name in ("documents", "tokens"):
            _count(entry.get(name), where, f"splits.{split}.{name}")
        files = entry.get("files")
        if not isinstance(files, list):
            raise _fail(where, f"splits.{split}.files", f"expected a list, found {type(files).__name__}")
        entry["files"] = [_file(f, where, f"splits.{split}.files[{i}]", itemsize) for i, f in enumerate(files)]
    return out


@dataclass(frozen=True)
class TokensIndex:
    """A validated `tokens.json` and where it lies (file prefixes are relative to its folder)."""

    path: Path | str
    """A local path, or the URI it was read from (``loader.remote.read_index``): then the paths below are URIs too,
    joined as text."""
    data: dict
    """The index as `validate` returns it (optional keys filled)."""

    @property
    def folder(self) -> Path | str:
        return self.path.rsplit("/", 1)[0] if isinstance(self.path, str) else self.path.parent

    def _join(self, name: str) -> Path | str:
        folder = self.folder
        return f"{folder}/{name}" if isinstance(folder, str) else folder / name

    @property
    def version(self) -> int:
        return self.data["version"]

    @property
    def tokenizer(self) -> dict:
        """file, sha256, vocab_size, eos_id and eos_token, as the stage recorded them."""
        return self.data["tokenizer"]

    @property
    def tokenizer_path(self) -> Path | str:
        return self._join(self.tokenizer["file"])

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.data["dtype"])

    @property
    def splits(self) -> dict[str, dict]:
        """{split: {documents, tokens, files}}."""
        return self.data["splits"]

    def files(self, split: str) -> list[dict]:
        """The file entries of ``split`` in the index's order (by prefix); a DataError names the splits there are."""
        if split not in self.splits:
            raise DataError(f"{self.path}: no split {split!r} (has {sorted(self.splits)})")
        return self.splits[split]["files"]

    def prefix_path(self, entry: Mapping[str, Any]) -> Path | str:
        """Where a file entry's ``.bin``/``.idx``/``.docs.parquet`` lie, without the extension."""
        return self._join(entry["prefix"])


def _contained(index: TokensIndex) -> None:
    """Every file a local index names resolves inside its folder: `validate` keeps the names relative, and a
    symlink in the folder (to a folder or a file) may not lead out of it either."""
    folder = os.path.realpath(index.folder)
    parents: dict[str, str] = {}

    def check(path: Path, key: str) -> None:
        parent = parents.get(str(path.parent))
        if parent is None:  # each folder resolved once: thousands of files share a few
            parent = parents[str(path.parent)] = os.path.realpath(path.parent)
        real = os.path.realpath(path) if path.is_symlink() else os.path.join(parent, path.name)
        if os.path.commonpath([folder, real]) != folder:
            raise _fail(str(index.path), key, f"{path} resolves to {real}, outside the index's folder {folder}: a "
                                              "symlink leads out of it; keep the token files inside the folder (link "
                                              "the whole folder instead)")

    check(Path(index.tokenizer_path), "tokenizer.file")
    for split, entry in index.splits.items():
        for i, f in enumerate(entry["files"]):
            for ext in HASHED:
                check(Path(f"{index.prefix_path(f)}{ext}"), f"splits.{split}.files[{i}].prefix")


def read(path: str | Path) -> TokensIndex:
    """The `tokens.json` at ``path`` (or in that folder, or in that run folder's ``tokenize/``), validated, and every
    file it names inside its folder."""
    p = locate(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{p}: no such tokens.json (the tokenize stage writes <run>/tokenize/tokens.json)") from None
    except OSError as exc:
        raise DataError(f"{p}: not a readable tokens.json: {exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise DataError(f"{p}: not a readable tokens.json: {exc}") from None
    index = TokensIndex(p, validate(data, p))
    _contained(index)
    return index
