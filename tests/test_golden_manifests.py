"""Golden manifests: the demo run, exactly as `make demo` makes it, matches manifests/ at the repository root.

When this fails after a deliberate change (a threshold, a reader, the generator), run `make golden` and commit
manifests/ with the change: the diff of manifests/ is the review of what the change did to the data.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tokenmill.demo import write_demo_corpus
from tokenmill.manifests import golden
from tokenmill.pipeline.config import load_config
from tokenmill.pipeline.runner import run_pipeline

pytestmark = pytest.mark.ray

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "manifests"
STAGES = ["ingest", "sample", "clean", "dedup", "decontaminate", "tokenize"]


@pytest.fixture(scope="module")
def demo_run(demo_corpus, ray_cluster) -> Path:
    """The demo as `make demo` runs it: `tokenmill demo-data DIR` (its defaults: seed 1234, 600 docs per source;
    tests/conftest.py's `demo_corpus`), then `tokenmill run DIR/demo.yaml`. About 30 s on 2 cores."""
    config = load_config(demo_corpus / "demo.yaml")
    run_pipeline(config)
    return config.output_dir


def test_demo_run_matches_the_golden_manifests(demo_run):
    assert sorted(p.stem for p in GOLDEN.glob("*.json")) == sorted(STAGES)
    differences = golden.compare(demo_run, GOLDEN)
    assert not differences, "\n".join(["the demo run differs from manifests/:", *differences, golden.HINT])


def test_write_then_compare_round_trips(demo_run, tmp_path):
    dest = tmp_path / "manifests"
    (dest).mkdir()
    (dest / "stale_stage.json").write_text("{}\n")
    written = golden.write(demo_run, dest)
    assert [p.stem for p in written] == STAGES  # pipeline order; the stale stage file is gone
    assert sorted(p.name for p in dest.iterdir()) == sorted(f"{s}.json" for s in STAGES)
    assert golden.compare(demo_run, dest) == []
    for path in written:
        text = path.read_text(encoding="utf-8")
        assert text == golden.canonical(json.loads(text)), f"{path.name} is not canonical JSON"
        # Nothing about where or when the run happened, nor library versions.
        assert str(demo_run) not in text and str(demo_run.parent) not in text
        for key in ("seconds", "versions", "libraries", "started", "host", "manifest_hash", "config_hash"):
            assert f'"{key}":' not in text, f"{path.name} holds {key}"


def test_golden_content_counts_add_up():
    """The checked-in files hold what they promise: per source counts, id hashes, dropped ids, tokens."""
    stages = golden.load(GOLDEN)
    for name, content in stages.items():
        for source, s in content["by_source"].items():
            assert s["kept_ids"]["count"] == s["docs_out"], (name, source)
            assert {r: d["count"] for r, d in s["dropped_ids"].items()} == s["drops"], (name, source)
            for reason, d in s["dropped_ids"].items():
                if d["count"] <= golden.LISTED_IDS:
                    assert golden.ids_digest(d["ids"]) == d["sha256"], (name, source, reason)
    tokens = stages["tokenize"]["tokens"]["splits"]
    for split in ("train", "valid"):
        assert sum(s["tokens"] for s in tokens[split]["by_source"].values()) == tokens[split]["tokens"]
        assert sum(s["ids"]["count"] for s in tokens[split]["by_source"].values()) == tokens[split]["documents"]


# ----------------------------------------------------------------------------------------------------------------
# A changed default in code shows as a readable difference
# ----------------------------------------------------------------------------------------------------------------


def _set_min_doc_words_default(value: int) -> None:
    """Change the Gopher `min_doc_words` default as an edit of quality.py would, and rebuild every model that
    embeds it (pydantic copies a nested model's defaults into its parents' validators)."""
    from tokenmill.pipeline.config import RunConfig, stages_config
    from tokenmill.stages.clean.config import CleanConfig, CleanOverride
    from tokenmill.text.quality import GopherQualityConfig, QualityConfig

    GopherQualityConfig.model_fields["min_doc_words"].default = value
    GopherQualityConfig.model_rebuild(force=True)
    QualityConfig.model_fields["gopher_quality"].default = GopherQualityConfig()
    QualityConfig.model_rebuild(force=True)
    CleanConfig.model_fields["quality"].default = QualityConfig()
    for model in (CleanOverride, CleanConfig, stages_config(), RunConfig):
        model.model_rebuild(force=True)


@pytest.fixture
def min_doc_words_200():
    from tokenmill.text.quality import GopherQualityConfig

    old = GopherQualityConfig.model_fields["min_doc_words"].default
    _set_min_doc_words_default(200)
    try:
        yield
    finally:
        _set_min_doc_words_default(old)
        from tokenmill.pipeline.config import stages_config

        restored = stages_config().model_validate({"clean": {}}).clean.quality.gopher_quality.min_doc_words
        assert restored == old, "the patched default leaked into later tests"


def _small_run(root: Path, output: str) -> Path:
    """The demo config on the smallest demo corpus, up to clean: a few seconds."""
    config = yaml.safe_load((root / "demo.yaml").read_text())
    config["output"] = output
    config["stages"] = {k: v for k, v in config["stages"].items() if k in ("sample", "clean")}
    path = root / f"{output}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    loaded = load_config(path)
    run_pipeline(loaded)
    return loaded.output_dir


@pytest.fixture(scope="module")
def small_demo(tmp_path_factory, ray_cluster) -> tuple[Path, Path]:
    """(corpus root, golden manifests of its default run up to clean)."""
    from tokenmill.demo.corpus import MIN_DOCS_PER_SOURCE

    root = tmp_path_factory.mktemp("golden-small")
    write_demo_corpus(root, seed=1234, docs_per_source=3 * MIN_DOCS_PER_SOURCE)
    run = _small_run(root, "run_default")
    dest = root / "golden"
    golden.write(run, dest)
    return root, dest


def test_a_changed_default_threshold_fails_the_check_with_a_readable_diff(small_demo, min_doc_words_200, capsys):
    root, dest = small_demo
    run = _small_run(root, "run_min_doc_words_200")
    differences = golden.compare(run, dest)
    assert differences
    # ingest and sample did not move; every difference is the clean stage's
    assert all(line.startswith("clean: ") for line in differences), differences
    assert "clean: config.config.quality.gopher_quality.min_doc_words: 50 -> 200" in differences

    def change(prefix: str) -> tuple[int, int]:
        [line] = [line for line in differences if line.startswith(prefix)]
        before, after = line[len(prefix):].split(" -> ")
        return int(before), int(after)

    words_before, words_after = change("clean: by_source.web_en.drops.too_few_words: ")
    kept_before, kept_after = change("clean: by_source.web_en.docs_out: ")
    assert words_after > words_before and kept_after < kept_before
    [dropped] = [line for line in differences if line.startswith("clean: dropped ids of web_en for too_few_words changed (hash ")]
    assert f"; {words_before} -> {words_after} docs; {words_after - words_before} added, 0 removed; added: web-" in dropped
    [kept] = [line for line in differences if line.startswith("clean: kept ids of web_en changed (hash ")]
    assert f"; {kept_before} -> {kept_after} docs; 0 added, {kept_before - kept_after} removed; now dropped: web-" in kept

    assert golden.main(["check", str(run), "--dest", str(dest)]) == 1
    out = capsys.readouterr().out
    assert "clean: config.config.quality.gopher_quality.min_doc_words: 50 -> 200" in out
    assert golden.HINT in out


def test_check_passes_on_an_identical_run(small_demo, capsys):
    root, dest = small_demo
    assert golden.main(["check", str(root / "run_default"), "--dest", str(dest)]) == 0
    assert "matches" in capsys.readouterr().out


def test_each_long_token_file_records_the_sha256_of_its_head(demo_run):
    """tokens.json records, for each .bin longer than HEAD_BYTES, the sha256 of its first HEAD_BYTES (what a
    streaming loader fetches alone for the sample running into the file), that of the file's own bytes; none for a
    shorter one. The demo's book files are longer, its others shorter."""
    import hashlib

    from tokenmill.tokenize.bundle import HEAD_BYTES

    index = json.loads((demo_run / "tokenize" / "tokens.json").read_text())
    heads = 0
    for split in index["splits"].values():
        for f in split["files"]:
            raw = (demo_run / "tokenize" / f"{f['prefix']}.bin").read_bytes()
            assert ("head" in f) == (len(raw) > HEAD_BYTES), f["prefix"]
            if "head" in f:
                assert f["head"] == {"bytes": HEAD_BYTES, "sha256": hashlib.sha256(raw[:HEAD_BYTES]).hexdigest()}
                heads += 1
    assert 0 < heads < sum(len(split["files"]) for split in index["splits"].values())
