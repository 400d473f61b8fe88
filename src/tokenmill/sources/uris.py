"""A source path or a URI: one place that globs, stats and opens either (object-store URIs through `pyarrow.fs`).

A local path, or a `file://` URI (which is one), stays a `Path` and keeps every local rule (`glob.glob`, the symlink
checks). An `s3://` or `gs://` pattern is listed with a `FileSelector` under its fixed prefix and matched component
by component as `glob.glob(recursive=True)` matches the same names (`*` stays in one folder, `**` spans folders, a
name starting with `.` needs a pattern part that does), so a glob expands under `s3://` as it does on disk. Object
stores have no symlinks, so nothing else is checked.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import os
import posixpath
import re
from pathlib import PurePath
from typing import TYPE_CHECKING, BinaryIO, Mapping

from tokenmill.errors import TokenmillError

if TYPE_CHECKING:
    import pyarrow.fs as pafs

SCHEMES = ("s3://", "gs://")
"""Object stores a source may be on (besides local paths and `file://`): those pyarrow.fs reaches by bucket."""
READ_BUFFER = 8 * 2**20
"""Bytes asked of the store per read of a source object: each read is one ranged GET, so the readers' small reads
(1 KiB at a time into a decompressor) are served from memory and a GET's latency is paid once per 8 MiB."""

_MAGIC = re.compile(r"[*?\[]")


class SourceListingError(OSError):
    """A source URI could not be listed or stat'ed: its store is unreachable, or refused the request."""


class ObjectUnreadable(TokenmillError):
    """Reading a source object from its store failed midway (network, service, the object gone).

    Deliberately not an OSError: readers take an OSError while reading for damage in the file and drop the rest of
    it as `read_error`. A store's failure is not the data's: the task fails (and Ray retries it), so a network blip
    never changes what a run outputs."""


def is_glob(path: str | os.PathLike) -> bool:
    """A path or URI with a wildcard (`*`, `?`, `[`) that glob expands."""
    return _MAGIC.search(str(path)) is not None


def is_uri(path: str | os.PathLike) -> bool:
    """A path with a scheme (`s3://`, `gs://`, `file://`)."""
    return "://" in str(path)


def is_remote(path: str | os.PathLike) -> bool:
    """An object-store URI (anything with a scheme but `file://`): read through `pyarrow.fs`, never `open()`."""
    return is_uri(path) and not str(path).startswith("file://")


def local_part(path: str) -> str:
    """A local path as given, or the path of a `file://` URI."""
    return path.removeprefix("file://")


def _split(uri: str) -> tuple[str, str]:
    """(`s3://`, `bucket/key`). A `?` is glob's one-character wildcard, as in a local pattern, not the start of a URI
    query: the store's options come from the environment (AWS_ENDPOINT_URL, AWS_REGION, credentials)."""
    scheme, _, rest = uri.partition("://")
    return f"{scheme}://", rest


_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)(?:[^/@\s'\"]*|[^/@\s'\":]*:[^@\s'\"]*)@")
"""`scheme://user:password@` in a URI, or in any text holding one (a message, a library's error). The password may
hold a `/` (AWS secret keys do); an object key with an `@` (`s3://bkt/a@2x.png`) is no user."""


def display_uri(text: str | os.PathLike) -> str:
    """A URI, or any text holding URIs, as it may be shown or logged: the credentials a URI carries
    (`s3://KEY:SECRET@bucket/...`) replaced by `***`. Every message that names a URI formats it through this."""
    return _USERINFO.sub(r"\1***@", str(text))


class UriError(TokenmillError, ValueError):
    """A URI tokenmill will not use: credentials in it, or no bucket named."""


def uri_problem(uri: str) -> str | None:
    """Why an object-store URI cannot be used (shown with its credentials redacted), or None.

    Credentials in a URI are refused, not used: a URI is written into manifests, logs and messages; the store's
    credentials come from the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile, a role). A URI
    must name its bucket: `s3:///x` names none (pyarrow would take `x` for it)."""
    if not is_remote(uri):
        return None
    scheme, rest = _split(uri)
    authority = rest.split("/", 1)[0]
    if "@" in authority or (":" in authority and "@" in rest):  # a secret key may hold a `/`
        return (f"{display_uri(uri)}: credentials in a URI are refused (a URI is written into manifests, logs and "
                f"messages); give the store's credentials in the environment (AWS_ACCESS_KEY_ID and "
                f"AWS_SECRET_ACCESS_KEY, AWS_PROFILE) and write the URI as {scheme}BUCKET/KEY")
    if scheme in SCHEMES and not authority:
        return f"{display_uri(uri)}: names no bucket; write it as {scheme}BUCKET/KEY"
    return None


def check_uri(uri: str) -> str:
    """`uri`, unless `uri_problem` finds something: then UriError with that message."""
    problem = uri_problem(uri)
    if problem:
        raise UriError(problem)
    return uri


def _known(uri: str) -> str:
    """`uri`, if its scheme is one tokenmill reads sources from and it names a bucket without credentials; else
    ValueError naming it (redacted)."""
    if _split(uri)[0] not in SCHEMES:
        raise ValueError(f"{display_uri(uri)}: tokenmill reads sources from local paths, file://, "
                         f"{' and '.join(SCHEMES)}, not {_split(uri)[0]}")
    return check_uri(uri)


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem of an object-store URI, and the object's path in it (`bucket/key`).

    The filesystem is made from the bucket alone, so a key need not parse as a URI (spaces, `[`, `%`). Raises
    ValueError for a scheme tokenmill does not read sources from."""
    scheme, rest = _split(_known(uri))
    bucket = rest.split("/", 1)[0]
    fs, _ = from_uri(f"{scheme}{bucket}")
    return fs, rest.rstrip("/")


EMULATOR_HOST = "STORAGE_EMULATOR_HOST"
"""The variable Google's clients read for a GCS emulator (`http://127.0.0.1:9023`): when set, `gs://` goes there,
anonymously. pyarrow's `from_uri` does not read it (it would look for Google credentials and a metadata server)."""
EMULATOR_RETRY_S = 10.0
"""How long pyarrow's GCS client retries a failing request to an emulator (its default is 15 minutes)."""


def gcs_filesystem(endpoint: str) -> pafs.FileSystem:
    """pyarrow's GcsFileSystem on a GCS emulator at `endpoint` (`http://host:port`), anonymous."""
    import datetime

    import pyarrow.fs as pafs

    scheme, _, host = endpoint.rpartition("://")
    return pafs.GcsFileSystem(anonymous=True, scheme=scheme or "http", endpoint_override=host.rstrip("/"),
                              project_id="tokenmill", retry_time_limit=datetime.timedelta(seconds=EMULATOR_RETRY_S))


def from_uri(uri: str) -> tuple[pafs.FileSystem, str]:
    """`pyarrow.fs.FileSystem.from_uri`, except that a `gs://` URI goes to the emulator `STORAGE_EMULATOR_HOST`
    names when it is set, and an `s3://` one writes a small object with one PUT (`allow_delayed_open`: pyarrow
    otherwise opens a multipart upload for every object, three requests where one does; a large object still goes
    up in parts). Every filesystem of a source, an output or a run folder is made here."""
    import pyarrow.fs as pafs

    endpoint = os.environ.get(EMULATOR_HOST)
    if uri.startswith("gs://") and endpoint:
        return gcs_filesystem(endpoint), uri.removeprefix("gs://").rstrip("/")
    if uri.startswith("s3://") and "?" not in uri:
        rest = uri.removeprefix("s3://")
        fs, _ = pafs.FileSystem.from_uri(f"s3://{rest.split('/', 1)[0]}?allow_delayed_open=true")
        return fs, rest.rstrip("/")
    return pafs.FileSystem.from_uri(uri)


def _unreachable(uri: str, err: OSError) -> SourceListingError:
    return SourceListingError(f"{display_uri(uri)}: the object store did not answer "
                              f"({display_uri(' '.join(str(err).split()))[:300]}); "
                              f"check the endpoint (AWS_ENDPOINT_URL), the credentials and the network")


def glob_remote(pattern: str) -> list[str]:
    """The object URIs a URI pattern matches, sorted; a pattern without wildcards names one object (or none).

    Raises SourceListingError when the store cannot be reached, ValueError for a wildcard in the bucket name or an
    unknown scheme."""
    return list(list_objects(pattern))


def _stamp(info: pafs.FileInfo) -> tuple[int, int]:
    """(size, mtime in ns) of an object, the mtime in whole seconds: S3's Last-Modified has no finer grain in a
    HEAD, and a listing must stamp an object as `stat` does later."""
    return info.size, (info.mtime_ns or 0) // 10**9 * 10**9


def list_objects(pattern: str) -> dict[str, tuple[int, int]]:
    """`glob_remote`'s objects, sorted, each with its (size, mtime in ns) from the listing itself: one request per
    thousand objects rather than one per object."""
    import pyarrow.fs as pafs

    scheme, rest = _split(_known(pattern))
    parts = [p for p in rest.split("/") if p]
    if _MAGIC.search(parts[0]):
        raise ValueError(f"{display_uri(pattern)}: a wildcard in the bucket name {parts[0]!r}; name the bucket, glob "
                         f"below it")
    fs, _ = filesystem(f"{scheme}{parts[0]}")
    fixed = next((i for i, p in enumerate(parts) if _MAGIC.search(p)), None)
    try:
        if fixed is None:  # one object named outright
            info = fs.get_file_info("/".join(parts))
            return {f"{scheme}{info.path}": _stamp(info)} if info.type == pafs.FileType.File else {}
        base = "/".join(parts[:fixed])
        wanted = parts[fixed:]
        recursive = len(wanted) > 1 or "**" in wanted
        infos = fs.get_file_info(pafs.FileSelector(base, recursive=recursive, allow_not_found=True))
    except OSError as err:
        raise _unreachable(pattern, err) from None
    prefix = base + "/"
    found = {f"{scheme}{i.path}": _stamp(i) for i in infos
             if i.type == pafs.FileType.File and i.path.startswith(prefix)
             and glob_match(wanted, i.path[len(prefix):].split("/"))}
    return {uri: found[uri] for uri in sorted(found, key=sort_key)}


def glob_match(pattern: list[str], path: list[str]) -> bool:
    """Whether `glob.glob(..., recursive=True)` would match a file's path components with the pattern's: `*`, `?`,
    `[...]` within one component, `**` for any number of them; a name starting with `.` only where the pattern's
    component does, and never among those a `**` spans (glob does not descend into dot folders)."""
    if not pattern:
        return not path
    head = pattern[0]
    if head == "**":
        for i in range(len(path) + 1):
            if glob_match(pattern[1:], path[i:]):
                return True
            if i < len(path) and path[i].startswith("."):
                return False
        return False
    if not path or (path[0].startswith(".") and not head.startswith(".")):
        return False
    return fnmatch.fnmatchcase(path[0], head) and glob_match(pattern[1:], path[1:])


def glob_reaches(pattern: list[str], folder: list[str], entries: Mapping[str, bool] | None = None) -> bool:
    """Whether the pattern's components can match, as `glob_match` does, a file below the folder's components
    whatever its name and depth. `entries`: the only names the folder itself may hold, each True for a folder
    (below which any name may come) or False for a file; None: any name. A run folder holds only tokenmill's names,
    and below them only what the run writes."""
    if not folder:
        if entries is None:
            return bool(pattern)  # any component left matches some name below (`**` too: it lists files)
        return any(glob_reaches(pattern, [name]) if is_folder else glob_match(pattern, [name])
                   for name, is_folder in entries.items())
    if not pattern:
        return False
    head = pattern[0]
    if head == "**":
        for i in range(len(folder)):
            if glob_reaches(pattern[1:], folder[i:], entries):
                return True
            if folder[i].startswith("."):
                return False  # glob's `**` never enters a dot folder
        return glob_reaches(pattern, [], entries)  # `**` spans the whole folder and goes on below it
    if folder[0].startswith(".") and not head.startswith("."):
        return False
    return fnmatch.fnmatchcase(folder[0], head) and glob_reaches(pattern[1:], folder[1:], entries)


def components(uri: str) -> tuple[str, list[str]]:
    """(`s3://`, [bucket, key components...]) of an object URI, empty components dropped as a listing drops them."""
    scheme, rest = _split(uri)
    return scheme, [p for p in rest.split("/") if p]


def sort_key(file: str | os.PathLike) -> tuple[str, ...]:
    """Files in the order local listings have (a `Path` sorts by its components), objects in the same way."""
    if isinstance(file, str) and is_uri(file):
        scheme, rest = _split(file)
        return (scheme, *rest.split("/"))
    return PurePath(file).parts


def where_listed(pattern: str) -> str:
    """The URI a pattern's listing starts from (its components before the first wildcard), for messages."""
    scheme, rest = _split(pattern)
    parts = rest.split("/")
    fixed = next((i for i, p in enumerate(parts) if _MAGIC.search(p)), len(parts))
    return f"{scheme}{'/'.join(parts[:fixed])}"


def common_folder(uris: list[str]) -> str:
    """The deepest folder URI that holds every object in `uris` (all of one scheme)."""
    schemes = sorted({_split(u)[0] for u in uris})
    if len(schemes) != 1:
        raise ValueError(f"objects of different stores have no common folder ({', '.join(schemes)}); set the "
                         f"source's root")
    scheme, _ = _split(uris[0])
    return f"{scheme}{posixpath.commonpath([posixpath.dirname(_split(u)[1]) for u in uris])}"


def relative_to(uri: str, root: str) -> str:
    """An object's key below a folder URI (`s3://b/x/y/z.jsonl` under `s3://b/x` is `y/z.jsonl`; under `s3://`,
    the root of objects in several buckets, `b/x/y/z.jsonl`)."""
    key, base = _split(uri)[1], _split(root)[1].rstrip("/")
    return posixpath.relpath(key, base) if base else key


def stat(uri: str) -> tuple[int, int]:
    """(size, modification time in ns) of an object.

    pyarrow's FileInfo gives an object's size and mtime (S3's Last-Modified, whole seconds), not its ETag: the
    `mtime` stamp of an object is those two, as for a local file (`stamp: content` hashes its bytes). Raises
    FileNotFoundError when the object is gone, SourceListingError when the store cannot be reached."""
    import pyarrow.fs as pafs

    fs, path = filesystem(uri)
    try:
        info = fs.get_file_info(path)
    except OSError as err:
        raise _unreachable(uri, err) from None
    if info.type != pafs.FileType.File:
        raise FileNotFoundError(f"{display_uri(uri)}: no such object")
    return _stamp(info)


class _ObjectRaw(io.RawIOBase):
    """A pyarrow random-access file as Python raw IO, its store's failures raised as ObjectUnreadable."""

    def __init__(self, uri: str, file: "pafs.NativeFile"):  # type: ignore[name-defined]
        self.uri = uri
        self.file = file

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        try:
            return self.file.readinto(buffer)
        except OSError as err:
            raise ObjectUnreadable(f"{display_uri(self.uri)}: reading from the store failed near byte "
                                   f"{self.file.tell()}: {display_uri(' '.join(str(err).split()))[:300]}") from None

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self.file.seek(offset, whence)

    def tell(self) -> int:
        return self.file.tell()

    def close(self) -> None:
        if not self.closed:
            self.file.close()
        super().close()


def open_object(uri: str) -> BinaryIO:
    """An object as a buffered, seekable byte stream: reads of READ_BUFFER bytes, each one ranged GET; a failure of
    the store raises ObjectUnreadable, a missing object FileNotFoundError (as `open` would)."""
    fs, path = filesystem(uri)
    try:
        file = fs.open_input_file(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{display_uri(uri)}: no such object") from None
    except OSError as err:
        raise ObjectUnreadable(f"{display_uri(uri)}: opening it failed: "
                               f"{display_uri(' '.join(str(err).split()))[:300]}") from None
    return io.BufferedReader(_ObjectRaw(uri, file), READ_BUFFER)  # type: ignore[return-value]


def object_sha256(uri: str) -> str:
    """The sha256 of an object's bytes, streamed (the `content` stamp of a source object)."""
    h = hashlib.sha256()
    with open_object(uri) as f:
        while chunk := f.read(READ_BUFFER):
            h.update(chunk)
    return h.hexdigest()


def storage_env() -> dict[str, str]:
    """The driver's `AWS_*` environment variables and its GCS emulator (`STORAGE_EMULATOR_HOST`): what a Ray worker
    started before they were set needs to reach the same store (endpoint, region, credentials). Only these travel
    with tasks, nothing else of the environment."""
    return {k: v for k, v in os.environ.items() if k.startswith("AWS_") or k == EMULATOR_HOST}
