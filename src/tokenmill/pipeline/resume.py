"""Stage keys and what to do with existing output: reuse it, finish it, or move it aside and recompute."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any, Sequence

from tokenmill.pipeline import storage
from tokenmill.pipeline.documents import SCHEMA_VERSION, canonical_json, digest

log = logging.getLogger(__name__)

KEY_FILE = "_work/key.json"
SUPERSEDED = "_superseded"


def stage_key(stage: str, identity: dict[str, Any], input_hash: str, stamp: Any = None) -> dict[str, Any]:
    """What a committed task must match to be reused: stage, config hash, input manifest hash, schema version."""
    key = {"stage": stage, "config_hash": digest(identity), "input_hash": input_hash, "schema_version": SCHEMA_VERSION}
    if stamp is not None:
        key["input_stamp"] = digest(stamp)
    return key


SHOWN_CHARS = 120
"""A value longer than this is cut in a change notice: the notice names the key, not the whole value."""
SHOWN_CHANGES = 20
"""At most this many changed keys in one notice, then how many more."""


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}... ({len(text):,} chars)"


def diff_values(old: Any, new: Any, path: str = "") -> list[str]:
    """Human-readable differences between two JSON values, down to the changed key or list element.

    Lists are compared element by element (`sources[2].fraction: 0.5 -> 0.4`); an element inserted or removed
    is named by its index, found by aligning the two lists (`difflib`), so the elements after it are not reported.
    """
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new)):
            sub = f"{path}.{k}" if path else str(k)
            if k not in old:
                out.append(f"{sub}: added ({_show(new[k])})")
            elif k not in new:
                out.append(f"{sub}: removed (was {_show(old[k])})")
            else:
                out.extend(diff_values(old[k], new[k], sub))
        return out
    if isinstance(old, list) and isinstance(new, list):
        return _diff_lists(old, new, path or "value")
    return [] if old == new else [f"{path or 'value'}: {_show(old)} -> {_show(new)}"]


def _diff_lists(old: list, new: list, path: str) -> list[str]:
    import difflib

    if len(old) == len(new):
        return [line for i, (a, b) in enumerate(zip(old, new)) for line in diff_values(a, b, f"{path}[{i}]")]
    texts = [canonical_json(v) for v in old], [canonical_json(v) for v in new]
    out: list[str] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, *texts, autojunk=False).get_opcodes():
        if op == "equal":
            continue
        paired = min(i2 - i1, j2 - j1)
        for k in range(paired):  # a replaced element: what changed inside it
            out.extend(diff_values(old[i1 + k], new[j1 + k], f"{path}[{j1 + k}]"))
        for i in range(i1 + paired, i2):
            out.append(f"{path}[{i}]: removed (was {_show(old[i])})")
        for j in range(j1 + paired, j2):
            out.append(f"{path}[{j}]: added ({_show(new[j])})")
    return out


def explain_change(previous: dict[str, Any], identity: dict[str, Any], key: dict[str, Any]) -> list[str]:
    """Why a stage's existing output no longer matches: config keys, input, or schema."""
    reasons = diff_values(previous.get("identity"), identity)
    if len(reasons) > SHOWN_CHANGES:
        more = len(reasons) - SHOWN_CHANGES
        reasons = reasons[:SHOWN_CHANGES] + [f"... and {more} more changed keys (the identities are in "
                                             f"_work/key.json of the old and the new stage folder)"]
    old_key = previous.get("key", {})
    if old_key.get("input_hash") != key["input_hash"] or old_key.get("input_stamp") != key.get("input_stamp"):
        reasons.append("its input changed")
    if old_key.get("schema_version") != key["schema_version"]:
        reasons.append(f"schema version {old_key.get('schema_version')} -> {key['schema_version']}")
    return reasons or ["its key changed"]


def supersede(fs, root: str, stages: Sequence[str]) -> str | None:
    """Move the output of these stages aside (never delete, never mix); returns where they went.

    Only a folder tokenmill made (`runfolder.stage_is_ours`) moves: a folder of the same name that someone else
    put in the run folder stays where it is (the runner refuses one of a configured stage before any work).
    """
    from tokenmill.pipeline.runfolder import stage_is_ours

    present = []
    for s in stages:
        folder = storage.join(root, s)
        if not storage.exists(fs, folder):
            continue
        if stage_is_ours(fs, folder):
            present.append(s)
        else:
            log.info("%s: not made by tokenmill (no marker), left where it is", folder)
    if not present:
        return None
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    dest = storage.join(root, SUPERSEDED, stamp)
    fs.create_dir(dest, recursive=True)
    for stage in present:
        fs.move(storage.join(root, stage), storage.join(dest, stage))
    return dest
