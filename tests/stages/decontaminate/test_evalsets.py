"""Evaluation sets: the real files in shared data (counts from SOURCES.md), both field shapes, errors."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import pytest

from tests.conftest import write_jsonl
from tokenmill.stages.decontaminate.evalsets import PRESETS, EvalField, EvalSetConfig, load_evalset


def load(fmt: str, path: Path, **kw) -> list[EvalField]:
    return list(load_evalset(EvalSetConfig(name=fmt, path=str(path), format=fmt, **kw), str(path)))


def by_item(fields: list[EvalField]) -> dict[str, dict[str, str]]:
    items: dict[str, dict[str, str]] = defaultdict(dict)
    for f in fields:
        assert f.field not in items[f.item], f"{f.item} {f.field} twice"
        items[f.item][f.field] = f.text
    return items


# (preset, file under shared data, items per SOURCES.md, the fields every item has)
REAL = [
    ("gsm8k", "evalsets/gsm8k_test.jsonl", 1319, {"question", "answer"}),
    ("humaneval", "evalsets/HumanEval.jsonl.gz", 164, {"prompt", "canonical_solution", "test"}),
    ("hellaswag_text", "evalsets/hellaswag_val_full.txt.gz", 10042,
     {"ctx", "ending[0]", "ending[1]", "ending[2]", "ending[3]"}),
    ("lambada", "evalsets/llmfoundry_lambada_openai.jsonl", 5153, {"text"}),
    ("piqa", "evalsets/llmfoundry_piqa.jsonl", 1838, {"goal", "sol1", "sol2"}),
    ("winogrande", "evalsets/llmfoundry_winogrande.jsonl", 1267, {"sentence[0]", "sentence[1]"}),
    ("arc", "evalsets/llmfoundry_arc_easy.jsonl", 2376, {"question", "choices[0]", "choices[1]"}),
    ("arc", "evalsets/llmfoundry_arc_challenge.jsonl", 1172, {"question", "choices[0]", "choices[1]"}),
    ("triviaqa", "evalsets/llmfoundry_triviaqa_sm_sub.jsonl", 3000, {"question", "answer"}),
    ("mosaic_icl", "evalsets/llmfoundry_arc_easy.jsonl", 2376, {"query", "choices[0]", "choices[1]"}),
    ("squad", "chinese/cmrc2018_dev.json", 848, {"context", "question[0]"}),
]


@pytest.mark.parametrize("fmt,rel,count,expected", REAL, ids=[f"{r[0]}:{Path(r[1]).name}" for r in REAL])
def test_real_evalsets(shared_data, fmt, rel, count, expected):
    fields = load(fmt, shared_data / rel)
    items = by_item(fields)
    assert len(items) == count
    for item, texts in items.items():
        assert expected <= set(texts), (item, sorted(texts))
    assert all(f.text.strip() for f in fields)
    # The MosaicML prompt template is gone: the text is the benchmark's own.
    assert not any(f.text.startswith("Question:") or f.text.rstrip().endswith("Answer:") for f in fields)


def test_real_specifics(shared_data):
    gsm = by_item(load("gsm8k", shared_data / "evalsets/gsm8k_test.jsonl"))
    assert not any("<<" in t["answer"] or ">>" in t["answer"] for t in gsm.values())
    assert gsm["0"]["answer"].startswith("Janet sells 16 - 3 - 4 = 9 duck eggs a day.")
    assert all("\n#### " in t["answer"] for t in gsm.values())

    human = by_item(load("humaneval", shared_data / "evalsets/HumanEval.jsonl.gz"))
    assert set(human) == {f"HumanEval/{i}" for i in range(164)}

    hella = by_item(load("hellaswag_text", shared_data / "evalsets/hellaswag_val_full.txt.gz"))
    assert hella["0"]["ctx"] == "A man is sitting on a roof. he"  # the activity label is removed
    assert hella["0"]["ending[3]"] == "starts pulling up roofing on a roof."

    lam = by_item(load("lambada", shared_data / "evalsets/llmfoundry_lambada_openai.jsonl"))
    assert lam["0"]["text"].endswith("I don't care about signs")  # context + continuation

    wino = by_item(load("winogrande", shared_data / "evalsets/llmfoundry_winogrande.jsonl"))
    assert wino["0"]["sentence[1]"] == ("Sarah was a much better surgeon than Maria so Maria always got the "
                                        "easier cases.")

    cmrc = load("squad", shared_data / "chinese/cmrc2018_dev.json")
    assert sum(f.field.startswith("question[") for f in cmrc) == 3219
    assert cmrc[0].item == "DEV_0" and cmrc[0].field == "context"


def test_original_shapes(tmp_path):
    """The presets read the original benchmark releases as well as the MosaicML rewrite."""
    hs = write_jsonl(tmp_path / "hs.jsonl",
                     [{"ind": 24, "ctx": "A man is sitting.", "endings": ["a", "", "c", "d"]}])
    assert [(f.item, f.field) for f in load("hellaswag", hs)] == [
        ("24", "ctx"), ("24", "ending[0]"), ("24", "ending[2]"), ("24", "ending[3]")]  # empty fields skipped

    piqa = write_jsonl(tmp_path / "piqa.jsonl", [{"goal": "g", "sol1": "s1", "sol2": "s2"}])
    assert [(f.field, f.text) for f in load("piqa", piqa)] == [("goal", "g"), ("sol1", "s1"), ("sol2", "s2")]

    wino = write_jsonl(tmp_path / "w.jsonl", [{"qID": "q-1", "sentence": "A beat B because _ was fast.",
                                               "option1": "A", "option2": "B", "answer": "1"}])
    assert [(f.item, f.field, f.text) for f in load("winogrande", wino)] == [
        ("q-1", "sentence[0]", "A beat B because A was fast."), ("q-1", "sentence[1]", "A beat B because B was fast.")]

    arc = write_jsonl(tmp_path / "arc.jsonl", [
        {"id": "Mercury_1",
         "question": {"stem": "Why?", "choices": [{"text": "x", "label": "A"}, {"text": "y", "label": "B"}]}},
        {"id": "Mercury_2", "question": "How?", "choices": {"text": ["u", "v"], "label": ["A", "B"]}},
    ])
    assert [(f.item, f.field, f.text) for f in load("arc", arc)] == [
        ("Mercury_1", "question", "Why?"), ("Mercury_1", "choices[0]", "x"), ("Mercury_1", "choices[1]", "y"),
        ("Mercury_2", "question", "How?"), ("Mercury_2", "choices[0]", "u"), ("Mercury_2", "choices[1]", "v")]

    tqa = write_jsonl(tmp_path / "t.jsonl",
                      [{"question_id": "tc_1", "question": "Who?", "answer": {"value": "Me", "aliases": ["me"]}}])
    assert [(f.item, f.field, f.text) for f in load("triviaqa", tqa)] == [
        ("tc_1", "question", "Who?"), ("tc_1", "answer", "Me")]

    mmlu = write_jsonl(tmp_path / "m.jsonl", [{"question": "Q?", "subject": "s", "choices": ["1", "2"], "answer": 0},
                                              {"query": "Question: R?\nAnswer:", "choices": ["3"], "gold": 0}])
    assert [(f.item, f.field, f.text) for f in load("mmlu", mmlu)] == [
        ("0", "question", "Q?"), ("0", "choices[0]", "1"), ("0", "choices[1]", "2"),
        ("1", "question", "R?"), ("1", "choices[0]", "3")]

    lam = write_jsonl(tmp_path / "l.jsonl", [{"text": "a whole passage"}])
    assert [f.text for f in load("lambada", lam)] == ["a whole passage"]

    squad = tmp_path / "squad.json.gz"
    with gzip.open(squad, "wt") as f:
        json.dump({"data": [{"title": "T", "paragraphs": [
            {"context": "Para one.", "qas": [{"id": "1", "question": "Q1?", "answers": [{"text": "one"}]},
                                             {"id": "2", "question": "Q2?", "answers": []}]},
            {"context": "Para two.", "qas": []}]}]}, f)
    assert [(f.item, f.field) for f in load("squad", squad)] == [
        ("0", "context"), ("0", "question[0]"), ("0", "question[1]"), ("1", "context")]

    text = tmp_path / "t.txt"
    text.write_text("first line\n\n  \nsecond line\n")
    assert [(f.item, f.field, f.text) for f in load("text", text)] == [
        ("0", "text", "first line"), ("1", "text", "second line")]


def test_jsonl_fields(tmp_path):
    path = write_jsonl(tmp_path / "set.jsonl", [
        {"id": "a", "q": "What is up?", "opts": ["sky", "", "ceiling"], "meta": {"a": "sky"}},
        {"q": "Second?", "opts": [], "meta": {"a": 7}},
        {"q": "", "meta": {}},
    ])
    fields = load("jsonl", path, fields=["q", "opts[]", "meta.a"])
    assert [(f.item, f.field, f.text) for f in fields] == [
        ("a", "q", "What is up?"), ("a", "opts[0]", "sky"), ("a", "opts[2]", "ceiling"), ("a", "meta.a", "sky"),
        ("1", "q", "Second?"), ("1", "meta.a", "7")]

    nested = write_jsonl(tmp_path / "n.jsonl", [{"qas": [{"answers": [{"text": "x"}, {"text": "y"}]}]}])
    assert [f.field for f in load("jsonl", nested, fields=["qas[].answers[].text"])] == [
        "qas[0].answers[0].text", "qas[0].answers[1].text"]
    assert [f.field for f in load("jsonl", nested, fields=["qas[0].answers[1].text"])] == ["qas[0].answers[1].text"]

    with pytest.raises(ValueError, match=r"set\.jsonl:1: field 'opts' is list.*opts\[\]"):
        load("jsonl", path, fields=["opts"])
    with pytest.raises(ValueError, match="'question'.* found in none of its 3 records"):
        load("jsonl", path, fields=["q", "question"])


def test_config_validation():
    with pytest.raises(ValueError, match="unknown eval-set format 'mmlu_csv'.*gsm8k, hellaswag"):
        EvalSetConfig(name="x", path="x.jsonl", format="mmlu_csv")
    with pytest.raises(ValueError, match="needs `fields`"):
        EvalSetConfig(name="x", path="x.jsonl")
    with pytest.raises(ValueError, match="only for format 'jsonl'"):
        EvalSetConfig(name="x", path="x.jsonl", format="gsm8k", fields=["question"])
    with pytest.raises(ValueError, match="bad field path"):
        EvalSetConfig(name="x", path="x.jsonl", fields=["a..b"])
    with pytest.raises(ValueError):
        EvalSetConfig(name="x", path="x.jsonl", format="gsm8k", colour="red")  # strict: unknown keys are errors
    config = EvalSetConfig(name="cmrc", path="c.json", format="squad", language="zh")
    assert config.language == "zh" and "jsonl" in PRESETS and len(PRESETS) == 14


def test_broken_files_name_file_and_line(tmp_path):
    bad = write_jsonl(tmp_path / "g.jsonl", [{"question": "q", "answer": "a"}], [b"", b"{not json"])
    with pytest.raises(ValueError, match=r"g\.jsonl:3: not a JSON line"):
        load("gsm8k", bad)
    wrong = write_jsonl(tmp_path / "p.jsonl", [{"goal": "g"}, {"text": "t"}])
    with pytest.raises(ValueError, match=r"p\.jsonl:2: expected 'goal'.*\['text'\]"):
        load("piqa", wrong)
    array = write_jsonl(tmp_path / "a.jsonl", [["not", "an", "object"]])
    with pytest.raises(ValueError, match=r"a\.jsonl:1: expected a JSON object"):
        load("mosaic_icl", array)

    shifted = tmp_path / "h.txt.gz"
    with gzip.open(shifted, "wt") as f:
        f.write("Label: ctx one\n2\ne0\ne1\ne2\ne3\nLabel: ctx two\nextra line\n1\ne0\ne1\ne2\ne3\n")
    with pytest.raises(ValueError, match=r"h\.txt\.gz:8: expected the gold label"):
        load("hellaswag_text", shifted)
    short = tmp_path / "s.txt"
    short.write_text("Label: ctx one\n2\ne0\ne1\ne2\ne3\nLabel: ctx two\n1\n")
    with pytest.raises(ValueError, match=r"s\.txt:8: the last item \(from line 7\) has 2 of its 6 lines"):
        load("hellaswag_text", short)

    not_squad = tmp_path / "ns.json"
    not_squad.write_text('{"version": 1}')
    with pytest.raises(ValueError, match="top-level 'data' list"):
        load("squad", not_squad)


def test_an_eval_sets_language_is_the_code_matching_compares():
    """`ZH` or `zh-Hans` is `zh` (character n-grams), as a source's language is; a name or unknown code is refused,
    naming the code to write (before, `ZH` silently matched a Chinese set by words)."""
    from pydantic import ValidationError

    for written in ("ZH", "zh-Hans", "zh_CN", " zh "):
        assert EvalSetConfig(name="c", path="c.jsonl", fields=["q"], language=written).language == "zh"
    with pytest.raises(ValidationError, match="'chinese' is not a language code; write 'zh'"):
        EvalSetConfig(name="c", path="c.jsonl", fields=["q"], language="chinese")
    with pytest.raises(ValidationError, match="not a code the language identifier"):
        EvalSetConfig(name="c", path="c.jsonl", fields=["q"], language="xx-nope")
