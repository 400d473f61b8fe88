"""The decontaminate stage on real Ray and real data: natural hits first, then planted ones; removed = planted +
natural, each against the right set and field; excision keeps the rest; Chinese found; common phrases kept."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import write_jsonl
from tests.pipeline.test_runner import run_into
from tokenmill.stages.decontaminate.evalsets import EvalSetConfig, load_evalset
from tokenmill.stages.decontaminate.ngrams import normalize_tokens

pytestmark = pytest.mark.ray

EVALSETS = [("gsm8k", "gsm8k_test.jsonl", "gsm8k"), ("hellaswag", "hellaswag_val_full.txt.gz", "hellaswag_text"),
            ("lambada", "llmfoundry_lambada_openai.jsonl", "lambada"), ("piqa", "llmfoundry_piqa.jsonl", "piqa"),
            ("winogrande", "llmfoundry_winogrande.jsonl", "winogrande"), ("arc", "llmfoundry_arc_easy.jsonl", "arc"),
            ("triviaqa", "llmfoundry_triviaqa_sm_sub.jsonl", "triviaqa"), ("humaneval", "HumanEval.jsonl.gz", "humaneval")]


def corpus(root, shared, plants: bool):
    web = json.loads(Path(shared / "pile" / "pearl_pile_texts.json").read_text(encoding="utf-8"))[:600]
    with gzip.open(shared / "commoncrawl" / "dolma_CC-MAIN-20190717121559-20190717143559-00140.jsonl.gz", "rt") as f:
        web += [t for t in (json.loads(line)["text"] for line in f) if t.strip()]
    docs = [{"id": f"web{i}", "text": t} for i, t in enumerate(web)]
    zh = [line.split("\t", 1)[1].strip() for line in (shared / "chinese" / "thucnews_cnews.val.txt").read_text(encoding="utf-8").split("\n") if line][:150]
    zh_docs = [{"id": f"zh{i}", "text": t} for i, t in enumerate(zh)]
    planted = {}
    if plants:
        book = (shared / "dups" / "textreuse_ats" / "gospeltruth00whit.txt").read_text(encoding="utf-8", errors="replace").split()
        rng = random.Random(3)

        def filler(n=450):
            start = rng.randrange(len(book) - n)
            return " ".join(book[start:start + n])

        gsm = [json.loads(line) for line in (shared / "evalsets" / "gsm8k_test.jsonl").read_text(encoding="utf-8").split("\n") if line]
        lam = [json.loads(line) for line in (shared / "evalsets" / "llmfoundry_lambada_openai.jsonl").read_text(encoding="utf-8").split("\n") if line]
        arc = [json.loads(line) for line in (shared / "evalsets" / "llmfoundry_arc_easy.jsonl").read_text(encoding="utf-8").split("\n") if line]
        question = gsm[5]["question"]
        docs.append({"id": "p-verbatim", "text": filler() + "\n\n" + question})
        shouted = gsm[9]["question"].upper().replace(" ", "   ")
        docs.append({"id": "p-case", "text": filler() + " " + shouted + " " + filler()})
        passage = (lam[11]["context"] + " " + lam[11]["continuation"]).split()
        fragment = " ".join(passage[5:25])
        before, after = filler(), filler()
        docs.append({"id": "p-fragment", "text": before + " " + fragment + " " + after})
        common = next(q["query"] for q in arc if len(q["query"].split()) >= 16).removeprefix("Question: ")
        for i in range(11):  # in 11 documents: a common phrase by the cap of 10, kept everywhere
            docs.append({"id": f"p-common{i}", "text": filler() + " " + common + " " + filler()})
        cmrc = json.loads(Path(shared / "chinese" / "cmrc2018_dev.json").read_text(encoding="utf-8"))
        zh_question = next(q["question"] for a in cmrc["data"] for p in a["paragraphs"] for q in p["qas"]
                           if len(q["question"]) >= 16)
        zh_docs.append({"id": "p-zh", "text": zh[0][:300] + zh_question + zh[0][300:]})
        # Short items, each on a line of its own: a 5-word PIQA goal and a 6-word ARC question matched whole, a
        # 10-word TriviaQA question by the set's 8-grams (GPT-3's rule: n = 8 for these sets, not 13).
        def field_of(name, fmt, field, words):
            path = shared / "evalsets" / name
            return next(f.text for f in load_evalset(EvalSetConfig(name=fmt, path=str(path), format=fmt), str(path))
                        if f.field == field and len(normalize_tokens(f.text)[0]) == words)

        short = {"p-piqa": field_of("llmfoundry_piqa.jsonl", "piqa", "goal", 5),
                 "p-arc": field_of("llmfoundry_arc_easy.jsonl", "arc", "question", 6),
                 "p-trivia": field_of("llmfoundry_triviaqa_sm_sub.jsonl", "triviaqa", "question", 10)}
        for doc_id, text in short.items():
            docs.append({"id": doc_id, "text": filler() + "\n" + text + "\n" + filler()})
        planted = {"p-verbatim": ("gsm8k", "question"), "p-case": ("gsm8k", "question"), "p-fragment": ("lambada", "text"),
                   "p-zh": ("cmrc", "question"), "p-piqa": ("piqa", "goal", "whole"), "p-arc": ("arc", "question", "whole"),
                   "p-trivia": ("triviaqa", "question", "ngram"), "before": before, "after": after}
    write_jsonl(root / "web.jsonl", docs)
    write_jsonl(root / "zh.jsonl", zh_docs)
    evalsets = [{"name": n, "path": str(shared / "evalsets" / f), "format": fmt} for n, f, fmt in EVALSETS]
    evalsets.append({"name": "cmrc", "path": str(shared / "chinese" / "cmrc2018_dev.json"), "format": "squad", "language": "zh"})
    config = {"output": "out", "ingest": {"docs_per_shard": 300},
              "sources": [{"name": "web", "format": "jsonl", "paths": ["web.jsonl"], "id_field": "id"},
                          {"name": "zh", "format": "jsonl", "paths": ["zh.jsonl"], "id_field": "id", "language": "zh"}],
              "stages": {"decontaminate": {"evalsets": evalsets}}}
    (root / "run.yaml").write_text(yaml.safe_dump(config))
    return root / "run.yaml", planted


@pytest.mark.slow  # two runs over real evaluation sets: about 16 s; the stage on Ray in `make test`: test_demo_run.py
def test_natural_then_planted_hits(ray_cluster, shared_data, tmp_path):
    natural_cfg, _ = corpus(tmp_path / "natural", shared_data, plants=False)
    run_into(natural_cfg, tmp_path / "natural" / "out")
    natural = {r["id"] for r in pq.read_table(tmp_path / "natural" / "out" / "decontaminate" / "hits.parquet").to_pylist()}

    cfg, planted = corpus(tmp_path / "planted", shared_data, plants=True)
    run_into(cfg, tmp_path / "planted" / "out")
    out = tmp_path / "planted" / "out" / "decontaminate"
    hits = pq.read_table(out / "hits.parquet").to_pylist()
    hit_ids = {r["id"] for r in hits}
    assert hit_ids == natural | {"p-verbatim", "p-case", "p-fragment", "p-zh", "p-piqa", "p-arc", "p-trivia"}
    for doc, (evalset, field, *rule) in ((k, v) for k, v in planted.items() if k.startswith("p-")):
        assert any(r["id"] == doc and r["evalset"] == evalset and r["field"].startswith(field)
                   and r["rule"] == (rule[0] if rule else "ngram") for r in hits), doc
    assert not any(r["id"].startswith("p-common") for r in hits)  # in 11 documents: a common phrase, kept
    content = json.loads((out / "manifest.json").read_text())["content"]
    report = content["report"]
    assert report["common_ngrams_ignored"] and all(c["documents"] >= 11 for c in report["common_ngrams_ignored"])
    # The index summary and the common n-grams reach the report directly, not through the first shard's stats.
    assert report["index"]["ngrams"] > 0
    assert not any({"index", "common_ngrams"} & set(s.get("stats") or {}) for s in content["shards"])
    assert report["evalsets"]["gsm8k"]["found"] >= 2 and report["evalsets"]["cmrc"]["by_source"]["zh"]
    # Coverage per set: n by GPT-3's rule, and every item counted under one rule.
    sets = report["evalsets"]
    assert {k: sets[k]["n"] for k in sets} == {"gsm8k": 13, "hellaswag": 8, "lambada": 13, "piqa": 8, "winogrande": 13,
                                               "arc": 8, "triviaqa": 8, "humaneval": 10, "cmrc": 8}
    for name, e in sets.items():
        assert e["checked_ngram"] + e["checked_whole"] + sum(e["not_checkable"].values()) == e["items"], name
    assert sets["piqa"]["checked_whole"] > 300 and sets["piqa"]["not_checkable"]["too_short"] > 0
    assert report["index"]["coverage"]["triviaqa"]["fields"]["too_short"] > 2000
    kept = {r["id"]: r["text"] for p in (out / "shards").glob("*.parquet") for r in pq.read_table(p).to_pylist()}
    text = kept["p-fragment"]  # excise: the fragment and 200 characters either side go, the rest stays intact
    assert text.startswith(planted["before"][:-200].rstrip()[:-5]) and planted["after"][205:] in text
    assert "p-common0" in kept and all(k in kept for k in ("p-verbatim", "p-case"))
