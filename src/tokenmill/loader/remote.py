"""Objects on a store (``s3://``, ``gs://``, ``file://``) read through `pyarrow.fs`, with retries and a deadline.

Imported only when a loader is given a URI: the local loader needs numpy and torch alone. The store's own retries
are turned off (one attempt per request) so that this module owns them all: exponential backoff from
``backoff`` seconds, doubling up to 8 s, until ``timeout`` seconds have passed since the first attempt; then a
``DataError`` naming the URI and the last error. A denied request is not retried, nor a missing object, unless
it was listed when the loader was built (a store coming back may answer "no such key" for a while). A download
that fails midway resumes at the byte where it stopped (ranged reads), so an outage costs only the bytes lost.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import BinaryIO, Callable, TypeVar

import pyarrow.fs as pafs

from tokenmill.sources.uris import check_uri
from tokenmill.tokenize.tokens_json import FILE, SHA256, DataError, TokensIndex, validate

log = logging.getLogger(__name__)

READ_BYTES = 8 << 20  # one ranged GET per 8 MiB: large enough to stream at full speed, small enough to resume
MAX_BACKOFF = 8.0
T = TypeVar("T")

# Errors of the store that no retry can fix (pyarrow raises them as OSError with the AWS error name in the text).
_FATAL = ("ACCESS_DENIED", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "INVALID_ACCESS_KEY_ID")
_MISSING = ("NoSuchBucket", "NO_SUCH_BUCKET", "NoSuchKey", "NO_SUCH_KEY")


@dataclass(frozen=True)
class FetchPolicy:
    """How hard to try one request before giving up."""

    timeout: float = 120.0
    """Seconds from a request's first attempt after which it fails with an error naming the URI."""
    backoff: float = 0.25
    """Seconds before the first retry; doubled after each failure, up to 8 s."""


class ObjectStore:
    """A `pyarrow.fs` filesystem per bucket, made in the process that uses it (never carried across a fork: the
    AWS SDK's connections and threads do not survive one)."""

    def __init__(self, policy: FetchPolicy = FetchPolicy()):
        self.policy = policy
        self._pid = os.getpid()
        self._fs: dict[str, pafs.FileSystem] = {}
        self._lock = threading.Lock()

    def __getstate__(self):
        return {"policy": self.policy}

    def __setstate__(self, state):
        self.__init__(state["policy"])

    def filesystem(self, uri: str) -> tuple[pafs.FileSystem, str]:
        """The filesystem of ``uri`` and the path in it."""
        scheme, _, rest = check_uri(uri).partition("://")
        key = f"{scheme}://{rest.split('/', 1)[0]}"
        if self._pid != os.getpid():  # forked (the parent's lock may have been held at the fork): start afresh
            self._fs, self._pid, self._lock = {}, os.getpid(), threading.Lock()
        with self._lock:
            fs = self._fs.get(key)
            if fs is None:
                fs = self._fs[key] = _filesystem(uri, self.policy)
        _, path = pafs.FileSystem.from_uri(uri) if scheme != "s3" else (None, rest)
        return fs, path

    def retry(self, uri: str, what: str, attempt: Callable[[], T], cancelled: Callable[[], bool] | None = None,
              listed: bool = False) -> T:
        """``attempt()`` until it succeeds, fails for good, or the deadline passes (then a DataError naming
        ``uri``); ``cancelled()`` true stops the retries early (a prefetch no longer wanted). ``listed``: the object
        was there when the loader was built, so its absence now (a store coming back) is retried too."""
        deadline = time.monotonic() + self.policy.timeout
        delay, tries = self.policy.backoff, 0
        while True:
            tries += 1
            try:
                return attempt()
            except OSError as err:
                missing = isinstance(err, FileNotFoundError) or any(name in str(err) for name in _MISSING)
                if missing and not listed:
                    raise DataError(f"{uri}: no such object ({what}); tokens.json lists it, so the store or the "
                                    "URI is not the one the tokenize stage wrote to") from None
                if any(name in str(err) for name in _FATAL):
                    raise DataError(f"{uri}: {what} refused by the store: {err}") from None
                left = deadline - time.monotonic()
                if left <= 0 or (cancelled is not None and cancelled()):
                    raise DataError(f"{uri}: {what} failed {tries} times over {self.policy.timeout:g} s "
                                    f"(fetch_timeout); last error: {err}") from None
                log.warning("%s: %s failed (%s); retrying in %.2f s", uri, what, err, min(delay, left))
                time.sleep(min(delay, left))
                delay = min(delay * 2, MAX_BACKOFF)

    def read_bytes(self, uri: str) -> bytes:
        """The whole object (small ones: `tokens.json`)."""
        def attempt() -> bytes:
            fs, path = self.filesystem(uri)
            with fs.open_input_stream(path) as f:
                return f.read()
        return self.retry(uri, "read", attempt)

    def exists(self, uri: str) -> bool:
        def attempt() -> bool:
            fs, path = self.filesystem(uri)
            return fs.get_file_info(path).type == pafs.FileType.File
        return self.retry(uri, "look-up", attempt)

    def download(self, uri: str, begin: Callable[[int], BinaryIO | None],
                 cancelled: Callable[[], bool] | None = None,
                 length: int | None = None) -> tuple[str, int, BinaryIO | None]:
        """The object (or with ``length`` its first ``length`` bytes) into the file that ``begin(size)`` opens once
        its size is known (None: give up, no bytes read), in ranged reads that resume at the first byte not yet
        written after a failure; (sha256 hex of what was written, size, the file)."""
        digest = hashlib.sha256()
        done, size, total, out = 0, -1, -1, None

        def attempt() -> None:
            nonlocal done, size, total, out
            fs, path = self.filesystem(uri)
            with fs.open_input_file(path) as f:  # one HEAD: the size
                if out is None:
                    total = f.size()
                    if length is not None and total < length:
                        raise DataError(f"{uri}: the object has {total} bytes, fewer than the {length} of its head "
                                        "that tokens.json records: it is not the file the tokenize stage wrote")
                    size = total if length is None else length
                    out = begin(size)
                    if out is None:
                        return
                elif f.size() != total:
                    raise DataError(f"{uri}: the object changed size ({total} -> {f.size()}) while it was fetched")
                while done < size:
                    chunk = f.read_at(min(READ_BYTES, size - done), done)
                    if not chunk:
                        raise OSError(f"object ended at byte {done} of {size}")
                    out.write(chunk)
                    digest.update(chunk)
                    done += len(chunk)

        try:
            self.retry(uri, "download", attempt, cancelled, listed=True)
        except BaseException:
            if out is not None:
                out.close()
            raise
        return digest.hexdigest(), size, out


def check_objects(store: ObjectStore, expected: dict[str, int | None]) -> None:
    """Every object exists, with its size where known: one listing per folder (a LIST request per 1,000 objects),
    so a missing or truncated token file is an error naming it before the first batch, not hours into a run."""
    folders: dict[str, list[str]] = {}
    for uri in expected:
        folders.setdefault(uri.rsplit("/", 1)[0], []).append(uri)
    for folder, uris in folders.items():
        def attempt(folder=folder) -> dict[str, int]:
            fs, path = store.filesystem(folder)
            selector = pafs.FileSelector(path, allow_not_found=True, recursive=False)
            return {i.base_name: i.size for i in fs.get_file_info(selector) if i.type == pafs.FileType.File}
        found = store.retry(folder, "listing", attempt)
        for uri in uris:
            name, want = uri.rsplit("/", 1)[1], expected[uri]
            if name not in found:
                raise DataError(f"{uri}: no such object; tokens.json lists it, so the store or the URI is not the "
                                "one the tokenize stage wrote to")
            if want is not None and found[name] != want:
                raise DataError(f"{uri}: the object has {found[name]} bytes but tokens.json implies {want}: it is "
                                "not the file the tokenize stage wrote; restore it or rerun the tokenize stage")


def _filesystem(uri: str, policy: FetchPolicy) -> pafs.FileSystem:
    fs, _ = pafs.FileSystem.from_uri(uri)
    if isinstance(fs, pafs.S3FileSystem):
        # Rebuilt with one attempt per request (the retries are ours, with a deadline) and finite timeouts, keeping
        # what from_uri resolved: the region, and the endpoint from the standard AWS environment.
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        timeout = max(1.0, min(30.0, policy.timeout))
        fs = pafs.S3FileSystem(region=fs.region, endpoint_override=endpoint, connect_timeout=timeout,
                               request_timeout=timeout, retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1))
    return fs


def index_uri(uri: str, store: ObjectStore) -> str:
    """The `tokens.json` a URI means: the object itself (a name ending in ``.json``), or ``tokens.json`` in that
    folder, or in that run folder's ``tokenize/``."""
    uri = uri.rstrip("/")
    if uri.endswith(".json"):
        return uri
    for candidate in (f"{uri}/{FILE}", f"{uri}/tokenize/{FILE}"):
        if store.exists(candidate):
            return candidate
    return f"{uri}/{FILE}"


def read_index(uri: str, store: ObjectStore) -> TokensIndex:
    """The index at ``uri`` (or in that folder, or that run folder's ``tokenize/``), validated; its paths are URIs.

    A URI carrying credentials (``s3://KEY:SECRET@bucket/...``) is refused as the pipeline refuses it: the loader's
    state records its datasets' URIs, and a checkpoint holding that state may be handed to others."""
    uri = index_uri(check_uri(uri), store)
    raw = store.read_bytes(uri)
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise DataError(f"{uri}: not a readable tokens.json: {exc}") from None
    return TokensIndex(uri, validate(data, uri))


def local_name(uri: str, sha256: str, suffix: str) -> str:
    """The cache's file name for an object: by its recorded sha256 (the same content is one file, whatever URI
    names it; other content never takes its place), else ``u`` and a hash of its URI. Only hex digits and the
    suffix: nothing from tokens.json reaches the name unless `tokens_json.validate` found it 64 lowercase hex
    characters (`cache.CachedObject` checks the name again)."""
    if sha256 and not SHA256.fullmatch(sha256):
        raise DataError(f"{uri}: sha256 {sha256!r:.100} is not 64 lowercase hex characters")
    return f"{sha256 or 'u' + hashlib.sha256(uri.encode('utf-8')).hexdigest()}{suffix}"
