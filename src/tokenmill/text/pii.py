"""Personal data replaced by placeholders (e-mail addresses, IP addresses, phone numbers), and a domain blocklist."""

from __future__ import annotations

import ipaddress
import re
from typing import Iterable, Sequence
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tokenmill.config_base import StrictModel
from tokenmill.text.re2_batch import may_match


class PiiConfig(StrictModel):
    """Which kinds of personal data are replaced, and by what."""

    email: bool = True
    """Replace e-mail addresses with `email_placeholder`."""
    ip: bool = True
    """Replace IPv4 and IPv6 addresses (not private ones such as 10.0.0.1, nor version numbers) with `ip_placeholder`."""
    phone: bool = True
    """Replace phone numbers (international `+` form and common national forms) with `phone_placeholder`."""
    email_placeholder: str = "<EMAIL>"
    """What an e-mail address becomes."""
    ip_placeholder: str = "<IP_ADDRESS>"
    """What an IP address becomes."""
    phone_placeholder: str = "<PHONE>"
    """What a phone number becomes."""


PII_KINDS = ("email", "ip", "phone")

_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![\w-])")
_IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])")
_IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){2,7}[0-9A-Fa-f]{1,4}(?![\w:])|(?<![\w:])(?:[0-9A-Fa-f]{1,4}:){1,6}:[0-9A-Fa-f]{1,4}(?![\w:])")
# +CC then 6-14 digits in groups; or a national number with a separator: (555) 123-4567, 555-123-4567, 010-12345678.
_PHONE = re.compile(
    r"(?<![\w+])(?:\+\d{1,3}[ .-]?(?:\(\d{1,4}\)[ .-]?)?\d{2,4}(?:[ .-]?\d{2,4}){1,4}"
    r"|\(\d{3}\)[ .-]?\d{3}[ .-]\d{4}|\d{3}[.-]\d{3}[.-]\d{4}|0\d{2,3}-\d{7,8})(?![\w-])"
)


def _public_ip(match: re.Match) -> bool:
    try:
        address = ipaddress.ip_address(match.group(0))
    except ValueError:
        return False  # 999.1.2.3, or a version string like 1.2.3.4567
    return address.is_global


# Cheap scans that rule a kind out for most documents before its full pattern runs. The address scans start at
# their separator, a literal the regex engine jumps to, and look one character back (`\d\.\d{1,3}...` and
# `[0-9A-Fa-f]:...` as written would be tried at every position): the same matches, about ten times faster.
_MAYBE_IPV4 = re.compile(r"\.(?<=\d\.)\d{1,3}\.\d{1,3}\.\d")
_MAYBE_IPV6 = re.compile(r":(?<=[0-9A-Fa-f]:)[0-9A-Fa-f]{0,4}:")
_MAYBE_PHONE = re.compile(r"\d[ .()-]{0,2}\d{2,4}[ .)-]{1,2}\d{2,4}")
# The phone scan for a whole batch at once, by RE2 (Arrow's regex engine, a DFA: about six times as fast as `re` on
# this pattern, which starts with a class and so is tried at every position). `\p{Nd}` is `re`'s `\d` (Unicode
# decimal digits) in RE2's Unicode version, which holds every digit Python's does (a test checks each code point):
# where it finds nothing, `_MAYBE_PHONE` finds nothing either.
_MAYBE_PHONE_RE2 = r"\p{Nd}[ .()-]{0,2}\p{Nd}{2,4}[ .)-]{1,2}\p{Nd}{2,4}"


def phone_candidates(texts: Sequence[str]) -> np.ndarray | None:
    """For each text, False where `_MAYBE_PHONE` cannot match it (True: it may), in one pass over the batch; None
    when a text has no UTF-8 form (a lone surrogate), for `replace_pii` to scan each text itself."""
    try:
        column = pa.array(texts, pa.string())
    except (pa.ArrowInvalid, UnicodeEncodeError):
        return None
    return pc.match_substring_regex(column, _MAYBE_PHONE_RE2).to_numpy(zero_copy_only=False)


# Each kind's pre-scan in RE2 (`pii_candidates`): `@` for the e-mail step's `in` test; the address scans without
# their look-behind, which only moves where the match starts (`_MAYBE_IPV4` matches where `\d\.\d{1,3}\.\d{1,3}\.\d`
# does, `_MAYBE_IPV6` where `[0-9A-Fa-f]:[0-9A-Fa-f]{0,4}:` does: tests/text/test_pii.py); `\p{Nd}` for `\d`.
_MAYBE_RE2 = {"email": "@", "ip": r"\p{Nd}\.\p{Nd}{1,3}\.\p{Nd}{1,3}\.\p{Nd}|[0-9A-Fa-f]:[0-9A-Fa-f]{0,4}:",
              "phone": _MAYBE_PHONE_RE2}


def pii_candidates(texts: Sequence[str], config: PiiConfig,
                   column: pa.StringArray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Which texts `replace_pii` may change (False: none of its pre-scans matches, so it returns the text as it is
    and finds nothing), and among those which the phone pre-scan may match (`replace_pii`'s `maybe_phone`): one RE2
    pass over the batch for every kind on, a second over the candidates for phones. `column`: `texts` as Arrow
    strings already, or None."""
    kinds = [_MAYBE_RE2[kind] for kind in PII_KINDS if getattr(config, kind)]
    if not kinds:
        return np.zeros(len(texts), dtype=bool), np.zeros(len(texts), dtype=bool)
    candidates = may_match(texts, "|".join(kinds), column)
    maybe_phone = np.zeros(len(texts), dtype=bool)
    if config.phone:
        rows = np.flatnonzero(candidates)
        chosen = column.take(pa.array(rows)) if column is not None else None
        maybe_phone[rows] = may_match([texts[i] for i in rows.tolist()], _MAYBE_PHONE_RE2, chosen)
    return candidates, maybe_phone


def replace_pii(text: str, config: PiiConfig, maybe_phone: bool = True) -> tuple[str, dict[str, int]]:
    """The text with personal data replaced, and how many of each kind. `maybe_phone` False (from
    `phone_candidates`) skips the phone scan when the text is still the one scanned (no address replaced)."""
    counts = {}
    if config.email and "@" in text:
        text, counts["email"] = _EMAIL.subn(config.email_placeholder, text)
    ipv4 = config.ip and _MAYBE_IPV4.search(text) is not None
    ipv6 = config.ip and ":" in text and _MAYBE_IPV6.search(text) is not None
    if ipv4 or ipv6:
        n = 0

        def sub_ip(match: re.Match) -> str:
            nonlocal n
            if _public_ip(match):
                n += 1
                return config.ip_placeholder
            return match.group(0)

        if ipv4:
            text = _IPV4.sub(sub_ip, text)
        if ipv6:
            text = _IPV6.sub(sub_ip, text)
        counts["ip"] = n
    scanned = maybe_phone or counts.get("email") or counts.get("ip")  # a replacement may add digits
    if config.phone and scanned and _MAYBE_PHONE.search(text):
        text, counts["phone"] = _PHONE.subn(config.phone_placeholder, text)
    return text, {k: v for k, v in counts.items() if v}


def load_blocklist(lines: Iterable[str]) -> frozenset[str]:
    """Domains, one per line (`#` comments and blank lines ignored), lowercased, without a leading `www.`."""
    out = set()
    for line in lines:
        line = line.split("#", 1)[0].strip().lower()
        if line:
            out.add(line.removeprefix("www.").rstrip("."))
    return frozenset(out)


def blocked(url: str | None, blocklist: frozenset[str]) -> bool:
    """True when the URL's host is a listed domain or one of its subdomains."""
    if not url or not blocklist:
        return False
    host = (urlsplit(url if "//" in url else f"//{url}").hostname or "").rstrip(".")
    parts = host.split(".")
    return any(".".join(parts[i:]) in blocklist for i in range(len(parts)))
