"""The tokenize stage on real Ray: every sequence decodes back to its document, `<|endoftext|>` in a document is
text, the valid split is disjoint and stable under resharding, and worker count does not change the bytes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import write_jsonl
from tests.pipeline.test_runner import run_into, tree
from tokenmill.tokenize.indexed import IndexedReader
from tokenmill.tokenize.tokenizer import load_tokenizer

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from tests.conftest import SHARED_DATA

    if not SHARED_DATA.is_dir():
        pytest.skip(f"real-data samples not found at {SHARED_DATA}")
    root = tmp_path_factory.mktemp("tok")
    pile = json.loads(Path(SHARED_DATA / "pile" / "pearl_pile_texts.json").read_text(encoding="utf-8"))[:150]
    zh = [line.split("\t", 1)[1].rstrip("\n") for line in (SHARED_DATA / "chinese" / "thucnews_cnews.val.txt").read_text(encoding="utf-8").splitlines(keepends=True)][:60]
    docs = [{"id": f"p{i}", "text": t} for i, t in enumerate(pile)]
    docs.append({"id": "eot", "text": "A forum post that writes <|endoftext|> in the middle of a sentence."})
    write_jsonl(root / "en.jsonl", docs)
    write_jsonl(root / "zh.jsonl", [{"id": f"z{i}", "text": t} for i, t in enumerate(zh)])
    tokdir = SHARED_DATA / "tokenizer"
    config = {"output": "out", "seed": 5, "ingest": {"docs_per_shard": 40},
              "sources": [{"name": "en", "format": "jsonl", "paths": ["en.jsonl"], "id_field": "id"},
                          {"name": "zh", "format": "jsonl", "paths": ["zh.jsonl"], "id_field": "id", "language": "zh"}],
              "stages": {"tokenize": {"tokenizer": {"encoder": str(tokdir / "encoder.json"), "merges": str(tokdir / "vocab.bpe")},
                                      "valid_fraction": 0.1}}}
    (root / "run.yaml").write_text(yaml.safe_dump(config))
    return root / "run.yaml", {d["id"]: d["text"] for d in docs} | {f"z{i}": t for i, t in enumerate(zh)}


def sequences(out):
    index = json.loads((out / "tokenize" / "tokens.json").read_text())
    tok = load_tokenizer(str(out / "tokenize" / "tokenizer.json"))
    seen = {}
    for split, entry in index["splits"].items():
        for f in entry["files"]:
            reader = IndexedReader(str(out / "tokenize" / f["prefix"]))
            side = pq.read_table(str(out / "tokenize" / f["prefix"]) + ".docs.parquet").to_pylist()
            assert len(side) == len(reader) == f["documents"]
            for row, seq in zip(side, reader):
                seen[row["id"]] = (split, seq, row)
    return index, tok, seen


@pytest.mark.long  # every document against the tokenizer's own encode: about 17 s, `make test-all`
def test_every_sequence_decodes_to_its_document(ray_cluster, corpus, tmp_path):
    config, texts = corpus
    run_into(config, tmp_path / "o")
    index, tok, seen = sequences(tmp_path / "o")
    assert set(seen) == set(texts) and index["dtype"] == "uint16" and index["tokenizer"]["eos_id"] == 50256
    for doc_id, (split, seq, row) in seen.items():
        assert seq[-1] == tok.eos_id and tok.decode(seq[:-1]) == texts[doc_id]
        assert row["tokens"] == len(seq)
    eot = seen["eot"][1]
    assert list(eot).count(tok.eos_id) == 1
    valid = {i for i, (s, _, _) in seen.items() if s == "valid"}
    assert 0 < len(valid) < len(seen) * 0.3
    report = json.loads((tmp_path / "o" / "tokenize" / "manifest.json").read_text())["content"]["report"]
    assert report["special_token_text_docs"] == 1
    assert report["tokens"]["train"] + report["tokens"]["valid"] == sum(len(s) for _, s, _ in seen.values())


@pytest.mark.long  # the stage run four ways (shards x workers): about 19 s, `make test-all`
def test_split_stable_under_resharding_and_workers(ray_cluster, corpus, tmp_path):
    config, _ = corpus
    run_into(config, tmp_path / "w1", workers=1)
    run_into(config, tmp_path / "w2", workers=2)
    assert tree(tmp_path / "w1") == tree(tmp_path / "w2")
    data = yaml.safe_load(config.read_text())
    data["ingest"]["docs_per_shard"] = 13
    resharded = config.with_name("resharded.yaml")
    resharded.write_text(yaml.safe_dump(data))
    run_into(resharded, tmp_path / "r")
    split_a = {i: s for i, (s, _, _) in sequences(tmp_path / "w1")[2].items()}
    split_b = {i: s for i, (s, _, _) in sequences(tmp_path / "r")[2].items()}
    assert split_a == split_b


@pytest.fixture(scope="module")
def tokenized(ray_cluster, corpus, tmp_path_factory) -> Path:
    """One run of the corpus through tokenize, for the tests below that read it or start from a copy of it."""
    out = tmp_path_factory.mktemp("tokenized") / "a"
    run_into(corpus[0], out)
    return out


def test_tokens_stats_command(tokenized, tmp_path):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "tokenmill", "tokens", "stats", str(tokenized), "--decode", "2"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "train" in result.stdout and "end-of-text id 50256" in result.stdout and "tokens):" in result.stdout
    missing = subprocess.run([sys.executable, "-m", "tokenmill", "tokens", "stats", str(tmp_path / "nothing")],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "run the tokenize stage first" in missing.stderr


def test_resume_after_losing_commits_of_every_phase(corpus, tokenized, tmp_path):
    import shutil

    config, _ = corpus
    out = tmp_path / "b"
    shutil.copytree(tokenized, out)  # a finished run, as a second run of the same config would leave it
    (out / "tokenize" / "manifest.json").unlink()
    (out / "tokenize" / "tokens.json").unlink()
    phases = sorted((out / "tokenize" / "_work" / "commits").iterdir())
    assert len(phases) == 4  # tokenizer, encoding per shard, merge per file, index: whatever the phases are named
    for phase in phases:
        for record in sorted(phase.glob("*.json"))[::2]:
            record.unlink()
    resumed = run_into(config, out)
    assert resumed[-1].status == "resumed"
    assert tree(out) == tree(tokenized)
    assert (out / "tokenize" / "tokens.json").read_bytes() == (tokenized / "tokenize" / "tokens.json").read_bytes()
    engines = {f["engine"] for s in json.loads((out / "tokenize" / "tokens.json").read_text())["splits"].values()
               for f in s["files"]}
    assert engines == {"tiktoken"}  # GPT-2 files: the fast engine applies (proven equal at load)


# `tokenizers`: about 10 s, `make test-slow`; `auto` (tiktoken, the engine a run picks; 13 s on 2 loaded cores) in
# `make test-all`
@pytest.mark.parametrize("engine", [pytest.param("auto", marks=pytest.mark.long),
                                    pytest.param("tokenizers", marks=pytest.mark.slow)])
def test_added_tokens_give_the_tokenizers_own_ids_on_every_document(ray_cluster, shared_data, tmp_path, engine):
    """A GPT-NeoX-like tokenizer (non-special added tokens for runs of spaces): every sequence the stage writes is
    `encode(text, add_special_tokens=False)` of the tokenizer as given, with either engine, on real web documents;
    `<|endoftext|>` in a document stays text; the engine is recorded per file."""
    from tests.tokenize.conftest import neox_like, web_texts

    neox = neox_like(shared_data)
    neox.save(str(tmp_path / "neox.json"))
    texts = web_texts(shared_data)[:400] + ["A post that writes <|endoftext|> and  <|padding|>  in it."]
    write_jsonl(tmp_path / "web.jsonl", [{"id": f"w{i}", "text": t} for i, t in enumerate(texts)])
    config = {"output": "out", "seed": 3, "ingest": {"docs_per_shard": 150},
              "sources": [{"name": "web", "format": "jsonl", "paths": ["web.jsonl"], "id_field": "id"}],
              "stages": {"tokenize": {"tokenizer": "neox.json", "engine": engine, "batch_docs": 64}}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    run_into(tmp_path / "run.yaml", tmp_path / "out")
    index, _, seen = sequences(tmp_path / "out")
    as_text = neox.__class__.from_str(neox.to_str())
    as_text.encode_special_tokens = True
    own = {f"w{i}": e.ids for i, e in enumerate(as_text.encode_batch(texts, add_special_tokens=False))}
    assert set(seen) <= set(own) and len(seen) > 350 and "w400" in seen  # ingest drops a few (e.g. empty)
    assert all(list(seq[:-1]) == own[i] for i, (_, seq, _) in seen.items())
    assert sum(any(t > 50256 for t in ids) for ids in own.values()) > 30  # the added tokens are in use
    engines = {f["engine"] for s in index["splits"].values() for f in s["files"]}
    assert engines == {"tiktoken" if engine == "auto" else "tokenizers"}
    report = json.loads((tmp_path / "out" / "tokenize" / "manifest.json").read_text())["content"]["report"]
    assert report["special_token_text_docs"] == 1


@pytest.mark.parametrize("sample_docs", [60, 8])
def test_tokenizer_train_command_matches_the_stage(ray_cluster, tmp_path, sample_docs):
    """The command takes the sample in one pass (`training_sample`); the stage from per-shard candidates (every id
    sent at 60 of 120 documents, only those under the bound at 8)."""
    import subprocess
    import sys

    texts = [f"document {i} tells of rivers, {i * 3} mountains and a village by the sea." for i in range(120)]
    write_jsonl(tmp_path / "d.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(texts)])
    config = {"output": "out", "sources": [{"name": "d", "format": "jsonl", "paths": ["d.jsonl"], "id_field": "id"}],
              "ingest": {"docs_per_shard": 50},
              "stages": {"tokenize": {"tokenizer": {"train": {"vocab_size": 300, "sample_docs": sample_docs}}}}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    before = subprocess.run([sys.executable, "-m", "tokenmill", "tokenizer", "train", str(tmp_path / "run.yaml")],
                            capture_output=True, text=True, timeout=120)
    assert before.returncode == 2 and "run it first" in before.stderr
    run_into(tmp_path / "run.yaml", tmp_path / "out")
    result = subprocess.run([sys.executable, "-m", "tokenmill", "tokenizer", "train", str(tmp_path / "run.yaml"),
                             "--out", str(tmp_path / "t.json")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "t.json").read_bytes() == (tmp_path / "out" / "tokenize" / "tokenizer.json").read_bytes()
    sent = pq.read_table(tmp_path / "out" / "tokenize" / "_work" / "sample").num_rows
    assert sent == 120 if sample_docs == 60 else 8 <= sent < 120  # at 8, only the ids under the bound, with text


def test_auto_tokenizer_loads_the_run_folder_with_its_end_of_text_token(ray_cluster, tmp_path, monkeypatch):
    """`AutoTokenizer.from_pretrained(<run>/tokenize)` (the real transformers, offline) knows the end-of-text token
    and gives the ids of the token files."""
    from tests.tokenize.test_hf_files import load_folder

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    texts = [f"document {i} tells of rivers , {i * 3} mountains and a village by the sea ." for i in range(60)]
    write_jsonl(tmp_path / "d.jsonl", [{"id": f"d{i}", "text": t} for i, t in enumerate(texts)])
    config = {"output": "out", "sources": [{"name": "d", "format": "jsonl", "paths": ["d.jsonl"], "id_field": "id"}],
              "stages": {"tokenize": {"tokenizer": {"train": {"vocab_size": 300, "sample_docs": 60}}}}}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    run_into(tmp_path / "run.yaml", tmp_path / "out")
    folder = tmp_path / "out" / "tokenize"
    assert {"tokenizer_config.json", "special_tokens_map.json"} <= {p.name for p in folder.iterdir()}
    index, _, seen = sequences(tmp_path / "out")
    hf = load_folder(folder)
    assert hf.eos_token == "<|endoftext|>" and hf.eos_token_id == index["tokenizer"]["eos_id"]
    for doc_id, (_, seq, _) in seen.items():
        assert hf.encode(texts[int(doc_id[1:])], add_special_tokens=False) + [hf.eos_token_id] == seq.tolist()



def test_index_from_the_merge_tasks_equals_reading_the_files_back(ray_cluster, corpus, tmp_path, monkeypatch):
    """tokens.json built from what each merge task computed over the bytes it wrote is the one built by reading
    every token file back; a file whose size changed since is read back."""
    import pyarrow.fs as pafs

    from tokenmill.pipeline import storage
    from tokenmill.pipeline.config import load_config
    from tokenmill.pipeline.contract import Task, TaskContext
    from tokenmill.pipeline.config import build_stages
    from tokenmill.stages.tokenize.stage import Merge, WriteIndex

    config, _ = corpus
    out = tmp_path / "o"
    run_into(config, out)
    stage = next(s for s in build_stages(load_config(config)) if s.name == "tokenize")
    folder = out / "tokenize"
    records = sorted((folder / "_work" / "commits" / "merge").glob("*.json"))
    known = Merge().reduce(stage, {p.stem: json.loads(p.read_text())["result"] for p in records}, None)
    assert len(known) == len(records) > 2
    tok = load_tokenizer(str(folder / "tokenizer.json"))

    class Writer:
        fs = pafs.LocalFileSystem()
        written: dict[str, bytes] = {}

        def write(self, relpath, data):
            self.written[relpath] = bytes(data)

    def index(encoded) -> bytes:
        writer = Writer()
        WriteIndex().run(stage, Task(key="tokens"), TaskContext(str(folder), None, {"tokenizer": tok, "merge":
                                                                                     encoded}, writer))
        return writer.written["tokens.json"]

    assert index({}) == (folder / "tokens.json").read_bytes()  # read back, as before
    real_read = storage.read_bytes

    def no_token_files(fs, path):
        assert not path.endswith((".bin", ".idx", ".docs.parquet")), path
        return real_read(fs, path)

    monkeypatch.setattr(storage, "read_bytes", no_token_files)
    assert index(known) == (folder / "tokens.json").read_bytes()
    monkeypatch.setattr(storage, "read_bytes", real_read)
    first = sorted(known)[0]
    side = folder / f"{first}.docs.parquet"
    before = side.stat().st_size
    pq.write_table(pq.read_table(side), side, compression="none")  # the same rows in another size than the task wrote
    assert side.stat().st_size != before  # so the file is read back, and its digest is of what lies there now
    files = {f["prefix"]: f for s in json.loads(index(known))["splits"].values() for f in s["files"]}
    assert files[first]["sha256"][".docs.parquet"] == hashlib.sha256((folder / f"{first}.docs.parquet").read_bytes()).hexdigest()
