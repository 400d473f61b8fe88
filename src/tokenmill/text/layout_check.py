"""The check that normalization kept code's layout: every non-blank line's indentation and tabs, byte for byte."""

from __future__ import annotations

from tokenmill.text.code_blocks import indentation
from tokenmill.text.normalize import unify_characters


def code_layout_errors(before: str, after: str, limit: int = 10) -> list[str]:
    """Where ``after`` (a normalized document) lost the layout of ``before`` (the same document before
    normalization): empty when every non-blank line kept its leading indentation and its tabs (those ending a
    line excepted: trailing whitespace is stripped), byte for byte.

    Lines are compared in order, blank lines left out (normalization removes blank lines at the ends and, in
    prose, in runs; it never removes, merges or splits a non-blank line once line breaks are unified). Both are
    read as prose normalization reads text: ``\\r\\n``, ``\\r``, U+0085, U+2028 and U+2029 are line breaks,
    no-break and other Unicode spaces are spaces, zero-width characters are nothing (one for one, so columns stay),
    so that code, which keeps those characters, is compared line for line too. Returns at most ``limit`` messages
    naming the line (1-based, among non-blank lines) and both versions of it.
    """
    old = [line for line in unify_characters(before).split("\n") if line.strip(" \t\f")]
    new = [line for line in unify_characters(after).split("\n") if line.strip(" \t\f")]
    if len(old) != len(new):
        return [f"{len(old)} non-blank lines before, {len(new)} after"]
    errors = []
    for number, (a, b) in enumerate(zip(old, new), 1):
        if indentation(a) != indentation(b) or a.rstrip(" \t").count("\t") != b.count("\t"):
            errors.append(f"line {number}: {a!r} became {b!r}")
            if len(errors) >= limit:
                break
    return errors
