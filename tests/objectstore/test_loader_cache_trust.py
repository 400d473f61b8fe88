"""The streaming loader's cache never serves a byte it has not checked, and a remote index never names a file
outside it: a real cache on a real S3 server (moto), damaged the ways a disk or a person damages it (bits flipped
with the size unchanged, a file cut short, each kind of file: .bin, .idx, head), and tokens.json files crafted to
reach outside the cache folder."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import Counter
from pathlib import Path

import pytest

from tests.loader.streaming import BUCKET, KW, URI, dataset, paused_hashing, upload
from tokenmill.loader import DataError, TokenLoader
from tokenmill import markers as marker_folder
from tokenmill.loader import verify


@pytest.fixture
def data(tmp_path, s3_server):
    path, total, largest = dataset(tmp_path / "run" / "tokenize")
    upload(s3_server, tmp_path / "run" / "tokenize")
    return path, total


def _epoch(path) -> int:
    """Steps (one sample each) in an epoch of the data: every token file is read."""
    return sum(s.samples(KW["seq_len"]) for s in TokenLoader([str(path)], verify=False, **KW).streams)


def _take(loader: TokenLoader, steps: int) -> tuple[list, dict]:
    it = iter(loader)
    got = [next(it)["input_ids"].tolist() for _ in range(steps)]
    stats = loader.fetch_stats()
    loader.close()
    return got, stats


def _flip_every_4k(p: Path) -> None:
    raw = bytearray(p.read_bytes())
    for i in range(0, len(raw), 4096):
        raw[i] ^= 0x01  # one bit per 4 KiB; the size unchanged
    p.write_bytes(bytes(raw))


def _damage(cache: Path, kind: str) -> list[str]:
    """Damage every cached file of one kind; their names."""
    suffix = {"bin": ".bin", "truncated": ".bin", "idx": ".idx", "head": ".head"}[kind]
    names = []
    for p in sorted(cache.glob(f"*{suffix}")):
        if kind == "truncated":
            with open(p, "r+b") as f:
                f.truncate(p.stat().st_size // 2)  # an interrupted copy
        else:
            _flip_every_4k(p)
        names.append(p.name)
    assert names, f"no {suffix} file in the cache to damage"
    return names


def _gets(log: Path, since: int) -> Counter:
    """The token objects the server sent since byte ``since`` of its log (one GET per object here)."""
    return Counter(re.findall(r'GET /tokens/run/tokenize/(train/\S+\.(?:bin|idx)) HTTP', log.read_text()[since:]))


def _intact(p: Path) -> bool:
    return hashlib.sha256(p.read_bytes()).hexdigest() == p.name[:64]


def _first_object(path):
    from tokenmill.loader.cache import CachedObject
    from tokenmill.loader.remote import local_name
    from tokenmill.tokenize import tokens_json

    entry = tokens_json.read(path).files("train")[0]
    uri = f"s3://{BUCKET}/run/tokenize/{entry['prefix']}.bin"
    sha = entry["sha256"][".bin"]
    return CachedObject(uri, local_name(uri, sha, ".bin"), sha, entry["tokens"] * 2)


# A .bin and an .idx damaged in `make test`; with 2 workers and a file cut short in `make test-slow` (4-5 s each)
@pytest.mark.parametrize("kind, workers", [("bin", 0), pytest.param("bin", 2, marks=pytest.mark.slow),
                                           pytest.param("truncated", 0, marks=pytest.mark.slow), ("idx", 0)])
def test_a_damaged_cached_file_is_fetched_again_and_the_batches_are_the_local_ones(data, tmp_path, kind, workers):
    """A cache that holds the data, filled by one loader and damaged; a new loader (with 2 workers: two processes
    finding the same damaged copies) serves the local loader's batches over an epoch, having fetched each damaged
    file once again and nothing else."""
    path, total = data
    steps = _epoch(path)
    reference, _ = _take(TokenLoader([str(path)], **KW), steps)
    cache, log = tmp_path / "cache", tmp_path / "moto.log"
    _, filled = _take(TokenLoader(URI, cache_dir=cache, cache_bytes=2 * total, **KW), steps)
    assert filled["files_fetched"] == 64  # every .bin and .idx, once
    damaged = _damage(cache, kind)
    since = len(log.read_text())
    got, stats = _take(TokenLoader(URI, cache_dir=cache, cache_bytes=2 * total, num_workers=workers, **KW), steps)
    assert got == reference
    refetched = _gets(log, since)
    # Each damaged copy fetched again exactly once for the node (two workers finding it damaged too), no other file.
    assert sum(refetched.values()) == len(damaged) and max(refetched.values()) == 1
    if workers == 0:  # (workers report their counts as of their last chunk)
        assert stats["damaged"] == len(damaged) and stats["bytes_fetched"] > 0
    assert all(_intact(p) for p in cache.iterdir() if p.is_file())  # no damaged copy left behind


def test_a_damaged_head_in_the_cache_is_fetched_again(data, tmp_path):
    """A cache of a quarter of the data holds heads (the first bytes of a .bin, for the sample that runs into it):
    flipped in the cache, they are checked and fetched again like whole files."""
    path, total = data
    kw = {**KW, "shuffle_block": "file", "shuffle_window": 2}
    steps = 40  # within the first files' block: the second loader needs what the first left in the cache
    reference, _ = _take(TokenLoader([str(path)], **kw), steps)
    cache = tmp_path / "cache"
    _take(TokenLoader(URI, cache_dir=cache, cache_bytes=total // 4, **kw), steps)
    damaged = _damage(cache, "head")
    got, stats = _take(TokenLoader(URI, cache_dir=cache, cache_bytes=total // 4, **kw), steps)
    assert got == reference
    assert 1 <= stats["damaged"] <= len(damaged) and stats["bytes_fetched"] > 0


def test_a_damaged_copy_another_process_holds_is_an_error_in_time_not_a_hang(data, tmp_path):
    """A copy damaged while another process of the node has it pinned cannot be replaced under it: the loader that
    finds it waits up to its timeout, then names the file; once the other lets go, it is replaced."""
    from tokenmill.loader.cache import TokenCache
    from tokenmill.loader.remote import ObjectStore

    path, total = data
    obj, store = _first_object(path), ObjectStore()
    uri = obj.uri
    # Two caches on one folder: each its own lock files, as two processes of the node have.
    holder = TokenCache(tmp_path / "cache", total, store, timeout=0.5)
    other = TokenCache(tmp_path / "cache", total, store, timeout=0.5)
    copy = holder.pin(obj)
    _flip_every_4k(copy)
    with pytest.raises(DataError, match=rf"{re.escape(str(copy))}: the cached copy of {re.escape(uri)} is damaged "
                                        r"and another process of this node has kept it in use for 0\.5 s"):
        other.pin(obj)
    holder.release(obj.name)
    assert other.pin(obj) == copy and _intact(copy)
    assert other.stats["damaged"] == 1 and other.stats["files_fetched"] == 1
    other.release_all()


def test_a_copy_being_checked_is_never_evicted(data, tmp_path, monkeypatch):
    """The check of a copy found in the cache runs under the copy's shared lock: another process making room
    meanwhile cannot evict it, and the pin then serves that copy, fetching nothing."""
    from tokenmill.loader.cache import TokenCache
    from tokenmill.loader.remote import ObjectStore

    path, total = data
    obj, store = _first_object(path), ObjectStore()
    filler = TokenCache(tmp_path / "cache", total, store)
    copy = filler.pin(obj)
    filler.release_all()  # in the folder, held by nobody
    hashing, go = paused_hashing(monkeypatch)
    reader, got = TokenCache(tmp_path / "cache", total, store), []
    thread = threading.Thread(target=lambda: got.append(reader.pin(obj)))
    thread.start()
    assert hashing.wait(20), "the copy found in the cache was not checked"
    other = TokenCache(tmp_path / "cache", total, store)
    with other._cache_lock():
        other._make_room(total)  # room for all the data: evicts every file nobody holds
    assert copy.exists()
    go.set()
    thread.join(20)
    assert got == [copy] and _intact(copy) and reader.stats["files_fetched"] == 0
    reader.release_all()


def test_the_cache_keeps_markers_only_of_its_files_and_a_warm_cache_is_not_hashed(data, tmp_path, monkeypatch):
    """A download is hashed as it arrives and leaves the node's marker, so a warm cache is not hashed again (an
    object's own times are its marker's: pins touch its lock file instead); an evicted file takes its marker with
    it, so markers do not pile up in a cache smaller than the data; with markers off every first pin hashes."""
    path, total = data
    monkeypatch.setenv(marker_folder.VERIFIED_CACHE_ENV, str(tmp_path / "markers"))
    hashed = []
    real = verify.file_sha256
    monkeypatch.setattr(verify, "file_sha256", lambda p: hashed.append(Path(p).name) or real(p))
    steps = _epoch(path)
    reference, _ = _take(TokenLoader([str(path)], verify=False, **KW), steps)
    full = tmp_path / "full"
    assert _take(TokenLoader(URI, cache_dir=full, cache_bytes=2 * total, **KW), steps)[0] == reference
    assert hashed == [] and len(list((tmp_path / "markers").iterdir())) == 64
    got, stats = _take(TokenLoader(URI, cache_dir=full, cache_bytes=2 * total, **KW), steps)
    assert got == reference and hashed == [] and stats["bytes_fetched"] == 0
    quarter = tmp_path / "quarter"
    _, stats = _take(TokenLoader(URI, cache_dir=quarter, cache_bytes=total // 4, **KW), steps // 4)
    assert stats["evicted"] > 64  # files fetched and evicted again and again
    for thread in threading.enumerate():  # close() does not wait for a download in flight: done before we look
        if thread.name == "tokenmill-fetch":
            thread.join(30)
    markers = [json.loads(p.read_text()) for p in (tmp_path / "markers").iterdir()]
    assert all(Path(m["path"]).exists() for m in markers)  # none of an evicted file
    assert len([m for m in markers if m["path"].startswith(str(quarter))]) <= len(list(quarter.glob("*.*")))
    monkeypatch.setenv(marker_folder.VERIFIED_CACHE_ENV, "off")
    got, _ = _take(TokenLoader(URI, cache_dir=full, cache_bytes=2 * total, **KW), steps)
    assert got == reference and sorted(hashed) == sorted(p.name for p in full.iterdir() if p.is_file())


# -- item 4: names from a remote index -------------------------------------------------------------------------


def _files(index: dict) -> list[dict]:
    return index["splits"]["train"]["files"]


CRAFTED = {  # what is edited: (the edit, the key named, a part of the value shown)
    ".bin sha256 ../../X": (lambda i: _files(i)[0]["sha256"].update({".bin": "../../X"}),
                            "splits.train.files[0].sha256..bin", "'../../X'"),
    ".bin sha256 uppercase": (lambda i: _files(i)[0]["sha256"].update({".bin": _files(i)[0]["sha256"][".bin"].upper()}),
                              "splits.train.files[0].sha256..bin", "expected a sha256"),
    ".idx sha256 short": (lambda i: _files(i)[1]["sha256"].update({".idx": "ab" * 20}),
                          "splits.train.files[1].sha256..idx", "ab" * 20),
    "head sha256 ../../../h": (lambda i: _files(i)[2]["head"].update(sha256="../" * 3 + "h"),
                               "splits.train.files[2].head.sha256", "'../../../h'"),
    "sha256 of a file /../x": (lambda i: _files(i)[0]["sha256"].update({"/../x": "ab" * 32}),
                               "splits.train.files[0].sha256", "'/../x'"),
    "tokenizer.file ../x": (lambda i: i["tokenizer"].update(file="../x"), "tokenizer.file", "'../x'"),
    "tokenizer.sha256 ../../tok": (lambda i: i["tokenizer"].update(sha256="../../tok"), "tokenizer.sha256",
                                   "'../../tok'"),
    "prefix /etc/passwd": (lambda i: _files(i)[0].update(prefix="/etc/passwd"), "splits.train.files[0].prefix",
                           "'/etc/passwd'"),
    "prefix train/../../../X": (lambda i: _files(i)[0].update(prefix="train/../../../X"),
                                "splits.train.files[0].prefix", "'train/../../../X'"),
    "prefix with backslashes": (lambda i: _files(i)[0].update(prefix="train\\..\\..\\X"),
                                "splits.train.files[0].prefix", "'train\\\\..\\\\..\\\\X'"),
    "prefix %-escaped ..": (lambda i: _files(i)[0].update(prefix="train/%2e%2e/%2e%2e/X"),
                            "splits.train.files[0].prefix", "'train/%2e%2e/%2e%2e/X'"),
}


def _tree(folder: Path, skip: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() if p.is_file() else b"" for p in folder.rglob("*")
            if p != skip and skip not in p.parents}


def test_a_crafted_remote_index_is_refused_and_nothing_is_written_outside_the_cache(data, tmp_path, s3_server):
    """tokens.json on the store with a hash or a name that reaches out of its folder: refused when the loader is
    built, naming the index, the key and the value; the folders around the cache unchanged (a file planted where
    `../../X` leads is neither read nor replaced), nothing fetched."""
    path, total = data
    cache = tmp_path / "nest" / "deeper" / "cache"
    cache.mkdir(parents=True)
    (tmp_path / "nest" / "X.bin").write_bytes(b"\x07\x00" * 700)  # where the cache's ../../X.bin would be
    before = _tree(tmp_path / "nest", cache)
    for what, (edit, key, shown) in CRAFTED.items():
        index = json.loads(path.read_text())
        edit(index)
        s3_server.client().put_object(Bucket=BUCKET, Key="run/tokenize/tokens.json", Body=json.dumps(index).encode())
        with pytest.raises(DataError) as err:
            loader = TokenLoader(URI, cache_dir=cache, cache_bytes=2 * total, **KW)
            try:
                _take(loader, 50)
            finally:
                loader.close()
        message = str(err.value)
        assert message.startswith(f"{URI}: {key}: ") and shown in message, (what, message)
        assert _tree(tmp_path / "nest", cache) == before, what
        assert not any(cache.iterdir()), what  # nothing fetched


def test_a_crafted_local_index_is_refused_the_same_way(tmp_path):
    path, _, _ = dataset(tmp_path / "run" / "tokenize")
    for what, (edit, key, shown) in CRAFTED.items():
        index = json.loads(path.read_text())
        edit(index)
        bad = path.parent / "crafted.json"
        bad.write_text(json.dumps(index))
        with pytest.raises(DataError) as err:
            TokenLoader([str(bad)], **KW)
        assert str(err.value).startswith(f"{bad}: {key}: ") and shown in str(err.value), (what, str(err.value))


def test_a_uri_with_credentials_is_refused_and_never_shown(data, tmp_path):
    """The loader refuses `s3://KEY:SECRET@bucket/...` as the pipeline does: its state records the datasets' URIs,
    and a checkpoint holding that state may be handed to others. The secret is in no message."""
    from tokenmill.sources.uris import UriError

    secret_uri = URI.replace("s3://", "s3://AKIAEXAMPLE:s3cr3t/with/slash@", 1)
    with pytest.raises(UriError) as err:
        TokenLoader(secret_uri, cache_dir=tmp_path / "cache", cache_bytes=1 << 30, **KW)
    assert "credentials in a URI are refused" in str(err.value) and "s3cr3t" not in str(err.value)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


# -- an index without hashes ---------------------------------------------------------------------------------------


def _put_index(s3_server, index: dict) -> None:
    s3_server.client().put_object(Bucket=BUCKET, Key="run/tokenize/tokens.json", Body=json.dumps(index).encode())


UNHASHED = {  # what the first file's entry leaves out: (the edit, the file named first)
    "no .bin sha256": (lambda e: e["sha256"].pop(".bin"), ".bin"),
    "no .idx sha256": (lambda e: e["sha256"].pop(".idx"), ".idx"),  # an .idx has no known size either: no check
    "no sha256 at all": (lambda e: e.pop("sha256"), ".bin"),
}


def test_a_remote_index_without_hashes_is_refused_unless_allowed(data, tmp_path, s3_server, caplog):
    """An index on the store that leaves a file's sha256 out had that file fetched and served unchecked (its .bin
    with bits flipped in the store, size unchanged, fed other tokens with no error). Now the loader refuses it when
    it is built, naming the index and the file, and fetches nothing; only `allow_unhashed=True` reads it, with a
    warning naming it."""
    import logging

    path, total = data
    steps = 40
    for n, (what, (edit, ext)) in enumerate(UNHASHED.items()):
        index = json.loads(path.read_text())
        edit(_files(index)[0])
        _put_index(s3_server, index)
        cache = tmp_path / f"cache{n}"
        with pytest.raises(DataError) as err:
            TokenLoader(URI, cache_dir=cache, cache_bytes=2 * total, **KW)
        first = f"s3://{BUCKET}/run/tokenize/{_files(index)[0]['prefix']}{ext}"
        assert str(err.value).startswith(f"{URI}: {first}: no sha256 recorded"), (what, str(err.value))
        assert "allow_unhashed" in str(err.value)
        assert not cache.exists() or not any(p.is_file() for p in cache.rglob("*")), what  # nothing fetched
    # verify=False is about local files: a download is checked whatever it says, so it is refused alike.
    with pytest.raises(DataError, match="no sha256 recorded"):
        TokenLoader(URI, cache_dir=tmp_path / "cache", cache_bytes=2 * total, verify=False, **KW)
    with caplog.at_level(logging.WARNING, logger="tokenmill.loader"):
        loader = TokenLoader(URI, cache_dir=tmp_path / "allowed", cache_bytes=2 * total, allow_unhashed=True, **KW)
    assert any(first in r.getMessage() and "allow_unhashed" in r.getMessage() for r in caplog.records)
    got, stats = _take(loader, steps)
    # The same index read locally (without the .bin sha256 the data's fingerprint, and so the order, differ).
    local = path.parent / "unhashed.json"
    local.write_text(json.dumps(index))
    assert got == _take(TokenLoader([str(local)], allow_unhashed=True, **KW), steps)[0]
    assert stats["files_fetched"] > 0


def test_no_cached_object_without_a_recorded_hash_unless_allowed(tmp_path):
    """The cache itself never takes "nothing recorded" for "checked": an object without a sha256 cannot be made
    unless the loader's allow_unhashed says so."""
    from tokenmill.loader.cache import CachedObject
    from tokenmill.loader.remote import local_name

    uri = f"s3://{BUCKET}/run/tokenize/train/alpha.0000.idx"
    with pytest.raises(DataError, match=rf"{re.escape(uri)}: no sha256 recorded"):
        CachedObject(uri, local_name(uri, "", ".idx"), "")
    assert CachedObject(uri, local_name(uri, "", ".idx"), "", allow_unhashed=True).sha256 == ""


def test_explain_checks_a_remote_sidecar_and_refuses_one_without_a_hash(data, tmp_path, s3_server, monkeypatch,
                                                                         capsys):
    """`tokenmill loader explain` on a state of remote data: a `.docs.parquet` changed in the store is refused as
    `verify.HashMismatch`, naming its URI as it is; one whose sha256 the index leaves out is refused naming the
    index and the file, or read with `--allow-unhashed`."""
    from tokenmill.cli import main
    from tokenmill.loader.explain import explain

    path, total = data
    monkeypatch.setenv("TOKENMILL_TOKEN_CACHE", str(tmp_path / "cache"))
    loader = TokenLoader(URI, cache_bytes=2 * total, **KW)
    state = json.loads(json.dumps(loader.state_dict()))
    loader.close()
    _, rows = explain(state, batch=0)
    prefix = rows[0]["file"]
    assert prefix.startswith(f"s3://{BUCKET}/run/tokenize/train/")
    key = prefix.removeprefix(f"s3://{BUCKET}/") + ".docs.parquet"
    client = s3_server.client()
    original = client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    other = next(p for p in sorted((path.parent / "train").glob("*.docs.parquet")) if p.read_bytes() != original)
    client.put_object(Bucket=BUCKET, Key=key, Body=other.read_bytes())  # a valid sidecar naming other documents
    with pytest.raises(verify.HashMismatch) as err:
        explain(state, batch=0)
    assert str(err.value).startswith(f"{prefix}.docs.parquet: sha256 ")
    client.put_object(Bucket=BUCKET, Key=key, Body=original)
    index = json.loads(path.read_text())
    for entry in _files(index):
        entry["sha256"].pop(".docs.parquet")
    _put_index(s3_server, index)
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps(state))
    assert main(["loader", "explain", str(state_file), "--batch", "0", "--json"]) == 2
    err = capsys.readouterr().err
    assert f"{URI}: {prefix}.docs.parquet: no sha256 recorded" in err and err.count("\n") == 1
    assert main(["loader", "explain", str(state_file), "--batch", "0", "--json", "--allow-unhashed"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == rows
