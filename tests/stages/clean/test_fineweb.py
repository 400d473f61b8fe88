"""The FineWeb filter: datatrove's `FineWebQualityFilter`'s decisions on real web and Pile text, per source through
overrides, off by default without moving any run's identity."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests.text.test_quality import english_web
from tokenmill.pipeline.contract import RunContext
from tokenmill.sources.config import SourceConfig
from tokenmill.stages.clean.config import CleanConfig
from tokenmill.stages.clean.filters.fineweb import FineWebConfig, fineweb_reason
from tokenmill.stages.clean.stage import CleanStage
from tokenmill.text.quality import RegexWordTokenizer

PROSE = ("The committee met on Tuesday to discuss the new budget for the city library. Members agreed that the "
         "reading rooms should stay open later in the evening.\nThey also talked about the old roof, which has been "
         "leaking for two winters, and about the cost of a repair.")
MENU = "Home\nNews\nSport\nWeather\nContact us\nPrivacy\nThe news of the day, every day, for everyone."


def datatrove_reasons(texts: list[str], config: FineWebConfig, monkeypatch) -> list[str | None]:
    """datatrove's own filter at `config`'s thresholds, with our words (its English default is spaCy, not
    installed here: the comparison tests the rules, as `text/quality/reference.py` does for the other families)."""
    from datatrove.data import Document
    from datatrove.pipeline.filters import fineweb_quality_filter as module

    words = RegexWordTokenizer()
    monkeypatch.setattr(module, "split_into_words", lambda text, language: words.word_tokenize(text))
    f = module.FineWebQualityFilter(**config.model_dump(exclude={"languages"}))
    out = []
    for i, text in enumerate(texts):
        verdict = f.filter(Document(text=text, id=str(i)))
        out.append(None if verdict is True else verdict[1])
    return out


@pytest.mark.parametrize("config", [FineWebConfig(), FineWebConfig(short_line_thr=0.5, new_line_ratio=0.1,
                                                                   line_punct_exclude_zero=True)],
                         ids=["defaults", "stricter"])
def test_real_web_and_pile_text_gets_datatroves_decisions(config, shared_data, monkeypatch):
    texts = [t for t in english_web(shared_data) if t.strip() and RegexWordTokenizer().word_tokenize(t)]
    ours = [fineweb_reason(t, config) for t in texts]
    assert ours == datatrove_reasons(texts, config, monkeypatch)
    dropped = {r for r in ours if r is not None}
    assert len(texts) > 1500 and len(dropped) >= 3, dropped  # the comparison reached most rules, on real text


def _stage(tmp_path, config: dict) -> CleanStage:
    sources = {"web": SourceConfig(name="web", format="jsonl", paths=["x"], language="en"),
               "lyrics": SourceConfig(name="lyrics", format="jsonl", paths=["x"], language="en")}
    return CleanStage(CleanConfig.model_validate({"langid": None, **config}),
                      RunContext(seed=0, sources=sources, base_dir=str(tmp_path)))


def _reasons(stage: CleanStage, rows: list[tuple[str, str, str]]) -> dict[str, str | None]:
    table = pa.table({"id": [r[0] for r in rows], "text": [r[1] for r in rows], "source": [r[2] for r in rows],
                      "subset": pa.nulls(len(rows), pa.string()), "meta": ["{}"] * len(rows)})
    out = stage.process(table, {})
    return dict(zip(table.column("id").to_pylist(), out.drop_reason.to_pylist()))


def test_off_by_default_on_with_empty_settings_and_an_override_per_source(tmp_path):
    quality_off = {"quality": {"gopher_quality": None, "gopher_repetition": None, "c4": None, "cjk": None}}
    rows = [("prose", PROSE, "web"), ("menu", MENU, "web"), ("song", MENU, "lyrics")]
    assert _reasons(_stage(tmp_path, quality_off), rows) == {"prose": None, "menu": None, "song": None}
    on = {**quality_off, "fineweb": {}, "overrides": [{"source": "lyrics", "fineweb": {"short_line_thr": 0.9, "new_line_ratio": 1.0}}]}
    assert _reasons(_stage(tmp_path, on), rows) == {"prose": None, "menu": "short_line_ratio", "song": None}
    assert "short_line_ratio" in _stage(tmp_path, on).drop_reasons


def test_a_config_without_it_keeps_its_identity_and_one_with_it_changes(tmp_path):
    assert "fineweb" not in CleanConfig().model_dump(mode="json")
    plain, on = _stage(tmp_path, {}).identity(), _stage(tmp_path, {"fineweb": {}}).identity()
    assert on != plain and on["config"]["fineweb"]["short_line_thr"] == 0.67


def test_other_languages_are_left_alone_and_hostile_texts_do_not_crash():
    config = FineWebConfig()
    assert fineweb_reason("\n".join(["只有一行"] * 5), config) is not None  # the rules themselves know no language
    assert fineweb_reason("!!!\n???\n...", config) == "short_line_ratio"
    assert fineweb_reason("\n\n\n \n", config) is None  # nothing but blank lines: `empty_after_cleaning` drops it
    assert fineweb_reason("a" * 1_000_000 + ".", config) is None
    assert FineWebConfig(languages=("en", "de")).languages == ("en", "de")
