"""Stage keys and what to do with existing output: reuse it, finish it, or move it aside and recompute."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any, Sequence

from tokenmill.pipeline import storage
from tokenmill.documents import SCHEMA_VERSION, digest
from tokenmill.pipeline.runfolder import SUPERSEDED, stage_is_ours

log = logging.getLogger(__name__)


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
    is named by its index, found by aligning the two lists (`json_diff.changes`), so the elements after it are not
    reported.
    """
    from tokenmill.json_diff import MISSING, changes

    if not path and not (isinstance(old, dict) and isinstance(new, dict)):
        path = "value"  # a top-level list or value is named, not an empty key
    out = []
    for name, a, b in changes(old, new, path):
        if a is MISSING:
            out.append(f"{name}: added ({_show(b)})")
        elif b is MISSING:
            out.append(f"{name}: removed (was {_show(a)})")
        else:
            out.append(f"{name}: {_show(a)} -> {_show(b)}")
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
        storage.move_tree(fs, storage.join(root, stage), storage.join(dest, stage))
    return dest
