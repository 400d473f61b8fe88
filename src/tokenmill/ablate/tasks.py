"""Multiple-choice items read from eval-set files with their gold answer, as lm-evaluation-harness prompts them."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenmill.ablate.config import TaskConfig
from tokenmill.readers.compression import open_binary


@dataclass(frozen=True)
class Item:
    """One item: per choice a (context, continuation) pair scored as log P(continuation | context); `gold` the
    index of the correct choice. Most tasks share one context; Winogrande's choices differ in the context (the
    harness's partial scoring), with one continuation."""

    id: str
    contexts: tuple[str, ...]
    continuations: tuple[str, ...]
    gold: int
    choices: tuple[str, ...]
    """The choices as the harness's `doc_to_choice` gives them (no delimiter): `acc_norm` divides by their length."""


def _question(query: str) -> str:
    """MosaicML's `Question: ...` prompt reduced to the question (the harness adds its own template)."""
    text = query.strip()
    text = text.removeprefix("Question:").strip()
    return text.removesuffix("Answer:").strip()


def hellaswag_preprocess(text: str) -> str:
    """The harness's HellaSwag cleaning (`lm_eval/tasks/hellaswag/utils.py`): WikiHow's ` [title]` marks become
    sentence ends, other bracketed tags go, double spaces close."""
    text = text.strip()
    text = text.replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


def _qa(item_id: str, question: str, choices: list[str], gold: int) -> Item:
    """`Question: ...\\nAnswer:` and each choice after a space (the harness's ARC and PIQA prompts)."""
    context = f"Question: {question}\nAnswer:"
    return Item(item_id, (context,) * len(choices), tuple(f" {c}" for c in choices), gold, tuple(choices))


def _arc(i: int, r: dict[str, Any]) -> Item:
    if "query" in r:
        return _qa(str(i), _question(r["query"]), list(r["choices"]), int(r["gold"]))
    question = r["question"]
    if isinstance(question, dict):  # AI2's own {stem, choices: [{text, label}]}
        choices = question["choices"]
        texts, labels, question = [c["text"] for c in choices], [c["label"] for c in choices], question["stem"]
    else:
        texts, labels = list(r["choices"]["text"]), list(r["choices"]["label"])
    return _qa(str(r.get("id", i)), question, texts, labels.index(r["answerKey"]))


def _piqa(i: int, r: dict[str, Any]) -> Item:
    if "query" in r:
        return _qa(str(i), _question(r["query"]), list(r["choices"]), int(r["gold"]))
    return _qa(str(i), r["goal"], [r["sol1"], r["sol2"]], int(r["label"]))


def _hellaswag(i: int, r: dict[str, Any]) -> Item:
    if "query" in r:
        context, endings, gold = r["query"], list(r["choices"]), int(r["gold"])
    else:
        context = r["activity_label"] + ": " + r["ctx_a"] + " " + r["ctx_b"].capitalize()
        endings, gold = list(r["endings"]), int(r["label"])
    context, endings = hellaswag_preprocess(context), [hellaswag_preprocess(e) for e in endings]
    return Item(str(r.get("ind", i)), (context,) * len(endings), tuple(f" {e}" for e in endings), gold, tuple(endings))


def _winogrande(i: int, r: dict[str, Any]) -> Item:
    if "context_options" in r:
        contexts, rest, gold = list(r["context_options"]), r["continuation"], int(r["gold"])
    else:
        cut = r["sentence"].index("_")
        contexts = [r["sentence"][:cut] + r["option1"], r["sentence"][:cut] + r["option2"]]
        rest, gold = r["sentence"][cut + 1:], int(r["answer"]) - 1
    return Item(str(i), tuple(contexts), (f" {rest.strip()}",) * len(contexts), gold, tuple(contexts))


_JSONL = {"arc": _arc, "piqa": _piqa, "hellaswag": _hellaswag, "winogrande": _winogrande}


def _hellaswag_text(path: Path, limit: int | None) -> list[Item]:
    """klosax's rendering: per item `<activity_label>: <ctx>`, the gold label, then 4 endings (6 lines)."""
    items: list[Item] = []
    block: list[str] = []
    with open_binary(str(path)) as f:
        for lineno, raw in enumerate(f, 1):
            block.append(raw.decode("utf-8").rstrip("\n"))
            if len(block) < 6:
                continue
            if block[1].strip() not in ("0", "1", "2", "3"):
                raise ValueError(f"{path}:{lineno - 4}: expected a gold label 0-3, got {block[1][:40]!r}")
            context, endings = hellaswag_preprocess(block[0]), [hellaswag_preprocess(e) for e in block[2:]]
            items.append(Item(str(len(items)), (context,) * 4, tuple(f" {e}" for e in endings), int(block[1]),
                              tuple(endings)))
            block = []
            if limit is not None and len(items) >= limit:
                break
    return items


def read_items(task: TaskConfig, path: Path) -> list[Item]:
    """The task's first `max_items` items; ValueError naming the file and line of a record that does not parse."""
    if task.format == "hellaswag_text":
        return _hellaswag_text(path, task.max_items)
    make = _JSONL[task.format]
    items: list[Item] = []
    with open_binary(str(path)) as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                item = make(len(items), json.loads(raw))
            except (ValueError, KeyError, TypeError, IndexError) as err:
                raise ValueError(f"{path}:{lineno}: not a {task.format} item ({type(err).__name__}: {err})") from None
            if not 0 <= item.gold < len(item.continuations):
                raise ValueError(f"{path}:{lineno}: gold {item.gold} is not a choice (0-{len(item.continuations) - 1})")
            items.append(item)
            if task.max_items is not None and len(items) >= task.max_items:
                break
    return items
