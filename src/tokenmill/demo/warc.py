"""WARC and WET files as Common Crawl writes them: CRLF headers, exact Content-Length, gzip per record.

A record is `WARC/1.0` CRLF, header lines each ending in CRLF, an empty line, the block of exactly
Content-Length bytes, then CRLF CRLF. Record ids are UUIDs hashed from the seed, the file and the
record's position, and dates come from the page, so the same seed writes the same bytes.
"""

from __future__ import annotations

import base64
import datetime
import gzip
import hashlib
import uuid
from pathlib import Path

from . import web

GZIP_LEVEL = 4
CRAWL = "CC-MAIN-2024-22"
_USER_AGENT = "CCBot/2.0 (https://commoncrawl.org/faq/)"


def record_id(key: str) -> str:
    return f"<urn:uuid:{uuid.UUID(bytes=hashlib.blake2b(key.encode(), digest_size=16).digest(), version=4)}>"


def digest(data: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode("ascii")


def warc_date(when: datetime.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def http_date(when: datetime.datetime) -> str:
    return when.strftime("%a, %d %b %Y %H:%M:%S GMT")


def warc_record(headers: list[tuple[str, str]], block: bytes) -> bytes:
    """One record; `headers` must not hold Content-Length, it is computed from the block."""
    lines = ["WARC/1.0"]
    for name, value in headers:
        lines.append(f"{name}: {value}")
        if name == "Content-Type":
            lines.append(f"Content-Length: {len(block)}")
    if len(lines) == len(headers) + 1:
        lines.append(f"Content-Length: {len(block)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8") + block + b"\r\n\r\n"


def warc_fields(fields: list[tuple[str, str]]) -> bytes:
    return ("".join(f"{k}: {v}\r\n" for k, v in fields) + "\r\n").encode("utf-8")


class WarcFile:
    """Collects records, each gzipped as its own member (as Common Crawl does) or all in one member."""

    def __init__(self, path: Path, key: str, filename: str, per_record_gzip: bool = True):
        self.path = path
        self.key = key
        self.filename = filename
        self.per_record_gzip = per_record_gzip
        self.ordinal = 0  # WARC records written so far, of every type
        self._parts: list[bytes] = []

    def id_of(self, ordinal: int, what: str = "") -> str:
        return record_id(f"{self.key}/{ordinal}{what}")

    def add(self, headers: list[tuple[str, str]], block: bytes) -> int:
        data = warc_record(headers, block)
        self._parts.append(gzip.compress(data, GZIP_LEVEL, mtime=0) if self.per_record_gzip else data)
        self.ordinal += 1
        return self.ordinal - 1

    def close(self) -> None:
        data = b"".join(self._parts)
        self.path.write_bytes(data if self.per_record_gzip else gzip.compress(data, GZIP_LEVEL, mtime=0))
        self._parts = []


class WetShard:
    """A WET file: a warcinfo record, then one `conversion` record per page (the documents)."""

    line_based = False

    def __init__(self, path: Path, key: str, *, single_member: bool = False, started: datetime.datetime):
        self.file = WarcFile(path, key, path.name, per_record_gzip=not single_member)
        self.count = 0
        self.last_info: dict = {}
        block = warc_fields([
            ("Software-Info", "ia-web-commons.1.1.10-SNAPSHOT-20240513074037"),
            ("Extracted-Date", http_date(started)),
            ("robots", "checked via crawler-commons 1.5-SNAPSHOT (https://github.com/crawler-commons/crawler-commons)"),
            ("isPartOf", CRAWL),
            ("operator", "Common Crawl Admin (info@commoncrawl.org)"),
            ("description", "Wide crawl of the web for May 2024 (tokenmill demo: generated text)"),
            ("publisher", "Common Crawl"),
        ])
        self.file.add([("WARC-Type", "warcinfo"), ("WARC-Date", warc_date(started)),
                       ("WARC-Filename", path.name), ("WARC-Record-ID", self.file.id_of(0)),
                       ("Content-Type", "application/warc-fields"), ("WARC-Block-Digest", digest(block))], block)

    def add_record(self, page: dict) -> int:
        body = page["text"].encode("utf-8")
        n = self.file.ordinal
        rid = self.file.id_of(n)
        headers = [
            ("WARC-Type", "conversion"),
            ("WARC-Target-URI", page["url"]),
            ("WARC-Date", warc_date(page["fetched"])),
            ("WARC-Record-ID", rid),
            ("WARC-Refers-To", self.file.id_of(n, "/response")),
            ("WARC-Block-Digest", digest(body)),
        ]
        if page.get("language"):
            headers.append(("WARC-Identified-Content-Language", page["language"]))
        headers.append(("Content-Type", "text/plain"))
        self.last_info = {"url": page["url"], "warc_record_id": rid}
        self.count += 1
        return self.file.add(headers, body)

    def add_raw(self, raw: bytes) -> int:
        raise TypeError("WET files take pages, not raw lines")

    def close(self) -> None:
        self.file.close()


class WarcShard:
    """A WARC file: warcinfo, then per page a request, its response (the document) and a metadata record."""

    line_based = False

    def __init__(self, path: Path, key: str, *, started: datetime.datetime):
        self.file = WarcFile(path, key, path.name)
        self.info_id = self.file.id_of(0)
        self.count = 0
        self.last_info: dict = {}
        block = warc_fields([
            ("isPartOf", CRAWL),
            ("publisher", "Common Crawl"),
            ("description", "Wide crawl of the web for May 2024 (tokenmill demo: generated text)"),
            ("operator", "Common Crawl Admin (info@commoncrawl.org)"),
            ("software", "Apache Nutch 1.19 (modified, https://github.com/commoncrawl/nutch/)"),
            ("robots", "checked via crawler-commons 1.5-SNAPSHOT (https://github.com/crawler-commons/crawler-commons)"),
            ("format", "WARC File Format 1.1"),
            ("conformsTo", "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/"),
        ])
        self.file.add([("WARC-Type", "warcinfo"), ("WARC-Date", warc_date(started)),
                       ("WARC-Record-ID", self.info_id), ("Content-Type", "application/warc-fields"),
                       ("WARC-Filename", path.name), ("WARC-Block-Digest", digest(block))], block)

    def add_record(self, page: dict) -> int:
        site, url, when = page["site"], page["url"], page["fetched"]
        path = url.split(site.host, 1)[1]
        request = (f"GET {path} HTTP/1.1\r\nUser-Agent: {_USER_AGENT}\r\n"
                   "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n"
                   f"Accept-Language: en-US,en;q=0.5\r\nAccept-Encoding: br,gzip\r\nHost: {site.host}\r\n"
                   "Connection: Keep-Alive\r\n\r\n").encode("ascii")
        kind = page.get("kind", "html")
        if kind == "png":
            payload, status, ctype = page["payload"], "200 OK", "image/png"
        elif kind == "not_found":
            payload, status, ctype = web.NOT_FOUND_HTML.encode("utf-8"), "404 Not Found", "text/html; charset=utf-8"
        else:
            payload, status, ctype = page["html"].encode("utf-8"), "200 OK", "text/html; charset=utf-8"
        head = (f"HTTP/1.1 {status}\r\nDate: {http_date(when)}\r\nServer: nginx\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(payload)}\r\nCache-Control: max-age=600\r\nConnection: close\r\n\r\n")
        response = head.encode("ascii") + payload
        n = self.file.ordinal
        req_id, resp_id = self.file.id_of(n), self.file.id_of(n + 1)
        common = [("WARC-Date", warc_date(when))]
        self.file.add([("WARC-Type", "request"), *common, ("WARC-Record-ID", req_id),
                       ("Content-Type", "application/http; msgtype=request"), ("WARC-Warcinfo-ID", self.info_id),
                       ("WARC-IP-Address", site.ip), ("WARC-Target-URI", url),
                       ("WARC-Block-Digest", digest(request))], request)
        index = self.file.add([("WARC-Type", "response"), *common, ("WARC-Record-ID", resp_id),
                               ("Content-Type", "application/http; msgtype=response"),
                               ("WARC-Warcinfo-ID", self.info_id), ("WARC-Concurrent-To", req_id),
                               ("WARC-IP-Address", site.ip), ("WARC-Target-URI", url),
                               ("WARC-Payload-Digest", digest(payload)), ("WARC-Block-Digest", digest(response)),
                               ("WARC-Identified-Payload-Type", ctype.split(";")[0])], response)
        language = '{"reliable":true,"languages":[{"code":"en","code-iso-639-3":"eng","name":"ENGLISH"}]}'
        meta = warc_fields([("fetchTimeMs", str(page.get("fetch_ms", 200))), ("charset-detected", "UTF-8"),
                            ("languages-cld2", language if kind == "html" else "{}")])
        self.file.add([("WARC-Type", "metadata"), *common, ("WARC-Record-ID", self.file.id_of(n + 2)),
                       ("Content-Type", "application/warc-fields"), ("WARC-Warcinfo-ID", self.info_id),
                       ("WARC-Concurrent-To", resp_id), ("WARC-Target-URI", url),
                       ("WARC-Block-Digest", digest(meta))], meta)
        self.last_info = {"url": url, "warc_record_id": resp_id}
        self.count += 1
        return index

    def add_raw(self, raw: bytes) -> int:
        raise TypeError("WARC files take pages, not raw lines")

    def close(self) -> None:
        self.file.close()
