"""A local Google Cloud Storage server for tests and benchmarks: gcp-storage-emulator in a child process on 127.0.0.1.

Clients reach it through `STORAGE_EMULATOR_HOST` (`env()`), the variable Google's own clients read for an
emulator; tokenmill's storage layer (`sources.uris.gcs_filesystem`) then talks to it anonymously over http with
pyarrow's GcsFileSystem. Objects live in memory: `stop()` loses them. `start()` raises `GcsUnavailable` when the
emulator is not installed or does not listen, so a test can skip saying why.
"""

from __future__ import annotations

import importlib.util
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from tests.s3server import ChildServer


class GcsUnavailable(RuntimeError):
    """The emulator cannot run here (not installed, or it did not start)."""


class GcsServer(ChildServer):
    """`python -m gcp_storage_emulator start --host 127.0.0.1 --port PORT --in-memory`, started and stopped by its owner."""

    name = "gcp-storage-emulator"
    failure = GcsUnavailable

    def env(self) -> dict[str, str]:
        """What a client needs: the emulator's address (no credentials: it takes anonymous requests)."""
        return {"STORAGE_EMULATOR_HOST": self.endpoint}

    def command(self) -> list[str]:
        return [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1", "--port",
                str(self.port), "--in-memory"]

    def start(self, timeout: float = 30.0) -> "GcsServer":
        if importlib.util.find_spec("gcp_storage_emulator") is None:
            raise GcsUnavailable("gcp-storage-emulator is not installed (pip install gcp-storage-emulator)")
        return super().start(timeout)

    def filesystem(self):
        """pyarrow's GcsFileSystem on this server (for setup: the code under test makes its own from the env)."""
        from tokenmill.sources.uris import gcs_filesystem

        return gcs_filesystem(self.endpoint)

    def create_bucket(self, name: str) -> str:
        self.filesystem().create_dir(name)
        return f"gs://{name}"

    def upload_tree(self, local: Path, bucket: str, prefix: str = "") -> list[str]:
        """Every file under `local` to `gs://bucket/prefix/<relative path>`; the keys, sorted.

        Uploaded with the JSON API's simple media upload, not through pyarrow: the emulator stores some compressed
        files (`.gz`, `.zst`) that pyarrow's client uploads with other bytes than were sent (a `.jsonl.gz` of 4,627
        bytes comes back with 4,650), a fault of the emulator's resumable upload that the media upload avoids."""
        import urllib.parse
        import urllib.request

        keys = []
        for path in sorted(p for p in Path(local).rglob("*") if p.is_file()):
            key = "/".join(x for x in (prefix.strip("/"), path.relative_to(local).as_posix()) if x)
            url = (f"{self.endpoint}/upload/storage/v1/b/{bucket}/o?uploadType=media&"
                   f"name={urllib.parse.quote(key, safe='')}")
            request = urllib.request.Request(url, data=path.read_bytes(), method="POST",
                                             headers={"Content-Type": "application/octet-stream"})
            urllib.request.urlopen(request, timeout=30).read()
            keys.append(key)
        return keys


@contextmanager
def running(port: int | None = None, log: Path | None = None) -> Iterator[GcsServer]:
    server = GcsServer(port, log).start()
    try:
        yield server
    finally:
        server.stop()
