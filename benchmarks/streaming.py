"""Benchmark tokenmill's streaming TokenLoader against MosaicML Streaming and litdata over one local S3 server; JSON.

One run, one moto server (tests/s3server.py) on 127.0.0.1 serving the same random token files in three formats:
tokenmill's own tokenize output (Megatron ``.bin/.idx`` + ``tokens.json``), MosaicML Streaming's MDS (``MDSWriter``,
one fixed-length sample of seq_len + 1 tokens per record, shards the size of a token file) and litdata chunks
(``litdata.optimize``, one sample per record, chunks the size of a token file). Every contender reads the same
samples (sample i of a source is its tokens [i L, i L + L + 1)), shuffled, with 2 DataLoader workers, the same cache
bound (``--cache-fraction`` of the token bytes) and the same number of samples, in a fresh process of its own, and
yields int64 ``input_ids``/``labels`` batches. Contenders:

- ``tokenmill_stream``: ``TokenLoader("s3://.../tokens.json", ..., cache_dir, cache_bytes)``, cold (empty cache).
- ``tokenmill_fill`` and ``tokenmill_warm``: the same with a cache bound that holds every token file, first cold
  on an empty folder (fill), then in a new process on the folder that first pass filled, reading the same samples
  (warm: no file left to fetch, what the streaming loader costs over files already on the node).
- ``tokenmill_local``: ``TokenLoader`` memory-mapping the same files on local disk (page cache warm).
- ``mosaic``: ``streaming.StreamingDataset(remote, local, cache_limit, shuffle=True)`` + its StreamingDataLoader.
- ``litdata``: ``litdata.StreamingDataset("s3://...", max_cache_size, shuffle=True)`` + ``StreamingDataLoader``.

Reported per contender: samples/s (after the first batch), seconds to the first batch (from building the
dataset/loader, imports done), bytes the server sent (counted by a TCP proxy in front of it, HTTP headers included)
per byte of data used (samples x seq_len x 2 bytes, the shared last token counted once: 1.0 is a floor for a pass
that reads each token once; MDS and litdata store seq_len + 1 tokens per sample, so theirs is (L + 1) / L), and
the peak local disk of its cache folder (st_blocks of every file, sampled every 20 ms) against the cache bound plus
its largest file. Ratios: tokenmill cold against the faster of MosaicML Streaming and litdata (samples/s, and their
first batch against tokenmill's), tokenmill warm against its local loader, and, not at the same bound, tokenmill's
fill run against the faster of the two. Each contender runs ``--rounds`` times, alternating, and gets two tries per
round from an empty cache; one that fails both is reported under ``errors`` with its message (the JSON is still
printed) and the benchmark exits 1.

MosaicML Streaming pins numpy<2.2 and litdata pulls its own torch, so both run from a virtual environment the
benchmark builds under --dir (``streaming/streaming-venv``: ``pip install torch==2.13.0 mosaicml-streaming==0.13.0
litdata==0.2.76 boto3``, about 2 minutes and 1.9 GB, reused when present). ``--no-venv-build`` (quick size) skips them when it is absent and says so in the JSON.

    python benchmarks/streaming.py [--tokens 150000000] [--file-tokens 5000000] [--seq-len 2048] [--batch 8]
        [--samples 0] [--cache-fraction 0.25] [--workers 2] [--shuffle-block file] [--shuffle-window 1] [--rounds 2]
        [--dir bench] [--no-venv-build]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/s3server.py: the same moto server the tests start

from loader import write_dataset  # noqa: E402 - benchmarks/loader.py, beside this script
from tests.loader.streaming import Watcher  # noqa: E402 - the disk watcher the streaming tests use
from tests.s3server import S3Server  # noqa: E402
from tokenmill.tokenize import tokens_json  # noqa: E402

SOURCES = {"web": 0.6, "books": 0.3, "code": 0.1}
BUCKET = "bench"
# Pinned: the litdata side sets an option of its downloader module (see LITDATA_SIDE).
VENV_PACKAGES = ["torch==2.13.0", "mosaicml-streaming==0.13.0", "litdata==0.2.76", "boto3"]
WORKERS = 2


# ------------------------------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------------------------------


def streams_of(index_path: Path) -> list[list[str]]:
    """The ``.bin`` files of each source in the loader's stream order (source name, then prefix)."""
    index = tokens_json.read(index_path)
    by_source: dict[str, list[str]] = {}
    for entry in index.files("train"):  # by prefix
        source = "+".join(sorted(entry["by_source"]))
        by_source.setdefault(source, []).append(f"{index.prefix_path(entry)}.bin")
    return [by_source[s] for s in sorted(by_source)]


def epoch_samples(streams: list[list[str]], sizes: dict[str, int], seq_len: int) -> int:
    """Samples in an epoch: each stream's uint16 tokens (``sizes``: each ``.bin``'s bytes) cut into sequences."""
    return sum(max(0, (sum(sizes[b] // 2 for b in bins) - 1) // seq_len) for bins in streams)


# ------------------------------------------------------------------------------------------------------------------
# Measuring: bytes through a counting proxy, disk by a watcher thread
# ------------------------------------------------------------------------------------------------------------------


class CountingProxy:
    """A TCP proxy on 127.0.0.1 in front of the S3 server: counts the bytes the server sends, whatever the client."""

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.down = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reset(self) -> None:
        with self.lock:
            self.down = 0

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, count: bool) -> None:
        buf = bytearray(1 << 18)
        try:
            while (n := src.recv_into(buf)) > 0:
                dst.sendall(memoryview(buf)[:n])
                if count:
                    with self.lock:
                        self.down += n
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


# ------------------------------------------------------------------------------------------------------------------
# The contenders, each a script run in a fresh process that prints one JSON line
# ------------------------------------------------------------------------------------------------------------------

# Each side gets its arguments as one JSON string and reads `samples` samples in batches of `batch`, timing the
# first batch from the moment it builds its dataset (imports done) and samples/s over the rest.
READ_LOOP = """
def read(batches, t0, a):
    it = iter(batches)
    first = next(it)
    t1 = time.perf_counter()
    n = first["input_ids"].shape[0]
    assert first["input_ids"].shape[1] == a["seq_len"] and first["input_ids"].dtype == torch.int64
    while n < a["samples"]:
        n += next(it)["input_ids"].shape[0]
    t2 = time.perf_counter()
    return {"first_batch_s": t1 - t0, "samples": n, "samples_per_s": (n - first["input_ids"].shape[0]) / (t2 - t1)}
"""

TOKENMILL_SIDE = """
import json, sys, time
import torch
from tokenmill.loader import TokenLoader
a = json.loads(sys.argv[1])
""" + READ_LOOP + """
kw = dict(seq_len=a["seq_len"], global_batch_size=a["batch"], num_workers=a["workers"], seed=1)
if a.get("tm_shuffle_block"):
    kw.update(shuffle_block=a["tm_shuffle_block"], shuffle_window=a["tm_shuffle_window"])
if a.get("cache_dir"):
    kw.update(cache_dir=a["cache_dir"], cache_bytes=a["cache_bytes"])
if a.get("tm_prefetch_bytes"):
    kw.update(prefetch_bytes=a["tm_prefetch_bytes"])
t0 = time.perf_counter()
loader = TokenLoader(a["path"], **kw)
out = read(loader, t0, a)
out["fetch_stats"] = loader.fetch_stats()
print(json.dumps(out))
"""

MOSAIC_SIDE = """
import json, sys, time, types
# streaming/__init__ imports its image datasets, which import torchvision: the PyPI torchvision is built for CUDA
# torch and cannot load against the CPU torch here. None of them is used.
sys.modules.setdefault("streaming.vision", types.ModuleType("streaming.vision"))
import numpy as np
import torch
a = json.loads(sys.argv[1])
L = a["seq_len"]
""" + READ_LOOP + """
if a["mode"] == "prepare":
    from streaming import MDSWriter
    with MDSWriter(out=a["out"], columns={"tokens": f"ndarray:uint16:{L + 1}"}, size_limit=a["shard_bytes"]) as w:
        for bins in a["streams"]:
            tokens = np.concatenate([np.fromfile(b, dtype=np.uint16) for b in bins])
            for i in range((len(tokens) - 1) // L):
                w.write({"tokens": tokens[i * L:i * L + L + 1]})
    print(json.dumps({"prepared": a["out"]}))
    sys.exit(0)

from streaming import StreamingDataLoader, StreamingDataset
from streaming.base.util import clean_stale_shared_memory

def collate(items):
    x = torch.from_numpy(np.stack([item["tokens"] for item in items]).astype(np.int64))
    return {"input_ids": x[:, :-1], "labels": x[:, 1:]}

clean_stale_shared_memory()
t0 = time.perf_counter()
ds = StreamingDataset(remote=a["remote"], local=a["local"], cache_limit=a["cache_bytes"], shuffle=True,
                      shuffle_seed=1, batch_size=a["batch"], shuffle_block_size=a["shuffle_block"])
out = read(StreamingDataLoader(ds, batch_size=a["batch"], num_workers=a["workers"], collate_fn=collate), t0, a)
print(json.dumps(out))
"""

LITDATA_SIDE = """
import json, sys, time
import numpy as np
import torch
from litdata.streaming import downloader
# litdata fetches chunks with obstore, which refuses a plain-http endpoint unless told (the local server is http;
# a real S3 endpoint is https). Set at import so that spawned workers, which import this file, have it too.
downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = "true"
""" + READ_LOOP + """
def samples(job):
    bins, first, stop, L = job
    tokens = np.concatenate([np.fromfile(b, dtype=np.uint16) for b in bins])
    for i in range(first, stop):
        yield tokens[i * L:i * L + L + 1].copy()

def collate(items):
    x = torch.from_numpy(np.stack(items).astype(np.int64))  # items are uint16 arrays, as written
    return {"input_ids": x[:, :-1], "labels": x[:, 1:]}

def prepare(a):
    from litdata import optimize
    L, jobs = a["seq_len"], []
    for bins in a["streams"]:
        n = (sum(np.memmap(b, dtype=np.uint16, mode="r").size for b in bins) - 1) // L
        jobs += [(bins, s, min(s + a["chunk_samples"], n), L) for s in range(0, n, a["chunk_samples"])]
    # One record per sample, its default item loader: TokensLoader, its LLM path, crashes at a bounded cache (a
    # KeyError in TokensLoader.close: its chunk eviction races the reader's unmap; litdata 0.2.76).
    optimize(fn=samples, inputs=jobs, output_dir=a["out"], chunk_size=a["chunk_samples"], num_workers=1,
             reorder_files=False, verbose=False)
    with open(a["out"] + "/index.json") as f:
        if not json.load(f)["chunks"]:
            raise SystemExit(f"litdata.optimize wrote no chunk to {a['out']}")

def main(a):
    from litdata import StreamingDataLoader, StreamingDataset

    t0 = time.perf_counter()
    ds = StreamingDataset(a["remote"], cache_dir=a["local"], shuffle=True, seed=1, max_cache_size=a["cache_bytes"],
                          storage_options={"endpoint_url": a["endpoint"]})
    return read(StreamingDataLoader(ds, batch_size=a["batch"], num_workers=a["workers"], collate_fn=collate), t0, a)

if __name__ == "__main__":  # litdata starts its workers with spawn: they import this file
    a = json.loads(sys.argv[1])
    if a["mode"] == "prepare":
        prepare(a)
        print(json.dumps({"prepared": a["out"]}))
    else:
        print(json.dumps(main(a)))
"""


def last_json(stdout: str) -> dict:
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError(f"no JSON line in {stdout[-500:]!r}")


def descendants(pid: int) -> list[int]:
    """The processes under ``pid`` (children, their children...), from /proc; empty where there is no /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            # The fields after the command (in parentheses, which may hold spaces): state, then the parent's pid.
            ppid = int(entry.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        children.setdefault(ppid, []).append(int(entry.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def run_side(python: str, code: str, args: dict, env: dict, watch: Path | None = None,
             proxy: CountingProxy | None = None, timeout: float = 3600) -> dict:
    """One contender in a fresh process; its JSON plus the server's bytes and the peak disk under ``watch``."""
    script = Path(args["scripts"]) / f"side_{hashlib.sha256(code.encode()).hexdigest()[:12]}.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(code)
    if watch is not None:
        watch.mkdir(parents=True, exist_ok=True)
    if proxy is not None:
        proxy.reset()
    with Watcher(watch, interval=0.02, allocated=True) if watch is not None else contextlib.nullcontext() as watcher:
        proc = subprocess.Popen([python, str(script), json.dumps(args)], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=ROOT)
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            # The side and every process under it (DataLoader workers, which a blocked system call keeps from
            # noticing their parent's death), so that none is left holding the cache or the port.
            for pid in [*descendants(proc.pid), proc.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            raise RuntimeError(f"{script.name} ran past {timeout:g} s and was killed with its workers: "
                               f"{stderr[-2000:]}") from None
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: {stderr[-2000:]}")
    out = last_json(stdout)
    if proxy is not None:
        out["server_bytes"] = proxy.down
    if watcher:
        out["peak_disk_bytes"] = watcher.peak
    return out


def largest_unit(folder: Path) -> int:
    """The largest file a competitor's format has in ``folder`` (a shard or chunk; 0 when absent)."""
    return max((p.stat().st_size for p in folder.glob("*") if p.name != "index.json"), default=0)


def ensure_venv(venv: Path, build: bool) -> tuple[str | None, str | None]:
    """The Python of the competitors' virtual environment, built when absent (or built for other packages) and
    allowed; or None and why not."""
    python = venv / "bin" / "python"
    marker = venv / ".complete"
    if marker.exists() and json.loads(marker.read_text()) == VENV_PACKAGES:
        return str(python), None
    if not build:
        return None, f"{venv} not built (--no-venv-build; a full-size run builds it: pip install {' '.join(VENV_PACKAGES)})"
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, *VENV_PACKAGES], check=True)
    # The torchvision that mosaicml-streaming pulls from PyPI is built for CUDA torch and cannot load against the CPU
    # torch: neither library needs it here (MOSAIC_SIDE stubs out streaming.vision, litdata checks for it).
    subprocess.run([str(python), "-m", "pip", "uninstall", "-y", "-q", "torchvision"], check=True)
    marker.write_text(json.dumps(VENV_PACKAGES))
    return str(python), None


# ------------------------------------------------------------------------------------------------------------------
# The run
# ------------------------------------------------------------------------------------------------------------------


def summarize(runs: list[dict], used_bytes_per_sample: int, bound: int | None) -> dict:
    """Best samples/s and first batch over the rounds; bytes and disk as the worst round saw them."""
    out = {"samples_per_s": round(max(r["samples_per_s"] for r in runs), 1),
           "first_batch_s": round(min(r["first_batch_s"] for r in runs), 3), "samples": runs[0]["samples"]}
    if "server_bytes" in runs[0]:
        out["server_bytes"] = max(r["server_bytes"] for r in runs)
        out["bytes_fetched_per_byte_used"] = round(out["server_bytes"] / (runs[0]["samples"] * used_bytes_per_sample),
                                                   3)
    if "peak_disk_bytes" in runs[0]:
        out["peak_disk_bytes"] = max(r["peak_disk_bytes"] for r in runs)
        if bound is not None:
            out["disk_bound_bytes"] = bound
            out["peak_disk_within_bound"] = out["peak_disk_bytes"] <= bound
    if runs[-1].get("fetch_stats"):
        out["fetch_stats"] = runs[-1]["fetch_stats"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=150_000_000, help="tokens in all (uint16: 2 bytes each)")
    parser.add_argument("--file-tokens", type=int, default=5_000_000, help="tokens per token file")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--samples", type=int, default=0, help="samples each contender reads (0: 90%% of an epoch)")
    parser.add_argument("--cache-fraction", type=float, default=0.25, help="cache bound as a share of the token bytes")
    parser.add_argument("--workers", type=int, default=WORKERS, help="DataLoader workers of every contender")
    parser.add_argument("--shuffle-block", default="file",
                        help="tokenmill's block shuffle: 'file' (default: a block per token file), samples per block, "
                             "or 0 (the global shuffle)")
    parser.add_argument("--shuffle-window", type=int, default=1, help="tokenmill's block shuffle: blocks per window")
    parser.add_argument("--prefetch-bytes", type=int, default=None,
                        help="tokenmill's prefetch_bytes (default: the loader's own default)")
    parser.add_argument("--only", default=None,
                        help="comma-separated contenders to run (default all: tokenmill_local, tokenmill_stream, "
                             "tokenmill_fill, tokenmill_warm, mosaic, litdata)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, contenders alternating; each one's best kept")
    parser.add_argument("--dir", default="bench")
    parser.add_argument("--no-venv-build", action="store_true",
                        help="skip MosaicML Streaming and litdata when their virtual environment is absent")
    args = parser.parse_args()
    only = None if args.only is None else set(args.only.split(","))

    base = Path(args.dir).resolve() / "streaming"
    data = base / f"tokens-{args.tokens}-{args.file_tokens}"
    index = write_dataset(data / "tokenmill", args.tokens, file_tokens=args.file_tokens)
    streams = streams_of(index)
    bins = [b for s in streams for b in s]
    sizes = {b: os.path.getsize(b) for b in bins}  # each .bin stat'ed once
    data_bytes = sum(sizes.values())
    largest = max(sizes.values())
    largest_pair = max(sizes[b] + os.path.getsize(b[:-4] + ".idx") for b in bins)
    cache_bytes = int(args.cache_fraction * data_bytes)
    if cache_bytes < 4 * largest:  # MosaicML Streaming refuses a cache_limit under four shards
        parser.error(f"--cache-fraction {args.cache_fraction}: a cache of {cache_bytes} bytes holds fewer than four "
                     f"token files of {largest} bytes (MosaicML Streaming's least cache_limit); raise it or lower "
                     "--file-tokens")
    per_epoch = epoch_samples(streams, sizes, args.seq_len)
    samples = args.samples or int(0.9 * per_epoch) // args.batch * args.batch
    samples_per_file = args.file_tokens // (args.seq_len + 1)
    python, skipped = ensure_venv(base / "streaming-venv", build=not args.no_venv_build)
    result: dict = {"tokens": args.tokens, "files": len(bins), "data_bytes": data_bytes, "seq_len": args.seq_len,
                    "batch": args.batch, "workers": args.workers, "samples": samples, "epoch_samples": per_epoch,
                    "cache_bytes": cache_bytes, "cpus": os.cpu_count(),
                    "warm": "a second process on the cache folder a first pass over the same samples filled, with a "
                            "cache bound that holds every file",
                    "data_used": "samples x seq_len x 2 bytes (with --samples 0, 90% of an epoch: fetching every "
                                 "file once is then about 1.11 bytes per byte used)",
                    "tokenmill_fill": "the first pass of warm, cold, with a cache that holds every file"}
    if skipped:
        result["skipped_contenders"] = {"mosaic": skipped, "litdata": skipped}

    scripts = base / "scripts"
    common = {"seq_len": args.seq_len, "batch": args.batch, "samples": samples, "workers": args.workers,
              "scripts": str(scripts)}
    # tokenmill's sides (stream, fill, warm, local alike, so warm against local compares one order): a block shuffle
    # by token file, windows of --shuffle-window blocks; the others shuffle their own way (MosaicML Streaming in
    # blocks that fit the cache, below; litdata chunk by chunk).
    tokenmill_options(args, common, result)
    env_base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env_base["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env_base.get("PYTHONPATH")) if p)
    if python:  # the competitors' formats, written once beside the token files
        prepare_formats(python, data, common, streams, env_base, largest, samples_per_file)

    # A SIGTERM (a runner's timeout) unwinds through `finally`, so the server child is stopped, not left listening.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    server = S3Server(log=base / "moto.log").start()
    proxy = CountingProxy(server.port)
    try:
        server.create_bucket(BUCKET)
        server.upload_tree(data / "tokenmill", BUCKET, "tokenmill")
        for name in ("mds", "litdata_samples"):
            if (data / name).is_dir() and python:
                server.upload_tree(data / name, BUCKET, name)
        env = {**env_base, **server.env(), "AWS_ENDPOINT_URL": proxy.endpoint, "S3_ENDPOINT_URL": proxy.endpoint}
        caches = base / "caches"
        uri = f"s3://{BUCKET}/tokenmill/{tokens_json.FILE}"
        sample_bytes = args.seq_len * 2
        runs: dict[str, list[dict]] = {}
        errors: dict[str, str] = {}
        failed_tries: dict[str, list[str]] = {}

        def attempt(name: str, python_: str, code: str, side: dict, env_: dict, watch: Path | None = None,
                    keep_cache: bool = False) -> None:
            """One contender's run, tried twice from an empty cache (a third-party loader's race must not sink the
            whole run); each failed try is reported, and a second failure fails the benchmark while the others
            still run."""
            if only is not None and name not in only:
                return
            for _ in range(2):
                if watch is not None and not keep_cache:  # each try starts from an empty cache folder
                    shutil.rmtree(watch, ignore_errors=True)
                try:
                    runs.setdefault(name, []).append(run_side(python_, code, side, env_, watch,
                                                              proxy if watch is not None else None))
                    return
                except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
                    failed_tries.setdefault(name, []).append(str(e)[-1500:])
            errors[name] = failed_tries[name][-1]

        for _ in range(args.rounds):
            for b in bins:
                Path(b).read_bytes()  # the local loader reads from a warm page cache, as after the first epoch
            attempt("tokenmill_local", sys.executable, TOKENMILL_SIDE, {**common, "path": str(index)}, env_base)
            cold = caches / "tokenmill"
            attempt("tokenmill_stream", sys.executable, TOKENMILL_SIDE,
                    {**common, "path": uri, "cache_dir": str(cold), "cache_bytes": cache_bytes}, env, cold)
            # Warm: a first pass with a cache that holds every file fills it (itself a cold run, unbounded), then a
            # new process reads the same samples from the same folder.
            warm = caches / "tokenmill_warm"
            whole = {**common, "path": uri, "cache_dir": str(warm), "cache_bytes": data_bytes + 2 * largest}
            attempt("tokenmill_fill", sys.executable, TOKENMILL_SIDE, whole, env, warm)
            attempt("tokenmill_warm", sys.executable, TOKENMILL_SIDE, whole, env, warm, keep_cache=True)
            if python:
                local = caches / "mosaic"
                attempt("mosaic", python, MOSAIC_SIDE, {
                    **common, "mode": "read", "remote": f"s3://{BUCKET}/mds", "local": str(local),
                    "cache_bytes": cache_bytes,
                    # Shuffle blocks of half the cache's samples per worker, so a block's shards fit the cache
                    # (the default, 262,144 samples, spans the whole dataset and thrashes a bounded cache).
                    "shuffle_block": max(1, cache_bytes // (2 * max(1, args.workers) * (args.seq_len + 1) * 2))}, env, local)
                local = caches / "litdata"
                attempt("litdata", python, LITDATA_SIDE, {
                    **common, "mode": "read", "remote": f"s3://{BUCKET}/litdata_samples", "local": str(local),
                    "cache_bytes": cache_bytes, "endpoint": proxy.endpoint}, env, local)
    finally:
        proxy.close()
        server.stop()

    # "One file": a token file's .bin and .idx for tokenmill (its cache holds both), a shard or chunk for the others.
    unit = {"tokenmill_stream": largest_pair, "mosaic": largest_unit(data / "mds"),
            "litdata": largest_unit(data / "litdata_samples")}
    result["contenders"] = {name: summarize(r, sample_bytes, cache_bytes + unit[name] if name in unit else None)
                            for name, r in runs.items() if r}
    compare(result)
    add_failures(result, failed_tries, errors)
    print(json.dumps(result, indent=1))
    return 1 if errors else 0


def add_failures(result: dict, failed_tries: dict[str, list[str]], errors: dict[str, str]) -> None:
    """Each contender's failed tries (how many, the first one's error) and the errors that failed the benchmark."""
    if failed_tries:
        result["failed_tries"] = {n: len(t) for n, t in failed_tries.items()}
        result["failed_try_errors"] = {n: t[0] for n, t in failed_tries.items()}
    if errors:
        result["errors"] = errors


def tokenmill_options(args: argparse.Namespace, common: dict, result: dict) -> None:
    """tokenmill's block shuffle and prefetch options, into every tokenmill side's settings and into the result."""
    block = "file" if args.shuffle_block == "file" else int(args.shuffle_block)
    if block:
        common.update(tm_shuffle_block=block, tm_shuffle_window=args.shuffle_window)
    if args.prefetch_bytes:
        common.update(tm_prefetch_bytes=args.prefetch_bytes)
        result["tokenmill_prefetch_bytes"] = args.prefetch_bytes
    result["tokenmill_shuffle"] = {"shuffle_block": block, "shuffle_window": args.shuffle_window} if block else "global"


def prepare_formats(python: str, data: Path, common: dict, streams: list, env: dict, shard_bytes: int,
                    chunk_samples: int) -> None:
    """Write MosaicML Streaming's and litdata's formats of the token files beside them, once (kept between runs)."""
    for name, code, extra in (("mds", MOSAIC_SIDE, {"shard_bytes": shard_bytes}),
                              ("litdata_samples", LITDATA_SIDE, {"chunk_samples": chunk_samples})):
        out = data / name
        if not (out / "index.json").exists():
            shutil.rmtree(out, ignore_errors=True)
            run_side(python, code, {**common, **extra, "mode": "prepare", "out": str(out), "streams": streams}, env)


def compare(result: dict) -> None:
    """The result's ratios between contenders (the fastest other loader named) and the acceptance checks."""
    c = result["contenders"]
    ratios = {}
    if "tokenmill_warm" in c and "tokenmill_local" in c:
        ratios["tokenmill_warm_vs_local"] = round(c["tokenmill_warm"]["samples_per_s"]
                                                  / c["tokenmill_local"]["samples_per_s"], 3)
    others = {n: c[n]["samples_per_s"] for n in ("mosaic", "litdata") if n in c}
    if others:
        best = max(others, key=others.get)
        result["fastest_other"] = best
        if "tokenmill_stream" in c:
            ratios["tokenmill_vs_fastest_other"] = round(c["tokenmill_stream"]["samples_per_s"] / others[best], 3)
            ratios["first_batch_fastest_other_vs_tokenmill"] = round(
                c[best]["first_batch_s"] / c["tokenmill_stream"]["first_batch_s"], 3)
        if "tokenmill_fill" in c:  # not the same bound: tokenmill's cache holds every file, the others' do not
            ratios["tokenmill_unbounded_vs_fastest_other"] = round(c["tokenmill_fill"]["samples_per_s"]
                                                                   / others[best], 3)
    result["ratios"] = ratios
    result["acceptance"] = {
        "tokenmill_at_least_fastest_other": ratios["tokenmill_vs_fastest_other"] >= 1.0
        if "tokenmill_vs_fastest_other" in ratios else None,
        "warm_within_0.8_of_local": ratios["tokenmill_warm_vs_local"] >= 0.8
        if "tokenmill_warm_vs_local" in ratios else None,
        "peak_disk_within_cache_bytes_plus_one_file": c.get("tokenmill_stream", {}).get("peak_disk_within_bound")}


if __name__ == "__main__":
    sys.exit(main())
