import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from tokenmill.loader import DataError, ResumeError, TokenLoader
from tests.loader.tokens import labelled_docs, stream_tokens, write_dataset

SEQ = 16


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = np.random.default_rng(0)
    root = tmp_path_factory.mktemp("tokens")
    return write_dataset(root, {
        "alpha": labelled_docs(120, rng, base=1),
        "beta": labelled_docs(80, rng, base=1001),
        "gamma": labelled_docs(40, rng, base=2001),
    }, files_per_source=3)


def _take(loader, n):
    it = iter(loader)
    return [next(it) for _ in range(n)]


def _rows(batches):
    return torch.cat([b["input_ids"] for b in batches]).tolist()


# (a) samples --------------------------------------------------------------------------------------------------------

def test_unshuffled_single_source_equals_concatenate_and_cut(data):
    loader = TokenLoader([data], seq_len=SEQ, global_batch_size=4, shuffle=False, weights={"alpha": 1, "beta": 0,
                                                                                          "gamma": 0})
    reference = stream_tokens(data, "alpha")
    n = (len(reference) - 1) // SEQ
    batches = _take(loader, (n + 3) // 4 + 2)
    inputs = torch.cat([b["input_ids"] for b in batches])
    labels = torch.cat([b["labels"] for b in batches])
    for i in range(len(inputs)):
        j = i % n  # the second epoch starts again (unshuffled: in order)
        window = reference[j * SEQ: j * SEQ + SEQ + 1]
        assert inputs[i].tolist() == window[:-1].tolist()
        assert labels[i].tolist() == window[1:].tolist()
    assert inputs.dtype == torch.int64 and inputs.shape[1] == SEQ


@pytest.mark.parametrize("workers", [0, 2])
def test_position_ids_restart_at_document_starts(data, workers):
    loader = TokenLoader([data], seq_len=SEQ, global_batch_size=8, position_ids=True, num_workers=workers)
    for batch in _take(loader, 5):
        for ids, pos in zip(batch["input_ids"].tolist(), batch["position_ids"].tolist()):
            assert pos[0] == 0
            for t in range(1, SEQ):
                # A document starts right after an end-of-text token.
                assert pos[t] == (0 if ids[t - 1] == 0 else pos[t - 1] + 1)


# (b) order ----------------------------------------------------------------------------------------------------------

def test_each_epoch_is_a_permutation(data):
    loader = TokenLoader([data], seq_len=SEQ, global_batch_size=1, weights={"alpha": 0, "beta": 1, "gamma": 0})
    n = loader.order.samples[1]
    positions = np.arange(3 * n)
    where = loader.order.locate(positions)
    epochs = [where.sample[e * n:(e + 1) * n] for e in range(3)]
    for e, samples in enumerate(epochs):
        assert sorted(samples.tolist()) == list(range(n))
        assert (where.epoch[e * n:(e + 1) * n] == e).all()
    assert not np.array_equal(epochs[0], epochs[1])  # a new key each epoch
    assert not np.array_equal(epochs[0], np.arange(n))


def test_order_is_independent_of_world_size_and_workers(data):
    one = _rows(_take(TokenLoader([data], seq_len=SEQ, global_batch_size=8), 6))
    for world, workers in ((2, 0), (4, 2)):
        per_rank = [_take(TokenLoader([data], seq_len=SEQ, global_batch_size=8, micro_batch_size=2, rank=r,
                                      world_size=world, num_workers=workers), 6 * 4 // world) for r in range(world)]
        merged = []
        m = 4 // world
        for k in range(6):
            for r in range(world):
                merged += _rows(per_rank[r][k * m:(k + 1) * m])
        assert merged == one


def test_seed_changes_the_order(data):
    a = _rows(_take(TokenLoader([data], seq_len=SEQ, global_batch_size=8, seed=1), 2))
    b = _rows(_take(TokenLoader([data], seq_len=SEQ, global_batch_size=8, seed=2), 2))
    assert a != b


# (c) resume ---------------------------------------------------------------------------------------------------------

def _global_batches(world, workers, n_batches, state=None, g=8, mb=1):
    """The next n global batches (lists of rows), assembled from every rank's micro-batches, and rank 0's state."""
    loaders = [TokenLoader([DATA[0]], seq_len=SEQ, global_batch_size=g, micro_batch_size=mb, rank=r,
                           world_size=world, num_workers=workers) for r in range(world)]
    if state is not None:
        for loader in loaders:
            loader.load_state_dict(state)
    m = g // world // mb
    per_rank = [_take(loader, n_batches * m) for loader in loaders]
    batches = []
    for k in range(n_batches):
        rows = []
        for r in range(world):
            rows += _rows(per_rank[r][k * m:(k + 1) * m])
        batches.append(rows)
    return batches, loaders[0].state_dict()


DATA = []


@pytest.fixture(scope="module")
def reference(data):
    DATA[:] = [data]
    batches, _ = _global_batches(1, 0, 60)
    return batches


@pytest.mark.parametrize("world", [pytest.param(1, marks=pytest.mark.slow), 2, 4])  # world 1: 30 s, `make test-slow`
def test_fifty_random_stops_resume_exactly(reference, world):
    rng = np.random.default_rng(world)
    stops = sorted(rng.integers(1, 40, size=50).tolist())
    m = 8 // world
    for stop in stops:
        loaders = [TokenLoader([DATA[0]], seq_len=SEQ, global_batch_size=8, micro_batch_size=1, rank=r,
                               world_size=world) for r in range(world)]
        # Stop inside a global batch too: every rank has taken the same number of micro-batches.
        micro = stop * m + int(rng.integers(0, m))
        for loader in loaders:
            _take(loader, micro)
        state = json.loads(json.dumps(loaders[0].state_dict()))  # it survives JSON
        assert state["consumed_samples"] == micro * world
        fresh = [TokenLoader([DATA[0]], seq_len=SEQ, global_batch_size=8, micro_batch_size=1, rank=r,
                             world_size=world) for r in range(world)]
        for loader in fresh:
            loader.load_state_dict(state)
        got = [_take(loader, 2 * m) for loader in fresh]
        k, done = divmod(micro, m)
        for r in range(world):
            expected = reference[k][r * m + done: (r + 1) * m] + reference[k + 1][r * m:(r + 1) * m] + \
                reference[k + 2][r * m: r * m + done]
            assert _rows(got[r]) == expected


@pytest.mark.parametrize("world,new_world,new_workers", [(1, 2, 2), pytest.param(2, 4, 0, marks=pytest.mark.slow),
                                                         pytest.param(4, 1, 2, marks=pytest.mark.slow), (2, 2, 0)])
def test_resume_with_workers_and_another_world_size(reference, world, new_world, new_workers):
    """Three stops per world size with two DataLoader workers; resume on another world size and worker count."""
    rng = np.random.default_rng(new_world)
    for stop in sorted(rng.integers(1, 30, size=3).tolist()):
        _, state = _global_batches(world, 2, stop)
        batches, _ = _global_batches(new_world, new_workers, 3, state=state, mb=2 if new_world < 4 else 1)
        assert batches == reference[stop:stop + 3]


def test_mid_batch_state_needs_the_same_step_size(data):
    loader = TokenLoader([data], seq_len=SEQ, global_batch_size=8, micro_batch_size=2, world_size=2)
    _take(loader, 1)
    other = TokenLoader([data], seq_len=SEQ, global_batch_size=8, micro_batch_size=1, world_size=2)
    with pytest.raises(ResumeError, match="inside global batch 0"):
        other.load_state_dict(loader.state_dict())


def test_prefetch_does_not_advance_the_state(data):
    loader = TokenLoader([data], seq_len=SEQ, global_batch_size=8, micro_batch_size=2, num_workers=2)
    it = iter(loader)
    next(it)
    assert loader.state_dict()["consumed_samples"] == 2
    next(it)
    assert loader.state_dict()["consumed_samples"] == 4


def test_iter_before_load_state_dict_does_not_restart(data, reference):
    loader = TokenLoader([data], seq_len=SEQ, global_batch_size=8)
    it = iter(loader)  # made before the state is loaded, as prime-rl's loop did
    _, state = _global_batches(1, 0, 5)
    loader.load_state_dict(state)
    assert next(it)["input_ids"].tolist() == reference[5]
    # A started iterator whose state is then replaced refuses to go on.
    loader.load_state_dict(state)
    with pytest.raises(RuntimeError, match="call iter"):
        next(it)


def test_layout_that_does_not_divide_is_refused(data):
    with pytest.raises(ValueError, match="does not divide evenly"):
        TokenLoader([data], seq_len=SEQ, global_batch_size=6, world_size=4)
    with pytest.raises(ValueError, match="does not divide evenly"):
        TokenLoader([data], seq_len=SEQ, global_batch_size=8, micro_batch_size=3)


# (e) changed data and weights ----------------------------------------------------------------------------------------

def test_changed_data_is_detected(tmp_path, data):
    rng = np.random.default_rng(5)
    first = write_dataset(tmp_path / "a", {"alpha": labelled_docs(50, rng), "beta": labelled_docs(30, rng, 900)})
    loader = TokenLoader([first], seq_len=SEQ, global_batch_size=4)
    _take(loader, 3)
    state = loader.state_dict()
    docs = labelled_docs(50, np.random.default_rng(6))
    second = write_dataset(tmp_path / "b", {"alpha": docs, "beta": labelled_docs(30, np.random.default_rng(5), 900)})
    changed = TokenLoader([second], seq_len=SEQ, global_batch_size=4, weights=[1.0])
    with pytest.raises(ResumeError, match=r"data changed \(alpha: files changed"):
        changed.load_state_dict(state)
    changed.load_state_dict(state, allow=("data", "weights"))
    assert changed.state_dict()["consumed_samples"] == 12


def test_changed_weights_are_named(data):
    loader = TokenLoader([data], seq_len=SEQ, global_batch_size=4)
    other = TokenLoader([data], seq_len=SEQ, global_batch_size=4, weights={"alpha": 1, "beta": 1, "gamma": 1})
    with pytest.raises(ResumeError, match="weights changed.*gamma"):
        other.load_state_dict(loader.state_dict())
    with pytest.raises(ResumeError, match="seed 0 -> 3"):
        TokenLoader([data], seq_len=SEQ, global_batch_size=4, seed=3).load_state_dict(loader.state_dict())


def test_files_that_disagree_with_tokens_json(tmp_path):
    rng = np.random.default_rng(1)
    path = write_dataset(tmp_path, {"alpha": labelled_docs(20, rng)}, files_per_source=1)
    index = json.loads(path.read_text())
    index["splits"]["train"]["files"][0]["tokens"] += 5
    path.write_text(json.dumps(index))
    loader = TokenLoader([path], seq_len=SEQ, global_batch_size=2, shuffle=False)
    with pytest.raises(DataError, match="tokens.json says"):
        next(iter(loader))


def test_bad_weights_and_paths(data, tmp_path):
    with pytest.raises(ValueError, match=r"unknown stream\(s\) \['delta'\]; the streams are \['alpha', 'beta', 'gamma'\]"):
        TokenLoader([data], seq_len=SEQ, global_batch_size=4, weights={"alpha": 1, "delta": 1})
    with pytest.raises(DataError, match="no such tokens.json"):
        TokenLoader([tmp_path / "missing.json"], seq_len=SEQ, global_batch_size=4)
    with pytest.raises(DataError, match="fewer than seq_len"):
        TokenLoader([data], seq_len=10**7, global_batch_size=4, weights={"alpha": 1, "beta": 0, "gamma": 0})


def test_weights_naming_some_streams_leave_the_others_out(data):
    """The README's example names three of the demo's nine streams: the others get weight 0 (used to raise)."""
    named = TokenLoader([data], seq_len=SEQ, global_batch_size=8, weights={"alpha": 3, "beta": 1})
    explicit = TokenLoader([data], seq_len=SEQ, global_batch_size=8, weights={"alpha": 3, "beta": 1, "gamma": 0})
    assert named.weights["gamma"] == 0 and named.weights["alpha"] == 3
    assert named.state_dict()["weights"] == explicit.state_dict()["weights"]
    rows = _rows(_take(named, 30))
    assert rows == _rows(_take(explicit, 30))
    tokens = {t for row in rows for t in row}
    assert not any(2001 <= t <= 2040 for t in tokens)  # gamma's documents are made of these tokens
    assert any(1 <= t <= 120 for t in tokens) and any(1001 <= t <= 1080 for t in tokens)


def test_two_datasets_mix_by_dataset_weights(tmp_path):
    rng = np.random.default_rng(2)
    a = write_dataset(tmp_path / "a", {"web": labelled_docs(100, rng, 1)})
    b = write_dataset(tmp_path / "b", {"web": labelled_docs(100, rng, 5001)})
    loader = TokenLoader([a, b], seq_len=SEQ, global_batch_size=10, weights=[3, 1])
    assert sorted(loader.describe()) == ["0/web", "1/web"]
    rows = _rows(_take(loader, 40))
    from_b = sum(1 for row in rows if max(row) > 5000)
    assert from_b == 100  # exactly a quarter of 400: the schedule is within one sample


# (g) skips ----------------------------------------------------------------------------------------------------------

def test_skipped_batches_never_appear_and_survive_resume(reference, data):
    loader = TokenLoader([data], seq_len=SEQ, global_batch_size=8)
    loader.skip("2-4,7")
    it = iter(loader)
    got = [next(it)["input_ids"].tolist() for _ in range(3)]
    assert got == [reference[0], reference[1], reference[5]]
    state = loader.state_dict()
    assert state["skip"] == [[2, 4], [7, 7]]
    fresh = TokenLoader([data], seq_len=SEQ, global_batch_size=8, num_workers=2)
    fresh.load_state_dict(state)
    it = iter(fresh)
    assert [next(it)["input_ids"].tolist() for _ in range(3)] == [reference[6], reference[8], reference[9]]
    assert fresh.last_batch == 9


def test_loader_needs_only_numpy_and_torch(data):
    code = ("import sys; from tokenmill.loader import TokenLoader; "
            f"l = TokenLoader([{str(data)!r}], seq_len=8, global_batch_size=2); next(iter(l)); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'ray', 'pyarrow', 'pydantic', 'yaml', 'rich', "
            "'tokenizers', 'pandas'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("prefix", ["../outside/web.0000", "/etc/passwd", "train/../../x"])
def test_an_index_pointing_outside_its_folder_is_refused(tmp_path, prefix):
    rng = np.random.default_rng(1)
    path = write_dataset(tmp_path, {"alpha": labelled_docs(5, rng)}, files_per_source=1)
    index = json.loads(path.read_text())
    index["splits"]["train"]["files"][0]["prefix"] = prefix
    path.write_text(json.dumps(index))
    with pytest.raises(DataError, match="not a path inside"):
        TokenLoader([path], seq_len=SEQ, global_batch_size=2)


def test_an_index_whose_token_count_disagrees_with_its_idx_names_the_file(tmp_path):
    path = write_dataset(tmp_path, {"alpha": labelled_docs(20, np.random.default_rng(0))}, files_per_source=1)
    index = json.loads(path.read_text())
    entry = index["splits"]["train"]["files"][0]
    entry["tokens"] -= 1
    path.write_text(json.dumps(index))
    loader = TokenLoader([path], seq_len=SEQ, global_batch_size=2, verify=False)
    with pytest.raises(DataError, match=rf"{entry['prefix']}\.idx holds {entry['tokens'] + 1} tokens but tokens\.json "
                                        rf"says {entry['tokens']}: the files changed after tokenize"):
        next(iter(loader))
