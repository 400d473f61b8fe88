"""A real S3-compatible server for tests and benchmarks: moto in server mode, in a child process on 127.0.0.1.

Clients reach it as they would reach any S3: through the standard AWS environment variables (`env()`: endpoint,
credentials, region), read by pyarrow's S3FileSystem, boto3 and s3fs alike. Nothing in the client is mocked.
moto keeps its objects in memory: `stop()` loses them, `start()` again comes back empty on the same port (a test of
an outage re-uploads what it needs, as a store coming back with the same objects would serve them).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ChildServer:
    """A server in a child process on 127.0.0.1:`port`, started and stopped by its owner: `command()` is its command
    line, `failure` the error `start()` raises when it exits or does not listen in time."""

    name = "server"
    failure: type[Exception] = RuntimeError

    def __init__(self, port: int | None = None, log: Path | None = None):
        self.port = port or free_port()
        self.log = log
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        raise NotImplementedError

    def child_env(self) -> dict[str, str]:
        return dict(os.environ)

    def start(self, timeout: float = 30.0):
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT, env=self.child_env())
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise self.failure(f"{self.name} exited with {self.proc.returncode} (port {self.port})")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise self.failure(f"{self.name} did not listen on 127.0.0.1:{self.port} in {timeout} s")
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


class S3Server(ChildServer):
    """`python -m moto.server -H 127.0.0.1 -p PORT`, started and stopped by its owner."""

    name = "moto server"

    def env(self) -> dict[str, str]:
        """The environment a client needs: `AWS_ENDPOINT_URL` (pyarrow >= 15, boto3 >= 1.28) and test credentials."""
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint, "AWS_EC2_METADATA_DISABLED": "true"}

    def command(self) -> list[str]:
        return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]

    def child_env(self) -> dict[str, str]:
        return {**os.environ, **CREDENTIALS}

    def client(self):
        """A boto3 S3 client on this server (for setup only: the code under test uses its own client)."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                            region_name=CREDENTIALS["AWS_DEFAULT_REGION"])

    def create_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return f"s3://{name}"

    def upload_tree(self, local: Path, bucket: str, prefix: str = "") -> list[str]:
        """Every file under `local` to `s3://bucket/prefix/<relative path>`; the keys, sorted."""
        client, keys = self.client(), []
        for path in sorted(p for p in Path(local).rglob("*") if p.is_file()):
            key = "/".join(x for x in (prefix.strip("/"), path.relative_to(local).as_posix()) if x)
            client.upload_file(str(path), bucket, key)
            keys.append(key)
        return keys


@contextmanager
def running(port: int | None = None, log: Path | None = None) -> Iterator[S3Server]:
    server = S3Server(port, log).start()
    try:
        yield server
    finally:
        server.stop()
