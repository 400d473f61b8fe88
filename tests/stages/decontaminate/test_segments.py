"""Multiple-choice prompts held in one field (issue 31, item 8): the stem and each choice are segments, each checked
by the rule its own length gives, and counted.

The prompts are MosaicML's CommonsenseQA records as llm-foundry stores them, and the shared ARC sets rendered in that
layout; the hosts are real Common Crawl pages and Pile texts from ../shared/data."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tokenmill.sources.config import SourceConfig
from tokenmill.pipeline.contract import RunContext
from tokenmill.stages.decontaminate.config import DecontaminateConfig
from tokenmill.stages.decontaminate.evalsets import EvalSetConfig, load_evalset
from tokenmill.stages.decontaminate.ngrams import build_index, find_matches, find_matches_batch, normalize_tokens

# mosaicml/llm-foundry scripts/eval/local_data/commonsense_reasoning/commonsense_qa.jsonl (34c28fc), lines 4, 8, 20.
CSQA = [
    {"query": "Question: Where are  you likely to find a hamburger?\nChoices:\nA. fast food restaurant\nB. ground up "
              "dead cows\nC. mouth\nD. cow carcus\nAnswer:", "choices": ["A", "B", "C", "D"], "gold": 0},
    {"query": "Question: What do animals do when an enemy is approaching?\nChoices:\nA. procreate\nB. pass water\n"
              "C. listen to each other\nD. sing\nAnswer:", "choices": ["A", "B", "C", "D"], "gold": 2},
    {"query": "Question: Where do adults use glue sticks?\nChoices:\nA. desk drawer\nB. at school\nC. office\n"
              "D. kitchen drawer\nAnswer:", "choices": ["A", "B", "C", "D"], "gold": 2},
]
NINE_WORDS = "What do animals do when an enemy is approaching?"
SIX_WORDS = "Where do adults use glue sticks?"


def test_a_prompt_is_cut_into_its_stem_and_choices():
    from tokenmill.stages.decontaminate.segments import WHOLE, split_field

    assert split_field(CSQA[1]["query"]) == [("stem", NINE_WORDS), ("A", "procreate"), ("B", "pass water"),
                                             ("C", "listen to each other"), ("D", "sing")]
    # llm-foundry's API-compatible copy has no "Answer:" line; the MosaicML presets remove the template first.
    assert split_field(CSQA[2]["query"].removesuffix("\nAnswer:"))[0] == ("stem", SIX_WORDS)
    assert split_field("Which are true?\nI. x is one\nII. y\n(A) I only\n(B) II only\n(C) both\n\nAnswer: (A)") == [
        ("stem", "Which are true?"), ("stem2", "I. x is one"), ("stem3", "II. y"), ("A", "I only"),
        ("B", "II only"), ("C", "both")]
    for whole in ("Question: How do I ready a guinea pig cage?\n",  # PIQA's query: no choices
                  "Q: Who wrote it?\nA: Tolstoy",  # a question and its answer
                  "B. second\nC. third",  # choices not from A
                  "Intro.\nA. only one choice\nAnswer:",
                  'def f(x):\n    """Options:\n    A. x\n    B. y\n    """\n    return x\n'):  # the block ends no prompt
        assert split_field(whole) == [(WHOLE, whole)], whole


def test_no_field_of_the_shared_sets_is_cut(shared_data):
    """The shared sets store their choices as fields of their own: none is a prompt with choices, so each keeps its
    index, n and coverage, and is found as before (a GSM8K solution's lines, a LAMBADA story's, a HumanEval prompt's
    stay one field)."""
    from tokenmill.stages.decontaminate.segments import split_field

    sets = [("gsm8k_test.jsonl", "gsm8k"), ("HumanEval.jsonl.gz", "humaneval"),
            ("llmfoundry_lambada_openai.jsonl", "lambada"), ("llmfoundry_piqa.jsonl", "piqa"),
            ("llmfoundry_arc_easy.jsonl", "arc"), ("llmfoundry_arc_challenge.jsonl", "arc"),
            ("llmfoundry_triviaqa_sm_sub.jsonl", "triviaqa"), ("llmfoundry_winogrande.jsonl", "winogrande")]
    lines = cut = 0
    for name, fmt in sets:
        path = shared_data / "evalsets" / name
        for f in load_evalset(EvalSetConfig(name=name, path=str(path), format=fmt), str(path)):
            if "\n" in f.text.strip():
                lines += 1
                cut += len(split_field(f.text)) > 1
    assert lines > 5000 and cut == 0


def _web_pages(shared_data: Path) -> list[str]:
    path = shared_data / "commoncrawl" / "dolma_CC-MAIN-20190717121559-20190717143559-00140.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [r["text"] for r in map(json.loads, f) if r["text"].strip()]


def _quoted_alone(page: str, text: str) -> str:
    """`text` on a line of its own in the middle of a real web page."""
    cut = page.find("\n", len(page) // 2)
    return page[:cut] + "\n" + text + "\n" + page[cut:]


def _csqa_index(tmp_path: Path, fmt: str):
    path = tmp_path / "commonsense_qa.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in CSQA), encoding="utf-8")
    config = EvalSetConfig(name="csqa", path=str(path), format=fmt, fields=["query"] if fmt == "jsonl" else [])
    return build_index((config.name, f.item, f.field, f.text, "en") for f in load_evalset(config, str(path)))


@pytest.mark.parametrize("fmt", ["mosaic_icl", "mmlu", "jsonl"])
def test_a_stem_quoted_alone_in_a_web_page_is_found(shared_data, tmp_path, fmt):
    """Before, the prompt was one field: n was 13 from its whole length with `fields: [query]`, and a 6-word stem
    held no n-gram of the field in any layout. Now the 9-word stem is found by its 8-grams, the 6-word one whole;
    1- and 2-word choices ("sing", "pass water") are too short to check, as they are in ARC's own layout."""
    index = _csqa_index(tmp_path, fmt)
    page = next(p for p in _web_pages(shared_data) if len(p) > 3000)
    assert find_matches(page, "en", index) == []

    def owners(text):
        return {owner for _, _, h in find_matches(_quoted_alone(page, text), "en", index)
                for owner in index.owners_with_rule(h)}

    assert {stem: bool(owners(stem)) for stem in (NINE_WORDS, SIX_WORDS)} == {NINE_WORDS: True, SIX_WORDS: True}
    field = "question" if fmt == "mmlu" else "query"  # the preset's name for the prompt
    assert owners(NINE_WORDS) == {("csqa", "1", f"{field}:stem", "ngram")}
    assert owners(SIX_WORDS) == {("csqa", "2", f"{field}:stem", "whole")}
    assert owners("listen to each other") == {("csqa", "1", f"{field}:C", "whole")}
    for short in ("sing", "pass water", "mouth", "desk drawer"):
        assert owners(short) == set(), short
    # Inside a sentence a short stem is a phrase of the page, not the item (the whole-match rule).
    assert owners(f"They asked where do adults use glue sticks and left it there, {page[:40]}") == set()
    cov = index.coverage["csqa"]
    assert (cov.n, cov.segmented_fields) == (8, 3)
    letters = 0 if fmt == "jsonl" else 12  # the presets also yield `choices`, one letter each: too short
    assert cov.segments == {"total": 15 + letters, "ngram": 2, "whole": 4, "too_short": 9 + letters, "no_text": 0}
    assert cov.items == {"total": 3, "ngram": 2, "whole": 1, "too_short": 0, "no_text": 0}


def _arc_as_prompts(shared_data: Path, tmp_path: Path) -> tuple[Path, Path, list[dict]]:
    """ARC-Challenge (shared data) and the same items rendered in CommonsenseQA's prompt layout."""
    own = shared_data / "evalsets" / "llmfoundry_arc_challenge.jsonl"
    rows = [json.loads(line) for line in own.read_text(encoding="utf-8").splitlines() if line.strip()]
    prompts = tmp_path / "arc_challenge_prompts.jsonl"
    with prompts.open("w", encoding="utf-8") as f:
        for r in rows:
            letters = "ABCDE"[:len(r["choices"])]
            query = (r["query"] + "\nChoices:\n" + "\n".join(f"{k}. {c}" for k, c in zip(letters, r["choices"]))
                     + "\nAnswer:")
            f.write(json.dumps({"query": query, "choices": list(letters), "gold": r["gold"]}) + "\n")
    return own, prompts, rows


def test_real_items_in_the_prompt_layout_are_found_as_in_their_own(shared_data, tmp_path):
    """ARC-Challenge in its own layout (question and choices as fields) and as prompts (MosaicML's CommonsenseQA
    layout, read with `fields: [query]`): the same n and coverage; every 4th item's stem quoted alone in a real web
    page is found in both (before: 209 of 293 as prompts, none of the 84 stems under 13 words); and on 697 real
    Common Crawl pages and 1,000 Pile texts, the same documents match (ARC's 3-word choices as list items)."""
    own, prompts, rows = _arc_as_prompts(shared_data, tmp_path)
    layouts = {"own": EvalSetConfig(name="arc", path=str(own), format="arc"),
               "prompts": EvalSetConfig(name="arc", path=str(prompts), format="jsonl", fields=["query"])}
    indexes = {k: build_index(("arc", f.item, f.field, f.text, "en") for f in load_evalset(c, c.path))
               for k, c in layouts.items()}
    own_cov, prompt_cov = indexes["own"].coverage["arc"], indexes["prompts"].coverage["arc"]
    assert (prompt_cov.n, prompt_cov.items) == (own_cov.n, own_cov.items) == (8, prompt_cov.items)
    assert prompt_cov.segments == own_cov.segments and prompt_cov.segmented_fields == len(rows)
    pages = _web_pages(shared_data)
    hosts = [p for p in pages if len(p) > 1500]
    stems = [r["query"].removeprefix("Question: ") for r in rows[::4]]
    docs = [_quoted_alone(hosts[i % len(hosts)], stem) for i, stem in enumerate(stems)]
    short = sum(len(normalize_tokens(s)[0]) < 13 for s in stems)
    pile = json.loads((shared_data / "pile" / "pearl_pile_texts.json").read_text(encoding="utf-8"))
    matched = {}
    for layout, index in indexes.items():
        found = find_matches_batch(docs, ["en"] * len(docs), index)
        assert all(found), f"{layout}: {sum(not m for m in found)} of {len(docs)} stems not found"
        web = find_matches_batch(pages + pile, ["en"] * (len(pages) + len(pile)), index)
        matched[layout] = sorted(i for i, m in enumerate(web) if m)
    assert len(docs) == 293 and short > 80
    assert matched["prompts"] == matched["own"] and len(matched["own"]) <= 2


def test_the_report_counts_segments(shared_data, tmp_path, capsys):
    """The index summary, the manifest's report and `tokenmill report contamination` count segments per set."""
    from tokenmill.cli import main
    from tokenmill.stages.decontaminate.stage import BuildIndex, DecontaminateStage

    path = tmp_path / "commonsense_qa.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in CSQA), encoding="utf-8")
    run = RunContext(seed=0, sources={"s": SourceConfig(name="s", format="jsonl", paths=["x"])}, base_dir=str(tmp_path))
    config = DecontaminateConfig(evalsets=[{"name": "csqa", "path": str(path), "format": "mosaic_icl"}])
    stage = DecontaminateStage(config, run)
    built = BuildIndex().build(stage, None)
    report = stage.report({}, {"index": built})
    entry = report["evalsets"]["csqa"]
    # mosaic_icl also yields the choices list, each a one-letter field: 12 more segments, too short.
    assert entry["segments"] == {"total": 27, "ngram": 2, "whole": 4, "too_short": 21, "no_text": 0}
    assert entry["segmented_fields"] == 3 and built["summary"]["coverage"]["csqa"]["segments"] == entry["segments"]
    (tmp_path / "decontaminate").mkdir()
    manifest = {"content": {"report": report, "shards": []}, "run_info": {}}  # read as any manifest is
    (tmp_path / "decontaminate" / "manifest.json").write_text(json.dumps(manifest))
    assert main(["report", "contamination", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.strip("│ ").startswith("csqa"))
    assert [c.strip() for c in line.strip("│ ").split("│")][:9] == ["csqa", "3", "8", "2", "1", "0", "0", "27",
                                                                   "2 / 4"]
