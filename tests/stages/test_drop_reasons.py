"""Every declared drop reason of every stage and of every clean filter has an input that produces it.

The reasons come from the code (`declared_stage_reasons`, `declared_filter_reasons`): each stage class's, and for a
stage whose reasons depend on its config (the clean stage's `low_<name>_score` per classifier), those of an instance
built from a config in `CONFIGURED`. The inputs come from `CASES` and
`FILTER_CASES` here and from any test module under `tests/stages/` that defines `DROP_REASON_CASES` (so a new stage
brings its cases in its own test file). A declared reason without a case fails `test_every_declared_reason_has_a_case`;
a case that does not produce its reason fails its own test. Stages run their pure `process` on Arrow tables, ingest
its readers; dedup and decontaminate, whose decisions span shards, run on a small Ray pipeline.
"""

from __future__ import annotations

import gzip
import importlib
import json
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import write_jsonl
from tests.stages.clean.classifier_model import WEB_TEXT, train_tiny
from tests.text.test_escapes import KIND_EXAMPLES
from tokenmill.sources.config import SourceConfig
from tokenmill.pipeline.contract import RunContext
from tokenmill.sources.formats import READERS
from tokenmill.stages.clean.classifiers import ClassifierConfig
from tokenmill.stages.clean.config import CleanConfig
from tokenmill.text.escapes import EscapePolicy
from tokenmill.stages.clean.filter import Batch, Filter
from tokenmill.stages.clean.filters import QualityScores
from tokenmill.text.langid import LangidConfig
from tokenmill.text.quality import (
    C4Config,
    CJKQualityConfig,
    GopherQualityConfig,
    GopherRepetitionConfig,
    QualityConfig,
)
from tokenmill.stages.clean.stage import CleanStage


CONFIGURED: dict[str, dict[str, Any]] = {
    "clean": {"classifiers": [{"name": "hq", "model": "model/model.bin", "keep": {"threshold": 0.9}}]},
}
"""Configs of stages whose instances declare reasons their class does not (built, never run: no file is opened)."""


def configured_stage(name: str) -> Any:
    from tokenmill.pipeline.registry import stage_classes

    cls = stage_classes()[name]
    return cls(cls.config_class.model_validate(CONFIGURED[name]), RunContext(seed=0, sources={}))


def declared_stage_reasons() -> dict[str, tuple[str, ...]]:
    """Every registered stage's declared drop reasons, by stage name (ingest included): its class's, and its
    configured instance's for a stage in `CONFIGURED`."""
    from tokenmill.pipeline.registry import stage_classes

    declared = {name: tuple(cls.drop_reasons) for name, cls in stage_classes().items()}
    for name in CONFIGURED:
        declared[name] = tuple(dict.fromkeys([*declared[name], *configured_stage(name).drop_reasons]))
    return declared


def declared_filter_reasons() -> dict[str, tuple[str, ...]]:
    """Every clean filter's declared drop reasons, by filter name, as built for the configured clean stage."""
    return {f.name: tuple(f.drop_reasons) for f in configured_stage("clean").chain.filters}


# --------------------------------------------------------------------------------------------------------------
# Clean filters: each filter alone on a one-document batch, with only the rule under test switched on
# --------------------------------------------------------------------------------------------------------------

PROSE = ("The committee met on Tuesday to discuss the new budget for the city library. Members agreed that the "
         "reading rooms should stay open later in the evening, and that the children's section needs more books.")
FRENCH = ("Le comité s'est réuni mardi pour discuter du nouveau budget de la bibliothèque municipale. Les membres "
          "ont convenu que les salles de lecture devraient rester ouvertes plus tard le soir.")
WORDS = "river mountain forest village harbor market bridge castle garden meadow valley island".split()
HAN = "春夏秋冬东南西北上下左右"
QUALITY_OFF = {"gopher_quality": None, "gopher_repetition": None, "c4": None, "cjk": None}


def _tiny_classifier(tmp_path: Path, threshold: float = 0.9) -> list[ClassifierConfig]:
    """A classifier `hq` trained for the test (about 1-2 s) whose threshold drops a web-like text."""
    model = train_tiny(tmp_path / "tiny").model_path
    return [ClassifierConfig(name="hq", model=str(model), keep={"threshold": threshold})]


def _off(model: type, **on: Any) -> Any:
    """`model` with every optional rule off but those in `on`."""
    fields = {name: None for name, f in model.model_fields.items() if f.default is not None and not f.is_required()
              and "None" in str(f.annotation)}
    lists = {name: () for name in ("top_n_grams", "dup_n_grams") if name in model.model_fields}
    flags = {name: False for name, f in model.model_fields.items() if f.annotation is bool}
    return model(**{**fields, **lists, **flags, **on})


def _quality(family: str, **on: Any) -> QualityConfig:
    models = {"gopher_quality": GopherQualityConfig, "gopher_repetition": GopherRepetitionConfig, "c4": C4Config,
              "cjk": CJKQualityConfig}
    return QualityConfig(**{name: (_off(model, **on) if name == family else None) for name, model in models.items()})


def _repeated(units: list[str], sep: str) -> str:
    return sep.join(units * 3)


def _repetition_cases(family: str, lang: str) -> dict[str, tuple]:
    units, sep = (WORDS, " ") if lang == "en" else (list(HAN), "")
    para = sep.join(units[:6]) + "."
    cases = {
        "empty_text": ("", {}),
        "duplicate_paragraphs": (f"{para}\n\n{para}\n\n{para}", {"dup_para_frac": 0.3}),
        "duplicate_paragraph_chars": (f"{para}\n\n{para}", {"dup_para_char_frac": 0.2}),
        "duplicate_lines": (f"{para}\n{para}\n{para}", {"dup_line_frac": 0.3}),
        "duplicate_line_chars": (f"{para}\n{para}", {"dup_line_char_frac": 0.2}),
        **{f"dominant_{n}_gram": (_repeated(units[:n], sep) * 2, {"top_n_grams": ((n, 0.2),)}) for n in (2, 3, 4)},
        **{f"duplicate_{n}_grams": (_repeated(units, sep), {"dup_n_grams": ((n, 0.1),)}) for n in range(5, 11)},
    }
    return {reason: (text, lang, _quality(family, **on)) for reason, (text, on) in cases.items()}


FILTER_CASES: dict[str, dict[str, tuple[str, str, Any]]] = {
    # filter -> reason -> (text, the document's language, the filter's settings)
    "escapes": {f"escape_{kind}": (text, "en", EscapePolicy(mode="drop", threshold=0.0))
                for kind, text, *_ in KIND_EXAMPLES},
    "blocklist": {"blocked_domain": (PROSE, "en", None)},
    "empty": {"empty_after_cleaning": (" \n\t ", "en", None)},
    "langid": {"wrong_language": (FRENCH, "en", LangidConfig())},
    # settings from a function of the test's folder: the model is trained there
    "classifiers": {"low_hq_score": (WEB_TEXT, "en", _tiny_classifier)},
    "gopher_quality": {reason: (text, "en", _quality("gopher_quality", **on)) for reason, text, on in (
        ("too_few_words", "Too short.", {"min_doc_words": 50}),
        ("too_many_words", "one two three four five", {"max_doc_words": 3}),
        ("short_average_word", "a b c d e", {"min_avg_word_length": 3}),
        ("long_average_word", "antidisestablishmentarianism supercalifragilistic", {"max_avg_word_length": 10}),
        ("too_many_hashes", "# tags #one #two here", {"max_symbol_word_ratio": 0.1}),
        ("too_many_ellipses", "wait... what... no... yes...", {"max_symbol_word_ratio": 0.1}),
        ("too_many_bullet_lines", "- one\n- two\n- three", {"max_bullet_lines_ratio": 0.9}),
        ("too_many_ellipsis_lines", "one…\ntwo…\nthree", {"max_ellipsis_lines_ratio": 0.3}),
        ("too_few_alphabetic_words", "1 2 3 4 5 words", {"max_non_alpha_words_ratio": 0.8}),
        ("too_few_stop_words", "Cats sleep", {"min_stop_words": 2}),
    )},
    "gopher_repetition": _repetition_cases("gopher_repetition", "en"),
    "c4": {reason: (text, "en", _quality("c4", **on)) for reason, text, on in (
        ("lorem_ipsum", "Lorem ipsum dolor sit amet.", {"filter_lorem_ipsum": True}),
        ("curly_bracket", "Put the { brace here now.", {"filter_curly_bracket": True}),
        ("too_few_sentences", "Only one sentence here.", {"min_num_sentences": 5}),
    )},
    "cjk": {**_repetition_cases("cjk", "zh"), **{reason: (text, "zh", _quality("cjk", **on)) for reason, text, on in (
        ("too_few_chars", "短文。", {"min_chars": 50}),
        ("too_many_chars", HAN + "。", {"max_chars": 5}),
        ("too_few_cjk_chars", "Mostly Latin text 中。", {"min_cjk_char_ratio": 0.15}),
        ("too_many_bullet_lines", "- 春\n- 夏\n- 秋", {"max_bullet_lines_ratio": 0.9}),
        ("too_many_ellipsis_lines", "春…\n夏…\n秋", {"max_ellipsis_lines_ratio": 0.3}),
        ("too_few_stop_chars", "春夏秋冬。", {"min_stop_chars": 1}),
        ("too_few_sentences", "春夏秋冬", {"min_sentences": 1}),
    )}},
}


def run_filter(cls: type[Filter], text: str, lang: str, settings: Any, tmp_path: Path) -> tuple[Filter, str | None]:
    """`cls` alone (after the quality scores it reads) on one document, built as for the configured clean stage;
    the filter and the reason it gave."""
    (tmp_path / "blocked.txt").write_text("spam.example\n")
    if callable(settings):
        settings = settings(tmp_path)
    config = CleanConfig.model_validate(CONFIGURED["clean"])
    built = cls.build(config, config.overrides)
    chain = [QualityScores(), built] if cls.setting == "quality" and cls is not QualityScores else [built]
    batch = Batch(ids=["d"], texts=[text], sources=["s"], subsets=[None], metas=['{"url": "https://spam.example/a"}'],
                  langs=[lang], lang_scores=pa.array([0.0], pa.float32()).to_numpy(zero_copy_only=False).copy())
    for f in chain:
        f.setup({"blocklist": str(tmp_path / "blocked.txt")})
        f.start(batch)
    for f in chain:
        f.run(batch, lambda name, source, subset: settings)
    return chain[-1], batch.reasons[0]


@pytest.mark.parametrize("name, reason", [(f, r) for f, rs in declared_filter_reasons().items() for r in rs])
def test_each_filter_reason_is_reached(name, reason, tmp_path):
    case = FILTER_CASES.get(name, {}).get(reason)
    if case is None:
        pytest.fail(f"clean filter {name!r}: no input case for its declared reason {reason!r}")
    cls = next(f for f in CleanStage.filters if f.name == name)
    f, got = run_filter(cls, *case, tmp_path)
    assert got == reason and f.dropped == {reason: 1}


def test_the_clean_stage_declares_exactly_its_filters_reasons():
    from tokenmill.stages.clean.chain import chain_drop_reasons

    stage = configured_stage("clean")
    assert set(stage.drop_reasons) == {r for rs in declared_filter_reasons().values() for r in rs}
    assert stage.drop_reasons == chain_drop_reasons(stage.chain.filters)
    assert CleanStage.drop_reasons == chain_drop_reasons(CleanStage.filters)
    assert set(stage.drop_reasons) - set(CleanStage.drop_reasons) == {"low_hq_score"}


# --------------------------------------------------------------------------------------------------------------
# Stages: one input per reason
# --------------------------------------------------------------------------------------------------------------

Case = Callable[[Path], "list[str | None]"]
"""Given a fresh folder, run the input through the stage (or ingest's reader); the drop reasons it gave."""


def _source(fmt: str, **kw: Any) -> SourceConfig:
    return SourceConfig(name="s", format=fmt, paths=["x"], **kw)


def _read(fmt: str, name: str, data: bytes, **kw: Any) -> Case:
    def case(tmp: Path) -> list[str | None]:
        (tmp / name).write_bytes(data)
        return [r.drop for r in READERS[fmt].read(str(tmp / name), _source(fmt, **kw), f"s:{name}")]
    return case


def _warc(*payloads: tuple[bytes, dict]) -> Case:
    from tests.readers.test_warc import members, response

    return _read("cc_warc", "w.warc.gz", members([response(p, i, **kw) for i, (p, kw) in enumerate(payloads)]))


def _extraction_fails(tmp: Path) -> list[str | None]:
    from tests.readers.test_warc import PAGE

    def boom(html: str, url: str) -> str:
        raise ValueError("parser gave up")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("tokenmill.readers.warc.extractor", lambda name: boom)
        return _warc((PAGE, {}))(tmp)


def _clean(text: str, language: str = "en", **config: Any) -> Case:
    def case(tmp: Path) -> list[str | None]:
        run = RunContext(seed=0, sources={"s": _source("jsonl", language=language)}, base_dir=str(tmp))
        table = pa.table({"id": ["d"], "text": [text], "source": ["s"], "subset": pa.nulls(1, pa.string()),
                          "meta": ["{}"]})
        return CleanStage(CleanConfig(**config), run).process(table, {}).drop_reason.to_pylist()
    return case


def _classified(tmp: Path) -> list[str | None]:
    classifiers = _tiny_classifier(tmp)
    return _clean(WEB_TEXT, classifiers=classifiers, langid=None, quality=QUALITY_OFF)(tmp)


def _sampled_out(tmp: Path) -> list[str | None]:
    from tokenmill.stages.sample import SampleConfig, SampleStage

    run = RunContext(seed=3, sources={"s": _source("jsonl", fraction=0.1)})
    ids = [f"d{i}" for i in range(50)]
    table = pa.table({"id": ids, "text": ["t"] * 50, "source": ["s"] * 50})
    return SampleStage(SampleConfig(), run).process(table, {}).drop_reason.to_pylist()


QUESTION = "how many red apples did the farmer sell at the market on the first sunny day of spring"
FILLER = " ".join(f"word{i}" for i in range(300))


def _pipeline(stage: str, stages: dict[str, Any], docs: list[dict]) -> Case:
    """A run of ingest and `stages` on `docs`; the drop reasons `stage` gave (its `dropped/` tables)."""

    def case(tmp: Path) -> list[str | None]:
        from tests.pipeline.test_runner import run_into

        write_jsonl(tmp / "docs" / "a.jsonl", docs)
        (tmp / "q.jsonl").write_text(json.dumps({"q": QUESTION}) + "\n")
        config = {"output": "out", "seed": 1, "stages": stages,
                  "sources": [{"name": "s", "format": "jsonl", "paths": ["docs/*.jsonl"], "id_field": "id"}]}
        (tmp / "run.yaml").write_text(yaml.safe_dump(config))
        run_into(tmp / "run.yaml", tmp / "out")
        return [r for p in sorted((tmp / "out" / stage / "dropped").glob("*.parquet"))
                for r in pq.read_table(p, columns=["drop_reason"]).column("drop_reason").to_pylist()]
    return case


def _articles() -> list[str]:
    from random import Random

    from tests.stages.test_dedup_stage import article, edited

    rng = Random(7)
    base = [article(rng) for _ in range(4)]
    return [*base, base[0], edited(base[1], rng, 0.97)]


def _dedup(tmp: Path) -> list[str | None]:
    docs = [{"id": f"d{i}", "text": t} for i, t in enumerate(_articles())]
    return _pipeline("dedup", {"dedup": {"partitions": 2}}, docs)(tmp)


def _decontaminate(policy: str) -> Case:
    docs = [{"id": "clean", "text": FILLER}, {"id": "inside", "text": f"{FILLER} {QUESTION} {FILLER}"},
            {"id": "fragmented", "text": " ".join(f"{QUESTION} {FILLER}" for _ in range(12))},
            {"id": "little", "text": f"{QUESTION}, said the farmer."}]
    evalsets = [{"name": "qa", "path": "q.jsonl", "fields": ["q"]}]
    return _pipeline("decontaminate", {"decontaminate": {"evalsets": evalsets, "policy": policy}}, docs)


RAY = pytest.mark.ray
_EXCISE = _decontaminate("excise")  # one run reaches both of excision's reasons

CASES: dict[str, dict[str, Case | tuple[Case, pytest.MarkDecorator]]] = {
    "ingest": {
        "read_error": _read("jsonl", "cut.jsonl.gz", gzip.compress(b'{"text": "a whole line"}\n' * 500)[:-40]),
        "decode_error": _read("jsonl", "f.jsonl", b'{"text": "caf\xe9"}\n'),
        "missing_text": _read("jsonl", "f.jsonl", b'{"id": "m"}\n'),
        "bad_text_type": _read("jsonl", "f.jsonl", b'{"text": 5}\n'),
        "empty_text": _read("jsonl", "f.jsonl", b'{"text": "   "}\n'),
        "missing_id": _read("jsonl", "f.jsonl", b'{"text": "no id"}\n', id_field="id"),
        "record_too_large": _read("jsonl", "f.jsonl", json.dumps({"text": "x" * 50_000}).encode() + b"\n",
                                  max_record_bytes=4096),
        "bad_json": _read("jsonl", "f.jsonl", b"{broken\n"),
        "not_an_object": _read("jsonl", "f.jsonl", b'["a", "list"]\n'),
        "bad_row": _read("csv", "f.csv", b"id,text\n1,ok\n2,too,many,fields\n"),
        "deleted_content": _read("reddit", "r.jsonl", b'{"id": "a", "body": "[deleted]"}\n'),
        "removed_content": _read("reddit", "r.jsonl", b'{"id": "a", "body": "[removed]"}\n'),
        "not_html": _warc((b"%PDF-1.4 ...", {"headers": "Content-Type: application/pdf"})),
        "http_error": _warc((b"gone", {"status": "404 Not Found"})),
        "bad_http": lambda tmp: _read("cc_warc", "w.warc.gz", _bad_http())(tmp),
        "extraction_failed": _extraction_fails,
    },
    "sample": {"sampled_out": _sampled_out},
    "clean": {
        # zero-width characters pass ingest (not whitespace) and are removed by normalization
        "empty_after_cleaning": _clean("\u200b\u2060\ufeff"),
        "wrong_language": _clean(FRENCH),
        "too_few_words": _clean("Too short."),
        "low_hq_score": _classified,
    },
    "dedup": {"exact_duplicate": (_dedup, RAY), "near_duplicate": (_dedup, RAY)},
    "decontaminate": {
        "contaminated": (_decontaminate("drop"), RAY),
        "contamination_fragmented": (_EXCISE, RAY),
        "contamination_left_too_little": (_EXCISE, RAY),
    },
}
"""stage -> reason -> case (with a mark when it needs Ray). Clean's other reasons are its filters' (above)."""


def _bad_http() -> bytes:
    from tests.readers.test_warc import members, warc_record

    return members([warc_record("response", b"garbage\r\n\r\n<html></html>",
                                content_type="application/http; msgtype=response")])


def _cases_from_test_modules() -> dict[str, dict[str, Any]]:
    """`DROP_REASON_CASES` (stage -> reason -> case) of any module under tests/stages/, for stages added later."""
    found: dict[str, dict[str, Any]] = {}
    root = Path(__file__).parent
    for path in sorted(root.rglob("test_*.py")):
        if path.name == Path(__file__).name or "DROP_REASON_CASES" not in path.read_text(encoding="utf-8"):
            continue
        module = importlib.import_module(".".join(path.relative_to(root.parent.parent).with_suffix("").parts))
        for stage, cases in getattr(module, "DROP_REASON_CASES", {}).items():
            found.setdefault(stage, {}).update(cases)
    return found


def all_cases() -> dict[str, dict[str, Any]]:
    merged = {stage: dict(cases) for stage, cases in CASES.items()}
    for stage, cases in _cases_from_test_modules().items():
        merged.setdefault(stage, {}).update(cases)
    return merged


def test_every_declared_reason_has_a_case():
    cases = all_cases()
    filter_reasons = {r for rs in declared_filter_reasons().values() for r in rs}
    missing = [(stage, reason) for stage, reasons in declared_stage_reasons().items() for reason in reasons
               if reason not in cases.get(stage, {}) and not (stage == "clean" and reason in filter_reasons)]
    assert not missing, f"declared drop reasons with no input case: {missing}"
    missing_filters = [(f, r) for f, rs in declared_filter_reasons().items() for r in rs
                       if r not in FILTER_CASES.get(f, {})]
    assert not missing_filters, f"clean filter reasons with no input case: {missing_filters}"


def _params():
    for stage, cases in all_cases().items():
        for reason, case in cases.items():
            fn, marks = (case[0], [case[1]]) if isinstance(case, tuple) else (case, [])
            yield pytest.param(stage, reason, fn, id=f"{stage}-{reason}", marks=marks)


_RAY_RUNS: dict[int, list[str | None]] = {}


@pytest.mark.parametrize("stage, reason, case", list(_params()))
def test_each_stage_reason_is_reached(stage, reason, case, request, tmp_path):
    if any(m.name == "ray" for m in request.node.iter_markers()):
        request.getfixturevalue("ray_cluster")
        if id(case) not in _RAY_RUNS:  # one pipeline run serves every reason it reaches
            _RAY_RUNS[id(case)] = case(tmp_path)
        reasons = _RAY_RUNS[id(case)]
    else:
        reasons = case(tmp_path)
    assert reason in reasons, f"{stage}: the case for {reason!r} gave {sorted({str(r) for r in reasons})}"
