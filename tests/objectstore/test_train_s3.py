"""`tokenmill train` with `data: s3://...`: the run trains from the local S3 server through the loader's node cache,
killed and resumed, with the losses of the same run on the local files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.train.runs import config, env, losses, write_config, write_tokens


def _train(cfg_path: Path, output: Path, kill_after: int | None = None) -> int:
    """`tokenmill train` in its own process group; killed (SIGKILL) once metrics.jsonl has step ``kill_after``."""
    proc = subprocess.Popen([sys.executable, "-m", "tokenmill.cli", "train", str(cfg_path)], env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline:
        if kill_after is not None and kill_after in losses(output):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return -9
        time.sleep(0.1)
    out = proc.communicate()[0].decode(errors="replace")
    assert proc.returncode is not None, "timed out"
    assert proc.returncode == 0, out[-3000:]
    return proc.returncode


@pytest.mark.slow  # three runs, two from moto: about 15 s; `make test`: the streaming loader on S3 (test_loader_*.py)
def test_train_from_s3_killed_and_resumed_gives_the_local_losses(tmp_path, s3_server):
    write_tokens(tmp_path / "run" / "tokenize")
    s3_server.create_bucket("data")
    s3_server.upload_tree(tmp_path / "run", "data", "runs/one")
    short = {"steps": 8, "checkpoint_every": 3, "eval_every": 4}
    local = tmp_path / "local"
    _train(write_config(tmp_path / "local.yaml", config(tmp_path / "run", local, **short)), local)
    remote = tmp_path / "remote"
    cfg = config("s3://data/runs/one", remote, **short,
                 loader={"num_workers": 0, "cache_dir": str(tmp_path / "cache")})
    path = write_config(tmp_path / "remote.yaml", cfg)
    assert _train(path, remote, kill_after=5) == -9
    _train(path, remote)
    assert losses(remote) == losses(local) and sorted(losses(local)) == list(range(1, 9))
    events = [json.loads(line) for line in (remote / "events.jsonl").read_text().splitlines()]
    assert [e["action"] for e in events] == ["resume"]
    assert any((tmp_path / "cache").rglob("*.bin"))  # the token files came through the node cache
    resolved = json.loads((remote / "config.json").read_text())
    assert resolved["data"][0]["path"] == "s3://data/runs/one"
