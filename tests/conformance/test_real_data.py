"""Real-data conformance: every file of ../shared/data that a reader reads goes through every stage, tokenized with
the GPT-2 tokenizer from ../shared/data and with GPT-2 carrying non-special added tokens (GPT-NeoX's space runs) and
special tokens; real code (standard-library `.py` files, the Makefile) rides along.

The pipeline runs once per tokenizer (module fixture; the second run reuses the first's stages up to decontaminate
through resume and recomputes only tokenize). The tests then check, per document and independently of tokenmill's
own readers and checks:

- the token ids equal the tokenizer's own `encode` of the text tokenize received, plus end-of-text, and decode to it;
- no stage added U+FFFD that its raw input did not hold;
- code documents keep every line's indentation;
- conservation: every input document of every stage is kept or dropped with one of the stage's named reasons;
- every dedup removal has a partner kept in its cluster whose exact Jaccard, recomputed here, is above the threshold.

Skipped, with the reason printed, where ../shared/data is absent.
"""

from __future__ import annotations

import collections
import gzip
import json
import re
import shutil
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import zstandard
from tokenizers import Tokenizer

from tests.conftest import SHARED_DATA
from tests.conformance import corpus
from tokenmill.pipeline.config import RunConfig, load_config
from tokenmill.sources.patterns import source_files
from tokenmill.pipeline.config import build_stages
from tokenmill.pipeline.runner import run_pipeline

pytestmark = [
    pytest.mark.ray,
    pytest.mark.long,  # two pipeline runs over every file of the shared data: about 75 s, `make test-all`
    pytest.mark.skipif(not SHARED_DATA.is_dir(),
                       reason=f"real-data samples not found at {SHARED_DATA} (they sit beside the repository in CI)"),
]

STAGES = ("ingest", "sample", "clean", "dedup", "decontaminate", "tokenize")
TEXT_STAGES = STAGES[:-1]  # the stages whose shards hold text
LANG_STAGES = ("clean", "dedup", "decontaminate")  # and a `lang` column (clean's detection)
TOKENIZERS = ("gpt2", "added")
FFFD = "\ufffd"


# -- the run ------------------------------------------------------------------------------------------------------


@dataclass
class Run:
    """One pipeline run's outputs, read lazily and independently of tokenmill's readers where it matters."""

    config: RunConfig
    code: dict[str, str] = field(repr=False)
    """The code documents' exact texts, by id."""
    _kept: dict = field(default_factory=dict, repr=False)

    @property
    def out(self) -> Path:
        return self.config.output_dir

    def manifest(self, stage: str) -> dict:
        return json.loads((self.out / stage / "manifest.json").read_text(encoding="utf-8"))["content"]

    def rows(self, stage: str, folder: str, columns=None) -> list[dict]:
        paths = sorted((self.out / stage / folder).glob("*.parquet"))
        return [r for p in paths for r in pq.read_table(p, columns=columns).to_pylist()]

    def kept(self, stage: str) -> dict[tuple[str, str], dict]:
        """(source, id) -> row of the stage's kept shards (ids are unique per source: checked by a test)."""
        if stage not in self._kept:
            columns = ["id", "source", "text", "meta"] + (["lang"] if stage in LANG_STAGES else [])
            self._kept[stage] = {(r["source"], r["id"]): r for r in self.rows(stage, "shards", columns)}
        return self._kept[stage]

    def dropped(self, stage: str) -> list[dict]:
        return self.rows(stage, "dropped", ["id", "source", "drop_reason"])

    @cached_property
    def stage_reasons(self) -> dict[str, frozenset[str]]:
        return {s.name: frozenset(s.drop_reasons) for s in build_stages(self.config)}

    @cached_property
    def tokenizer(self) -> Tokenizer:
        """The tokenize stage's own tokenizer.json, encoding special-token text as text (as the stage promises)."""
        tok = Tokenizer.from_file(str(self.out / "tokenize" / "tokenizer.json"))
        tok.encode_special_tokens = True
        return tok

    @cached_property
    def index(self) -> dict:
        return json.loads((self.out / "tokenize" / "tokens.json").read_text(encoding="utf-8"))

    @cached_property
    def sequences(self) -> dict[tuple[str, str], tuple[str, np.ndarray]]:
        """(source, id) -> (split, token ids) from every .bin/.idx pair and its .docs.parquet side file."""
        seqs = {}
        for split, entry in self.index["splits"].items():
            for f in entry["files"]:
                prefix = self.out / "tokenize" / f["prefix"]
                tokens = read_megatron(prefix)
                side = pq.read_table(f"{prefix}.docs.parquet").to_pylist()
                assert len(side) == len(tokens) == f["documents"], prefix
                for row, ids in zip(side, tokens):
                    assert row["tokens"] == len(ids), (prefix, row)
                    key = (row["source"], row["id"])
                    assert key not in seqs, f"{key} has two token sequences"
                    seqs[key] = (split, ids)
        return seqs


def read_megatron(prefix: Path) -> list[np.ndarray]:
    """Megatron-LM's MMIDIDX pair read with numpy alone (not tokenmill.tokenize.indexed): one array per sequence."""
    raw = Path(f"{prefix}.idx").read_bytes()
    assert raw[:9] == b"MMIDIDX\x00\x00", prefix
    version, code, n_seq, n_doc = (int.from_bytes(raw[9:17], "little"), raw[17],
                                   int.from_bytes(raw[18:26], "little"), int.from_bytes(raw[26:34], "little"))
    assert version == 1, prefix
    dtype = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32,
             8: np.uint16}[code]
    at = 34
    lengths = np.frombuffer(raw, "<i4", n_seq, at)
    at += 4 * n_seq
    pointers = np.frombuffer(raw, "<i8", n_seq, at)
    at += 8 * n_seq
    docs = np.frombuffer(raw, "<i8", n_doc, at)
    at += 8 * n_doc
    assert at == len(raw), f"{prefix}.idx: {len(raw) - at} trailing bytes"
    assert docs.tolist() == list(range(n_seq + 1)), "one sequence per document"
    itemsize = np.dtype(dtype).itemsize
    expected = np.zeros(n_seq, dtype=np.int64)
    expected[1:] = np.cumsum(lengths[:-1], dtype=np.int64) * itemsize
    assert np.array_equal(pointers, expected), f"{prefix}.idx: pointers are not the running byte offsets"
    tokens = np.frombuffer(Path(f"{prefix}.bin").read_bytes(), np.dtype(dtype).newbyteorder("<"))
    assert len(tokens) == int(lengths.sum()), f"{prefix}.bin holds {len(tokens)} tokens, .idx says {lengths.sum()}"
    return [tokens[p // itemsize: p // itemsize + n] for p, n in zip(pointers.tolist(), lengths.tolist())]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, ray_cluster) -> dict[str, Run]:
    root = tmp_path_factory.mktemp("conformance")
    code = corpus.write_code(root / "code.jsonl")
    gpt2 = SHARED_DATA / "tokenizer" / "gpt2_tokenizer.json"
    first = load_config(corpus.write_config(root, SHARED_DATA, str(gpt2), "gpt2"))
    run_pipeline(first)
    # The second tokenizer: the same run up to decontaminate (copied, so resume reuses every stage), tokenize again.
    added = corpus.write_tokenizer(root / "added_tokenizer" / "tokenizer.json", gpt2)
    shutil.copytree(first.output_dir, root / "added",
                    ignore=lambda folder, names: ["tokenize"] if Path(folder) == first.output_dir else [])
    second = load_config(corpus.write_config(root, SHARED_DATA, str(added), "added"))
    reports = run_pipeline(second)
    assert [r.status for r in reports[:-1]] == ["up to date"] * (len(STAGES) - 1)
    return {"gpt2": Run(first, code), "added": Run(second, code)}


@pytest.fixture(scope="module")
def run(runs) -> Run:
    """The stages before tokenize are the same in both runs: their checks look at one."""
    return runs["gpt2"]


def input_of(run: Run, stage: str) -> dict[tuple[str, str], dict]:
    return run.kept(STAGES[STAGES.index(stage) - 1])


# -- sources: every readable file, read whole ---------------------------------------------------------------------


def test_every_file_of_shared_data_is_a_source_or_named_as_not_one(run):
    read = {p for s in run.config.sources for p in source_files(run.config, s)[1]}
    for path in sorted(SHARED_DATA.rglob("*")):
        rel = path.relative_to(SHARED_DATA).as_posix()
        if path.is_file() and not rel.startswith(corpus.NOT_SOURCES):
            assert path.resolve() in read, f"{rel} is read by no source of the conformance run"


def test_ingest_reads_every_record_of_every_file(run):
    by_source = run.manifest("ingest")["by_source"]
    expected = corpus.RECORDS | {"code": len(run.code)}
    assert {s: v["docs_in"] for s, v in by_source.items()} == expected


def test_every_file_gives_documents_past_sample(run):
    """Each file contributes kept documents to ingest and, after the sample stage's fractions, to the cleaning."""
    files = {(s.name, p.name) for s in run.config.sources for p in source_files(run.config, s)[1]}
    # The file each ingest shard was read from; later stages keep the shard's name.
    read_from = {s["path"]: Path(s["input"]).name for s in run.manifest("ingest")["shards"]}
    for stage in ("ingest", "sample"):
        got = collections.Counter()
        for shard in run.manifest(stage)["shards"]:
            got[(shard["source"], read_from[shard["path"]])] += shard["docs_out"]
        empty = sorted(f for f in files if not got[f])
        assert not empty, f"{stage}: no document kept from {empty}"


def test_every_source_reaches_tokenize(runs):
    for name, r in runs.items():
        sources = {s for s, _ in r.sequences}
        assert sources == {s.name for s in r.config.sources}, name


def test_ids_are_unique_per_source(run):
    for stage in TEXT_STAGES:
        rows = run.rows(stage, "shards", ["id", "source"])
        counts = collections.Counter((r["source"], r["id"]) for r in rows)
        assert not [k for k, n in counts.items() if n > 1], stage


# -- conservation -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stage", STAGES)
def test_conservation(run, stage):
    """Every input document is kept or dropped, once, with a reason of the stage; the manifest counts the same."""
    kept = collections.Counter((r["source"], r["id"]) for r in run.rows(stage, "shards", ["id", "source"]))
    dropped = run.dropped(stage)
    reasons = run.stage_reasons[stage]
    bad = [r for r in dropped if r["drop_reason"] not in reasons]
    assert not bad, f"{stage}: drops without one of its named reasons {sorted(reasons)}: {bad[:5]}"
    gone = collections.Counter((r["source"], r["id"]) for r in dropped)
    manifest = run.manifest(stage)
    totals = manifest["totals"]
    assert totals["docs_out"] == sum(kept.values())
    assert totals["docs_in"] == sum(kept.values()) + sum(gone.values())
    assert totals["drops"] == dict(collections.Counter(r["drop_reason"] for r in dropped))
    for source, counts in manifest["by_source"].items():
        out = sum(n for (s, _), n in kept.items() if s == source)
        lost = sum(n for (s, _), n in gone.items() if s == source)
        assert (counts["docs_out"], counts["docs_in"]) == (out, out + lost), f"{stage}: manifest counts of {source}"
    if stage == "ingest":
        return  # its input is files: the record counts are checked above
    before = collections.Counter(list(input_of(run, stage)))
    assert kept + gone == before, (f"{stage}: lost {sorted((before - kept - gone).elements())[:5]}, "
                                   f"invented {sorted((kept + gone - before).elements())[:5]}")


@pytest.mark.parametrize("tok", TOKENIZERS)
def test_conservation_into_token_files(runs, tok):
    """Every document tokenize kept has exactly one token sequence, traced back by its side file."""
    r = runs[tok]
    assert set(r.sequences) == set(r.kept("tokenize")) == set(r.kept("decontaminate"))
    for split, entry in r.index["splits"].items():
        assert entry["documents"] == sum(s == split for s, _ in r.sequences.values())
        assert entry["tokens"] == sum(len(ids) for s, ids in r.sequences.values() if s == split)


def test_bytes_in_are_the_bytes_the_stage_received(run):
    """A stage's `bytes_in` is its input's `bytes_out` (per source); `bytes_out` is the UTF-8 size of its kept texts."""
    previous = None
    for stage in TEXT_STAGES:
        by_source = run.manifest(stage)["by_source"]
        kept = collections.Counter()
        for (source, _), row in run.kept(stage).items():
            kept[source] += len(row["text"].encode("utf-8"))
        assert {s: v["bytes_out"] for s, v in by_source.items()} == {s: kept[s] for s in by_source}, stage
        if previous is not None:
            assert {s: v["bytes_in"] for s, v in by_source.items()} == previous, f"{stage}: bytes_in"
        previous = {s: v["bytes_out"] for s, v in by_source.items()}


# -- tokens -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tok", TOKENIZERS)
def test_saved_tokenizer_is_the_configured_one(runs, tok):
    r = runs[tok]
    saved = r.tokenizer
    configured = Tokenizer.from_file(str(r.config.resolve(r.config.stages.tokenize.tokenizer)))
    assert saved.get_vocab(with_added_tokens=True) == configured.get_vocab(with_added_tokens=True)
    added = {t.content: t.special for t in saved.get_added_tokens_decoder().values()}
    if tok == "added":
        assert {run: added.get(run) for run in corpus.SPACE_RUNS} == dict.fromkeys(corpus.SPACE_RUNS, False)
        assert all(added.get(t) is True for t in corpus.SPECIAL_TOKENS)
    eos = saved.token_to_id("<|endoftext|>")
    assert r.index["tokenizer"]["eos_id"] == eos == 50256


@pytest.mark.parametrize("tok", TOKENIZERS)
def test_ids_equal_the_tokenizers_own_encode(runs, tok):
    """ids == Tokenizer.encode(text received, add_special_tokens=False).ids + [eos], for every document."""
    r = runs[tok]
    received = r.kept("decontaminate")
    keys = sorted(received)
    encoded = r.tokenizer.encode_batch([received[k]["text"] for k in keys], add_special_tokens=False)
    eos = r.index["tokenizer"]["eos_id"]
    wrong = []
    for key, enc in zip(keys, encoded):
        got = r.sequences[key][1].tolist()
        if got != enc.ids + [eos]:
            first = next((i for i, (a, b) in enumerate(zip(got, enc.ids)) if a != b), min(len(got), len(enc.ids)))
            wrong.append(f"{key}: the stage wrote {len(got)} ids, encode gives {len(enc.ids)} + end-of-text; first "
                         f"difference at {first}: stage {got[first:first + 4]}, encode {enc.ids[first:first + 4]}")
    assert not wrong, f"{len(wrong)} of {len(keys)} documents:\n" + "\n".join(wrong[:10])


@pytest.mark.parametrize("tok", TOKENIZERS)
def test_decode_gives_the_text_back(runs, tok):
    r = runs[tok]
    received = r.kept("decontaminate")
    eos = r.index["tokenizer"]["eos_id"]
    keys = sorted(received)
    seqs = [r.sequences[k][1] for k in keys]
    assert all(len(s) and s[-1] == eos for s in seqs), "every sequence ends with end-of-text"
    decoded = r.tokenizer.decode_batch([s[:-1].tolist() for s in seqs], skip_special_tokens=False)
    wrong = [k for k, text in zip(keys, decoded) if text != received[k]["text"]]
    assert not wrong, f"{len(wrong)} of {len(keys)} documents do not decode to their text: {wrong[:10]}"


@pytest.mark.parametrize("tok", TOKENIZERS)
def test_special_tokens_only_end_documents(runs, tok):
    """Special-token text inside a document is text: the only special id in a sequence is its final end-of-text."""
    r = runs[tok]
    special = np.array(sorted(i for i, t in r.tokenizer.get_added_tokens_decoder().items() if t.special))
    inside = [k for k, (_, ids) in r.sequences.items() if np.isin(ids[:-1], special).any()]
    assert not inside, f"special ids inside {len(inside)} documents: {inside[:10]}"


def test_added_space_tokens_are_used(runs):
    """Texts tokenize received hold runs of spaces (code indentation at least), and their ids use the added
    space-run tokens: else the second tokenizer proves nothing. (When clean turned every run of spaces into one,
    `added` encoded exactly as `gpt2`, and the id check above could not see ids that ignore added tokens.)"""
    r = runs["added"]
    space_ids = {r.tokenizer.token_to_id(s) for s in corpus.SPACE_RUNS}
    texts = r.kept("decontaminate")
    with_runs = sorted(k for k, row in texts.items() if "  " in row["text"])
    assert with_runs, f"none of the {len(texts)} texts tokenize received holds two spaces in a row"
    used = [k for k in with_runs if space_ids & set(r.sequences[k][1].tolist())]
    assert any(source == "code" for source, _ in used), f"space-run tokens in {len(used)} documents, no code among them"


# -- U+FFFD -------------------------------------------------------------------------------------------------------


def _raw_holds_fffd(run: Run, source: str) -> bool:
    """Whether the source's files hold U+FFFD: as UTF-8 bytes, or as a JSON escape."""
    src = run.config.source(source)
    for path in source_files(run.config, src)[1]:
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        elif path.suffix == ".zst":
            data = zstandard.ZstdDecompressor().decompressobj().decompress(data)
        if "\ufffd".encode() in data or re.search(rb"\\u[fF]{3}[dD]", data):
            return True
    return False


def test_readers_add_no_replacement_characters(run):
    """A document of ingest holds U+FFFD only where its file does, or where a WARC page's stray bytes were replaced
    and counted (docs/readers.md: `meta.replaced_chars`)."""
    with_fffd = collections.defaultdict(list)
    for (source, doc_id), row in run.kept("ingest").items():
        if FFFD in row["text"] and not json.loads(row["meta"]).get("replaced_chars"):
            with_fffd[source].append(doc_id)
    added = {s: ids[:3] for s, ids in with_fffd.items() if not _raw_holds_fffd(run, s)}
    assert not added, f"U+FFFD in documents whose files hold none: {added}"


@pytest.mark.parametrize("stage", TEXT_STAGES[1:])
def test_no_stage_adds_replacement_characters(run, stage):
    raw = run.kept("ingest")
    added = [k for k, row in run.kept(stage).items() if row["text"].count(FFFD) > raw[k]["text"].count(FFFD)]
    assert not added, f"{stage} added U+FFFD to {len(added)} documents: {added[:10]}"


# -- code ---------------------------------------------------------------------------------------------------------


def _indented_lines(text: str) -> list[tuple[str, str]]:
    """(indentation, line) of every non-blank line, after the line-break changes clean documents (CRLF, CR,
    U+0085 and U+2028 to a newline); trailing spaces and blank-line runs, which clean may change, do not count."""
    text = re.sub(r"\r\n?|[\u0085\u2028]", "\n", text)
    return [(line[: len(line) - len(line.lstrip(" \t"))], line) for line in text.split("\n") if line.strip()]


def test_code_is_read_exactly(run):
    got = {doc_id: row["text"] for (source, doc_id), row in run.kept("ingest").items() if source == "code"}
    assert got == run.code


@pytest.mark.parametrize("stage", ("clean", "dedup", "decontaminate"))
def test_code_keeps_every_lines_indentation(run, stage):
    """Line by line against the original file: the same non-blank lines, each with the same leading spaces and tabs
    (the Makefile's recipe lines need their tab). A document an evaluation set matched was cut: not compared."""
    kept = run.kept(stage)
    excised = set()
    if stage == "decontaminate":
        hits = pq.read_table(run.out / "decontaminate" / "hits.parquet", columns=["id", "source"]).to_pylist()
        excised = {r["id"] for r in hits if r["source"] == "code"}
    present = {doc_id: row["text"] for (source, doc_id), row in kept.items()
               if source == "code" and doc_id not in excised}
    assert len(present) + len(excised) >= 0.9 * len(run.code), \
        f"{stage} kept {len(present)} of {len(run.code)} code documents"
    broken = {}
    for doc_id, text in sorted(present.items()):
        want, got = _indented_lines(run.code[doc_id]), _indented_lines(text)
        if len(want) != len(got):
            broken[doc_id] = f"{len(want)} non-blank lines became {len(got)}"
            continue
        bad = [(n, w, g) for n, ((wi, w), (gi, g)) in enumerate(zip(want, got)) if wi != gi]
        if bad:
            n, w, g = bad[0]
            broken[doc_id] = f"{len(bad)} lines re-indented, first {w!r} -> {g!r}"
    assert not broken, f"{stage}: {len(broken)} of {len(present)} code documents lost indentation:\n" + \
        "\n".join(f"{k}: {v}" for k, v in list(broken.items())[:10])


def test_code_is_not_dropped(run):
    """The code source is kept as a user keeps one (no prose quality rules, escapes counted): every file reaches
    tokenize, unless an evaluation set matched it."""
    lost = {}
    for stage in STAGES[1:]:
        for r in run.dropped(stage):
            if r["source"] == "code":
                lost[r["id"]] = f"{stage}: {r['drop_reason']}"
    assert all(v.startswith("decontaminate") for v in lost.values()), lost


# -- decontaminate -------------------------------------------------------------------------------------------


def test_decontaminate_cuts_every_hit_and_nothing_else(run):
    """Each hit's span is in the text decontaminate received, and is gone (with its context) from what it kept;
    a document without hits comes out unchanged."""
    received, kept = input_of(run, "decontaminate"), run.kept("decontaminate")
    dropped = {(r["source"], r["id"]) for r in run.dropped("decontaminate")}
    hits = pq.read_table(run.out / "decontaminate" / "hits.parquet").to_pylist()
    problems = []
    for h in hits:
        key = (h["source"], h["id"])
        text = received[key]["text"]
        if text[h["start"]:h["end"]] != h["text"]:
            span = text[h["start"]:h["end"]]
            problems.append(f"{key}: [{h['start']}:{h['end']}] is {span!r}, the hit says {h['text']!r}")
        elif key not in dropped and text[max(0, h["start"] - 50):h["end"] + 50] in kept[key]["text"]:
            problems.append(f"{key}: the hit {h['text']!r} ({h['evalset']} {h['item']}) is still in the kept text")
    hit_keys = {(h["source"], h["id"]) for h in hits}
    changed = [k for k, row in kept.items() if k not in hit_keys and row["text"] != received[k]["text"]]
    assert not changed, f"decontaminate changed {len(changed)} documents without a hit: {changed[:5]}"
    assert not problems, "\n".join(problems[:10])


# -- dedup --------------------------------------------------------------------------------------------------------

_WORD = re.compile(r"[^\W_]+")


def _shingles(text: str, lang: str | None, n: int) -> set[tuple[str, ...]] | set[str]:
    """docs/dedup.md's shingles, recomputed: words are lowercased runs of letters and digits; word n-grams, or
    character n-grams of the words run together for zh/ja/th; a text shorter than n gives one shingle of all."""
    words = _WORD.findall(text.lower())
    if lang and re.split(r"[-_]", lang.lower())[0] in ("zh", "ja", "th"):
        chars = "".join(words)
        return {chars[i:i + n] for i in range(max(1, len(chars) - n + 1))} if chars else set()
    return {tuple(words[i:i + n]) for i in range(max(1, len(words) - n + 1))} if words else set()


def _jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


def test_every_dedup_removal_has_a_verified_partner(run):
    threshold = run.config.stages.dedup.threshold
    n = run.config.stages.dedup.word_ngram, run.config.stages.dedup.char_ngram
    texts = input_of(run, "dedup")
    clusters = pq.read_table(run.out / "dedup" / "clusters.parquet").to_pylist()
    dropped = {(r["source"], r["id"]): r["drop_reason"] for r in run.dropped("dedup")}
    removed = {(r["source"], r["id"]): r for r in clusters if not r["kept"]}
    assert {k: r["reason"] for k, r in removed.items()} == dropped, "clusters.parquet and dedup/dropped disagree"
    kept_by_cluster = collections.defaultdict(dict)
    for r in clusters:
        if r["kept"]:
            kept_by_cluster[r["cluster"]][r["id"]] = (r["source"], r["id"])
    kept_after = run.kept("dedup")
    problems = []
    for key, r in sorted(removed.items()):
        partner = kept_by_cluster[r["cluster"]].get(r["removed_by"])
        if partner is None or partner not in kept_after:
            problems.append(f"{key}: removed by {r['removed_by']!r}, not a kept member of cluster {r['cluster']}")
            continue
        a, b = texts[key], texts[partner]
        def size(row):
            return n[1] if (row["lang"] or "").split("-")[0] in ("zh", "ja", "th") else n[0]

        jac = _jaccard(_shingles(a["text"], a["lang"], size(a)), _shingles(b["text"], b["lang"], size(b)))
        if r["reason"] == "exact_duplicate":
            same = _WORD.findall(a["text"].lower()) == _WORD.findall(b["text"].lower())
            if not same:
                problems.append(f"{key}: exact_duplicate of {partner}, but their normalized texts differ")
        elif not jac > threshold:
            problems.append(f"{key}: near_duplicate of {partner} at Jaccard {jac:.4f}, not above {threshold}")
        elif abs(jac - r["jaccard"]) > 1e-6:
            problems.append(f"{key}: clusters.parquet says Jaccard {r['jaccard']:.6f}, recomputed {jac:.6f}")
    assert not problems, "\n".join(problems[:20])


def test_dedup_removes_exact_and_near_duplicates(run):
    """The real data holds both kinds (dolma's repeated pages, two scans of one book): the check above is not empty."""
    reasons = collections.Counter(r["drop_reason"] for r in run.dropped("dedup"))
    assert reasons["exact_duplicate"] >= 5 and reasons["near_duplicate"] >= 1, reasons
