"""One RE2 search over a batch of texts: which texts a pattern may match, for per-text work to skip the others.

Python's `re` tries a pattern that starts with a class (`\\d`, `[ \\t]`) at every position of a text, one call per
text; Arrow's RE2 (`pyarrow.compute.match_substring_regex`, a DFA) reads the whole batch once, about 2 ns a byte.
The filters that edit text ask it which documents hold anything for them to do. The anchors call a filter once per
document in Python (datatrove's `filter(doc)`, NeMo Curator's `score_document` through `ScoreFilter`); what is taken
from Curator is the batch as an Arrow table (`DocumentBatch`), here searched by Arrow's own kernels.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def may_match(texts: Sequence[str], pattern: str, column: pa.StringArray | None = None) -> np.ndarray:
    """For each text, whether RE2 `pattern` finds a match in it; True for a text with no UTF-8 form (a lone
    surrogate: Arrow cannot hold it), so that the caller looks at that one itself. `column`: the same texts as Arrow
    strings already (the clean stage's `Batch.text_column`), searched as they are; None: `texts` converted."""
    if column is not None:
        return _search(column, pattern)
    try:
        column = pa.array(texts, pa.string())
    except (pa.ArrowInvalid, UnicodeEncodeError):
        unreadable = np.array([not _utf8(t) for t in texts], dtype=bool)
        column = pa.array(["" if bad else t for t, bad in zip(texts, unreadable)], pa.string())
        return _search(column, pattern) | unreadable
    return _search(column, pattern)


def _search(column: pa.Array, pattern: str) -> np.ndarray:
    return pc.match_substring_regex(column, pattern).to_numpy(zero_copy_only=False).astype(bool, copy=False)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
