"""The fault suites' shared parts: the small corpus and its uninterrupted reference run, trial folders,
the byte-for-byte comparison and the conservation check."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import yaml

from tokenmill.pipeline.manifest import check_conservation
from tokenmill.pipeline.config import RunConfig, load_config
from tokenmill.pipeline.config import build_stages

STAGES = ["ingest", "sample", "clean", "dedup", "subdoc", "decontaminate", "tokenize"]
"""Every stage of the small demo run, in pipeline order (`order`: subdoc 35, between dedup and decontaminate)."""
FULL_TRIALS = int(os.environ.get("TOKENMILL_FAULTS_TRIALS", "20"))
"""Trials per stage and kill kind in the full suite (`make test-faults`); the variable shortens it for a look."""
SEED = os.environ.get("TOKENMILL_FAULTS_SEED", "0")
"""Every random kill point derives from this and the trial's name; set it to draw other points."""


def trial_rng(*name) -> random.Random:
    return random.Random(":".join(map(str, (SEED, *name))))


def trial_params(fast: int):
    """Trial numbers 0..FULL_TRIALS-1; those from `fast` on are marked slow (left out of `make test`)."""
    import pytest

    return [pytest.param(i, marks=pytest.mark.slow) if i >= fast else i for i in range(FULL_TRIALS)]


def stage_params(fast: set[str]):
    """Every stage; those not in `fast` are marked slow (left out of `make test`: one stage there stands for all)."""
    import pytest

    return [s if s in fast else pytest.param(s, marks=pytest.mark.slow) for s in STAGES]


def write_small_demo(root: Path) -> Path:
    """The demo corpus at 40 documents per source, in shards of 20 documents, with a small tokenizer, and the subdoc
    stage (off in the demo) turned on with 4 partitions and `max_docs: 1`, so that it removes spans on this corpus."""
    from tokenmill.demo import write_demo_corpus

    write_demo_corpus(root, docs_per_source=40)
    config = root / "demo.yaml"
    text = config.read_text()
    for old, new in [("docs_per_shard: 500", "docs_per_shard: 20"),
                     ("vocab_size: 4096, sample_docs: 2000", "vocab_size: 512, sample_docs: 200"),
                     ("  dedup: {}\n", "  dedup: {}\n  subdoc: {partitions: 4, max_docs: 1}\n")]:
        assert old in text, f"the demo config changed: {old!r} not found; update tests/faults/harness.py"
        text = text.replace(old, new)
    config.write_text(text)
    return config


@dataclass
class Reference:
    """The corpus, its config and one uninterrupted run of every stage, shared by every trial."""

    config_path: Path
    output: Path
    tasks: dict[str, list[tuple[str, str]]]
    """Per stage, every (phase, task key) the uninterrupted run committed."""

    def config(self, output: Path, **execution) -> RunConfig:
        config = load_config(self.config_path)
        return config.model_copy(update={"output": str(output),
                                         "execution": config.execution.model_copy(update=execution)})

    def write_config(self, output: Path, name: str) -> Path:
        """A config file beside the corpus (relative source paths still resolve) with `output` set."""
        data = yaml.safe_load(self.config_path.read_text())
        data["output"] = str(output)
        path = self.config_path.parent / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    def prepare(self, dest: Path, stage: str) -> Path:
        """A run folder holding the reference's committed output of every stage before `stage`."""
        for earlier in STAGES[:STAGES.index(stage)]:
            shutil.copytree(self.output / earlier, dest / earlier)
        dest.mkdir(parents=True, exist_ok=True)
        return dest

    def record(self, stage: str, phase: str, task: str) -> dict:
        return json.loads((self.output / stage / "_work" / "commits" / phase / f"{task}.json").read_text())


def committed_tasks(stage_dir: Path) -> list[tuple[str, str]]:
    commits = stage_dir / "_work" / "commits"
    return sorted((p.parent.name, p.stem) for p in commits.glob("*/*.json"))


def tree(stage_dir: Path) -> dict[str, str]:
    """sha256 of every file under a stage folder, by relative path; a manifest counts by its `content` only.

    Nothing else is left out: a leftover temporary file, attempt folder or record shows up as an extra path.
    """
    out = {}
    for path in sorted(stage_dir.rglob("*")):
        if not path.is_file():
            continue
        rel = str(path.relative_to(stage_dir))
        if rel == "manifest.json":
            data = json.dumps(json.loads(path.read_text())["content"], sort_keys=True).encode()
        else:
            data = path.read_bytes()
        out[rel] = hashlib.sha256(data).hexdigest()
    return out


def assert_same_as_reference(ref: Reference, out: Path, stage: str, what: str) -> None:
    """Every file of `stage` (and nothing more) byte-identical to the uninterrupted run's; `what` names the trial."""
    got, want = tree(out / stage), tree(ref.output / stage)
    if got != want:
        missing = sorted(set(want) - set(got))
        extra = sorted(set(got) - set(want))
        differ = sorted(p for p in set(got) & set(want) if got[p] != want[p])
        raise AssertionError(f"{what}: stage {stage!r} is not byte-identical to the uninterrupted run "
                             f"(output {out}): missing {missing[:5]}, extra {extra[:5]}, different {differ[:5]}")
    assert not (out / "_superseded").exists(), f"{what}: a rerun superseded committed output"


def assert_conserved(ref: Reference, out: Path, stage: str) -> None:
    """The manifest's counts add up (in = kept + drops, against the input stage too) and match the shard files."""
    config = ref.config(out)
    stages = {s.name: s for s in build_stages(config)}
    content = json.loads((out / stage / "manifest.json").read_text())["content"]
    index = STAGES.index(stage)
    upstream = json.loads((out / STAGES[index - 1] / "manifest.json").read_text())["content"] if index else None
    check_conservation(content, stages[stage].drop_reasons, upstream)
    for entry in content["shards"]:
        assert pq.read_metadata(out / stage / entry["path"]).num_rows == entry["docs_out"], entry["path"]
        if entry.get("dropped_path"):
            assert pq.read_metadata(out / stage / entry["dropped_path"]).num_rows == sum(entry["drops"].values())


def process_group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs (zombies, which write nothing, do not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


def kill_group(pgid: int, timeout: float = 30.0) -> None:
    """SIGKILL a process group and wait until none of it runs, so no orphan writes during the rerun."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.time() + timeout
    while process_group_alive(pgid):
        assert time.time() < deadline, f"process group {pgid} still runs {timeout} s after SIGKILL"
        time.sleep(0.05)


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_workers_gone(pids_file: Path, timeout: float = 60.0) -> int:
    """Wait until every worker that started a task of a killed driver's job has died (Ray kills the workers of a
    dead job); re-read the file until it stops growing, so a worker that started late is waited for too.
    Returns how many workers there were."""
    deadline = time.time() + timeout
    seen: set[int] = set()
    while True:
        pids = {int(p) for p in pids_file.read_text().split()} if pids_file.exists() else set()
        alive = [p for p in pids if pid_alive(p)]
        if not alive and pids == seen:
            return len(pids)
        seen = pids
        assert time.time() < deadline, f"workers {alive} of a killed driver still run {timeout} s later"
        time.sleep(0.2)
