"""A cheap exact pre-check for ftfy's mojibake test: texts where `ftfy.badness.is_bad` cannot be True, found fast.

`is_bad` searches `BADNESS_RE`, an alternation of about 40 character sequences, at every position of the text: the
most expensive step of normalization on non-ASCII text (its branches begin with classes such as `\\s` and `[a-z]`,
so the regex engine cannot skip ahead). Every branch has positions that accept only a few non-ASCII characters
(`[ÂÃÎÐ]` then one of 34 symbols; `вЂ`; an accented capital then a currency sign...): a branch can match only in a
text that holds a character of each of them. Those sets are read from ftfy's own compiled pattern at import, so the
proof follows ftfy's version. One class search finds which of their characters a text holds (curly quotes and
dashes in most English text, none in most Chinese); when no branch has all its sets present, `is_bad` is False.
If the pattern could not be read so (a flag, a branch without such a position), `is_bad` always runs.
"""

from __future__ import annotations

import re
from functools import lru_cache

from ftfy.badness import BADNESS_RE, is_bad

try:  # Python 3.11+ names the regex parser re._parser; earlier versions sre_parse
    from re import _constants as _sc, _parser as _sp
except ImportError:  # pragma: no cover
    import sre_constants as _sc  # type: ignore[no-redef]
    import sre_parse as _sp  # type: ignore[no-redef]


def _literal_set(items) -> frozenset[int] | None:
    """The code points of a character class made of literals and ranges only (no category, no negation)."""
    out: set[int] = set()
    for op, av in items:
        if op is _sc.LITERAL:
            out.add(av)
        elif op is _sc.RANGE:
            out.update(range(av[0], av[1] + 1))
        else:
            return None
    return frozenset(out)


def _required_sets(items) -> list[frozenset[int]]:
    """For a sequence of regex items, each position every match must pass and the characters it accepts there
    (only positions whose characters are all listed: a literal, or a class of literals and ranges)."""
    found: list[frozenset[int]] = []
    for op, av in items:
        if op is _sc.LITERAL:
            found.append(frozenset((av,)))
        elif op is _sc.IN:
            chars = _literal_set(av)
            if chars is not None:
                found.append(chars)
        elif op in (_sc.MAX_REPEAT, _sc.MIN_REPEAT, _sc.POSSESSIVE_REPEAT) and av[0] >= 1:
            found += _required_sets(av[2])
        elif op is _sc.SUBPATTERN and not av[1] & re.IGNORECASE:  # a group, without an inline (?i:...)
            found += _required_sets(av[-1])
    return found


def _branch_requirements(pattern: re.Pattern) -> list[list[frozenset[int]]] | None:
    """Per branch of `pattern`'s top-level alternation, the sets of non-ASCII characters a match must each hold one
    of; None when that cannot be read (case-insensitive matching, a branch with no such set)."""
    if pattern.flags & (re.IGNORECASE | re.LOCALE):
        return None
    items = list(_sp.parse(pattern.pattern, pattern.flags))
    branches = items[0][1][1] if len(items) == 1 and items[0][0] is _sc.BRANCH else [items]
    out = []
    for branch in branches:
        required = list(dict.fromkeys(s for s in _required_sets(list(branch)) if s and min(s) > 0x7F))
        if not required:
            return None
        out.append(required)
    return out


_BRANCHES = _branch_requirements(BADNESS_RE)
_BRANCH_CHARS = [[frozenset(map(chr, s)) for s in sets] for sets in _BRANCHES or []]
SIGNAL_CLASS = "".join(f"\\U{c:08x}" for c in sorted(set().union(*(s for b in _BRANCHES or [] for s in b))))
"""The characters of every branch's sets, as the inside of a regex class (empty when the pattern could not be read)."""
_SIGNAL_CHARS = frozenset(chr(c) for b in _BRANCHES or [] for s in b for c in s)
_SIGNAL = re.compile("[" + SIGNAL_CLASS + "]") if _BRANCHES else None


@lru_cache(maxsize=4096)
def _some_branch_can_match(present: frozenset[str]) -> bool:
    """True when every set of some branch holds a character of `present`; cached, as most texts hold one of a few
    such sets (`{’}`, `{“, ”, —}`)."""
    return any(all(not present.isdisjoint(s) for s in sets) for sets in _BRANCH_CHARS)


def may_be_mojibake(text: str, seen: set[str] | None = None) -> bool:
    """`ftfy.badness.is_bad(text)`; False without running it when no branch of its pattern can match in `text`.
    `seen`: the characters of `text` among a set that holds `SIGNAL_CLASS`'s (found by the caller's own scan), or
    None to scan here."""
    if text.isascii():
        return False
    if _SIGNAL is not None:
        present = frozenset(_SIGNAL.findall(text)) if seen is None else _SIGNAL_CHARS.intersection(seen)
        if not present or not _some_branch_can_match(present):
            return False
    return is_bad(text)
