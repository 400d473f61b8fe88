"""Record streams of the real-format sources: Pile lines, Common Crawl pages, Reddit comments and submissions.

Each stream yields (record, text): the record as its writer serializes it, and the text a reader
should produce from it (used for uniqueness and byte counts).
"""

from __future__ import annotations

import datetime
import functools
import hashlib

from . import styles, web
from .documents import DocumentMaker
from .sources import NEWS_CATEGORIES, TOPICS, Records, Unique, _Cover

CRAWL_START = datetime.datetime(2024, 5, 17, 23, 31, 22)


class _Weighted:
    """Every key once (shuffled), then weighted random picks."""

    def __init__(self, maker: DocumentMaker, weights: dict[str, float]):
        self.rnd = maker.rnd
        self.keys = list(weights)
        self.cum = []
        total = 0.0
        for key in self.keys:
            total += weights[key]
            self.cum.append(total)
        self.order = list(self.keys)
        self.rnd.shuffle(self.order)

    def __call__(self) -> str:
        if self.order:
            return self.order.pop()
        x = self.rnd.random() * self.cum[-1]
        return next(k for k, c in zip(self.keys, self.cum) if x < c)


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if not n:
            return out


# -- The Pile ---------------------------------------------------------------------


def pile_records(maker: DocumentMaker, unique: Unique) -> Records:
    """Pile lines: text plus meta.pile_set_name, sets mixed in every file as in the real shards."""
    sets = _Weighted(maker, styles.PILE_SETS)
    topics = _Cover(maker, TOPICS)
    rnd = maker.rnd
    while True:
        name = sets()
        allowed = styles.PILE_TOPICS.get(name)
        topic = topics() if allowed is None else allowed[rnd.randrange(len(allowed))]
        text = styles.PILE_STYLES[name](maker, topic)
        if unique(text):
            yield {"text": text, "meta": {"pile_set_name": name}}, text


# -- Common Crawl --------------------------------------------------------------------


class _Clock:
    """Fetch times of a crawl segment: seconds apart, always increasing."""

    def __init__(self, maker: DocumentMaker, start: datetime.datetime = CRAWL_START):
        self.rnd = maker.rnd
        self.now = start

    def __call__(self) -> datetime.datetime:
        self.now += datetime.timedelta(seconds=self.rnd.randint(0, 4))
        return self.now


def _zh_date(maker: DocumentMaker) -> str:
    return f"2024-{maker.rnd.randint(1, 5):02d}-{maker.rnd.randint(1, 28):02d}"


def _en_byline(maker: DocumentMaker, topic: str) -> tuple[str, str, str]:
    """(date as shown, ISO date, author) of a post published before the crawl."""
    day = datetime.date(2015, 1, 1) + datetime.timedelta(days=maker.rnd.randrange(3420))
    names = maker.en.lexicon(topic)["NAME"]
    return f"{day:%B} {day.day}, {day.year}", day.isoformat(), names[maker.rnd.randrange(len(names))]


def wet_records(maker: DocumentMaker, unique: Unique) -> Records:
    """WET conversion records: mostly English pages, some Chinese, a few bilingual; menus and footers kept."""
    rnd, clock, cover = maker.rnd, _Clock(maker), _Cover(maker, TOPICS)
    i = 0
    while True:
        topic = cover()
        sites = web.SITES_BY_TOPIC[topic]
        r = rnd.random()
        if r < 0.15:
            site = next(s for s in sites if s.lang == "zh")
            title, paragraphs = styles.chinese_article(maker, topic)
            date, author = _zh_date(maker), maker._name(maker.zh, topic)
            related = [maker.zh.one(topic, "t") for _ in range(3)]
            language = "zho"
            url = f"https://{site.host}/{date[:7].replace('-', '')}/t{date.replace('-', '')}_{100000 + i}.html"
        else:
            site = [s for s in sites if s.lang == "en"][rnd.randrange(2)]
            title, paragraphs = styles.article(maker, topic, min_sentences=6)
            date, _, author = _en_byline(maker, topic)
            related = [maker.en.one(topic, "t") for _ in range(3)]
            language = "eng"
            if r > 0.96:  # a bilingual page: an English post with a Chinese summary
                paragraphs.append("中文摘要：" + "".join(maker.zh.take(topic, ("s",), 2)))
                language = "eng,zho"
            url = f"https://{site.host}/{topic}/{web.slug(title)}-{i}/"
        text = web.wet_text(site, title, paragraphs, date, author, related)
        if not unique(text):
            continue
        i += 1
        yield {"url": url, "text": text, "language": language, "fetched": clock()}, text


def html_records(maker: DocumentMaker, unique: Unique) -> Records:
    """English article pages as HTML; the text is what a main-content extractor should find (title, paragraphs)."""
    rnd, clock, cover = maker.rnd, _Clock(maker), _Cover(maker, TOPICS)
    i = 0
    while True:
        topic = cover()
        site = [s for s in web.SITES_BY_TOPIC[topic] if s.lang == "en"][rnd.randrange(2)]
        title, paragraphs = styles.article(maker, topic, min_sentences=10)
        text = title + "\n\n" + "\n\n".join(paragraphs)
        if not unique(text):
            continue
        date, iso, author = _en_byline(maker, topic)
        lex = maker.en.lexicon(topic)
        related = []
        for k in range(4):
            other = maker.en.one(topic, "t")
            related.append((f"/{topic}/{web.slug(other)}-{rnd.randrange(10**5)}/", other))
        tags = [lex["NOUNS"][rnd.randrange(len(lex["NOUNS"]))] for _ in range(3)]
        path = f"/{topic}/{web.slug(title)}-{i}/"
        html = web.html_page(site, path, title, paragraphs, (date, iso), author, related, tags)
        i += 1
        yield {"url": f"https://{site.host}{path}", "site": site, "fetched": clock(), "html": html,
               "kind": "html", "fetch_ms": rnd.randint(40, 2400)}, text


# -- Reddit (Pushshift dumps) ------------------------------------------------------------

SUBREDDITS = {
    "science": "askscience", "cooking": "Cooking", "travel": "travel", "sports": "sports",
    "finance": "personalfinance", "history": "AskHistorians", "technology": "technology",
    "health": "Fitness", "gardening": "gardening", "music": "WeAreTheMusicMakers",
}


def month_info(month: str) -> tuple[int, int, int]:
    """(epoch seconds of the month's first day, first comment id, first submission id) of a dump month `YYYY-MM`."""
    year, mon = (int(x) for x in month.split("-"))
    start = int(datetime.datetime(year, mon, 1, tzinfo=datetime.timezone.utc).timestamp())
    k = (year - 2023) * 12 + mon - 1  # ids grow with time, as Reddit's base-36 ids do
    return start, int("j2h0000", 36) + k * int("4c000", 36), int("1000000", 36) + k * int("q000", 36)


@functools.lru_cache(maxsize=None)
def _subreddit_id(name: str) -> str:
    return "t5_" + _base36(int.from_bytes(hashlib.blake2b(name.encode(), digest_size=4).digest(), "big"))


def _username(maker: DocumentMaker, topic: str) -> str:
    rnd, lex = maker.rnd, maker.en.lexicon(topic)
    noun = lex["NOUN"][rnd.randrange(len(lex["NOUN"]))].replace(" ", "_")
    adj = lex["GADJ"][rnd.randrange(len(lex["GADJ"]))]
    if rnd.random() < 0.7:
        return f"{adj.capitalize()}_{noun.capitalize()}{rnd.randint(1, 9999)}"  # Reddit's suggested-name style
    return f"{noun}{adj}{rnd.randint(10, 99)}"


def reddit_comments(maker: DocumentMaker, unique: Unique, month: str) -> Records:
    """Comments of one month's RC_ dump: key sets vary (2023 API lines, older lean lines), time ascending."""
    rnd, cover = maker.rnd, _Cover(maker, TOPICS)
    now, comment_base, submission_base = month_info(month)
    cid = comment_base
    recent: list[tuple[str, str]] = []  # (id, first paragraph) of the latest comments, for replies
    while True:
        topic = cover()
        reply_to = recent[rnd.randrange(len(recent))] if recent and rnd.random() < 0.45 else None
        body = styles.reddit_comment(maker, topic, reply_to[1] if reply_to else None)
        if not unique(body):
            continue
        cid += rnd.randint(1, 40)
        now += rnd.randint(0, 6)
        sub = SUBREDDITS[topic]
        link = _base36(submission_base + rnd.randrange(4000))
        parent = f"t1_{reply_to[0]}" if reply_to else f"t3_{link}"
        cid36 = _base36(cid)
        first = body.split("\n\n", 1)[0]
        if not first.startswith(("&gt;", "**", "[")) and len(first) < 200:
            recent = (recent + [(cid36, first)])[-50:]
        score = int(rnd.paretovariate(1.2)) - (rnd.random() < 0.1) * rnd.randint(2, 20)
        author = "[deleted]" if rnd.random() < 0.02 else _username(maker, topic)  # account gone, text kept
        lean = rnd.random() < 0.15
        record = {
            "author": author, "body": body, "controversiality": int(rnd.random() < 0.05),
            "created_utc": str(now) if lean else float(now), "distinguished": None, "downs": 0,
            "edited": False, "gilded": 0, "id": cid36, "link_id": f"t3_{link}", "parent_id": parent,
            "retrieved_on": now + rnd.randint(30, 90), "score": score, "subreddit": sub,
            "subreddit_id": _subreddit_id(sub), "ups": score,
        }
        if not lean or rnd.random() < 0.5:
            record["name"] = f"t1_{cid36}"
        if not lean:
            slug = web.slug(maker.en.one(topic, "t")).replace("-", "_")[:50]
            record.update({
                "_meta": {"retrieved_2nd_on": now + 86400 * rnd.randint(1, 30)},
                "all_awardings": [], "archived": False, "author_flair_text": None,
                "author_fullname": f"t2_{_base36(rnd.randrange(36 ** 8))}", "collapsed": False,
                "is_submitter": rnd.random() < 0.1, "locked": False, "no_follow": rnd.random() < 0.7,
                "permalink": f"/r/{sub}/comments/{link}/{slug}/{cid36}/", "score_hidden": False,
                "send_replies": True, "stickied": False, "subreddit_name_prefixed": f"r/{sub}",
                "subreddit_type": "public", "total_awards_received": 0,
            })
            if rnd.random() < 0.1:
                record["edited"] = float(now + rnd.randint(60, 7200))
            if rnd.random() < 0.2:
                record["author_flair_text"] = maker.en.lexicon(topic)["ROLE"][0].split(" ", 1)[-1].title()
            if author == "[deleted]":
                del record["author_fullname"]
        yield dict(sorted(record.items())), body


def reddit_submissions(maker: DocumentMaker, unique: Unique, month: str) -> Records:
    """Submissions of one month's RS_ dump: self posts with markdown, link posts with empty selftext."""
    rnd, cover = maker.rnd, _Cover(maker, TOPICS)
    now, _, sid = month_info(month)
    while True:
        topic = cover()
        title = maker.en.one(topic, "q" if rnd.random() < 0.4 else "t")
        is_self = rnd.random() < 0.6
        selftext = styles.reddit_selftext(maker, topic) if is_self else ""
        text = f"{title}\n\n{selftext}" if selftext else title
        if not unique(text):
            continue
        sid += rnd.randint(1, 9)
        now += rnd.randint(0, 30)
        sub, id36 = SUBREDDITS[topic], _base36(sid)
        slug = web.slug(title).replace("-", "_")[:50]
        permalink = f"/r/{sub}/comments/{id36}/{slug}/"
        if is_self:
            url, domain = f"https://www.reddit.com{permalink}", f"self.{sub}"
        else:
            site = [s for s in web.SITES_BY_TOPIC[topic] if s.lang == "en"][rnd.randrange(2)]
            url, domain = f"https://{site.host}/{topic}/{slug.replace('_', '-')}/", site.host
        score = int(rnd.paretovariate(1.1)) - 1
        record = {
            "author": _username(maker, topic), "created_utc": float(now) if rnd.random() < 0.9 else str(now),
            "domain": domain, "id": id36, "is_self": is_self, "is_video": False, "name": f"t3_{id36}",
            "num_comments": int(rnd.paretovariate(1.0)) - 1, "over_18": False, "permalink": permalink,
            "retrieved_on": now + rnd.randint(30, 90), "score": score, "selftext": selftext, "subreddit": sub,
            "subreddit_id": _subreddit_id(sub), "title": title, "url": url,
        }
        if rnd.random() < 0.8:
            record.update({
                "_meta": {"retrieved_2nd_on": now + 86400 * rnd.randint(1, 30)},
                "link_flair_text": None if rnd.random() < 0.7 else topic.capitalize(),
                "thumbnail": "self" if is_self else "default", "upvote_ratio": round(rnd.uniform(0.5, 1.0), 2),
                "subreddit_subscribers": rnd.randint(10**4, 3 * 10**7), "gilded": 0, "stickied": False,
            })
        yield dict(sorted(record.items())), text


# -- Chinese news in GB18030 ------------------------------------------------------------------


def gb_news_records(maker: DocumentMaker, unique: Unique) -> Records:
    """Chinese news for the GB18030 file; some stories end with a © line (a 4-byte GB18030 sequence)."""
    cover = _Cover(maker, TOPICS)
    i = 0
    while True:
        topic = cover()
        _, text = maker.news_story(topic)
        if maker.rnd.random() < 0.3:
            city = maker._name(maker.zh, topic, "CITY")
            text += f"\n\n（本文版权归{city}日报所有 ©，未经授权不得转载）"
        if not unique(text):
            continue
        date = f"2023-{maker.rnd.randint(1, 12):02d}-{maker.rnd.randint(1, 28):02d}"
        yield {"id": f"gbnews-{i:06d}", "content": text, "category": NEWS_CATEGORIES[topic], "date": date}, text
        i += 1
