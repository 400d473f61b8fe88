"""Compare the HTML extractors of the `cc_warc` reader (resiliparse, trafilatura) on the same pages, as JSON.

The pages are the HTML `response`/`resource` records of the given WARC files, decoded exactly as the reader
decodes them (HTTP parsed, dechunked, charset resolved), so both libraries get the same `str`. For each library:

- speed: MB of HTML per second of CPU time on one core (both run single-threaded; best of `repeats` passes after
  a warm-up pass that pays for imports and lazy set-up), and records per second;
- volume: total and median extracted characters, and pages with under 200 characters (the page's content lost);
- boilerplate left: share of extracted characters in lines that recur verbatim in the extraction of another
  page of the same host (menus, footers, sidebars repeat across a site's pages; prose does not), and share in
  short lines (under 40 characters: menu entries, buttons, dates, but also headings and list items);
- article kept: of the long paragraphs (>= 200 characters) of the page's full visible text (resiliparse with
  `main_content=False`, so every visible paragraph), the share whose word 5-grams are at least 80% in the
  extraction (whitespace and line wrapping do not matter), over all paragraphs and as the median page.

Then the ratios resiliparse / trafilatura and the per-page lengths side by side.

    python benchmarks/html_extraction.py [WARC ...]   (default: the shared Common Crawl and wget samples)
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tokenmill.sources.config import SourceConfig
from tokenmill.readers.base import open_source
from tokenmill.readers.html import PayloadProblem, decode_html, extractor
from tokenmill.readers.warc import html_payload, record_meta
from tokenmill.readers.warc_records import iter_warc_records

EXTRACTORS = ("resiliparse", "trafilatura")
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "commoncrawl"
DEFAULT_WARCS = [SHARED / "dolma_wget_sample-0000.warc.gz", SHARED / "whirlwind.warc.gz"]
SHORT = 200
_WS = re.compile(r"\s+")


def html_pages(warc_paths: list[str]) -> list[dict[str, Any]]:
    """The HTML pages of the files, as the cc_warc reader sees them: url, host and decoded html."""
    source = SourceConfig(name="bench", format="cc_warc", paths=["x"])
    pages = []
    for path in warc_paths:
        with open_source(str(path), source) as stream:
            for header, body in iter_warc_records(stream):
                if header.type not in ("response", "resource") or header.content_length > source.max_record_bytes:
                    continue
                meta = record_meta(header)
                try:
                    payload = html_payload(header, body.read(), source.max_record_bytes, meta)
                except PayloadProblem:
                    continue
                html, _, _ = decode_html(payload, meta.get("charset"))
                pages.append({"url": meta["url"], "host": urlsplit(meta["url"] or "").hostname or "",
                              "html": html, "html_bytes": len(html.encode("utf-8"))})
    return pages


def _lines(text: str) -> list[str]:
    return [line for line in (_WS.sub(" ", raw).strip(" -•*|") for raw in text.splitlines()) if len(line) >= 8]


def _shingles(text: str, n: int = 5) -> set[tuple[str, ...]]:
    words = _WS.sub(" ", text).lower().split()
    return {tuple(words[i:i + n]) for i in range(max(1, len(words) - n + 1))}


def _boilerplate_share(pages: list[dict], texts: list[str]) -> float:
    """Share of extracted characters in lines that recur in another page of the same host."""
    by_host: dict[str, list[int]] = defaultdict(list)
    for i, page in enumerate(pages):
        by_host[page["host"]].append(i)
    repeated = total = 0
    for members in by_host.values():
        if len(members) < 2:
            continue
        line_sets = {i: set(_lines(texts[i])) for i in members}
        for i in members:
            others = set().union(*(line_sets[j] for j in members if j != i))
            for line in _lines(texts[i]):
                total += len(line)
                repeated += len(line) if line in others else 0
    return round(repeated / total, 4) if total else 0.0


def _reference_paragraphs(pages: list[dict]) -> list[list[str]]:
    from resiliparse.extract.html2text import extract_plain_text

    refs = []
    for page in pages:
        full = extract_plain_text(page["html"], main_content=False, alt_texts=False, comments=True)
        refs.append([p for p in (_WS.sub(" ", line).strip() for line in full.splitlines()) if len(p) >= 200])
    return refs


def _short_line_share(texts: list[str]) -> float:
    lines = [line for t in texts for line in (_WS.sub(" ", raw).strip() for raw in t.splitlines()) if line]
    total = sum(map(len, lines))
    return round(sum(len(line) for line in lines if len(line) < 40) / total, 4) if total else 0.0


def _article_kept(refs: list[list[str]], texts: list[str]) -> dict[str, float]:
    kept = total = kept_chars = total_chars = 0
    per_page = []
    for paragraphs, text in zip(refs, texts):
        have = _shingles(text)
        page_kept = 0
        for paragraph in paragraphs:
            grams = _shingles(paragraph)
            hit = sum(g in have for g in grams) / len(grams) >= 0.8
            kept += hit
            page_kept += hit
            total += 1
            kept_chars += len(paragraph) if hit else 0
            total_chars += len(paragraph)
        if paragraphs:
            per_page.append(page_kept / len(paragraphs))
    return {"paragraphs": total, "pages_with_paragraphs": len(per_page),
            "kept_share": round(kept / total, 4) if total else 0.0,
            "kept_char_share": round(kept_chars / total_chars, 4) if total_chars else 0.0,
            "median_page_kept_share": round(statistics.median(per_page), 4) if per_page else 0.0}


def _time(extract, pages: list[dict], repeats: int) -> tuple[float, float, list[str]]:
    texts = [extract(p["html"], p["url"]) for p in pages]  # warm-up: imports, lazy tables
    best_cpu = best_wall = float("inf")
    for _ in range(repeats):
        cpu, wall = time.process_time(), time.perf_counter()
        for p in pages:
            extract(p["html"], p["url"])
        best_cpu = min(best_cpu, time.process_time() - cpu)
        best_wall = min(best_wall, time.perf_counter() - wall)
    return best_cpu, best_wall, texts


PER_PAGE_SHOWN = 30


def compare_extractors(warc_paths: list[str], repeats: int = 5) -> dict:
    """Both extractors on the same HTML records of `warc_paths`: speed, volume and quality, side by side."""
    pages = html_pages(warc_paths)
    if not pages:
        raise ValueError(f"no HTML response records in {warc_paths}")
    html_mb = sum(p["html_bytes"] for p in pages) / 1e6
    refs = _reference_paragraphs(pages)
    results: dict[str, Any] = {}
    texts_by: dict[str, list[str]] = {}
    for name in EXTRACTORS:
        cpu, wall, texts = _time(extractor(name), pages, repeats)
        texts_by[name] = texts
        lengths = [len(t) for t in texts]
        results[name] = {
            "cpu_seconds": round(cpu, 4),
            "wall_seconds": round(wall, 4),
            "html_mb_per_s_per_core": round(html_mb / cpu, 2),
            "records_per_s_per_core": round(len(pages) / cpu, 1),
            "total_chars": sum(lengths),
            "median_chars": statistics.median(lengths),
            "pages_under_200_chars": sum(n < SHORT for n in lengths),
            "boilerplate_share": _boilerplate_share(pages, texts),
            "short_line_char_share": _short_line_share(texts),
            "article": _article_kept(refs, texts),
        }
    a, b = results["resiliparse"], results["trafilatura"]
    return {
        "files": [str(p) for p in warc_paths],
        "records": len(pages),
        "html_mb": round(html_mb, 3),
        "repeats": repeats,
        "extractors": results,
        "ratio_resiliparse_to_trafilatura": {
            "speed": round(a["html_mb_per_s_per_core"] / b["html_mb_per_s_per_core"], 2),
            "total_chars": round(a["total_chars"] / b["total_chars"], 3) if b["total_chars"] else None,
            "median_chars": round(a["median_chars"] / b["median_chars"], 3) if b["median_chars"] else None,
        },
        # The first pages, enough to eyeball: a benchmark over thousands would drown the figures.
        "per_page": [{"url": p["url"], "html_bytes": p["html_bytes"],
                      **{name: len(texts_by[name][i]) for name in EXTRACTORS}} for i, p in enumerate(pages[:PER_PAGE_SHOWN])],
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Compare resiliparse and trafilatura on the HTML of WARC files.")
    parser.add_argument("warcs", nargs="*", help="WARC files (default: the shared Common Crawl and wget samples)")
    given = parser.parse_args().warcs
    paths = given or [str(p) for p in DEFAULT_WARCS]
    if not given and not all(p.is_file() for p in DEFAULT_WARCS):
        print(json.dumps({"skipped": f"no WARC samples at {SHARED}"}))
        sys.exit(0)
    print(json.dumps(compare_extractors(paths), indent=2, ensure_ascii=False))
