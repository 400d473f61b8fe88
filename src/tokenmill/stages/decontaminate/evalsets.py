"""Evaluation sets read from files, as items made of text fields (what decontamination matches against).

`load_evalset` streams one `EvalField` per non-empty text field of each item: a HellaSwag item gives its
context and four endings, a SQuAD paragraph gives its context and each question. The `format` names a
preset that knows the file's shape; the JSON-lines presets accept both the original benchmark field names
and the MosaicML ICL-eval rewrite (`query`/`choices`/`context`/`continuation`/`context_options`), whose
`Question: ... Answer:` prompt template is removed so the text is the benchmark's own. A field that holds a whole
multiple-choice prompt (MosaicML's CommonsenseQA `query`: `Question: ...\nChoices:\nA. ...\nAnswer:`) is yielded
as it is and cut into its stem and choices when indexed (`segments.py`).

Presets and the fields they yield:

- `gsm8k`: `question`, `answer` -> `question`, `answer` (calculator notes `<<16-3-4=9>>` removed; `#### 42` kept).
- `hellaswag`: `ctx` (or `ctx_a` + `ctx_b`), `endings[]`, id `ind` -> `ctx`, `ending[i]`.
- `hellaswag_text`: 6 lines per item (`<activity_label>: <ctx>`, gold 0-3, 4 endings) -> `ctx` (label removed),
  `ending[0..3]`.
- `humaneval`: `task_id`, `prompt`, `canonical_solution`, `test` -> `prompt`, `canonical_solution`, `test`.
- `lambada`: `text`, or MosaicML `context` + `continuation` -> `text` (the whole passage).
- `piqa`: `goal`, `sol1`, `sol2`, or MosaicML `query`, `choices[]` -> `goal`, `sol1`, `sol2`.
- `winogrande`: `sentence` with `_` and `option1`/`option2`, or MosaicML `context_options[]` + `continuation`
  -> `sentence[0]`, `sentence[1]` (the sentence filled in with each option).
- `arc`: `question` (text, or AI2's `{stem, choices[{text}]}`) and `choices` (`{text[]}` or a list), or MosaicML
  `query`, `choices[]` -> `question`, `choices[i]`.
- `triviaqa`: `question` and `answer` (text or `{value}`), or MosaicML `context`, `answer` -> `question`, `answer`
  (the short `aliases` are not yielded).
- `mmlu`: `question` or MosaicML `query`, and `choices[]` -> `question`, `choices[i]`.
- `squad`: one JSON document `data[].paragraphs[]{id?, context, qas[]{question}}` (SQuAD, CMRC 2018); items are
  paragraphs -> `context`, `question[i]`.
- `mosaic_icl`: any of `query`, `context`, `choices[]`, `continuation`, `context_options[]` -> the same names, list
  elements as `name[i]`.
- `text`: plain text, one item per non-empty line -> `text`.
- `jsonl`: JSON lines with `fields` naming dotted paths (`a.b`, `opts[]`, `x[2]`, `qas[].answers[].text`) -> the
  paths, lists expanded (`opts[1]`); a path that no record has is an error (a typo, most likely).

Item ids are the set's own id where it has one (`task_id`, `id`, `qID`, `question_id`, HellaSwag's `ind`,
a SQuAD paragraph's `id`), else the item's 0-based index as a string. Files ending in `.gz`/`.zst` are
decompressed; JSON lines are split on `\\n` only (one set holds a U+0085 inside a string). Broken lines are
`ValueError("<file>:<line>: ...")`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import field_validator, model_validator

from tokenmill.config_base import StrictModel
from tokenmill.readers.compression import open_binary

PRESETS: tuple[str, ...] = ("gsm8k", "hellaswag", "hellaswag_text", "humaneval", "lambada", "piqa", "winogrande",
                            "arc", "triviaqa", "mmlu", "squad", "mosaic_icl", "text", "jsonl")

# One `fields` path segment: a key, then any number of `[]` (every element) or `[N]` (one element).
_SEGMENT = re.compile(r"^([^.\[\]]+)((?:\[\d*\])*)$")
_BRACKETS = re.compile(r"\[(\d*)\]")


class EvalSetConfig(StrictModel):
    """One evaluation set to decontaminate against."""

    name: str
    """The set's name, as reports show it (e.g. `gsm8k`)."""

    path: str
    """The file, relative to the run config's folder; `.gz` and `.zst` are decompressed."""

    format: str = "jsonl"
    """How to read the file: one of `PRESETS` (see the module docstring for the fields each yields)."""

    fields: list[str] = []
    """For format `jsonl` only: the text fields, as dotted paths; `[]` expands a list (`["q", "opts[]", "meta.a"]`)."""

    language: str = "en"
    """`zh` for Chinese sets: matching then uses character n-grams instead of word n-grams."""

    @field_validator("name", "path")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value

    @field_validator("language")
    @classmethod
    def _language_known(cls, value: str) -> str:
        """The code matching compares (`ZH`, `zh-Hans` -> `zh`), as a source's `language` is checked: else a Chinese
        set written `ZH` was matched by words, not characters, without a word."""
        from tokenmill.text.langid import canonical_language

        return canonical_language(value)

    @field_validator("format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        if value not in PRESETS:
            raise ValueError(f"unknown eval-set format {value!r}; the presets are: {', '.join(PRESETS)}")
        return value

    @model_validator(mode="after")
    def _fields_for_jsonl(self) -> EvalSetConfig:
        if self.format == "jsonl":
            if not self.fields:
                raise ValueError(f"eval set {self.name!r}: format 'jsonl' needs `fields` (dotted paths to the text)")
            for spec in self.fields:
                _parse_path(spec)
        elif self.fields:
            raise ValueError(f"eval set {self.name!r}: `fields` is only for format 'jsonl' (format is {self.format!r})")
        return self


@dataclass(frozen=True)
class EvalField:
    """One text field of one evaluation item."""

    item: str
    """The item's id: the set's own id where it has one, else its 0-based index as a string."""
    field: str
    """The field's name, e.g. `question`, `choices[2]`, `ending[1]`."""
    text: str


def load_evalset(config: EvalSetConfig, path: str) -> Iterator[EvalField]:
    """Stream the set's non-empty text fields, item by item; `path` is the resolved file path."""
    if config.format == "hellaswag_text":
        yield from _hellaswag_text(path)
    elif config.format == "text":
        yield from _text_lines(path)
    elif config.format == "squad":
        yield from _squad(path)
    elif config.format == "jsonl":
        yield from _generic_jsonl(path, config.fields)
    else:
        yield from _preset_jsonl(path, _PRESET_READERS[config.format])


# --- JSON lines ---------------------------------------------------------------------------------------

class _RecordError(ValueError):
    """A record that does not have the preset's shape; the caller adds the file and line."""


def _json_lines(path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) for each non-blank line; split on `\\n` only."""
    with open_binary(path) as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
                raise ValueError(f"{path}:{lineno}: not a JSON line: {e}") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
            yield lineno, record


_ID_KEYS = ("task_id", "id", "qID", "question_id", "ind")

Fields = list[tuple[str, Any]]
PresetReader = Callable[[dict[str, Any]], Fields]


def _own_id(record: dict[str, Any]) -> str | None:
    for key in _ID_KEYS:
        value = record.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value).strip():
            return str(value)
    return None


def _preset_jsonl(path: str, reader: PresetReader) -> Iterator[EvalField]:
    for index, (lineno, record) in enumerate(_json_lines(path)):
        try:
            fields = reader(record)
        except _RecordError as e:
            raise ValueError(f"{path}:{lineno}: {e}") from None
        item = _own_id(record) or str(index)
        for name, value in fields:
            if value is None:
                continue
            if not isinstance(value, str):
                raise ValueError(f"{path}:{lineno}: field {name!r} is {type(value).__name__}, expected text")
            if value.strip():
                yield EvalField(item, name, value)


def _shape_error(record: dict[str, Any], expected: str) -> _RecordError:
    return _RecordError(f"expected {expected}; the record has keys {sorted(record)}")


def _text_list(record: dict[str, Any], key: str) -> list[Any]:
    value = record.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise _RecordError(f"{key!r} should be a list, got {type(value).__name__}")
    return value


def _listed(name: str, values: list[Any]) -> Fields:
    return [(f"{name}[{i}]", v) for i, v in enumerate(values)]


_QUESTION_PREFIX = re.compile(r"^\s*Question:\s*")
_ANSWER_SUFFIX = re.compile(r"\s*Answer:\s*$")


def _untemplate(value: Any) -> Any:
    """Remove a MosaicML ICL prompt's `Question: ` prefix and `Answer:` suffix (and the whitespace around)."""
    if not isinstance(value, str):
        return value
    return _ANSWER_SUFFIX.sub("", _QUESTION_PREFIX.sub("", value)).strip()


def _join(left: str, right: str) -> str:
    """Concatenate two text pieces with one space, unless either side already brings whitespace."""
    if not left or not right or left[-1].isspace() or right[0].isspace():
        return left + right
    return f"{left} {right}"


_CALCULATOR = re.compile(r"<<[^<>]*>>")


def _gsm8k(r: dict[str, Any]) -> Fields:
    if "question" not in r:
        raise _shape_error(r, "'question' and 'answer'")
    answer = r.get("answer")
    if isinstance(answer, str):
        answer = _CALCULATOR.sub("", answer)
    return [("question", r["question"]), ("answer", answer)]


def _hellaswag(r: dict[str, Any]) -> Fields:
    if "endings" not in r:
        raise _shape_error(r, "'ctx' and 'endings'")
    ctx = r.get("ctx")
    if ctx is None and ("ctx_a" in r or "ctx_b" in r):
        ctx = _join(r.get("ctx_a") or "", r.get("ctx_b") or "")
    return [("ctx", ctx), *_listed("ending", _text_list(r, "endings"))]


def _humaneval(r: dict[str, Any]) -> Fields:
    if "prompt" not in r:
        raise _shape_error(r, "'task_id', 'prompt', 'canonical_solution', 'test'")
    return [("prompt", r["prompt"]), ("canonical_solution", r.get("canonical_solution")), ("test", r.get("test"))]


def _lambada(r: dict[str, Any]) -> Fields:
    if "text" in r:
        return [("text", r["text"])]
    if "context" in r and "continuation" in r:
        context, continuation = r["context"], r["continuation"]
        if not isinstance(context, str) or not isinstance(continuation, str):
            raise _RecordError("'context' and 'continuation' should be text")
        return [("text", _join(context, continuation))]
    raise _shape_error(r, "'text', or 'context' and 'continuation'")


def _piqa(r: dict[str, Any]) -> Fields:
    if "goal" in r:
        return [("goal", r["goal"]), ("sol1", r.get("sol1")), ("sol2", r.get("sol2"))]
    if "query" in r and "choices" in r:
        choices = _text_list(r, "choices")
        return [("goal", _untemplate(r["query"])), *[(f"sol{i + 1}", c) for i, c in enumerate(choices)]]
    raise _shape_error(r, "'goal', 'sol1', 'sol2', or 'query' and 'choices'")


def _winogrande(r: dict[str, Any]) -> Fields:
    if "sentence" in r:
        sentence = r["sentence"]
        if not isinstance(sentence, str):
            raise _RecordError("'sentence' should be text")
        options = [r.get("option1"), r.get("option2")]
        if "_" not in sentence or not all(isinstance(o, str) for o in options):
            return [("sentence", sentence)]
        return [(f"sentence[{i}]", sentence.replace("_", o, 1)) for i, o in enumerate(options)]
    if "context_options" in r and "continuation" in r:
        continuation = r["continuation"]
        if not isinstance(continuation, str):
            raise _RecordError("'continuation' should be text")
        out: Fields = []
        for i, option in enumerate(_text_list(r, "context_options")):
            if not isinstance(option, str):
                raise _RecordError(f"context_options[{i}] should be text")
            out.append((f"sentence[{i}]", _join(option, continuation)))
        return out
    raise _shape_error(r, "'sentence', 'option1', 'option2', or 'context_options' and 'continuation'")


def _arc(r: dict[str, Any]) -> Fields:
    if "question" in r:
        question, choices = r["question"], r.get("choices")
        if isinstance(question, dict):  # the AI2 release: question{stem, choices[{text, label}]}
            choices = question.get("choices", choices)
            question = question.get("stem")
        if isinstance(choices, dict):  # the Hugging Face release: choices{text[], label[]}
            choices = choices.get("text")
        if choices is None:
            choices = []
        if not isinstance(choices, list):
            raise _RecordError(f"'choices' should be a list, got {type(choices).__name__}")
        texts = [c.get("text") if isinstance(c, dict) else c for c in choices]
        return [("question", question), *_listed("choices", texts)]
    if "query" in r and "choices" in r:
        return [("question", _untemplate(r["query"])), *_listed("choices", _text_list(r, "choices"))]
    raise _shape_error(r, "'question' (and 'choices'), or 'query' and 'choices'")


def _triviaqa(r: dict[str, Any]) -> Fields:
    if "question" in r:
        question = r["question"]
    elif "context" in r:
        question = _untemplate(r["context"])
    else:
        raise _shape_error(r, "'question' or 'context', and 'answer'")
    answer = r.get("answer")
    if isinstance(answer, dict):
        answer = answer.get("value")
    return [("question", question), ("answer", answer)]


def _mmlu(r: dict[str, Any]) -> Fields:
    if "question" in r:
        question = r["question"]
    elif "query" in r:
        question = _untemplate(r["query"])
    else:
        raise _shape_error(r, "'question' or 'query', and 'choices'")
    return [("question", question), *_listed("choices", _text_list(r, "choices"))]


def _mosaic_icl(r: dict[str, Any]) -> Fields:
    keys = ("query", "context", "choices", "continuation", "context_options")
    if not any(k in r for k in keys):
        raise _shape_error(r, "MosaicML ICL keys (" + ", ".join(keys) + ")")
    out: Fields = []
    for key in ("query", "context"):
        if key in r:
            out.append((key, _untemplate(r[key])))
    out += _listed("choices", _text_list(r, "choices"))
    out += _listed("context_options", _text_list(r, "context_options"))
    if "continuation" in r:
        out.append(("continuation", r["continuation"]))
    return out


_PRESET_READERS: dict[str, PresetReader] = {
    "gsm8k": _gsm8k, "hellaswag": _hellaswag, "humaneval": _humaneval, "lambada": _lambada, "piqa": _piqa,
    "winogrande": _winogrande, "arc": _arc, "triviaqa": _triviaqa, "mmlu": _mmlu, "mosaic_icl": _mosaic_icl,
}


# --- generic JSON lines with `fields` -----------------------------------------------------------------

_FieldPath = list[tuple[str, list[str]]]  # (key, brackets): "" for `[]`, digits for `[N]`


def _parse_path(spec: str) -> _FieldPath:
    segments: _FieldPath = []
    for part in spec.split("."):
        m = _SEGMENT.match(part.strip())
        if not m:
            raise ValueError(f"bad field path {spec!r}: write dotted keys with optional [] or [N], e.g. 'a.b[].c'")
        segments.append((m.group(1), _BRACKETS.findall(m.group(2))))
    return segments


def _walk(value: Any, path: _FieldPath, name: str) -> Iterator[tuple[str, Any]]:
    """(concrete field name, leaf value) for each place the path reaches; a missing key yields nothing."""
    if not path:
        yield name, value
        return
    (key, brackets), rest = path[0], path[1:]
    if not isinstance(value, dict) or key not in value:
        return
    yield from _index(value[key], brackets, rest, f"{name}.{key}" if name else key)


def _index(value: Any, brackets: list[str], rest: _FieldPath, name: str) -> Iterator[tuple[str, Any]]:
    if not brackets:
        yield from _walk(value, rest, name)
        return
    if value is None:
        return
    if not isinstance(value, list):
        raise _RecordError(f"{name!r} is {type(value).__name__}, not a list")
    wanted, more = brackets[0], brackets[1:]
    positions = range(len(value)) if wanted == "" else [int(wanted)] if int(wanted) < len(value) else []
    for i in positions:
        yield from _index(value[i], more, rest, f"{name}[{i}]")


def _generic_jsonl(path: str, specs: list[str]) -> Iterator[EvalField]:
    paths = [(spec, _parse_path(spec)) for spec in specs]
    found = {spec: False for spec in specs}
    records = 0
    for index, (lineno, record) in enumerate(_json_lines(path)):
        records += 1
        item = _own_id(record) or str(index)
        for spec, segments in paths:
            try:
                leaves = list(_walk(record, segments, ""))
            except _RecordError as e:
                raise ValueError(f"{path}:{lineno}: field {spec!r}: {e}") from None
            for name, value in leaves:
                found[spec] = True
                if value is None or isinstance(value, bool):
                    continue
                if isinstance(value, (int, float)):
                    value = str(value)
                elif not isinstance(value, str):
                    hint = f"; write '{spec}[]' for each element" if isinstance(value, list) else ""
                    raise ValueError(f"{path}:{lineno}: field {name!r} is {type(value).__name__}, not text{hint}")
                if value.strip():
                    yield EvalField(item, name, value)
    missing = [spec for spec, seen in found.items() if not seen]
    if records and missing:
        raise ValueError(f"{path}: field(s) {missing} found in none of its {records} records")


# --- other shapes -------------------------------------------------------------------------------------

def _decode(path: str, lineno: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}:{lineno}: not UTF-8: {e}") from None


def _text_lines(path: str) -> Iterator[EvalField]:
    index = 0
    with open_binary(path) as f:
        for lineno, raw in enumerate(f, 1):
            text = _decode(path, lineno, raw)
            if lineno == 1:
                text = text.removeprefix("\ufeff")
            if text.strip():
                yield EvalField(str(index), "text", text)
                index += 1


def _hellaswag_text(path: str) -> Iterator[EvalField]:
    """klosax's rendering: per item `<activity_label>: <ctx>`, the gold label 0-3, then the 4 endings."""
    block: list[str] = []
    first = 0
    index = 0
    lineno = 0
    with open_binary(path) as f:
        for lineno, raw in enumerate(f, 1):
            if not block:
                first = lineno
            block.append(_decode(path, lineno, raw))
            if len(block) < 6:
                continue
            if block[1].strip() not in ("0", "1", "2", "3"):
                raise ValueError(f"{path}:{first + 1}: expected the gold label 0-3 of the item that starts on line "
                                 f"{first}, got {block[1][:40]!r} (the file is not 6 lines per item)")
            label, sep, ctx = block[0].partition(": ")
            if not sep:
                ctx = label
            item = str(index)
            if ctx.strip():
                yield EvalField(item, "ctx", ctx)
            for i, ending in enumerate(block[2:]):
                if ending.strip():
                    yield EvalField(item, f"ending[{i}]", ending)
            block = []
            index += 1
    if block and any(line.strip() for line in block):
        raise ValueError(f"{path}:{lineno}: the last item (from line {first}) has {len(block)} of its 6 lines")


def _squad(path: str) -> Iterator[EvalField]:
    """SQuAD-style JSON (SQuAD, CMRC 2018): one item per paragraph, its context and each question."""
    try:
        with open_binary(path) as f:
            document = json.load(f)
    except ValueError as e:
        raise ValueError(f"{path}: not a JSON document: {e}") from None
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected SQuAD-style JSON with a top-level 'data' list")
    index = 0
    for a, article in enumerate(data):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise ValueError(f"{path}: data[{a}] has no 'paragraphs' list")
        for p, paragraph in enumerate(paragraphs):
            where = f"{path}: data[{a}].paragraphs[{p}]"
            if not isinstance(paragraph, dict):
                raise ValueError(f"{where} is not an object")
            item = _own_id(paragraph) or str(index)
            index += 1
            context = paragraph.get("context")
            if context is not None and not isinstance(context, str):
                raise ValueError(f"{where}.context is not text")
            if context and context.strip():
                yield EvalField(item, "context", context)
            qas = paragraph.get("qas") or []
            if not isinstance(qas, list):
                raise ValueError(f"{where}.qas is not a list")
            for q, qa in enumerate(qas):
                question = qa.get("question") if isinstance(qa, dict) else None
                if question is not None and not isinstance(question, str):
                    raise ValueError(f"{where}.qas[{q}].question is not text")
                if question and question.strip():
                    yield EvalField(item, f"question[{q}]", question)
