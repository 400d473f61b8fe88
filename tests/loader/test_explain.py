import json

import numpy as np
import pytest

from tokenmill.cli import main
from tokenmill.loader import DataError, TokenLoader
from tokenmill.loader.explain import explain, explain_batch, state_from
from tests.loader.tokens import EOS, labelled_docs, write_dataset

SEQ = 24


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = np.random.default_rng(3)
    root = tmp_path_factory.mktemp("explain")
    return write_dataset(root, {"alpha": labelled_docs(60, rng, base=1),
                                "beta": labelled_docs(50, rng, base=1001, min_len=30, max_len=90)})


def _doc_of_token(t: int) -> str:
    return f"alpha-{t - 1}" if t < 1001 else f"beta-{t - 1001}"


@pytest.mark.parametrize("k", [0, 3, 17, 250])
def test_explain_names_exactly_the_documents_in_the_batch(data, k):
    loader = TokenLoader([data], seq_len=SEQ, global_batch_size=6, micro_batch_size=3, world_size=2, rank=0)
    tokens = loader.global_batch(k).numpy()  # inputs and the last label of every sample
    # Every token names its document (EOS ends the one before), so the batch's documents are known exactly.
    expected = {_doc_of_token(int(t)) for t in np.unique(tokens) if t != EOS}
    rows = explain_batch(loader, k)
    assert {r["id"] for r in rows} >= expected
    # A document only reaches a sample through its EOS when the sample starts on it: nothing else is extra.
    extra = {r["id"] for r in rows} - expected
    assert all(r["tokens_in_sample"] == 1 for r in rows if r["id"] in extra)
    assert sum(r["tokens_in_sample"] for r in rows) == 6 * (SEQ + 1)
    for r in rows:
        assert r["source"] == r["id"].split("-")[0]
        assert r["rank"] == r["sample_in_batch"] // 3 and r["micro_batch"] == 0


def test_explain_by_step_follows_skips_and_reads_saved_state(data, tmp_path):
    loader = TokenLoader([data], seq_len=SEQ, global_batch_size=4)
    loader.skip([(1, 2)])
    it = iter(loader)
    served = [next(it) for _ in range(2)]
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps({"extra": {"loader": loader.state_dict()}}))  # as a checkpoint's meta.json
    k, rows = explain(state_from(state_file), step=1)
    assert k == 3  # batches 1 and 2 are skipped: step 1 trained on batch 3
    tokens = served[1]["input_ids"].numpy()
    assert {_doc_of_token(int(t)) for t in np.unique(tokens) if t != EOS} <= {r["id"] for r in rows}


def test_cli_explain(data, tmp_path, capsys):
    loader = TokenLoader([data], seq_len=SEQ, global_batch_size=4)
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps(loader.state_dict()))
    assert main(["loader", "explain", str(state_file), "--batch", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["batch"] == 2 and {r["id"] for r in out["rows"]} == {r["id"] for r in explain_batch(loader, 2)}
    assert main(["loader", "explain", str(tmp_path), "--step", "0"]) == 2  # no state there: a clear error


def test_cli_explain_table(data, tmp_path, capsys):
    loader = TokenLoader([data], seq_len=SEQ, global_batch_size=4)
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps(loader.state_dict()))
    assert main(["loader", "explain", str(state_file), "--step", "1"]) == 0
    out = capsys.readouterr().out
    assert "step 1 = global batch 1" in out
    assert all(r["source"] in out for r in explain_batch(loader, 1))


def test_a_changed_sidecar_is_refused_not_reported(tmp_path):
    """The ids attribution reports come from `.docs.parquet`: one rewritten with other ids (a valid file, its
    sha256 no longer the recorded one) is refused naming it, not reported as the batch's documents."""
    import pyarrow.parquet as pq

    path = write_dataset(tmp_path, {"alpha": labelled_docs(30, np.random.default_rng(4))}, files_per_source=1,
                         every_sha256=True)
    loader = TokenLoader([path], seq_len=SEQ, global_batch_size=4)
    assert {r["id"].split("-")[0] for r in explain_batch(loader, 0)} == {"alpha"}
    sidecar = tmp_path / "train" / "alpha.0000.docs.parquet"
    table = pq.read_table(sidecar).to_pydict()
    table["id"] = [f"someone-else-{i}" for i in range(len(table["id"]))]
    pq.write_table(pq.read_table(sidecar).from_pydict(table, schema=pq.read_schema(sidecar)), sidecar)
    again = TokenLoader([path], seq_len=SEQ, global_batch_size=4)
    with pytest.raises(DataError, match=r"alpha\.0000\.docs\.parquet: sha256 .* differs from .* recorded in tokens"):
        explain_batch(again, 0)


def _state_file(path, tmp_path, **kw):
    loader = TokenLoader([path], seq_len=SEQ, global_batch_size=4, **kw)
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps({"extra": {"loader": loader.state_dict()}}))
    loader.close()
    return state_file


def test_a_changed_idx_is_refused_not_reported(tmp_path, capsys):
    """The `.idx` maps a sample's tokens to documents: one rewritten with a document boundary moved (a valid index,
    the same size and token count, its sha256 no longer the recorded one) made `explain`, whose loader does not
    verify in the background, report the tokens of one document as another's. Now every file explain reads is
    checked first, naming it; a CLI user sees one line."""
    from tokenmill.tokenize.indexed import IndexedReader, build_index

    path = write_dataset(tmp_path, {"alpha": labelled_docs(30, np.random.default_rng(4), min_len=8)},
                         files_per_source=1)
    state_file = _state_file(path, tmp_path)
    _, rows = explain(state_from(state_file), batch=0)
    # Two documents that meet inside sample 0 of the batch: 3 tokens of the second now said to be the first's.
    d = min(r["document_in_file"] for r in rows if r["sample_in_batch"] == 0 and r["tokens_in_sample"] > 3)
    assert any(r["document_in_file"] == d + 1 and r["sample_in_batch"] == 0 for r in rows)
    idx_path = tmp_path / "train" / "alpha.0000.idx"
    reader = IndexedReader(idx_path)
    lengths = reader.sequence_lengths.astype(np.int64).copy()
    lengths[d], lengths[d + 1] = lengths[d] + 3, lengths[d + 1] - 3
    idx = build_index(reader.dtype, lengths)
    assert len(idx) == idx_path.stat().st_size and IndexedReader(idx_path).num_tokens == sum(lengths)
    del reader
    idx_path.write_bytes(idx)
    with pytest.raises(DataError, match=r"alpha\.0000\.idx: sha256 .* differs from .* recorded in tokens\.json"):
        explain(state_from(state_file), batch=0)
    assert main(["loader", "explain", str(state_file), "--batch", "0", "--json"]) == 2
    err = capsys.readouterr().err
    assert "alpha.0000.idx: sha256" in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("ext", [".docs.parquet", ".idx", ".bin"])
def test_a_file_without_a_recorded_hash_is_refused_by_explain_unless_allowed(tmp_path, capsys, caplog, ext):
    """A sidecar, `.idx` or `.bin` whose sha256 the index leaves out: explain refuses it, as the loader refuses
    such token files, naming the index and the file (before: the sidecar and, in explain, every local token file
    were read unchecked without a word); `--allow-unhashed` reads it with a warning naming it."""
    import logging

    path = write_dataset(tmp_path, {"alpha": labelled_docs(30, np.random.default_rng(4))}, files_per_source=1)
    index = json.loads(path.read_text())
    del index["splits"]["train"]["files"][0]["sha256"][ext]
    path.write_text(json.dumps(index))
    state_file = _state_file(path, tmp_path, verify=False)  # (the .bin sha256 is in the data's fingerprint)
    name = f"{tmp_path / 'train' / 'alpha.0000'}{ext}"
    with pytest.raises(DataError, match=rf"^{path}: {name}: no sha256 recorded"):
        explain(state_from(state_file), batch=0)
    assert main(["loader", "explain", str(state_file), "--batch", "0", "--json"]) == 2
    err = capsys.readouterr().err
    assert f"{name}: no sha256 recorded" in err and "allow-unhashed" in err and err.count("\n") == 1
    with caplog.at_level(logging.WARNING, logger="tokenmill.loader"):
        assert main(["loader", "explain", str(state_file), "--batch", "0", "--json", "--allow-unhashed"]) == 0
    assert {r["source"] for r in json.loads(capsys.readouterr().out)["rows"]} == {"alpha"}
    assert any(name in r.getMessage() and "allow_unhashed" in r.getMessage() for r in caplog.records)


def test_previews_come_only_from_the_recorded_tokenizer(tmp_path):
    """Previews decode with the index's tokenizer.json when its sha256 is the recorded one; another tokenizer.json
    there (it would show other text than was trained on) is refused, naming it."""
    import hashlib

    from tokenizers import Tokenizer, models

    path = write_dataset(tmp_path, {"alpha": labelled_docs(30, np.random.default_rng(4))}, files_per_source=1)
    tokenizer = tmp_path / "tokenizer.json"
    Tokenizer(models.WordLevel({"<eos>": 0, **{f"w{i}": i for i in range(1, 200)}}, unk_token="<eos>")).save(
        str(tokenizer))
    index = json.loads(path.read_text())
    index["tokenizer"]["sha256"] = hashlib.sha256(tokenizer.read_bytes()).hexdigest()
    path.write_text(json.dumps(index))
    rows = explain_batch(TokenLoader([path], seq_len=SEQ, global_batch_size=4), 0)
    assert all(r["preview"].startswith(f"w{int(r['id'].split('-')[1]) + 1}") for r in rows if r["tokens_in_sample"] > 1)
    Tokenizer(models.WordLevel({"<eos>": 0, **{f"x{i}": i for i in range(1, 200)}}, unk_token="<eos>")).save(
        str(tokenizer))
    with pytest.raises(DataError, match=r"tokenizer\.json: sha256 .* differs from .* recorded in tokens\.json"):
        explain_batch(TokenLoader([path], seq_len=SEQ, global_batch_size=4), 0)


def test_explain_on_a_verifying_loader_hashes_no_file_it_verified(tmp_path, monkeypatch):
    """The trainer explains a batch with its own loader at a rollback (`train.restore`): files that loader's check
    verified are taken from its verifier, not hashed again (before: hashed once more per explain call when the
    node keeps no markers, `TOKENMILL_VERIFIED_CACHE=off`). A file changed since is still refused, naming it."""
    from pathlib import Path

    from tokenmill.loader import verify
    from tokenmill.tokenize.indexed import IndexedReader, build_index

    monkeypatch.setenv("TOKENMILL_VERIFIED_CACHE", "off")
    hashed: list[str] = []
    real = verify.file_sha256
    monkeypatch.setattr(verify, "file_sha256", lambda path: hashed.append(Path(path).name) or real(path))
    path = write_dataset(tmp_path, {"alpha": labelled_docs(30, np.random.default_rng(4), min_len=8)},
                         files_per_source=1)  # every batch reads alpha.0000
    loader = TokenLoader([path], seq_len=SEQ, global_batch_size=4)
    loader.verifier.wait()
    assert sorted(hashed) == ["alpha.0000.bin", "alpha.0000.idx"]
    hashed.clear()
    assert explain_batch(loader, 0) and explain_batch(loader, 1) and hashed == []
    loader.close()
    # A changed .idx (a boundary moved, same size): the verifier of a fresh loader refuses it, naming it.
    idx_path = tmp_path / "train" / "alpha.0000.idx"
    reader = IndexedReader(idx_path)
    lengths = reader.sequence_lengths.astype(np.int64).copy()
    lengths[0], lengths[1] = lengths[0] + 3, lengths[1] - 3
    del reader
    idx_path.write_bytes(build_index(np.dtype(np.uint16), lengths))
    again = TokenLoader([path], seq_len=SEQ, global_batch_size=4)
    with pytest.raises(DataError, match=r"alpha\.0000\.idx: sha256 .* differs from .* recorded in tokens\.json"):
        explain_batch(again, 0)
    again.close()
