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
from tokenmill.sources.config import SourceConfig
from tokenmill.pipeline.contract import RunContext
from tokenmill.sources.formats import READERS
from tokenmill.stages.clean.filters.classifiers import ClassifierConfig
from tokenmill.stages.clean.config import CleanConfig
from tokenmill.stages.clean import filter as clean_filter
from tokenmill.stages.clean.filter import Batch, Filter
from tokenmill.stages.clean.filters.langid import FRENCH
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
# Clean filters: each filter alone on a one-document batch, with its own case (`Filter.cases`, in its module)
# --------------------------------------------------------------------------------------------------------------

PROSE = ("The committee met on Tuesday to discuss the new budget for the city library. Members agreed that the "
         "reading rooms should stay open later in the evening, and that the children's section needs more books.")
QUALITY_OFF = {"gopher_quality": None, "gopher_repetition": None, "c4": None, "cjk": None}


def filter_cases() -> dict[str, dict[str, clean_filter.Case]]:
    """filter -> reason -> the case its module declares, as built for the configured clean stage."""
    return {f.name: dict(f.cases) for f in configured_stage("clean").chain.filters}


def run_filter(built: Filter, case: clean_filter.Case, tmp_path: Path) -> str | None:
    """`built` alone on the case's document, after the filters before it that share its settings and only annotate
    (the quality scores its family reads); the reason it gave."""
    (tmp_path / "blocked.txt").write_text(case.blocklist)
    settings = case.settings_in(tmp_path)
    chain = [f() for f in CleanStage.filters if f.order < built.order and f.settings is not None
             and f.settings is built.settings and not f.drop_reasons] + [built]
    batch = Batch(ids=["d"], texts=[case.text], sources=["s"], subsets=[None], metas=[case.meta], langs=[case.lang],
                  lang_scores=pa.array([0.0], pa.float32()).to_numpy(zero_copy_only=False).copy())
    for f in chain:
        f.setup({"blocklist": str(tmp_path / "blocked.txt")})
        f.start(batch)
    for f in chain:
        f.run(batch, lambda name, source, subset: settings)
    return batch.reasons[0]


@pytest.mark.parametrize("name, reason", [(f, r) for f, rs in declared_filter_reasons().items() for r in rs])
def test_each_filter_reason_is_reached(name, reason, tmp_path):
    built = next(f for f in configured_stage("clean").chain.filters if f.name == name)
    case = built.cases.get(reason)
    if case is None:
        pytest.fail(f"clean filter {name!r}: no input case for its declared reason {reason!r}")
    got = run_filter(built, case, tmp_path)
    assert got == reason and built.dropped == {reason: 1}


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


def _tiny_classifier(tmp_path: Path, threshold: float = 0.9) -> list[ClassifierConfig]:
    """A classifier `hq` trained for the test (about 1-2 s) whose threshold drops a web-like text."""
    model = train_tiny(tmp_path / "tiny").model_path
    return [ClassifierConfig(name="hq", model=str(model), keep={"threshold": threshold})]


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
                       if r not in filter_cases().get(f, {})]
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
