"""Two ranks of a node, as two processes, sharing one cache folder: each file fetched once, each rank its own
samples, and the bound held for the node (the folder measured on disk while both run)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections import Counter

import pytest

from tests.loader.streaming import KW, URI, Watcher, dataset, upload
from tokenmill.loader import TokenLoader

RANK = """
import hashlib, json, os, sys, time
from tokenmill.loader import TokenLoader
rank, cache, bound, steps = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
loader = TokenLoader(sys.argv[5], cache_dir=cache, cache_bytes=bound, rank=rank, world_size=2, num_workers=1,
                     seq_len=16, global_batch_size=4, micro_batch_size=1, seed=3)
open(sys.argv[6] + f".{rank}", "w").close()  # ready: both ranks start reading together, as a job's ranks do
while not all(os.path.exists(sys.argv[6] + f".{r}") for r in (0, 1)):
    time.sleep(0.01)
digest, it = hashlib.sha256(), iter(loader)
for _ in range(steps):
    digest.update(json.dumps(next(it)["input_ids"].tolist()).encode())
stats = loader.fetch_stats()
loader.close()
print(json.dumps({"digest": digest.hexdigest(), **stats}))
"""


def _local_digest(path, rank: int, steps: int) -> str:
    loader = TokenLoader([str(path)], **{**KW, "global_batch_size": 4}, rank=rank, world_size=2)
    digest, it = hashlib.sha256(), iter(loader)
    for _ in range(steps):
        digest.update(json.dumps(next(it)["input_ids"].tolist()).encode())
    return digest.hexdigest()


@pytest.mark.parametrize("share", ["whole", pytest.param("quarter", marks=pytest.mark.slow)])
def test_two_ranks_share_one_cache(tmp_path, s3_server, share):
    root = tmp_path / "run" / "tokenize"
    path, total, _ = dataset(root)
    upload(s3_server, root)
    cache, steps = tmp_path / "cache", 300
    bound = total + 4096 if share == "whole" else total // 4
    with Watcher(cache) as watcher:
        procs = [subprocess.Popen([sys.executable, "-c", RANK, str(rank), str(cache), str(bound), str(steps), URI,
                                   str(tmp_path / "ready")], stdout=subprocess.PIPE, env=os.environ.copy())
                 for rank in (0, 1)]
        outs = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert [o["digest"] for o in outs] == [_local_digest(path, rank, steps) for rank in (0, 1)]
    assert watcher.peak <= bound and max(o["cache_peak_bytes"] for o in outs) <= bound
    if share == "whole":
        # The server's own request log: every token file was downloaded once for the node, by one rank or the other.
        log = (tmp_path / "moto.log").read_text()
        gets = Counter(re.findall(r'GET /tokens/(run/tokenize/train/\S+\.(?:bin|idx)) HTTP', log))
        assert gets and max(gets.values()) == 1, gets.most_common(3)
        assert sum(o["files_fetched"] for o in outs) == len(gets)
        assert all(o["files_fetched"] > 0 for o in outs)  # both ranks fetched, neither twice what the other did
        assert not any(p.suffix == ".head" for p in cache.iterdir())  # all the data fits: no file read by its head
