"""Stages that variants share: equal prefixes of stage identities, linked (not copied) from the variant that ran them."""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from tokenmill.documents import digest
from tokenmill.pipeline.config import RunConfig, build_stages
from tokenmill.pipeline.contract import SourceStage
from tokenmill.pipeline.runfolder import KEY_FILE

log = logging.getLogger(__name__)


def signatures(config: RunConfig) -> list[tuple[str, str]]:
    """(stage, signature) per stage of the chain: a hash of the stage's identity and of every earlier signature, the
    source stage's over its input listing and stamp too. Two runs whose signatures agree up to a stage compute the
    same output there (the runner's stage key: identity and input hash, which the earlier stages determine)."""
    out: list[tuple[str, str]] = []
    previous = ""
    for stage in build_stages(config):
        parts = {"previous": previous, "stage": stage.name, "identity": stage.identity()}
        if isinstance(stage, SourceStage):
            parts["input"] = digest(stage.input_listing())
            parts["stamp"] = digest(stage.input_stamp())
        previous = digest(parts)
        out.append((stage.name, previous))
    return out


@dataclass
class SharePlan:
    """Which of a variant's stages come from an earlier variant (`partner`), and which it computes itself."""

    variant: str
    stages: list[str]
    partner: str | None = None
    shared: list[str] = field(default_factory=list)

    @property
    def recomputed(self) -> list[str]:
        return [s for s in self.stages if s not in self.shared]

    def to_json(self) -> dict:
        return {"stages": self.stages, "shared_from": self.partner, "shared": self.shared,
                "recomputed": self.recomputed}


def plan(chains: dict[str, list[tuple[str, str]]]) -> dict[str, SharePlan]:
    """Per variant (in the given order): the earliest earlier variant with the longest equal prefix of signatures,
    and that prefix's stages."""
    plans: dict[str, SharePlan] = {}
    done: list[str] = []
    for name, chain in chains.items():
        best, length = None, 0
        for other in done:
            n = 0
            for (_, a), (_, b) in zip(chain, chains[other]):
                if a != b:
                    break
                n += 1
            if n > length:
                best, length = other, n
        plans[name] = SharePlan(name, [s for s, _ in chain], best, [s for s, _ in chain[:length]])
        done.append(name)
    return plans


def _key(stage_dir: Path) -> str | None:
    path = stage_dir / KEY_FILE
    return path.read_text(encoding="utf-8") if path.is_file() else None


def link_stage(source: Path, dest: Path) -> str:
    """Make `dest` the stage folder `source` is, by hard links (no byte copied; a copy only where the filesystem
    refuses links): `linked`, `copied`, or `present` when `dest` already holds the same key. A `dest` of another
    key is removed first (it is this ablation's own, made under an older config)."""
    if _key(dest) is not None and _key(dest) == _key(source):
        return "present"
    if dest.exists():
        shutil.rmtree(dest)
    how = "linked"
    tmp = dest.parent.parent / "_linking" / f"{dest.parent.name}.{dest.name}"  # outside any run folder
    if tmp.exists():
        shutil.rmtree(tmp)
    for folder, dirs, files in os.walk(source):
        rel = Path(folder).relative_to(source)
        if rel.parts[:2] == ("_work", "tmp"):
            dirs[:] = []
            continue
        (tmp / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            try:
                os.link(Path(folder) / name, tmp / rel / name)
            except OSError:
                shutil.copy2(Path(folder) / name, tmp / rel / name)
                how = "copied"
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, dest)  # whole or not at all: a kill while linking leaves only the temporary folder
    return how
