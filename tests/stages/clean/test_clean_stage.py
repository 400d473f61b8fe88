"""The clean stage end to end on tables: every step's decision lands in a column, a drop reason or the report."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from tokenmill.sources.config import SourceConfig
from tokenmill.pipeline.contract import RunContext
from tokenmill.stages.clean.config import CleanConfig
from tokenmill.stages.clean.stage import CleanStage

PROSE = ("The committee met on Tuesday to discuss the new budget for the city library. Members agreed that the "
         "reading rooms should stay open later in the evening, and that the children's section needs more books. "
         "They also talked about the old roof, which has been leaking for two winters, and about the cost of a "
         "repair. In the end the vote was close, but the plan passed with a small majority and work starts soon. "
         "Everyone hopes that the building will be ready before the first snow of the year arrives.")
FR = ("Le comité s'est réuni mardi pour discuter du nouveau budget de la bibliothèque municipale. Les membres "
      "ont convenu que les salles de lecture devraient rester ouvertes plus tard le soir. Ils ont aussi parlé du "
      "vieux toit, qui fuit depuis deux hivers, et du coût d'une réparation. À la fin, le vote a été serré, mais le "
      "projet a été adopté avec une faible majorité. Les travaux commenceront au printemps prochain, si tout va bien. "
      "Chacun espère que le bâtiment sera prêt avant les premières neiges de l'année.")
ZH = ("北京时间昨天晚上，国家图书馆宣布将延长阅览室的开放时间。馆方表示，这一决定是在听取了大量读者意见之后作出的。"
      "今后每天晚上九点以前，读者都可以在馆内查阅资料和借阅图书。与此同时，少儿阅览区还将增加两千册新书，"
      "以满足越来越多小读者的需要。馆长在接受采访时说，图书馆的发展离不开社会各界的支持。")


def run_context(tmp_path, **languages):
    sources = {name: SourceConfig(name=name, format="jsonl", paths=["x"], language=lang) for name, lang in languages.items()}
    return RunContext(seed=0, sources=sources, base_dir=str(tmp_path))


def table(rows):
    return pa.table({
        "id": [r[0] for r in rows], "text": [r[1] for r in rows], "source": [r[2] for r in rows],
        "subset": [r[3] if len(r) > 3 else None for r in rows],
        "meta": [json.dumps(r[4]) if len(r) > 4 else "{}" for r in rows],
    })


def run(stage, rows):
    out = stage.process(table(rows), {})
    result = {i: (r, t) for i, r, t in zip(out.table.column("id").to_pylist(), out.drop_reason.to_pylist(),
                                          out.table.column("text").to_pylist())}
    return out, result


def test_every_step_decides_and_records(tmp_path):
    (tmp_path / "blocked.txt").write_text("spam.example\n")
    stage = CleanStage(CleanConfig(blocklist="blocked.txt"), run_context(tmp_path, web="en", zh="zh", any_="any"))
    stage.setup({})
    escaped = json.dumps(PROSE.replace(". ", ".\n"))[1:-1]
    leaked = "Line one.\n" + PROSE.replace(". ", ".\\n ") + "\nEnd.\\n"
    out, res = run(stage, [
        ("ok", PROSE, "web"),
        ("escaped", escaped, "web"),
        ("leaked", leaked, "web"),
        ("mojibake", "CafÃ© crÃ¨me, naÃ¯ve. " + PROSE, "web"),
        ("pii", PROSE + " Write to ann@example.org or call +1 415-555-0134.", "web"),
        ("spam", PROSE, "web", None, {"url": "https://www.spam.example/page"}),
        ("french", FR, "web"),
        ("short", "Too short.", "web"),
        ("zh", ZH, "zh"),
        ("anything", FR, "any_"),
    ])
    assert res["ok"][0] is None and res["ok"][1] == PROSE
    assert res["escaped"][0] is None and res["escaped"][1] == PROSE.replace(". ", ".\n")
    assert res["leaked"][0] == "escape_literal_newline"
    assert res["mojibake"][0] is None and res["mojibake"][1].startswith("Café crème, naïve.")
    assert res["pii"][0] is None and "<EMAIL>" in res["pii"][1] and "<PHONE>" in res["pii"][1]
    assert res["spam"][0] == "blocked_domain"
    assert res["french"][0] == "wrong_language"
    assert res["short"][0] == "too_few_words"
    assert res["zh"][0] is None and res["anything"][0] is None
    langs = dict(zip(out.table.column("id").to_pylist(), out.table.column("lang").to_pylist()))
    assert langs["zh"] == "zh" and langs["french"] == "fr" and langs["ok"] == "en"
    steps = dict(zip(out.table.column("id").to_pylist(), out.table.column("clean_steps").to_pylist()))
    assert steps["escaped"].startswith("escape_repair:json_unescape") and "ftfy" in steps["mojibake"]
    assert "pii:email+phone" in steps["pii"]
    assert set(out.table.column_names) >= {"lang", "lang_score", "escape_score", "escape_counts", "gopher_words"}
    report = stage.report(out.stats)
    web = report["leaks"]["by_source"]["web"]
    assert web["docs"] == 8 and web["docs_with_leaks"] == 2 and web["subsets"]["(none)"]["dropped"] == 1
    assert report["leaks"]["worst"][0]["id"] in ("escaped", "leaked")
    assert report["pii"] == {"email": 1, "phone": 1} and report["normalize"]["ftfy"] == 1
    assert any("escape leaks in web" in line for line in report["summary"])


def test_overrides_pick_the_most_specific(tmp_path):
    config = CleanConfig.model_validate({
        "escapes": {"mode": "drop"},
        "overrides": [
            {"source": "pile", "escapes": {"mode": "repair"}},
            {"source": "pile", "subset": "ArXiv", "escapes": {"mode": "flag"}},
            {"subset": "Short", "quality": {"gopher_quality": {"min_doc_words": 1}, "gopher_repetition": None, "c4": None}},
        ],
    })
    stage = CleanStage(config, run_context(tmp_path, pile="en", web="en"))
    assert stage.setting("escapes", "pile", "ArXiv").mode == "flag"
    assert stage.setting("escapes", "pile", "Wikipedia").mode == "repair"
    assert stage.setting("escapes", "web", "ArXiv").mode == "drop"
    escaped = json.dumps(PROSE.replace(". ", ".\n"))[1:-1]
    _, res = run(stage, [("a", escaped, "pile", "ArXiv"), ("b", escaped, "pile", "Wiki"), ("c", escaped, "web"),
                         ("d", "The cat sat on the mat and that was all.", "web", "Short")])
    assert not (res["a"][0] or "").startswith("escape_") and res["a"][1] == escaped  # flagged only
    assert res["b"][0] is None and res["b"][1] != escaped  # repaired
    assert res["c"][0].startswith("escape_")  # dropped
    assert res["d"][0] is None  # the subset's own quality rules


def test_blocklist_path_is_checked_before_any_work(tmp_path):
    from tokenmill.errors import ConfigError
    from tokenmill.pipeline.config import parse_config

    (tmp_path / "a.jsonl").write_text('{"text": "x"}\n')
    config = {"output": "o", "sources": [{"name": "a", "format": "jsonl", "paths": ["a.jsonl"]}],
              "stages": {"clean": {"blocklist": "missing.txt"}}}
    with pytest.raises(ConfigError, match="stages.clean.blocklist"):
        parse_config(config, tmp_path)
    config["stages"]["clean"] = {"escapes": {"mode": "sometimes"}}
    with pytest.raises(ConfigError, match="stages.clean.escapes.mode"):
        parse_config(config, tmp_path)


def test_identity_holds_the_blocklist_content_not_its_path(tmp_path):
    for folder in ("one", "two"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "b.txt").write_text("spam.example\n")
    a = CleanStage(CleanConfig(blocklist="b.txt"), run_context(tmp_path / "one", web="en")).identity()
    b = CleanStage(CleanConfig(blocklist="b.txt"), run_context(tmp_path / "two", web="en")).identity()
    assert a == b and a["config"]["blocklist"].startswith("sha256:")
    (tmp_path / "two" / "b.txt").write_text("other.example\n")
    assert CleanStage(CleanConfig(blocklist="b.txt"), run_context(tmp_path / "two", web="en")).identity() != a


def _zh_rows(shared_data):
    rows = []
    for i, line in enumerate((shared_data / "chinese" / "thucnews_cnews.val.txt").read_text(encoding="utf-8").splitlines()):
        rows.append((f"thuc-{i}", line.split("\t", 1)[1].rstrip("\n"), "news"))
    cmrc = json.loads(Path(shared_data / "chinese" / "cmrc2018_dev.json").read_text(encoding="utf-8"))
    for article in cmrc["data"]:
        for p in article["paragraphs"]:
            rows.append((p["id"], p["context"], "cmrc"))
    return rows


def test_chinese_news_survives_and_is_tagged_zh(shared_data, tmp_path):
    stage = CleanStage(CleanConfig(), run_context(tmp_path, news="zh", cmrc="zh"))
    out, res = run(stage, _zh_rows(shared_data))
    for source, n in (("news", 1000), ("cmrc", 848)):
        kept = [i for i, (r, _) in res.items() if r is None and (i.startswith("thuc") == (source == "news"))]
        assert len(kept) / n >= 0.95, (source, len(kept))
    langs = [lang for lang, r in zip(out.table.column("lang").to_pylist(), out.drop_reason.to_pylist()) if r is None]
    assert langs.count("zh") / len(langs) >= 0.99
