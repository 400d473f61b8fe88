"""Web pages of the Common Crawl sources: made-up sites, the WET text of a page, and its HTML.

Hosts are subdomains of the reserved example.com/.org/.net names and IP addresses come from the
documentation ranges (RFC 5737), so nothing here points at a real site.
"""

from __future__ import annotations

import hashlib
import re
import struct
import zlib
from dataclasses import dataclass
from html import escape

from .sources import TOPICS
from . import words_zh

_SITE_WORDS = ("daily", "notes", "journal", "corner", "hub", "review", "times", "weekly")
_TLDS = ("example.com", "example.org", "example.net")
_NAV_EN = ("Home", "News", "Guides", "Reviews", "About", "Contact")
_NAV_ZH = ("首页", "新闻", "专题", "图片", "视频", "关于我们")
_FOOTER_EN = ("Privacy Policy", "Terms of Use", "Cookie Settings", "Advertise", "Sitemap")
_COOKIE = ("We use cookies to improve your experience on our site and to show you relevant advertising. "
           "By continuing to browse, you agree to our use of cookies.")


@dataclass(frozen=True)
class Site:
    host: str
    name: str
    lang: str  # "en" or "zh"
    topic: str
    ip: str


def _ip(host: str) -> str:
    h = hashlib.blake2b(host.encode(), digest_size=2).digest()
    net = ("192.0.2", "198.51.100", "203.0.113")[h[0] % 3]
    return f"{net}.{1 + h[1] % 254}"


def _sites() -> tuple[Site, ...]:
    out = []
    for i, topic in enumerate(TOPICS):
        for j in range(2):
            word = _SITE_WORDS[(i + 3 * j) % len(_SITE_WORDS)]
            host = f"{'www.' if j == 0 else ''}{topic}{word}.{_TLDS[(i + j) % 3]}"
            out.append(Site(host, f"{topic.capitalize()} {word.capitalize()}", "en", topic, _ip(host)))
        category = words_zh.TOPICS[topic]["category"]
        host = f"{topic}.news.example.{('com', 'net')[i % 2]}"
        out.append(Site(host, f"{category}资讯网", "zh", topic, _ip(host)))
    return tuple(out)


SITES = _sites()
SITES_BY_TOPIC = {t: tuple(s for s in SITES if s.topic == t) for t in TOPICS}


_NOT_SLUG = re.compile(r"[^a-z0-9]+")


def slug(title: str) -> str:
    return _NOT_SLUG.sub("-", title.lower()).strip("-")[:60] or "page"


# -- WET text --------------------------------------------------------------------


def wet_text(site: Site, title: str, paragraphs: list[str], date: str, author: str, related: list[str]) -> str:
    """The text Common Crawl's WET conversion keeps of a page: one line per block, menus and footer included."""
    if site.lang == "zh":
        lines = [f"{title}_{site.name}", *_NAV_ZH, words_zh.TOPICS[site.topic]["category"], title,
                 f"来源：{site.name}　{date}　作者：{author}", *paragraphs, "相关阅读", *related,
                 f"版权所有 © 2024 {site.name} 保留所有权利", "联系我们　|　网站地图"]
    else:
        lines = [f"{title} | {site.name}", "Skip to content", *_NAV_EN, title, f"Posted on {date} by {author}",
                 *paragraphs,
                 "Related posts", *related, f"\u00a9 2024 {site.name}. All rights reserved.", *_FOOTER_EN[:3]]
    # WET keeps one line per text block: a paragraph is a line, a list item or a Q/A turn too.
    return "\n".join(lines) + "\n"


# -- HTML --------------------------------------------------------------------------


def _block_html(paragraph: str) -> str:
    lines = paragraph.split("\n")
    items = [line for line in lines[1:] if line.startswith("- ") or line[:1].isdigit()]
    if len(lines) > 1 and len(items) == len(lines) - 1:  # an intro line and a list
        tag = "ul" if items[0].startswith("- ") else "ol"
        lis = "".join(f"<li>{escape(item.split(' ', 1)[1], quote=False)}</li>" for item in items)
        return f"<p>{escape(lines[0], quote=False)}</p>\n<{tag}>{lis}</{tag}>"
    return "<p>" + "<br>\n".join(escape(line, quote=False) for line in lines) + "</p>"


def html_page(site: Site, url_path: str, title: str, paragraphs: list[str], date: tuple[str, str], author: str,
              related: list[tuple[str, str]], tags: list[str]) -> str:
    """A realistic article page: head, nav menu, header, article, sidebar, footer and cookie banner.

    `date` is (as shown, ISO 8601).
    """
    t = escape(title, quote=False)
    nav = "".join(f'<li><a href="/{n.lower()}/">{n}</a></li>' for n in _NAV_EN[1:])
    side = "".join(f'<li><a href="{escape(u)}">{escape(rt, quote=False)}</a></li>' for u, rt in related)
    tag_links = " ".join(f'<a class="tag" href="/tag/{slug(x)}/">{escape(x, quote=False)}</a>' for x in tags)
    footer = "".join(f'<li><a href="/{slug(x)}/">{x}</a></li>' for x in _FOOTER_EN)
    body = "\n".join(_block_html(p) for p in paragraphs)
    description = escape(paragraphs[0][:150])
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{t} | {escape(site.name)}</title>
<meta name="description" content="{description}">
<meta property="og:title" content="{escape(title)}">
<meta property="og:url" content="https://{site.host}{escape(url_path)}">
<link rel="canonical" href="https://{site.host}{escape(url_path)}">
<link rel="stylesheet" href="/static/css/main.css">
<script async src="/static/js/analytics.js"></script>
<script>window.dataLayer = window.dataLayer || []; function gtag(){{dataLayer.push(arguments);}} gtag('js', new Date());</script>
</head>
<body class="post-template">
<nav class="top-menu" aria-label="Main menu"><ul><li><a href="/">Home</a></li>{nav}</ul></nav>
<header class="site-header">
<a class="logo" href="/">{escape(site.name)}</a>
<form class="search" action="/search" role="search"><input type="search" name="q" placeholder="Search&hellip;"><button>Search</button></form>
</header>
<main id="content">
<article class="post">
<h1 class="entry-title">{t}</h1>
<p class="byline">By <a href="/author/{slug(author)}/">{escape(author)}</a> &middot; <time datetime="{date[1]}">{date[0]}</time></p>
<div class="entry-content">
{body}
</div>
<p class="tags">Tags: {tag_links}</p>
</article>
<aside class="sidebar">
<h3>Related posts</h3>
<ul>{side}</ul>
<h3>Newsletter</h3>
<p>Get the best of {escape(site.name)} in your inbox every week.</p>
</aside>
</main>
<footer class="site-footer">
<ul class="footer-links">{footer}</ul>
<p>&copy; 2024 {escape(site.name)}. All rights reserved.</p>
</footer>
<div class="cookie-banner" id="cookie-consent"><p>{_COOKIE}</p><button type="button">Accept all</button> <button type="button">Manage choices</button></div>
</body>
</html>
"""


NOT_FOUND_HTML = """<!DOCTYPE html>
<html>
<head><title>404 Not Found</title></head>
<body>
<h1>Not Found</h1>
<p>The requested URL was not found on this server.</p>
<hr><address>nginx</address>
</body>
</html>
"""


def png_image(seed: int, size: int = 16) -> bytes:
    """A small valid PNG (RGB gradient), different per seed."""
    # Each row: filter byte 0, then `size` RGB pixels.
    rows = b"".join(
        b"\x00" + b"".join(bytes(((x * 16 + seed) % 256, (y * 16) % 256, (seed * 37) % 256)) for x in range(size))
        for y in range(size)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")
