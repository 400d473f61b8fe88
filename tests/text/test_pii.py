"""PII: e-mail, public IP and phone numbers replaced and counted; dates, versions of private addresses and ISBNs kept."""

from __future__ import annotations

import pytest

from tokenmill.text.pii import PiiConfig, blocked, load_blocklist, replace_pii

ON = PiiConfig()


@pytest.mark.parametrize("raw, clean, counts", [
    ("write to john.doe+news@mail.example.co.uk today", "write to <EMAIL> today", {"email": 1}),
    ("dns 8.8.8.8, lan 192.168.1.1 and 10.0.0.1", "dns <IP_ADDRESS>, lan 192.168.1.1 and 10.0.0.1", {"ip": 1}),
    ("v6 2001:4860:4860::8888 here", "v6 <IP_ADDRESS> here", {"ip": 1}),
    ("call +1 415-555-0134 or (212) 555-7890", "call <PHONE> or <PHONE>", {"phone": 2}),
    ("北京 010-12345678 联系", "北京 <PHONE> 联系", {"phone": 1}),
    ("in 1999-2001, 12.5 million, ISBN 978-3-16-148410-0, 3.14159", "in 1999-2001, 12.5 million, ISBN 978-3-16-148410-0, 3.14159", {}),
    ("999.300.1.2 is not an address", "999.300.1.2 is not an address", {}),
])
def test_replacements(raw, clean, counts):
    assert replace_pii(raw, ON) == (clean, counts)


def test_kinds_can_be_turned_off_and_placeholders_set():
    config = PiiConfig(phone=False, email_placeholder="[e]")
    assert replace_pii("a@b.org +44 20 7946 0958", config) == ("[e] +44 20 7946 0958", {"email": 1})


def test_blocklist_matches_domain_and_subdomains_only():
    blocklist = load_blocklist(["# spam", "Example.COM", "www.bad.org", ""])
    assert blocklist == {"example.com", "bad.org"}
    assert blocked("https://sub.example.com/page", blocklist)
    assert blocked("http://bad.org", blocklist) and blocked("www.bad.org/x", blocklist)
    assert not blocked("https://notexample.com/", blocklist)
    assert not blocked(None, blocklist) and not blocked("https://example.com", frozenset())


def test_address_scans_find_what_the_plain_patterns_find():
    """The IP pre-scans start at their separator and look one character back: the same documents pass them."""
    import random
    import re

    from tokenmill.text import pii

    plain = {"_MAYBE_IPV4": re.compile(r"\d\.\d{1,3}\.\d{1,3}\.\d"), "_MAYBE_IPV6": re.compile(r"[0-9A-Fa-f]:[0-9A-Fa-f]{0,4}:")}
    rng = random.Random(5)
    groups = ["1", "25", "300", "1234", "٣", "a", "F"]  # ٣: a digit to \d, not to [0-9]
    texts = ["".join(rng.choice(groups) + rng.choice([".", ".", ".", ":", ":", " "]) for _ in range(rng.randint(1, 8)))
             for _ in range(40_000)]
    for name, pattern in plain.items():
        found = [getattr(pii, name).search(t) is not None for t in texts]
        assert found == [pattern.search(t) is not None for t in texts]
        assert 500 < sum(found) < len(texts) - 500


def test_the_batch_phone_scan_misses_no_text_the_phone_scan_finds():
    """RE2's `\\p{Nd}` holds every character `re`'s `\\d` matches, so a text the batch scan passes over is one
    `_MAYBE_PHONE` passes over too; the batch scan finds the same texts on digits of any script."""
    import random
    import re

    import pyarrow as pa
    import pyarrow.compute as pc

    from tokenmill.text import pii

    digits = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and re.fullmatch(r"\d", chr(c))]
    assert pc.all(pc.match_substring_regex(pa.array([chr(c) for c in digits]), r"^\p{Nd}$")).as_py()
    rng = random.Random(9)
    groups = ["1", "23", "456", "7890", "٣٤", "१२३", "a", "(", ")", " ", ".", "-", "x"]
    texts = ["".join(rng.choice(groups) for _ in range(rng.randint(0, 14))) for _ in range(40_000)]
    assert pii.phone_candidates(texts).tolist() == [pii._MAYBE_PHONE.search(t) is not None for t in texts]
    assert pii.phone_candidates(["a \udc80 b"]) is None  # no UTF-8: each text scanned by itself


def test_a_text_changed_by_an_earlier_replacement_is_scanned_again_for_phones():
    """The batch scan saw the text before e-mail and IP replacement: a placeholder with digits is then scanned."""
    config = PiiConfig(ip_placeholder="(555) 123-4567")
    assert replace_pii("dns 8.8.8.8 here", config, maybe_phone=False) == ("dns <PHONE> here", {"ip": 1, "phone": 1})
    assert replace_pii("call 555-123-4567", ON, maybe_phone=False) == ("call 555-123-4567", {})  # as told
    assert replace_pii("call 555-123-4567", ON) == ("call <PHONE>", {"phone": 1})
