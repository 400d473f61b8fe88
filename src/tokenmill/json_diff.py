"""Differences between two JSON values, by dotted key: the one walk behind change notices, golden and run diffs.

Keys read as in a config file: `stages.clean.quality.max_ratio`, a list element by index (`sources[2].fraction`).
`changes(old, new)` walks both values and yields `(key, old_value, new_value)` for each difference, `MISSING` for a
side that lacks the key; `flatten(value)` gives every leaf under its dotted key, and `flat_changes` compares two
flattened values key by key. Pure functions over parsed JSON: no I/O, nothing from the rest of tokenmill.
"""

from __future__ import annotations

import difflib
import json
from typing import Any, Callable, Iterator, Literal


class _Missing:
    """The value of a key one side does not have (distinct from a JSON null)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()

Change = tuple[str, Any, Any]
"""(dotted key, value in the old JSON, value in the new JSON); `MISSING` where one side lacks the key."""


def key(path: str, name: Any) -> str:
    """`path.name`, or `name` alone at the top."""
    return f"{path}.{name}" if path else str(name)


def _absent(path: str) -> Any:
    return MISSING


def changes(old: Any, new: Any, path: str = "", *, lists: Literal["align", "whole"] = "align",
            strict: bool = False, absent: Callable[[str], Any] = _absent) -> Iterator[Change]:
    """Every difference between two JSON values, in sorted key order, down to the changed key or list element.

    Dicts are walked key by key; a key one side lacks is one change (`MISSING` on that side), or, when
    `absent(path of the dict)` gives a value, compared against that value (a drop reason left out is a count of 0).
    Lists of one length are compared element by element. Lists of different lengths: `lists="align"` aligns them
    (`difflib` over each element's canonical JSON) so an inserted or removed element is one change under its index
    (the old index for a removal, the new one otherwise) and the elements after it are not reported; `"whole"`
    yields the two lists as one change. `strict` also tells apart equal values of different types (`1` and `1.0`).
    """
    if isinstance(old, dict) and isinstance(new, dict):
        default = absent(path)
        for name in sorted(set(old) | set(new), key=str):
            sub = key(path, name)
            a, b = old.get(name, default), new.get(name, default)
            if a is MISSING or b is MISSING:
                yield sub, a, b
            else:
                yield from changes(a, b, sub, lists=lists, strict=strict, absent=absent)
    elif isinstance(old, list) and isinstance(new, list):
        if old == new:
            return
        if len(old) == len(new):
            for i, (a, b) in enumerate(zip(old, new)):
                yield from changes(a, b, f"{path}[{i}]", lists=lists, strict=strict, absent=absent)
        elif lists == "whole":
            yield path, old, new
        else:
            yield from _aligned(old, new, path, strict=strict, absent=absent)
    elif old != new or (strict and type(old) is not type(new)):
        yield path, old, new


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _aligned(old: list, new: list, path: str, **options: Any) -> Iterator[Change]:
    """Two lists of different lengths, aligned so an inserted or removed element is named alone."""
    matcher = difflib.SequenceMatcher(None, [_canonical(v) for v in old], [_canonical(v) for v in new],
                                      autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        paired = min(i2 - i1, j2 - j1)
        for k in range(paired):  # a replaced element: what changed inside it
            yield from changes(old[i1 + k], new[j1 + k], f"{path}[{j1 + k}]", lists="align", **options)
        for i in range(i1 + paired, i2):
            yield f"{path}[{i}]", old[i], MISSING
        for j in range(j1 + paired, j2):
            yield f"{path}[{j}]", MISSING, new[j]


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf under its dotted key: dicts by key, lists that hold a dict by index (`overrides[0].source`).

    Other lists (of numbers, of strings) and empty dicts are one value each: a threshold list is one setting.
    """
    out: dict[str, Any] = {}
    _flatten_into(value, prefix, out)
    return out


def _flatten_into(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value:
        for name, v in value.items():
            _flatten_into(v, key(prefix, name), out)
    elif isinstance(value, list) and any(isinstance(v, dict) for v in value):
        for i, v in enumerate(value):
            _flatten_into(v, f"{prefix}[{i}]", out)
    else:
        out[prefix] = value


def flat_changes(old: dict[str, Any], new: dict[str, Any]) -> Iterator[Change]:
    """The keys of two flattened values whose values differ, sorted; `MISSING` for a key one side lacks."""
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name, MISSING), new.get(name, MISSING)
        if a is MISSING or b is MISSING or a != b:
            yield name, a, b
