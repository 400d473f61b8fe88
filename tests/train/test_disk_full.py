"""A full disk in a training run, for real (a small tmpfs): while checkpointing or between checkpoints (the logs,
config.json), on one rank or two, the run stops with one line naming the folder and exit 74, nothing half-written
left behind (a JSON-lines log keeps whole lines), the previous checkpoint intact and resumed once there is space; the
watchdog's heartbeat never ends the run. With --nproc, an error every rank shares is said once.

A tmpfs needs root (or CAP_SYS_ADMIN); where it cannot be mounted these tests are skipped, saying why."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from tokenmill.cli import main
from tokenmill.train.checkpoint import MARKER, CheckpointManager, ModelOptimizerState
from tokenmill.train.metrics import EVENTS_JSONL, METRICS_JSONL, RANKS_JSONL, JsonLines
from tokenmill.train.watchdog import Progress, Watchdog, WatchdogConfig, heartbeat_path
from tests.train.runs import config, env, write_config, write_tokens

PAGE = 4096  # a tmpfs gives a file its space a page at a time
LOGS = (METRICS_JSONL, EVENTS_JSONL, RANKS_JSONL)


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    return write_tokens(tmp_path_factory.mktemp("disk-full-tokens"))


@contextlib.contextmanager
def tmpfs(path: Path, size: int) -> Iterator[Path]:
    """A tmpfs of ``size`` bytes mounted on ``path`` (skips the test when that is not allowed here)."""
    path.mkdir(parents=True)
    if shutil.which("mount") is None:
        pytest.skip("no `mount` command: a real full disk needs a small tmpfs")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                          text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode}): a real full disk needs "
                    "root or CAP_SYS_ADMIN")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def resize(mount: Path, size: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(mount)], check=True)


def fill(mount: Path, leave: int = 0) -> Path:
    """A file that takes all the free space on ``mount`` but ``leave`` bytes (0: until the disk says ENOSPC)."""
    filler = mount / "filler"
    with open(filler, "wb", buffering=0) as f:  # unbuffered: the ENOSPC comes from the write, not from close
        want = shutil.disk_usage(mount).free - leave
        try:
            while want > 0 or not leave:
                want -= f.write(b"\0" * (min(want, 1 << 20) if want > 0 else 4096))
        except OSError as e:
            assert e.errno == errno.ENOSPC and not leave
    return filler


def leftovers(root: Path) -> list[str]:
    """Temp files and staging folders anywhere under ``root``."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".tmp" in p.name)


def _app(seed: int = 0) -> tuple[dict, nn.Module]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(256, 256), nn.Linear(256, 256))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 256)).sum().backward()
    opt.step()
    return {"train": ModelOptimizerState(model, opt)}, model


def test_a_save_that_fills_the_disk_raises_disk_full_removes_its_files_and_keeps_the_previous(tmp_path):
    """torch's zip writer turns the short write into `RuntimeError: unexpected pos`; the save still says disk full."""
    from tokenmill.train.checkpoint import DiskFullError

    with tmpfs(tmp_path / "disk", 8 << 20) as disk:
        mgr = CheckpointManager(disk / "ckpt")
        app, model = _app()
        first = mgr.save(1, app, healthy=True)
        size = sum(f.stat().st_size for f in first.iterdir())
        fill(disk, leave=size // 2)
        with pytest.raises(DiskFullError) as raised:
            mgr.save(2, _app(seed=1)[0], healthy=True)
        assert re.fullmatch(rf"checkpoint step 2 not written: the disk holding {re.escape(str(disk / 'ckpt'))} is "
                            r"full \(no space left on device, [\d,]+ bytes free\); what it had written was removed "
                            r"and the previous checkpoint \(step 1\) is intact: .*resume from it", str(raised.value))
        assert raised.value.exit_code == 74
        assert sorted(p.name for p in (disk / "ckpt").iterdir()) == ["step-000000001"] and not leftovers(disk)
        assert mgr.verify(first) is None
        fresh, restored = _app(seed=2)
        assert mgr.load(fresh).step == 1
        assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), restored.state_dict().values()))


def test_a_marker_that_cannot_be_written_puts_back_the_checkpoint_it_replaced(tmp_path, monkeypatch):
    """Saving a step again (after a rollback) on a disk that fills at the marker: the new one is removed and the old
    one of that step is back, marker and all."""
    from tokenmill.train import checkpoint
    from tokenmill.train.checkpoint import DiskFullError

    mgr = CheckpointManager(tmp_path)
    app, model = _app()
    mgr.save(1, app, healthy=True)
    real = checkpoint.write_atomic

    def no_space_for_markers(path: Path, text: str, **kwargs) -> None:
        if path.name == MARKER:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, text, **kwargs)

    monkeypatch.setattr(checkpoint, "write_atomic", no_space_for_markers)
    with pytest.raises(DiskFullError, match="checkpoint step 1 not written: the disk holding"):
        mgr.save(1, _app(seed=1)[0], healthy=True)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000000001"] and mgr.verify(mgr.path_for(1)) is None
    fresh, restored = _app(seed=2)
    assert mgr.load(fresh).step == 1
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), restored.state_dict().values()))


def test_a_full_disk_leaves_no_temp_file_of_a_small_atomic_write(tmp_path):
    from tokenmill.train.checkpoint import DiskFullError

    with tmpfs(tmp_path / "disk", 4 << 20) as disk:
        mgr = CheckpointManager(disk / "ckpt")
        first = mgr.save(1, {"w": torch.zeros(8)}, healthy=True)
        before = (first / "meta.json").read_bytes()
        fill(disk)
        with pytest.raises(DiskFullError, match=rf"meta.json of checkpoint step 1 not written: the disk holding "
                                                rf"{re.escape(str(first))} is full \(no space left on device"):
            mgr.mark(1, False)
        assert (first / "meta.json").read_bytes() == before and not leftovers(disk)


def test_the_watchdog_heartbeat_on_a_full_disk_neither_raises_nor_leaves_a_temp_file(tmp_path, caplog):
    with tmpfs(tmp_path / "disk", 2 << 20) as disk:
        progress = Progress()
        dog = Watchdog(WatchdogConfig(timeout_s=600), progress, 0, 1, "cpu", disk / "run")
        dog._start(None)
        beat = heartbeat_path(dog.folder, 0)
        written = json.loads(beat.read_text())
        caplog.set_level(logging.INFO, logger="tokenmill.train.watchdog")
        filler = fill(disk)
        progress.begin(1)  # a new heartbeat to write, which no longer fits (the thread may try it first)
        dog.stop()  # its last heartbeat: on 0a49688 an OSError out of the trainer's `finally`
        assert not leftovers(disk)
        assert json.loads(beat.read_text()) == written  # the previous heartbeat, whole
        said = [r for r in caplog.records if "cannot write its heartbeat" in r.getMessage()]
        assert len(said) == 1 and said[0].levelno == logging.INFO and "the disk is full" in said[0].getMessage()
        filler.unlink()
        dog._beat()  # space again: the heartbeat resumes
        assert json.loads(beat.read_text())["step"] == 1


def _train(path: Path, *args: str) -> subprocess.CompletedProcess:
    # A wide console: rich would otherwise fold the message (and a long path) at 80 columns.
    return subprocess.run([sys.executable, "-m", "tokenmill.cli", "train", str(path), *args], capture_output=True,
                          text=True, timeout=300, env=env(COLUMNS="500"))


def _events(out: Path) -> list[tuple[str, int]]:
    return [(e["action"], e["step"]) for e in map(json.loads, (out / "events.jsonl").read_text().splitlines())]


def _stopped_with_one_line(proc: subprocess.CompletedProcess, out: Path, step: int, previous: int) -> list[str]:
    """Asserts the run ended with 74 and its first line of stderr is the message; returns the other lines."""
    folder = re.escape(str(out / "checkpoints"))
    expected = (rf"error: checkpoint step {step} not written: the disk holding {folder} is full \(no space left on "
                rf"device, [\d,]+ bytes free\); what it had written was removed and the previous checkpoint \(step "
                rf"{previous}\) is intact: free space there \(or point output at a larger disk\), then run the same "
                r"command to resume from it")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 74, proc.stderr
    assert re.fullmatch(expected, lines[0]), proc.stderr
    return lines[1:]


def test_a_full_disk_while_checkpointing_stops_with_one_line_and_the_run_resumes(tokens, tmp_path, capsys):
    with tmpfs(tmp_path / "disk", 64 << 20) as disk:
        out = disk / "run"
        path = write_config(tmp_path / "t.yaml", config(tokens, out, steps=2, checkpoint_every=2, eval_every=0,
                                                        warmup_steps=1, log_every=100))
        assert main(["train", str(path)]) == 0, capsys.readouterr().err
        first = out / "checkpoints" / "step-000000002"
        size = sum(f.stat().st_size for f in first.iterdir())
        resize(disk, shutil.disk_usage(disk).used + size // 2)  # room for half a checkpoint
        rest = _stopped_with_one_line(_train(path, "--steps", "4"), out, 4, 2)
        assert rest == []  # one line: no traceback, no heartbeat warning
        assert not leftovers(out)
        assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-000000002"]
        assert CheckpointManager(out / "checkpoints").verify(first) is None
        resize(disk, 64 << 20)
        assert main(["train", str(path), "--steps", "4"]) == 0, capsys.readouterr().err
        assert _events(out) == [("resume", 2), ("resume", 2)]  # the failed run resumed from step 2 too
        assert (out / "checkpoints" / "step-000000004" / MARKER).is_file()


@pytest.mark.slow  # two ranks, launched twice: about 30 s on two busy cores
def test_two_ranks_on_a_full_disk_stop_with_74_and_leave_nothing(tokens, tmp_path):
    with tmpfs(tmp_path / "disk", 64 << 20) as disk:
        out = disk / "run"
        path = write_config(tmp_path / "t.yaml", config(tokens, out, steps=2, checkpoint_every=2, eval_every=0,
                                                        warmup_steps=1, log_every=100))
        assert _train(path, "--nproc", "2").returncode == 0
        first = out / "checkpoints" / "step-000000002"
        resize(disk, shutil.disk_usage(disk).used + sum(f.stat().st_size for f in first.iterdir()) // 2)
        proc = _train(path, "--nproc", "2", "--steps", "4")
        assert _stopped_with_one_line(proc, out, 4, 2) == []  # rank 0 says it; rank 1 and the launcher add nothing
        assert not leftovers(out) and CheckpointManager(out / "checkpoints").verify(first) is None
        resize(disk, 64 << 20)
        assert _train(path, "--nproc", "2", "--steps", "4").returncode == 0
        assert _events(out) == [("resume", 2), ("resume", 2)]  # the failed run resumed from step 2 too


# ---- between checkpoints: the logs, config.json, summary.json

def _whole(path: Path) -> list[dict]:
    """A log's rows, asserting what a full disk must not leave: a line that is not JSON, or a last line cut short."""
    text = path.read_text(encoding="utf-8")
    assert not text or text.endswith("\n"), f"{path} ends in half a line: {text[-120:]!r}"
    return [json.loads(line) for line in text.splitlines()]


def _steps(path: Path) -> list[int]:
    return [r["step"] for r in _whole(path)]


def _full_between(out: Path, previous: int | None) -> str:
    """The one line of a full disk met between checkpoints, by any of the run's own files."""
    kept = (rf"the previous checkpoint \(step {previous}\) is intact: free space there \(or point output at a larger "
            r"disk\), then run the same command to resume from it") if previous is not None else \
        r"no earlier checkpoint exists: free space there \(or point output at a larger disk\) and run it again"
    return (rf"error: (metrics\.jsonl|ranks\.jsonl|events\.jsonl|config\.json) not written: the disk holding "
            rf"{re.escape(str(out))} is full \(no space left on device, [\d,]+ bytes free\); the run stopped with "
            rf"its files whole and {kept}")


def test_a_row_that_a_full_disk_cuts_short_is_cut_back_to_whole_lines(tmp_path):
    """tmpfs writes what fits in the last page and then says ENOSPC: on 0a49688 half a row stayed in the file."""
    with tmpfs(tmp_path / "disk", 1 << 20) as disk:
        log = JsonLines(disk / METRICS_JSONL, True)
        while not (disk / METRICS_JSONL).exists() or (disk / METRICS_JSONL).stat().st_size < PAGE - 150:
            log.write({"step": 1, "loss": 5.25, "note": "x" * 40})
        fill(disk)  # no page left: the next row fits only in part
        before = (disk / METRICS_JSONL).read_bytes()
        with pytest.raises(OSError) as raised:
            log.write({"step": 2, "loss": 5.0, "note": "y" * 300})
        assert raised.value.errno == errno.ENOSPC
        assert (disk / METRICS_JSONL).read_bytes() == before


def test_a_disk_that_fills_between_checkpoints_stops_with_one_line_and_the_run_resumes(tokens, tmp_path, capsys):
    from tokenmill.train.doctor import diagnose

    with tmpfs(tmp_path / "disk", 64 << 20) as disk:
        out = disk / "run"
        cfg = config(tokens, out, steps=2, checkpoint_every=2, eval_every=0, warmup_steps=1, log_every=1000)
        path = write_config(tmp_path / "t.yaml", cfg)
        assert main(["train", str(path)]) == 0, capsys.readouterr().err
        # No checkpoint before step 1000: the logs fill the disk first. Two pages more than in use: events.jsonl
        # (new) takes one; config.json and the heartbeat are replaced through the other; then the first log to need
        # a page takes it, and the next finds none, its row already in part in the page it had.
        write_config(path, {**cfg, "steps": 1000, "checkpoint_every": 1000})
        resize(disk, shutil.disk_usage(disk).used + 2 * PAGE)
        proc = _train(path)
        assert proc.returncode == 74, proc.stderr
        assert re.fullmatch(_full_between(out, 2), proc.stderr.strip()), proc.stderr  # one line, no traceback
        assert not leftovers(out)
        assert all(_whole(out / name) for name in LOGS)  # whole lines: the tolerant readers have nothing to skip
        assert diagnose(out).unreadable == {}
        assert _steps(out / RANKS_JSONL)[-1] - _steps(out / METRICS_JSONL)[-1] in (0, 1)
        assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-000000002"]
        assert CheckpointManager(out / "checkpoints").verify(out / "checkpoints" / "step-000000002") is None
        resize(disk, 64 << 20)
        assert main(["train", str(path), "--steps", "3"]) == 0, capsys.readouterr().err
        assert _steps(out / METRICS_JSONL) == _steps(out / RANKS_JSONL) == [1, 2, 3]
        assert _events(out) == [("resume", 2), ("resume", 2)]
        assert json.loads((out / "summary.json").read_text())["steps"] == 3


def test_a_run_killed_in_the_middle_of_a_row_resumes_with_whole_lines(tokens, tmp_path, capsys):
    """What a SIGKILL (or 0a49688 on a full disk) leaves: each log ending in half a row. On 0a49688 the resume
    stopped on it (a JSONDecodeError from metrics.jsonl) and the next event was glued onto it."""
    out = tmp_path / "run"
    path = write_config(tmp_path / "t.yaml", config(tokens, out, steps=2, checkpoint_every=2, eval_every=0,
                                                    warmup_steps=1))
    assert main(["train", str(path)]) == 0, capsys.readouterr().err
    for name in LOGS:
        with open(out / name, "a", encoding="utf-8") as f:
            f.write('{"step": 3, "loss": 4.12')
    assert main(["train", str(path), "--steps", "3"]) == 0, capsys.readouterr().err
    assert _steps(out / METRICS_JSONL) == _steps(out / RANKS_JSONL) == [1, 2, 3]
    assert _events(out) == [("resume", 2)]


def test_a_run_stopped_before_its_first_checkpoint_starts_again_without_its_rows(tokens, tmp_path, capsys):
    """A full disk before the first checkpoint says "run it again": the rerun starts at step 0, and the rows of the
    attempt are dropped (on 0a49688 they stayed: metrics.jsonl held steps 1, 2, 1, 2, 3)."""
    out = tmp_path / "run"
    path = write_config(tmp_path / "t.yaml", config(tokens, out, steps=3, checkpoint_every=3, eval_every=0,
                                                    warmup_steps=1))
    assert main(["train", str(path)]) == 0, capsys.readouterr().err
    for name in (METRICS_JSONL, RANKS_JSONL):  # what the attempt left: the rows of steps 1 and 2, no checkpoint
        (out / name).write_text("".join(f"{json.dumps(r)}\n" for r in _whole(out / name) if r["step"] < 3))
    shutil.rmtree(out / "checkpoints")
    assert main(["train", str(path)]) == 0, capsys.readouterr().err
    assert _steps(out / METRICS_JSONL) == _steps(out / RANKS_JSONL) == [1, 2, 3]


@pytest.mark.slow  # two ranks: about 20 s busy; a shared error said once on two ranks: the config test below
def test_two_ranks_on_a_full_disk_say_it_once(tokens, tmp_path):
    """Full from the start: rank 0 cannot write config.json while rank 1 goes on to step 1; they stop together
    there. On 0a49688: an OSError traceback from each rank, exit 1, and the launcher's line."""
    with tmpfs(tmp_path / "disk", 1 << 20) as disk:
        fill(disk)
        out = disk / "run"
        path = write_config(tmp_path / "t.yaml", config(tokens, out, steps=2, checkpoint_every=2, eval_every=0,
                                                        warmup_steps=1))
        proc = _train(path, "--nproc", "2")
        assert proc.returncode == 74, proc.stderr
        assert re.fullmatch(_full_between(out, None), proc.stderr.strip()), proc.stderr
        assert not leftovers(out) and all(_whole(out / name) == [] for name in LOGS if (out / name).exists())


def test_two_ranks_on_a_config_this_world_size_cannot_take_say_it_once(tokens, tmp_path):
    """Each rank finds the batch layout impossible: one line, exit 2. On 0a49688: a traceback from each rank (a
    ValueError) and the launcher's line."""
    path = write_config(tmp_path / "t.yaml", config(tokens, tmp_path / "run", steps=2, micro_batch_size=4,
                                                    eval_every=0, warmup_steps=1))
    proc = _train(path, "--nproc", "2")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == ("error: train config: global_batch_size 12 does not divide evenly into world_size "
                                   "2 x micro_batch_size 4: each rank needs a whole number of micro-batches (choose "
                                   "micro_batch_size dividing 6)")


@pytest.mark.slow  # two ranks, launched three times: about 40 s on two busy cores
def test_two_ranks_on_a_disk_that_fills_between_checkpoints_stop_together_and_resume(tokens, tmp_path):
    with tmpfs(tmp_path / "disk", 64 << 20) as disk:
        out = disk / "run"
        cfg = config(tokens, out, steps=2, checkpoint_every=2, eval_every=0, warmup_steps=1, log_every=1000)
        path = write_config(tmp_path / "t.yaml", cfg)
        assert _train(path, "--nproc", "2").returncode == 0
        write_config(path, {**cfg, "steps": 1000, "checkpoint_every": 1000})
        resize(disk, shutil.disk_usage(disk).used + 2 * PAGE)
        proc = _train(path, "--nproc", "2")
        assert proc.returncode == 74, proc.stderr
        assert re.fullmatch(_full_between(out, 2), proc.stderr.strip()), proc.stderr
        assert not leftovers(out) and all(_whole(out / name) for name in LOGS)
        assert CheckpointManager(out / "checkpoints").verify(out / "checkpoints" / "step-000000002") is None
        resize(disk, 64 << 20)
        assert _train(path, "--nproc", "2", "--steps", "3").returncode == 0
        assert _steps(out / METRICS_JSONL) == [1, 2, 3] and _steps(out / RANKS_JSONL) == [1, 1, 2, 2, 3, 3]
