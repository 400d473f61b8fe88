"""Config validation refuses what would otherwise run and go wrong quietly (issue 17, items 7 and 13): a language
name, a key written twice, a boolean for a number, an unexpanded `$VAR` in a path, two sources reading one file."""

from __future__ import annotations

import pytest

from tests.conftest import write_jsonl
from tokenmill.cli import main
from tokenmill.errors import ConfigError
from tokenmill.pipeline.config import load_config, parse_config, path_fields
from tokenmill.sources.patterns import expand_pattern, source_files
from tokenmill.text.langid import LANGUAGE_NAMES, LangidConfig, canonical_language, model_languages


@pytest.fixture
def base(tmp_path):
    write_jsonl(tmp_path / "data" / "a.jsonl", [{"text": "hello"}])
    write_jsonl(tmp_path / "data" / "b.jsonl", [{"text": "world"}])
    return {"output": "out", "seed": 1, "sources": [{"name": "a", "format": "jsonl", "paths": ["data/*.jsonl"]}]}


def refused(data, tmp_path) -> str:
    with pytest.raises(ConfigError) as err:
        parse_config(data, tmp_path)
    return str(err.value)


# ------------------------------------------------------------------------------------------------ item 7: language

def test_the_label_set_is_the_models_own():
    codes = model_languages()
    assert len(codes) == 176  # lid.176; the default predict threshold would lose 9 of them
    assert {"en", "zh", "ru", "yue", "ceb", "war", "kw"} <= codes
    assert not any(code.startswith("__label__") for code in codes)


def test_every_name_points_at_a_code_of_the_model():
    assert set(LANGUAGE_NAMES.values()) <= model_languages()
    assert not set(LANGUAGE_NAMES) & model_languages()  # a name must never hide a real code


@pytest.mark.parametrize("name, code", [("english", "en"), ("English", "en"), ("Chinese", "zh"), ("eng", "en"),
                                        ("german", "de"), ("zho", "zh")])
def test_a_language_name_is_refused_with_the_code_to_write(tmp_path, base, name, code):
    base["sources"][0]["language"] = name
    message = refused(base, tmp_path)
    assert "sources[0].language" in message
    assert f"{name!r} is not a language code; write {code!r}" in message


def test_an_unknown_code_is_refused_naming_any(tmp_path, base):
    base["sources"][0]["language"] = "xx"
    message = refused(base, tmp_path)
    assert "sources[0].language: 'xx' is not a code the language identifier" in message
    assert "'any'" in message


@pytest.mark.parametrize("given, stored", [("en", "en"), ("EN", "en"), ("en-US", "en"), ("zh_Hans", "zh"),
                                           ("ZH", "zh"), ("yue", "yue"), ("any", "any"), ("ANY", "any")])
def test_codes_are_taken_case_insensitively_without_region(tmp_path, base, given, stored):
    base["sources"][0]["language"] = given
    assert parse_config(base, tmp_path).sources[0].language == stored


def test_same_language_groups_are_checked():
    assert LangidConfig.model_validate({"same_language": [["ZH", "yue"]]}).same_language == (("zh", "yue"),)
    with pytest.raises(ValueError, match="'english' is not a language code; write 'en'"):
        LangidConfig.model_validate({"same_language": [["english", "en"]]})
    with pytest.raises(ValueError, match="'qq' is not a code"):
        canonical_language("qq")


def test_validate_stops_on_a_language_name(tmp_path, capsys):
    write_jsonl(tmp_path / "data" / "a.jsonl", [{"text": "hello"}])
    path = tmp_path / "c.yaml"
    path.write_text("output: run\nsources:\n  - {name: a, format: jsonl, paths: [data/a.jsonl], language: english}\n")
    assert main(["validate", str(path)]) == 2
    assert "write 'en'" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------------ item 13: duplicate keys

def test_a_top_level_key_written_twice_is_refused(tmp_path, base):
    path = tmp_path / "c.yaml"
    path.write_text("output: out\nseed: 1\nsources:\n  - {name: a, format: jsonl, paths: ['data/*.jsonl']}\nseed: 2\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert "key 'seed' appears twice in one mapping (first on line 2)" in str(err.value)
    assert "line 5" in str(err.value)


def test_a_nested_key_written_twice_is_refused(tmp_path, base):
    path = tmp_path / "c.yaml"
    path.write_text("output: out\nsources:\n  - {name: a, format: jsonl, paths: ['data/*.jsonl'], name: b}\n")
    with pytest.raises(ConfigError, match="key 'name' appears twice"):
        load_config(path)
    path.write_text("output: out\nsources:\n  - {name: a, format: jsonl, paths: ['data/*.jsonl']}\n"
                    "stages:\n  sample: {}\n  dedup: {threshold: 0.9}\n  sample: {}\n")
    with pytest.raises(ConfigError, match="key 'sample' appears twice in one mapping \\(first on line 5\\)"):
        load_config(path)


def test_a_merge_may_still_be_overridden(tmp_path, base):
    path = tmp_path / "c.yaml"
    path.write_text("output: out\nsources:\n  - &a {name: a, format: jsonl, paths: ['data/a.jsonl'], fraction: 0.5}\n"
                    "  - {<<: *a, name: b, paths: ['data/b.jsonl']}\n")
    config = load_config(path)
    assert [(s.name, s.fraction, s.paths) for s in config.sources] == [("a", 0.5, ["data/a.jsonl"]),
                                                                       ("b", 0.5, ["data/b.jsonl"])]


# --------------------------------------------------------------------------------------- item 13: booleans as numbers

@pytest.mark.parametrize("mutate, key, value", [
    (lambda c: c.update(seed=True), "seed", "true"),
    (lambda c: c.update(seed=False), "seed", "false"),
    (lambda c: c.update(execution={"workers": True}), "execution.workers", "true"),
    (lambda c: c["sources"][0].update(fraction=True), "sources[0].fraction", "true"),
    (lambda c: c.update(ingest={"docs_per_shard": True}), "ingest.docs_per_shard", "true"),
    (lambda c: c.update(stages={"dedup": {"threshold": True}}), "stages.dedup.threshold", "true"),
])
def test_a_boolean_for_a_number_is_refused_naming_the_key(tmp_path, base, mutate, key, value):
    mutate(base)
    assert f"{key}: {value} is a boolean, not a number" in refused(base, tmp_path)


@pytest.mark.parametrize("seed", ["5", 5.0])
def test_seed_is_a_strict_integer(tmp_path, base, seed):
    base["seed"] = seed
    assert "seed: Input should be a valid integer" in refused(base, tmp_path)


def test_booleans_stay_booleans(tmp_path, base):
    base["seed"] = 7
    base["ingest"] = {"keep_dropped": False}
    config = parse_config(base, tmp_path)
    assert config.seed == 7 and config.ingest.keep_dropped is False


# ------------------------------------------------------------------------------- item 13: ~ and $VAR in every path

@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    write_jsonl(home / "corpus" / "c.jsonl", [{"text": "from home"}])
    (home / "block.txt").write_text("example.com\n")
    write_jsonl(home / "eval.jsonl", [{"q": "what is the answer to this question", "a": "forty two"}])
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CORPUS", str(home / "corpus"))
    monkeypatch.delenv("TOKENMILL_UNSET", raising=False)
    monkeypatch.setenv("TOKENMILL_EMPTY", "")
    return home


def test_home_and_variables_are_expanded_in_every_path(tmp_path, home):
    config = parse_config({
        "output": "$HOME/run",
        "sources": [{"name": "a", "format": "jsonl", "paths": ["${CORPUS}/*.jsonl"], "root": "~/corpus"}],
        "stages": {"clean": {"blocklist": "~/block.txt"},
                   "decontaminate": {"evalsets": [{"name": "e", "path": "$HOME/eval.jsonl", "format": "jsonl",
                                                   "fields": ["q"]}]}},
    }, tmp_path / "elsewhere")
    assert config.output == str(home / "run")
    assert config.output_dir == home / "run"
    assert config.sources[0].paths == [f"{home}/corpus/*.jsonl"]
    assert config.sources[0].root == str(home / "corpus")
    assert source_files(config, config.sources[0]) == (home / "corpus", [home / "corpus" / "c.jsonl"])
    # the stages open these strings as they are: they must already be expanded
    assert config.stages.clean.blocklist == str(home / "block.txt")
    assert config.stages.decontaminate.evalsets[0].path == str(home / "eval.jsonl")
    assert not (tmp_path / "elsewhere" / "$HOME").exists()


@pytest.mark.parametrize("field", path_fields())
def test_an_unset_variable_in_any_path_is_refused_naming_the_key(tmp_path, base, home, field):
    data = dict(base)
    bad = "$TOKENMILL_UNSET/x"
    key = field.replace("[]", "[0]")
    if field == "output":
        data["output"] = bad
    elif field.startswith("sources"):
        data["sources"] = [{**base["sources"][0], "paths": [bad] if "paths" in field else ["data/*.jsonl"],
                            **({"root": bad} if "root" in field else {})}]
    elif "classifiers" in field:
        classifier = {"name": "hq", "model": bad, "keep": {"threshold": 0.5}}
        clean = {"classifiers": [classifier]} if field.startswith("stages.clean.classifiers") else \
            {"overrides": [{"source": "s", "classifiers": [classifier]}]}
        data["stages"] = {"clean": clean}
    elif "clean" in field:
        data["stages"] = {"clean": {"blocklist": bad}}
    elif "decontaminate" in field:
        evalset = {"name": "e", "path": bad, "format": "jsonl", "fields": ["q"]}
        data["stages"] = {"decontaminate": {"evalsets": [evalset]}}
    elif field.endswith("tokenizer"):
        data["stages"] = {"tokenize": {"tokenizer": bad}}
    else:
        files = {"encoder": "enc.json", "merges": "merges.txt", field.rsplit(".", 1)[1]: bad}
        data["stages"] = {"tokenize": {"tokenizer": files}}
    message = refused(data, tmp_path)
    assert f"{key}: '{bad}' names the environment variable $TOKENMILL_UNSET, which is not set" in message


def test_an_empty_variable_is_refused(tmp_path, base, home):
    base["output"] = "$TOKENMILL_EMPTY/run"  # would be /run
    assert "output: '$TOKENMILL_EMPTY/run' names the environment variable $TOKENMILL_EMPTY, which is empty" in \
        refused(base, tmp_path)


def test_validate_refuses_an_unset_variable_and_creates_nothing(tmp_path, home, capsys):
    write_jsonl(tmp_path / "data" / "a.jsonl", [{"text": "hello"}])
    path = tmp_path / "c.yaml"
    path.write_text("output: $TOKENMILL_UNSET/run\nsources:\n  - {name: a, format: jsonl, paths: [data/a.jsonl]}\n")
    assert main(["validate", str(path)]) == 2
    assert "$TOKENMILL_UNSET, which is not set" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml", "data", "home"]


# ------------------------------------------------------------------------------- item 13: overlapping source globs

def test_two_sources_matching_one_file_are_refused_naming_both(tmp_path, base):
    base["sources"].append({"name": "b", "format": "jsonl", "paths": ["data/b*.jsonl"]})
    message = refused(base, tmp_path)
    assert "sources[1].paths: 1 file(s) of source 'b' are also matched by source 'a' (sources[0])" in message
    assert str((tmp_path / "data" / "b.jsonl").resolve()) in message


def test_overlap_through_a_symlink_is_found(tmp_path, base):
    (tmp_path / "alias").symlink_to(tmp_path / "data")
    base["sources"].append({"name": "b", "format": "jsonl", "paths": ["alias/a.jsonl"]})
    assert "1 file(s) of source 'b' are also matched by source 'a'" in refused(base, tmp_path)


def test_overlap_inside_one_source_reads_each_file_once(tmp_path, base):
    base["sources"][0]["paths"] = ["data/a.jsonl", "data/a*.jsonl"]
    base["sources"].append({"name": "b", "format": "jsonl", "paths": ["data/b.jsonl"]})
    config = parse_config(base, tmp_path)
    assert len(expand_pattern(config, "data/*.jsonl")) == 2
    assert source_files(config, config.sources[0])[1] == [(tmp_path / "data" / "a.jsonl").resolve()]


@pytest.mark.timeout(60)
def test_overlap_check_never_globs_an_unsafe_pattern(tmp_path, base):
    """A `**` through a symlink loop lists names without end: its own error comes, and the overlap check is skipped."""
    (tmp_path / "data" / "sub").mkdir()
    (tmp_path / "data" / "sub" / "up").symlink_to("..")
    (tmp_path / "data" / "sub" / "again").symlink_to("../sub")
    base["sources"][0]["paths"] = ["data/**/*.jsonl"]
    base["sources"].append({"name": "b", "format": "jsonl", "paths": ["data/b.jsonl"]})
    message = refused(base, tmp_path)
    assert "walks through a symlink loop" in message
    assert "also matched by" not in message


def test_the_run_reads_the_files_validation_listed_and_checked(tmp_path, base):
    """One listing per run: planning takes validation's. A file that appears after validation, or a symlink to a
    file outside the folder put there after it, is not read unchecked, and does not stop the run (planning used to
    list again: the pattern, unsafe then, matched no file and planning failed on an empty list)."""
    from tokenmill.stages.ingest import list_source_files

    config = parse_config(base, tmp_path)
    write_jsonl(tmp_path / "data" / "c.jsonl", [{"text": "late"}])
    write_jsonl(tmp_path / "elsewhere" / "secret.jsonl", [{"text": "outside"}])
    (tmp_path / "data" / "d.jsonl").symlink_to(tmp_path / "elsewhere" / "secret.jsonl")
    assert [f.relpath for f in list_source_files(config)] == ["a.jsonl", "b.jsonl"]
    assert expand_pattern(config, "data/*.jsonl") == []  # listed now, the pattern is unsafe: what planning got before
