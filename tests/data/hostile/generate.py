"""Write the hostile input corpus: one folder per case and `cases.json` saying what each must come to.

    python tests/data/hostile/generate.py OUT_DIR [--full]

Nothing here is committed but this script: the large cases are made on the fly. Without `--full` they are scaled
down so the default test suite stays fast (a zstd bomb of 1 GiB of output, a 50 MB line without a newline, a
20 MB document); `--full` uses the sizes of issue 11 (10 GiB, 1 GiB, 100 MB).

`cases.json` is a list; each case has:

- `name`: the case, also the name of its source in the run config and of its folder;
- `group`: `ingest` (read by one pipeline run, one source per case), `config` (a config that must stop before
  any work), or `manifest` (a completed run edited to point outside the run folder);
- `files`: what the case wrote, relative to OUT_DIR;
- `source` (ingest): the source's config, paths relative to OUT_DIR;
- `config` (config): a whole run config, paths relative to OUT_DIR; `yaml` (config): raw config text instead;
- `edit` (manifest): which file to edit and how;
- `expect`: the outcome, one of
  - `{"kind": "counted", "kept": N, "drops": {reason: count}, "messages": [...]}`: ingest reads the source's
    files into exactly N kept documents and these drops (so in = kept + drops), and every string of
    `messages` appears in one of the errors the manifest lists (file and line);
  - `{"kind": "config_error", "match": "..."}`: loading the config raises ConfigError whose message holds
    `match`, before any output is written;
  - `{"kind": "manifest_error", "match": "..."}`: rerunning raises ManifestError holding `match`, and nothing
    outside the run folder is read or written;
- `memory` (optional): the case is also read in a subprocess of its own whose peak RSS must stay under
  `max_rss_mb`.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import io
import json
import os
import shutil
import sys
import zlib
from pathlib import Path

import zstandard

MiB = 1 << 20
GiB = 1 << 30


class Corpus:
    def __init__(self, out: Path, full: bool):
        self.out = out
        self.full = full
        self.cases: list[dict] = []

    def case(self, name: str, group: str, expect: dict, **fields) -> Path:
        folder = self.out / name
        folder.mkdir(parents=True, exist_ok=True)
        self.cases.append({"name": name, "group": group, "expect": expect, **fields})
        return folder

    def ingest(self, name: str, fmt: str, files: dict[str, bytes | None], expect: dict, pattern: str = "*",
               memory: int | None = None, **source) -> None:
        """A source of one format over the case's folder; `files` maps names to content (None: written by the caller)."""
        folder = self.case(name, "ingest", expect, files=[f"{name}/{f}" for f in files],
                           source={"name": name, "format": fmt, "paths": [f"{name}/{pattern}"], **source})
        for fname, data in files.items():
            if data is not None:
                (folder / fname).parent.mkdir(parents=True, exist_ok=True)
                (folder / fname).write_bytes(data)
        if memory is not None:
            self.cases[-1]["memory"] = {"max_rss_mb": memory}

    def write(self) -> Path:
        path = self.out / "cases.json"
        path.write_text(json.dumps({"full": self.full, "cases": self.cases}, indent=1, ensure_ascii=False) + "\n",
                        encoding="utf-8")
        return path


def counted(kept: int, drops: dict | None = None, messages: list[str] | None = None) -> dict:
    return {"kind": "counted", "kept": kept, "drops": drops or {}, "messages": messages or []}


def jl(*records) -> bytes:
    return b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in records)


def docs(n: int, prefix: str = "doc") -> bytes:
    return jl(*({"text": f"{prefix} {i}: the quick brown fox jumps over the lazy dog"} for i in range(n)))


# ------------------------------------------------------------------------------------------------ WARC helpers


def warc_record(warc_type: str, body: bytes, *, length: int | None = None, digest: bool = True,
                content_type: str = "text/plain", uri: str = "http://example.com/") -> bytes:
    n = len(body) if length is None else length
    headers = [b"WARC/1.0", f"WARC-Type: {warc_type}".encode(),
               f"WARC-Record-ID: <urn:uuid:{hashlib.md5(body).hexdigest()}>".encode(),
               f"WARC-Target-URI: {uri}".encode(), b"WARC-Date: 2024-01-01T00:00:00Z",
               f"Content-Type: {content_type}".encode(), f"Content-Length: {n}".encode()]
    if digest:
        headers.append(b"WARC-Block-Digest: sha1:" + base64.b32encode(hashlib.sha1(body).digest()))
    return b"\r\n".join(headers) + b"\r\n\r\n" + body + b"\r\n\r\n"


def html_response(i: int) -> bytes:
    page = (f"<html><head><title>Page {i}</title></head><body><article><h1>Heading {i}</h1>"
            + "".join(f"<p>Paragraph {k} of page {i} holds enough ordinary words for an extractor to keep it as the "
                      f"main content of the page, sentence after sentence.</p>" for k in range(4))
            + "</article></body></html>").encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: "
            + str(len(page)).encode() + b"\r\n\r\n" + page)


def gz_members(*records: bytes) -> bytes:
    return b"".join(gzip.compress(r, mtime=0) for r in records)


# --------------------------------------------------------------------------------------------- streaming writers


def zstd_zeros(path: Path, size: int) -> None:
    """`size` zero bytes, zstd-compressed without ever holding them (a bomb: ~32,000:1)."""
    cctx = zstandard.ZstdCompressor(level=3)
    chunk = bytes(MiB)
    with open(path, "wb") as f, cctx.stream_writer(f, closefd=False) as w:
        for _ in range(size // MiB):
            w.write(chunk)


def gzip_zeros(path: Path, size: int) -> None:
    chunk = bytes(MiB)
    with gzip.open(path, "wb", compresslevel=9) as w:
        for _ in range(size // MiB):
            w.write(chunk)


def long_line(path: Path, size: int, prefix: bytes = b'{"text": "', compress: bool = False) -> None:
    """One line of `size` bytes and no newline at all."""
    chunk = b"a" * MiB
    f = open(path, "wb")  # noqa: SIM115 - closed by `with w`, the stream writer closes what it wraps
    w = zstandard.ZstdCompressor(level=1).stream_writer(f) if compress else f
    with w:
        w.write(prefix)
        for _ in range(size // MiB):
            w.write(chunk)


# ------------------------------------------------------------------------------------------------------ the cases


def build(out: Path, full: bool, tiny: bool = False) -> Path:
    """Write every case under `out`; `tiny` makes the large files small (same cases, to list them quickly)."""
    c = Corpus(out, full)
    bomb = 10 * GiB if full else 1 * GiB
    line = 1 * GiB if full else 50 * MiB
    document = 100 * 1000 * 1000 if full else 20 * 1000 * 1000
    if tiny:
        bomb, line, document = 8 * MiB, 2 * MiB, 2 * 1000 * 1000
    # In the fast corpus the long line is under the default 64 MiB cap; a smaller cap keeps its outcome the same.
    line_cap = {} if full else {"max_record_bytes": 16 * MiB}

    # --- encodings
    bad_utf8 = b'{"text": "caf\xe9 au lait \xff\xfe"}\n'
    c.ingest("invalid_utf8_jsonl", "jsonl", {"a.jsonl": docs(2) + bad_utf8 + docs(1, "tail")},
             counted(3, {"decode_error": 1}, ["invalid_utf8_jsonl:a.jsonl:3: invalid utf-8"]))
    c.ingest("invalid_utf8_text", "text", {"a.txt": b"ok start \xc3\x28 broken \xa0\xa1"},
             counted(0, {"decode_error": 1}, ["invalid_utf8_text:a.txt: invalid utf-8 at byte 9"]))
    c.ingest("invalid_utf8_csv", "csv", {"a.csv": b"id,text\n1,fine row\n2,bad \xff\xfe row\n3,another\n"},
             counted(2, {"decode_error": 1}, ["invalid_utf8_csv:a.csv:3: invalid utf-8 bytes"]))
    mixed = (json.dumps({"text": "plain ascii line"}).encode() + b"\n"
             + json.dumps({"text": "Café “quoted” – naïve résumé, déjà vu"}, ensure_ascii=False).encode("cp1252") + b"\n"
             + json.dumps({"text": "专家认为，寺庙不仅能翻译手稿，而且还能带动档案的发展。"}, ensure_ascii=False).encode("gb18030") + b"\n"
             + json.dumps({"text": "Ünïcödé in UTF-8"}, ensure_ascii=False).encode() + b"\n")
    c.ingest("mixed_encodings_auto", "jsonl", {"a.jsonl": mixed}, counted(4), encoding="auto")
    c.ingest("mixed_encodings_utf8", "jsonl", {"a.jsonl": mixed},
             counted(2, {"decode_error": 2}, ["mixed_encodings_utf8:a.jsonl:2:", "mixed_encodings_utf8:a.jsonl:3:"]))
    c.ingest("bom_crlf_separators", "jsonl",
             {"a.jsonl": b"\xef\xbb\xbf" + b'{"text": "first"}\r\n{"text": "line\xe2\x80\xa8sep and \xc2\x85 NEL"}\r\n'
                         + b'{"text": "last, no newline"}'},
             counted(3))

    # --- NUL bytes and control characters
    c.ingest("nul_bytes_jsonl", "jsonl",
             {"a.jsonl": docs(1) + b'{"text": "raw \x00 NUL"}\n' + b"\x00" * 64 + b"\n"
                         + b'{"text": "escaped \\u0000 NUL kept as text"}\n'},
             counted(2, {"bad_json": 2}, ["nul_bytes_jsonl:a.jsonl:2: invalid JSON", "nul_bytes_jsonl:a.jsonl:3:"]))
    c.ingest("nul_bytes_text", "text", {"a.txt": b"text with \x00 NUL \x00\x00 bytes and \x1b[31m escapes"}, counted(1))
    c.ingest("nul_bytes_tsv", "tsv", {"a.tsv": b"id\ttext\n1\tnul \x00 inside\n2\tplain\n"}, counted(2))

    # --- sizes and bombs (each also read alone in a subprocess whose memory is measured)
    c.ingest("zstd_bomb_jsonl", "jsonl", {"bomb.jsonl.zst": None},
             counted(0, {"record_too_large": 1}, ["zstd_bomb_jsonl:bomb.jsonl.zst:1: line of more than"]), memory=1500)
    zstd_zeros(out / "zstd_bomb_jsonl" / "bomb.jsonl.zst", bomb)
    c.ingest("zstd_bomb_text", "text", {"bomb.txt.zst": None}, counted(0, {"record_too_large": 1}), memory=1500)
    os.link(out / "zstd_bomb_jsonl" / "bomb.jsonl.zst", out / "zstd_bomb_text" / "bomb.txt.zst")
    c.ingest("zstd_bomb_csv", "csv", {"bomb.csv.zst": None},
             counted(0, {"record_too_large": 1}, ["zstd_bomb_csv:bomb.csv.zst:1: line of more than"]), memory=1500,
             options={"header": False, "columns": ["text"]})
    os.link(out / "zstd_bomb_jsonl" / "bomb.jsonl.zst", out / "zstd_bomb_csv" / "bomb.csv.zst")
    c.ingest("gzip_bomb_jsonl", "jsonl", {"bomb.jsonl.gz": None}, counted(0, {"record_too_large": 1}), memory=1500)
    gzip_zeros(out / "gzip_bomb_jsonl" / "bomb.jsonl.gz", bomb // 8)
    c.ingest("no_newline_line_jsonl", "jsonl", {"line.jsonl": None},
             counted(0, {"record_too_large": 1}, ["no_newline_line_jsonl:line.jsonl:1: line of more than"]),
             memory=1500, **line_cap)
    long_line(out / "no_newline_line_jsonl" / "line.jsonl", line)
    c.ingest("no_newline_line_csv", "csv", {"line.csv.zst": None},
             counted(1, {"record_too_large": 1}, ["no_newline_line_csv:line.csv.zst:3: line of more than"]),
             memory=1500, **line_cap)
    long_line(out / "no_newline_line_csv" / "line.csv.zst", line, prefix=b"text\nshort row\n", compress=True)
    c.ingest("no_newline_line_json", "json", {"line.json": None},
             counted(1, {"record_too_large": 1}, ["no_newline_line_json:line.json: item 1: more than"]),
             memory=1500, **line_cap)
    long_line(out / "no_newline_line_json" / "line.json", line, prefix=b'["short item", "')
    c.ingest("huge_document_kept", "jsonl", {"doc.jsonl": None}, counted(1), memory=1500,
             max_record_bytes=256 * MiB)
    with open(out / "huge_document_kept" / "doc.jsonl", "wb") as f:
        f.write(b'{"text": "' + b"word " * (document // 5) + b'"}\n')
    c.ingest("huge_document_over_cap", "text", {"doc.txt": None},
             counted(0, {"record_too_large": 1}, ["huge_document_over_cap:doc.txt: more than"]), memory=1500,
             max_record_bytes=MiB)
    os.link(out / "huge_document_kept" / "doc.jsonl", out / "huge_document_over_cap" / "doc.txt")

    # --- damaged compression
    payload = docs(400)
    gz = gzip.compress(payload, mtime=0)
    cut = gz[: len(gz) // 2]
    whole = zlib.decompressobj(31).decompress(cut).count(b"\n")
    c.ingest("truncated_gzip", "jsonl", {"a.jsonl.gz": cut},
             counted(whole, {"read_error": 1}, [f"truncated_gzip:a.jsonl.gz:{whole + 1}: damaged stream"]))
    zs = zstandard.ZstdCompressor(level=3).compress(payload)
    zcut = zs[: len(zs) // 2]
    zwhole = zstandard.ZstdDecompressor().decompressobj().decompress(zcut).count(b"\n")
    c.ingest("truncated_zstd", "jsonl", {"a.jsonl.zst": zcut},
             counted(zwhole, {"read_error": 1}, [f"truncated_zstd:a.jsonl.zst:{zwhole + 1}: damaged stream"]))
    c.ingest("not_gzip_at_all", "jsonl", {"a.jsonl.gz": b"this is plain text, not gzip\n" * 10},
             counted(0, {"read_error": 1}, ["not_gzip_at_all:a.jsonl.gz:1: damaged stream"]))
    big_window = zstandard.ZstdCompressor(compression_params=zstandard.ZstdCompressionParameters(
        window_log=30, enable_ldm=True, write_content_size=False))
    with io.BytesIO() as buf:
        with big_window.stream_writer(buf, closefd=False) as w:
            w.write(docs(5))
        window_file = buf.getvalue()
    c.ingest("zstd_window_too_large", "jsonl", {"a.jsonl.zst": window_file},
             counted(0, {"read_error": 1}, ["max_window_log"]))

    # --- JSON structure
    c.ingest("deeply_nested_jsonl", "jsonl",
             {"a.jsonl": docs(1) + b'{"text": "x", "m": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n" + docs(1, "after")},
             counted(2, {"bad_json": 1}, ["deeply_nested_jsonl:a.jsonl:2: invalid JSON"]))
    c.ingest("deeply_nested_json", "json",
             {"a.json": b'[{"text": "first [{ item"}, {"text": "x", "m": ' + b"[" * 100_000 + b"]" * 100_000 + b"}]"},
             counted(1, {"read_error": 1}, ["deeply_nested_json:a.json: damaged after item 1: nesting deeper"]),
             memory=1500)
    c.ingest("lone_surrogate_json", "json",
             {"a.json": b'[{"text": "high \\ud800 alone"}, {"text": "pair \\ud83d\\ude00"}, {"text": "\\udc00 low"}, '
                        b'{"text": "after"}]'},
             counted(2, {"decode_error": 2}, ["lone_surrogate_json:a.json: item 0: a \\u escape of a lone surrogate",
                                              "lone_surrogate_json:a.json: item 2: a \\u escape of a lone surrogate"]))
    c.ingest("json_not_an_array", "json", {"a.json": b'{"data": [{"text": "hidden"}]}'},
             counted(0, {"read_error": 1}, ["is not a JSON array"]))
    arr = json.dumps([{"text": f"item {i}"} for i in range(50)]).encode()
    c.ingest("truncated_json", "json", {"a.json": arr[: arr.index(b"item 30")]},
             counted(30, {"read_error": 1}, ["truncated_json:a.json: damaged after item 30"]))
    c.ingest("wrong_types_pile", "pile",
             {"a.jsonl": jl({"text": "ok", "meta": {"pile_set_name": "Set"}}, {"text": None}, {"text": 12},
                            {"text": "   "}, [1, 2], {"meta": {}}) + b"NaN\n"
                         + b'{"text": "big float kept", "score": 1e999}\n'
                         + b'{"text": "huge int", "n": ' + b"9" * 5000 + b"}\n"},
             counted(2, {"missing_text": 2, "bad_text_type": 1, "empty_text": 1, "not_an_object": 1, "bad_json": 2},
                     ["wrong_types_pile:a.jsonl:9: invalid JSON"]))
    c.ingest("reddit_hostile", "reddit",
             {"RC.ndjson": jl({"id": "a1", "body": "a comment", "subreddit": "x"},
                              {"id": "a2", "body": "[deleted]"}, {"id": "a3", "body": "[removed]"},
                              {"id": "a4", "body": 7}, {"id": "a5", "score": 1}, "a string")},
             counted(1, {"deleted_content": 1, "removed_content": 1, "bad_text_type": 1, "missing_text": 1,
                         "not_an_object": 1}))
    c.ingest("csv_bad_rows", "csv", {"a.csv": b'id,text\n1,ok\n2,too,many,fields\n3\n4,"quoted, fine"\n'},
             counted(2, {"bad_row": 2}, ["csv_bad_rows:a.csv:3: 4 fields, expected 2"]))

    # --- empty files
    c.ingest("empty_jsonl", "jsonl", {"empty.jsonl": b""}, counted(0))
    c.ingest("empty_text", "text", {"empty.txt": b""}, counted(0, {"empty_text": 1}))
    c.ingest("empty_csv", "csv", {"empty.csv": b""}, counted(0))
    c.ingest("empty_json", "json", {"empty.json": b""}, counted(0, {"read_error": 1}))
    c.ingest("empty_gzip", "jsonl", {"a.jsonl.gz": gzip.compress(b"", mtime=0), "b.jsonl.gz": b""}, counted(0))
    c.ingest("empty_parquet_file", "parquet", {"a.parquet": b""}, counted(0, {"read_error": 1}))
    c.ingest("not_parquet", "parquet", {"a.parquet": b"PAR1 this is not a parquet file at all PAR1"},
             counted(0, {"read_error": 1}))
    import pyarrow as pa
    import pyarrow.parquet as pq
    sink = io.BytesIO()
    pq.write_table(pa.table({"text": [f"row {i}" for i in range(10)], "score": [float("nan")] * 10,
                             "when": pa.array([0] * 10, pa.timestamp("s"))}), sink)
    c.ingest("parquet_nan_and_timestamps", "parquet", {"a.parquet": sink.getvalue()}, counted(10))
    c.ingest("truncated_parquet", "parquet", {"a.parquet": sink.getvalue()[:-40]}, counted(0, {"read_error": 1}))

    # --- WARC and WET
    texts = [f"WET text {i}: " + "some words " * 20 for i in range(4)]
    c.ingest("wet_content_length_past_end", "cc_wet",
             {"a.warc.wet.gz": gz_members(*(warc_record("conversion", t.encode()) for t in texts[:2]),
                                          warc_record("conversion", texts[2].encode(), length=len(texts[2]) + 5000))},
             counted(2, {"read_error": 1}, ["wet_content_length_past_end:a.warc.wet.gz: record 2 at byte",
                                            "runs past the end"]))
    c.ingest("wet_content_length_short", "cc_wet",
             {"a.warc.wet": warc_record("conversion", texts[0].encode())
                            + warc_record("conversion", texts[1].encode(), length=len(texts[1]) - 30)
                            + b"".join(warc_record("conversion", t.encode()) for t in texts[2:])},
             counted(1, {"read_error": 1}, ["wet_content_length_short:a.warc.wet: record 1", "WARC-Block-Digest"]))
    responses = [html_response(i) for i in range(3)]
    c.ingest("warc_content_length_past_end", "cc_warc",
             {"a.warc.gz": gz_members(*(warc_record("response", r, content_type="application/http; msgtype=response",
                                                    uri=f"http://example.com/{i}") for i, r in enumerate(responses[:2])),
                                      warc_record("response", responses[2], length=len(responses[2]) * 3,
                                                  content_type="application/http; msgtype=response"))},
             counted(2, {"read_error": 1}, ["runs past the end"]))

    # --- names
    c.ingest("paths_spaces_non_ascii", "jsonl",
             {"dir with spaces/ünïcødé 文件 (1).jsonl": docs(2), "dir with spaces/new\nline.jsonl": docs(1) + b"{bad\n",
              "dir with spaces/-rf *.jsonl": docs(1)},
             counted(4, {"bad_json": 1}, ["paths_spaces_non_ascii:new\nline.jsonl:2: invalid JSON"]),
             pattern="dir with spaces/*.jsonl")

    # --- config cases: each must stop before any work
    def config_case(name: str, match: str, sources=None, stages=None, yaml_text: str | None = None,
                    output: str = "run") -> Path:
        cfg = {"output": f"{name}/{output}", "sources": sources or [{"name": "s", "format": "jsonl", "paths": [f"{name}/data/*.jsonl"]}]}
        if stages:
            cfg["stages"] = stages
        fields = {"yaml": yaml_text} if yaml_text is not None else {"config": cfg}
        folder = c.case(name, "config", {"kind": "config_error", "match": match}, files=[], **fields)
        (folder / "data").mkdir(exist_ok=True)
        (folder / "data" / "good.jsonl").write_bytes(docs(2))
        return folder

    config_case("glob_matches_nothing", "matches no file",
                sources=[{"name": "s", "format": "jsonl", "paths": ["glob_matches_nothing/data/*.parquet"]}])
    f = config_case("symlink_file_loop", "symlink loop")
    os.symlink("b.jsonl", f / "data" / "a.jsonl")
    os.symlink("a.jsonl", f / "data" / "b.jsonl")
    f = config_case("symlink_dir_loop", "walks through a symlink loop",
                    sources=[{"name": "s", "format": "jsonl", "paths": ["symlink_dir_loop/data/**/*.jsonl"]}])
    (f / "data" / "sub").mkdir()
    os.symlink("..", f / "data" / "sub" / "up")
    os.symlink("../sub", f / "data" / "sub" / "again")
    f = config_case("symlink_outside_source", "outside")
    (f / "secret").mkdir(exist_ok=True)
    (f / "secret" / "passwd.jsonl").write_bytes(jl({"text": "secret"}))
    os.symlink("../secret/passwd.jsonl", f / "data" / "evil.jsonl")
    # The run folder and the object-store URIs (issue 31 items 5 and 11).
    f = config_case("output_symlinked_into_source", "would match files the run writes under its output folder",
                    sources=[{"name": "s", "format": "jsonl", "paths": ["output_symlinked_into_source/data/**/*.jsonl"]}],
                    output="out")
    (f / "data" / "runs").mkdir()
    os.symlink("data/runs", f / "out")
    f = config_case("output_dangling_symlink", "is a symlink to missing/run, which does not exist")
    os.symlink("missing/run", f / "run")
    config_case("uri_with_credentials", "credentials in a URI are refused",
                sources=[{"name": "s", "format": "jsonl", "paths": ["s3://AKIAEXAMPLE:SECRET@bkt/x/*.jsonl"]}])
    config_case("uri_without_bucket", "s3:///bkt/x/*.jsonl: names no bucket",
                sources=[{"name": "s", "format": "jsonl", "paths": ["s3:///bkt/x/*.jsonl"]}])
    f = config_case("tokenizer_not_json", "is not a tokenizer.json",
                    stages={"tokenize": {"tokenizer": "tokenizer_not_json/tokenizer.json"}})
    (f / "tokenizer.json").write_bytes(b"\x00\x01 definitely not JSON \xff")
    f = config_case("tokenizer_json_not_a_tokenizer", "is not a tokenizer.json",
                    stages={"tokenize": {"tokenizer": "tokenizer_json_not_a_tokenizer/tokenizer.json"}})
    (f / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "nothing"}, "hello": [1, 2]}))
    config_case("tokenizer_missing", "is not a file",
                stages={"tokenize": {"tokenizer": "tokenizer_missing/tokenizer.json"}})
    f = config_case("tokenizer_without_eos", "no end-of-text token",
                    stages={"tokenize": {"tokenizer": "tokenizer_without_eos/tokenizer.json"}})
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(["some text to learn from"] * 10, trainers.BpeTrainer(vocab_size=300, show_progress=False))
    tok.save(str(f / "tokenizer.json"))
    config_case("gpt2_files_garbage", "are not GPT-2",
                stages={"tokenize": {"tokenizer": {"encoder": "gpt2_files_garbage/encoder.json",
                                                   "merges": "gpt2_files_garbage/vocab.bpe"}}})
    (out / "gpt2_files_garbage" / "encoder.json").write_bytes(b"[1, 2, 3]")
    (out / "gpt2_files_garbage" / "vocab.bpe").write_bytes(b"\xff\xfe")
    config_case("yaml_python_tag", "not valid YAML",
                yaml_text="output: yaml_python_tag/run\nsources: !!python/object/apply:os.system ['touch yaml_python_tag/PWNED']\n")
    config_case("utf16_line_format", "cannot be split into lines",
                sources=[{"name": "s", "format": "jsonl", "paths": ["utf16_line_format/data/*.jsonl"],
                          "encoding": "utf-16"}])

    # --- manifest cases: a completed run, one file edited, then a rerun that must refuse
    outside = out / "manifest_outside"
    outside.mkdir(exist_ok=True)
    pq.write_table(pa.table({"text": ["outside the run folder"]}), outside / "secret.parquet")
    edits = {
        "manifest_shard_dotdot": ({"file": "ingest/manifest.json", "field": "path",
                                   "value": "../../../manifest_outside/secret.parquet"}, "is not a plain relative path"),
        "manifest_shard_absolute": ({"file": "ingest/manifest.json", "field": "path",
                                     "value": str((outside / "secret.parquet").resolve())}, "is not a relative path"),
        "manifest_dropped_dotdot": ({"file": "ingest/manifest.json", "field": "dropped_path",
                                     "value": "dropped/../../../manifest_outside/secret.parquet"},
                                    "is not a plain relative path"),
        "commit_record_file_dotdot": ({"file": "ingest/_work/commits/read/*.json", "field": "files.path",
                                       "value": "../../../manifest_outside/secret.parquet"},
                                      "is not a plain relative path"),
        "commit_record_shard_absolute": ({"file": "ingest/_work/commits/read/*.json", "field": "result.path",
                                          "value": str((outside / "secret.parquet").resolve())},
                                         "is not a relative path"),
    }
    for name, (edit, match) in edits.items():
        c.case(name, "manifest", {"kind": "manifest_error", "match": match}, files=["manifest_outside/secret.parquet"],
               edit=edit)
    return c.write()


def case_names() -> list[tuple[str, str, bool]]:
    """(name, group, memory measured) of every case, in order, from a tiny corpus written to a temporary folder."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="hostile-names-") as tmp:
        cases = json.loads(build(Path(tmp), full=False, tiny=True).read_text())["cases"]
    return [(case["name"], case["group"], "memory" in case) for case in cases]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--full", action="store_true", help="the sizes of issue 11: 10 GiB bomb, 1 GiB line, 100 MB document")
    args = parser.parse_args(argv)
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    path = build(args.out, args.full)
    print(f"{len(json.loads(path.read_text())['cases'])} cases in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
