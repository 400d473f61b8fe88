"""Paths through `pyarrow.fs`, so a run folder may live on local disk or an object store."""

from __future__ import annotations

import json
import os
import stat
from typing import Any, Iterator

import pyarrow.fs as pafs

from tokenmill.sources import uris


def filesystem_for(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and in-filesystem path of a local path or URI (s3://, gs://, file://).

    Raises `uris.UriError` for a URI with credentials in it or without a bucket, naming it redacted: pyarrow would
    take the credentials, and its errors quote the URI whole."""
    if "://" in uri:
        return uris.from_uri(uris.check_uri(uri))
    return pafs.LocalFileSystem(), uri


def join(*parts: str) -> str:
    return "/".join(p.rstrip("/") for p in parts if p)


def exists(fs: pafs.FileSystem, path: str) -> bool:
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def file_size(fs: pafs.FileSystem, path: str) -> int | None:
    info = fs.get_file_info(path)
    return info.size if info.type == pafs.FileType.File else None


OBJECT_STORES = ("s3", "gcs")
"""pyarrow's `type_name` of the object stores: no folders, no rename, and one PUT of an object is atomic."""


def is_object_store(fs: pafs.FileSystem) -> bool:
    """Whether `fs` is an object store (S3, GCS; a sub-tree of one): what `write_bytes` and `commit.TaskWriter`
    write straight to final names. Anything else (local disk, a sub-tree of it) keeps folders and renames."""
    if isinstance(fs, pafs.SubTreeFileSystem):
        return is_object_store(fs.base_fs)
    return fs.type_name in OBJECT_STORES


def write_bytes(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    """Write a file whole. On an object store one PUT (a multipart upload for a large one), which readers see whole
    or not at all, and no folder markers: an object store's folders are key prefixes, listed without them (pyarrow's
    `create_dir` would write an empty `folder/` object per level, after a HEAD per level)."""
    if is_object_store(fs):
        with fs.open_output_stream(path) as out:
            out.write(data)
        return
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
    """Write JSON so that readers see all of it or none: on local disk under a unique temporary name, then an atomic
    rename into place; on an object store one PUT under its name (a single-object PUT is atomic, and S3 and GCS read
    it back and list it at once after, strongly consistent), with no temporary object to copy and delete."""
    data = (json.dumps(value, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()
    if is_object_store(fs):
        write_bytes(fs, path, data)
        return
    tmp = f"{path}.{tmp_suffix}.tmp"
    write_bytes(fs, tmp, data)
    fs.move(tmp, path)


def remove_tree(fs: pafs.FileSystem, path: str) -> None:
    if exists(fs, path):
        fs.delete_dir(path)


def list_tree(fs: pafs.FileSystem, path: str, recursive: bool = False) -> list[pafs.FileInfo]:
    """What a folder holds (everything below it when `recursive`), sorted by path; never anything through a symlink.

    Every listing of a run folder goes through here: pyarrow's `FileSelector` follows symlinks on local disk, so a
    link inside a stage folder would list the files of the folder it leads to, and the runner would delete them as
    leftovers. Here a link below `path` is listed as itself (`FileType.Unknown`) and never entered; `path` itself
    is the folder the caller named (an `output` may be a link to the run folder). A missing folder lists as
    nothing. An object store has no links: pyarrow lists it.
    """
    if not isinstance(fs, pafs.LocalFileSystem):
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=recursive, allow_not_found=True))
        return sorted(infos, key=lambda i: i.path)
    out: list[pafs.FileInfo] = []
    for entry in local_entries(path, recursive):
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue  # removed since the folder was read
        if stat.S_ISDIR(st.st_mode):
            out.append(pafs.FileInfo(entry.path, pafs.FileType.Directory, mtime_ns=st.st_mtime_ns))
        elif stat.S_ISREG(st.st_mode):
            out.append(pafs.FileInfo(entry.path, pafs.FileType.File, mtime_ns=st.st_mtime_ns, size=st.st_size))
        else:  # a symlink (or a socket, a fifo): never entered, never read
            out.append(pafs.FileInfo(entry.path, pafs.FileType.Unknown))
    return sorted(out, key=lambda i: i.path)


def local_entries(path: str, recursive: bool = False) -> Iterator[os.DirEntry]:
    """The entries of a local folder (everything below it when `recursive`), unsorted, never entering a symlink;
    a missing folder has none. The walk under `list_tree`, for a caller that needs only each entry's kind (which
    the folder read gives: no `stat` per entry)."""
    stack = [path.rstrip("/") or "/"]
    while stack:
        try:
            with os.scandir(stack.pop()) as found:
                entries = list(found)
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            yield entry
            if recursive and entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)


def file_sizes(fs: pafs.FileSystem, path: str) -> dict[str, int]:
    """{path: size} of every plain file below a folder, from one recursive listing (on an object store a request per
    thousand objects, not a HEAD per file); never through a link."""
    return {i.path: i.size for i in list_tree(fs, path, recursive=True) if i.type == pafs.FileType.File}


def list_files(fs: pafs.FileSystem, path: str, suffix: str = "") -> list[str]:
    """The plain files in a folder (not below it) whose names end with `suffix`, sorted; never through a link."""
    return [i.path for i in list_tree(fs, path) if i.type == pafs.FileType.File and i.path.endswith(suffix)]


def move_tree(fs: pafs.FileSystem, source: str, dest: str) -> None:
    """Move a folder and everything under it to `dest` (which must not exist).

    On local disk one atomic rename. An object store has no folders to rename (pyarrow's `move` takes one object
    only): every object is copied, then the source's objects are deleted, so a kill midway leaves the source whole
    and a partial copy at `dest`, never a lost file.
    """
    if isinstance(fs, pafs.LocalFileSystem):
        fs.move(source, dest)
        return
    files = [i.path for i in list_tree(fs, source, recursive=True) if i.type == pafs.FileType.File]
    for path in files:
        target = join(dest, path[len(source.rstrip("/")) + 1:])
        fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
        fs.copy_file(path, target)
    fs.delete_dir(source)
