"""`tokenmill train --nproc`: ranks joined through a file store, every socket on 127.0.0.1, the same losses as
torchrun, and a killed rank stopping the rest. Also what torchrun itself listens on, as docs/security.md says."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.netstat import is_loopback, listeners
from tests.train.runs import config, env, free_port, losses, write_config, write_tokens

WILDCARD = ("::", "0.0.0.0")


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    return write_tokens(tmp_path_factory.mktemp("launch-tokens"))


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it, from /proc's parent links."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def watch(cmd: list[str], timeout: float = 240, **extra_env: str) -> tuple[subprocess.CompletedProcess, set]:
    """Run ``cmd``; every listening socket its process tree held while it ran."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(**extra_env))
    seen: set = set()
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        seen |= listeners(descendants(proc.pid))
        time.sleep(0.05)
    out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), seen


def start_past_checkpoint(path: Path, out: Path) -> subprocess.Popen:
    """``tokenmill train --nproc 2 PATH``, returned once its step-4 checkpoint is committed."""
    cmd = [sys.executable, "-m", "tokenmill.cli", "train", "--nproc", "2", str(path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())
    deadline = time.monotonic() + 240
    while not (out / "checkpoints" / "step-000000004" / "COMMITTED").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no step-4 checkpoint: {proc.communicate()[1][-3000:]}")
        time.sleep(0.05)
    return proc


@pytest.mark.long  # a run by --nproc and one by torchrun, with the sockets watched: about 26 s, `make test-all`
def test_nproc_trains_like_torchrun_and_only_torchrun_store_leaves_the_loopback(tokens, tmp_path):
    short = {"steps": 8, "eval_every": 0, "checkpoint_every": 4}
    port = free_port()
    by_torchrun = tmp_path / "torchrun"

    def defaults(cfg: dict) -> dict:  # dropout and the loader's workers as the trainer has them by default
        return {k: v for k, v in cfg.items() if k not in ("dropout", "loader")}

    torchrun = [str(Path(sys.executable).parent / "torchrun"), "--nnodes", "1", "--nproc-per-node", "2",
                "--master-addr", "127.0.0.1", "--master-port", str(port), "-m", "tokenmill.cli", "train",
                str(write_config(tmp_path / "a.yaml", defaults(config(tokens, by_torchrun, **short))))]
    done, torchrun_seen = watch(torchrun)
    assert done.returncode == 0, done.stderr[-3000:]

    by_nproc = tmp_path / "nproc"
    cmd = [sys.executable, "-m", "tokenmill.cli", "train", "--nproc", "2",
           str(write_config(tmp_path / "b.yaml", defaults(config(tokens, by_nproc, **short))))]
    done, nproc_seen = watch(cmd)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 x cpu" in done.stdout  # rank 0's summary: both ranks were in the group

    # The same two ranks, the same batches, the same sums: the same losses.
    assert losses(by_nproc) == losses(by_torchrun) and len(losses(by_nproc)) == 8
    # --nproc: gloo listened (so something was seen), and only on the loopback.
    assert nproc_seen and all(is_loopback(a) for a, _ in nproc_seen), nproc_seen
    # torchrun: gloo is on the loopback too, but torch's TCPStore binds the wildcard address on the master port
    # whatever --master-addr says. If torch ever binds --master-addr, this fails: update docs/security.md.
    store = {a for a, p in torchrun_seen if p == port}
    assert store and store <= set(WILDCARD), torchrun_seen
    assert all(is_loopback(a) for a, p in torchrun_seen if p != port), torchrun_seen


@pytest.mark.slow  # two launches of two ranks: about 30 s; the launcher stopping every rank: the SIGTERM test below
def test_a_killed_rank_stops_the_other_and_the_rerun_resumes(tokens, tmp_path):
    out = tmp_path / "run"
    path = write_config(tmp_path / "train.yaml", config(tokens, out, steps=12, eval_every=0, checkpoint_every=4,
                                                        dropout=0.0))
    proc = start_past_checkpoint(path, out)
    try:
        ranks = {}
        for pid in descendants(proc.pid)[1:]:
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            rank = [v[5:].decode() for v in environ if v.startswith(b"RANK=")]
            if rank:
                ranks[rank[0]] = pid
        assert set(ranks) == {"0", "1"}, ranks
        os.kill(ranks["1"], signal.SIGKILL)
        _, err = proc.communicate(timeout=120)  # rank 0 would otherwise wait in a collective for 30 minutes
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGKILL, err[-3000:]
    assert "tokenmill train: rank 1 was killed by SIGKILL" in err, err[-3000:]
    assert not Path(f"/proc/{ranks['0']}").exists() or b"zombie" in Path(f"/proc/{ranks['0']}/status").read_bytes()

    resumed = subprocess.run([sys.executable, "-m", "tokenmill.cli", "train", "--nproc", "2", str(path)],
                             capture_output=True, text=True, timeout=240, env=env())
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert sorted(losses(out)) == list(range(1, 13))


def test_a_bad_config_stops_before_any_rank_starts(tokens, tmp_path, capsys):
    from tokenmill.cli import main

    path = write_config(tmp_path / "bad.yaml", {"data": str(tmp_path / "none"), "model": "opt-tiny", "steps": -1})
    assert main(["train", "--nproc", "2", str(path)]) == 2
    assert "steps: Input should be greater than 0" in capsys.readouterr().err
    good = write_config(tmp_path / "ok.yaml", config(tokens, tmp_path / "o"))
    assert main(["train", "--nproc", "0", str(good)]) == 2
    assert "--nproc: must be at least 1" in capsys.readouterr().err and not (tmp_path / "o").exists()


@pytest.mark.long  # two ranks started, signalled and waited out: about 12 s, `make test-all`
def test_sigterm_to_the_launcher_reaches_every_rank(tokens, tmp_path):
    out = tmp_path / "run"
    path = write_config(tmp_path / "train.yaml", config(tokens, out, steps=200, eval_every=0, checkpoint_every=4))
    proc = start_past_checkpoint(path, out)
    try:
        ranks = descendants(proc.pid)[1:]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "was killed by SIGTERM" in err, err[-3000:]
    assert ranks and not [p for p in ranks if Path(f"/proc/{p}").exists()
                          and b"zombie" not in Path(f"/proc/{p}/status").read_bytes()]
    assert max(losses(out)) < 200  # stopped, not finished


def test_a_rank_failing_with_a_status_gives_that_status(tmp_path, caplog):
    from tokenmill.train.launch import launch

    # Each rank fails to read the config (exit 2, as `tokenmill train` does); whichever ends first is named, in the
    # log: the library prints nothing (`tokenmill train --nproc` prints it, as the killed-rank test above shows).
    with caplog.at_level(logging.ERROR, logger="tokenmill.train.launch"):
        assert launch(["train", str(tmp_path / "missing.yaml")], 2) == 2
    assert any(re.match(r"tokenmill train: rank [01] exited with status 2", r.getMessage()) for r in caplog.records)


# A rank of a run ending on an error: it leaves its note as the trainer does (`note_error`), then exits with `how`.
RANK = """
import os, sys, time
from tokenmill.train.errors import DiskFullError
from tokenmill.train.launch import note_error

rank, wait, how = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
time.sleep(wait)
if how == "kill":
    os.kill(os.getpid(), 9)
note_error(DiskFullError("the disk holding /run is full"), rank, 2)
if how == "abort":  # what torch's teardown does to a gloo rank now and then, after the CLI said its line
    os.abort()
sys.exit(74)
"""


def _ranks(folder: Path, *plans: tuple[float, str]) -> list[subprocess.Popen]:
    from tokenmill.train.watchdog import HANG_DIR_ENV

    return [subprocess.Popen([sys.executable, "-c", RANK, str(rank), str(wait), how],
                             env=env(**{HANG_DIR_ENV: str(folder)})) for rank, (wait, how) in enumerate(plans)]


def _first_failed(procs: list[subprocess.Popen]) -> list[int]:
    while not any(p.poll() for p in procs):
        time.sleep(0.02)
    return [rank for rank, p in enumerate(procs) if p.returncode]


def test_a_quiet_rank_leaves_its_error_to_rank_0_which_says_it_alone(tmp_path):
    """Rank 1 stops on an error every rank shares and stays quiet; rank 0, slower, ends by itself (it is not stopped)
    and said it: the launcher adds nothing (on 0a49688: "rank 1 exited with status 74; stopped rank(s) 0")."""
    from tokenmill.train.launch import _stop_after

    procs, said = _ranks(tmp_path, (1.5, "exit"), (0.0, "exit")), []
    assert _stop_after(_first_failed(procs), procs, said.append, tmp_path) == 74
    assert said == [] and procs[0].returncode == 74


def test_what_a_quiet_rank_left_to_a_rank_0_that_never_says_it_is_said_by_the_launcher(tmp_path):
    from tokenmill.train.launch import _stop_after

    procs, said = _ranks(tmp_path, (60.0, "exit"), (0.0, "exit")), []
    assert _stop_after(_first_failed(procs), procs, said.append, tmp_path, grace_s=1.0) == 74
    assert said == ["tokenmill train: rank 1: the disk holding /run is full"]
    assert procs[0].returncode == -signal.SIGTERM


def test_a_rank_that_explained_itself_is_not_repeated_even_if_its_teardown_aborts(tmp_path):
    from tokenmill.train.launch import _stop_after

    procs, said = _ranks(tmp_path, (0.0, "abort"), (60.0, "exit")), []
    assert _stop_after(_first_failed(procs), procs, said.append, tmp_path) == 74
    assert said == [] and procs[0].returncode == -signal.SIGABRT


def test_a_rank_killed_without_a_word_is_named_even_when_another_explained_its_error(tmp_path):
    from tokenmill.train.launch import _stop_after

    procs, said = _ranks(tmp_path, (0.3, "exit"), (0.0, "kill")), []
    for p in procs:
        p.wait()
    assert _stop_after([0, 1], procs, said.append, tmp_path) == 128 + signal.SIGKILL
    assert said == ["tokenmill train: rank 1 was killed by SIGKILL"]
