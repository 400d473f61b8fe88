"""Paths through `pyarrow.fs`, so a run folder may live on local disk or an object store."""

from __future__ import annotations

import json
from typing import Any

import pyarrow.fs as pafs

from tokenmill.pipeline import uris


def filesystem_for(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and in-filesystem path of a local path or URI (s3://, gs://, file://).

    Raises `uris.UriError` for a URI with credentials in it or without a bucket, naming it redacted: pyarrow would
    take the credentials, and its errors quote the URI whole."""
    if "://" in uri:
        return pafs.FileSystem.from_uri(uris.check_uri(uri))
    return pafs.LocalFileSystem(), uri


def join(*parts: str) -> str:
    return "/".join(p.rstrip("/") for p in parts if p)


def exists(fs: pafs.FileSystem, path: str) -> bool:
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def file_size(fs: pafs.FileSystem, path: str) -> int | None:
    info = fs.get_file_info(path)
    return info.size if info.type == pafs.FileType.File else None


def write_bytes(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    parent = path.rsplit("/", 1)[0]
    fs.create_dir(parent, recursive=True)
    with fs.open_output_stream(path) as out:
        out.write(data)


def read_bytes(fs: pafs.FileSystem, path: str) -> bytes:
    with fs.open_input_stream(path) as f:
        return f.read()


def read_json(fs: pafs.FileSystem, path: str) -> Any | None:
    """A JSON file's value, or None when it does not exist or is cut short (a write killed midway)."""
    try:
        return json.loads(read_bytes(fs, path))
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


def write_json_atomic(fs: pafs.FileSystem, path: str, value: Any, tmp_suffix: str) -> None:
    """Write JSON under a unique temporary name, then move it into place.

    On local disk the move is an atomic rename; on an object store the single PUT of a small
    object is itself atomic, so readers never see half a record either way.
    """
    data = (json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()
    tmp = f"{path}.{tmp_suffix}.tmp"
    write_bytes(fs, tmp, data)
    fs.move(tmp, path)


def remove_tree(fs: pafs.FileSystem, path: str) -> None:
    if exists(fs, path):
        fs.delete_dir(path)


def list_files(fs: pafs.FileSystem, path: str, suffix: str = "") -> list[str]:
    if not exists(fs, path):
        return []
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=False))
    return sorted(i.path for i in infos if i.type == pafs.FileType.File and i.path.endswith(suffix))


def move_tree(fs: pafs.FileSystem, source: str, dest: str) -> None:
    """Move a folder and everything under it to `dest` (which must not exist).

    On local disk one atomic rename. An object store has no folders to rename (pyarrow's `move` takes one object
    only): every object is copied, then the source's objects are deleted, so a kill midway leaves the source whole
    and a partial copy at `dest`, never a lost file.
    """
    if isinstance(fs, pafs.LocalFileSystem):
        fs.move(source, dest)
        return
    infos = fs.get_file_info(pafs.FileSelector(source, recursive=True))
    files = sorted(i.path for i in infos if i.type == pafs.FileType.File)
    for path in files:
        target = join(dest, path[len(source.rstrip("/")) + 1:])
        fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
        fs.copy_file(path, target)
    fs.delete_dir(source)
