"""A loader state is input: a checkpoint's `meta.json` or a state file may come from someone else, and its numbers
index the order. Each malformed one is refused naming the key (`load_state_dict`, the trainer's `check_state_dict`,
`tokenmill loader explain`), never resumed at another position or failed deep inside."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.loader.tokens import labelled_docs, write_dataset
from tokenmill.cli import main
from tokenmill.loader import ResumeError, TokenLoader

KW = {"seq_len": 8, "global_batch_size": 4, "micro_batch_size": 2}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("state")
    return write_dataset(root, {"alpha": labelled_docs(40, np.random.default_rng(5))})


@pytest.fixture
def state(data) -> dict:
    loader = TokenLoader([data], **KW)
    it = iter(loader)
    for _ in range(6):
        next(it)
    return json.loads(json.dumps(loader.state_dict()))  # as a checkpoint keeps it: 12 samples consumed


def _set(key: str, value):
    def edit(state: dict) -> None:
        node, *path = key.split(".")
        target = state
        for part in [node, *path][:-1]:
            target = target[part]
        if value is KeyError:
            del target[key.split(".")[-1]]
        else:
            target[key.split(".")[-1]] = value
    return edit


HOSTILE = [
    ("consumed_samples", -4), ("consumed_samples", 1 << 70), ("consumed_samples", "12"), ("consumed_samples", 12.5),
    ("consumed_samples", True), ("skip", [[-3, 2]]), ("skip", [[5, 2]]), ("skip", [["a", 1]]), ("skip", "1-2"),
    ("skip", [[1, 2, 3]]), ("world_size", 0), ("global_batch_size", 0), ("micro_batch_size", -2), ("weights", KeyError),
    ("weights.period", 0), ("weights.slots", {"alpha": -1}), ("data.streams", ["alpha"]), ("data", KeyError),
    ("datasets", "/etc"),
    # Keys that `explain.loader_from_state` builds a loader from (before: KeyError or a ValueError deep inside).
    ("seq_len", KeyError), ("seq_len", -5), ("seq_len", "8"), ("seed", "abc"), ("seed", KeyError), ("seed", 1.5),
    ("seed", True), ("seed", 1 << 70), ("split", KeyError), ("split", 3), ("split", ""), ("shuffle", KeyError),
    ("shuffle", "yes"), ("shuffle", 1), ("shuffle_block", 0), ("shuffle_block", "files"), ("shuffle_window", -1),
    ("datasets", KeyError), ("datasets", []), ("datasets", [7]), ("datasets", [""]), ("micro_batch_size", 3),
    ("world_size", 3), ("consumed_samples", 13), ("version", 2), ("version", KeyError),
]


@pytest.mark.parametrize("key, value", HOSTILE, ids=[f"{k}={v!r:.20}" for k, v in HOSTILE])
def test_a_malformed_state_is_refused_naming_the_key(data, state, key, value):
    _set(key, value)(state)
    loader = TokenLoader([data], **KW)
    name = key.split(".")[0] if value is KeyError else key
    with pytest.raises(ResumeError, match=rf"^loader state: {name}(\[\d+\]|\.\w+)?: expected"):
        loader.check_state_dict(state)
    with pytest.raises(ResumeError, match=rf"^loader state: {name}"):
        loader.load_state_dict(state)
    assert loader.consumed_samples == 0 and loader.skips == []  # nothing taken from it
    assert loader.data_changes(state) == []  # (the trainer asks first: nothing to name, check_state_dict refuses)


def test_explain_refuses_a_malformed_state_and_a_negative_step_in_one_line(data, state, tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(state))
    assert main(["loader", "explain", str(good), "--step", "-1"]) == 2
    assert "step -1: expected a training step" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    state["consumed_samples"] = -4
    bad.write_text(json.dumps(state))
    assert main(["loader", "explain", str(bad), "--step", "0"]) == 2
    err = capsys.readouterr().err
    assert "loader state: consumed_samples: expected an integer from 0" in err and "Traceback" not in err
    state["consumed_samples"], state["weights"] = 12, {"slots": "all"}
    bad.write_text(json.dumps(state))
    assert main(["loader", "explain", str(bad), "--step", "0"]) == 2
    assert "loader state: weights.fingerprint: expected a string" in capsys.readouterr().err


@pytest.mark.parametrize("key, value", HOSTILE, ids=[f"{k}={v!r:.20}" for k, v in HOSTILE])
def test_explain_refuses_each_malformed_state_in_one_line_naming_the_key(data, state, tmp_path, capsys, key, value):
    """`tokenmill loader explain` builds a loader from the state's own keys: each malformed one is one line naming
    the key, exit 2, never a traceback (a state without seq_len was a KeyError traceback)."""
    _set(key, value)(state)
    bad = tmp_path / "state.json"
    bad.write_text(json.dumps({"extra": {"loader": state}}))  # as a checkpoint's meta.json keeps it
    assert main(["loader", "explain", str(bad), "--step", "0"]) == 2
    err = capsys.readouterr().err
    name = key.split(".")[0] if value is KeyError else key
    assert err.startswith(f"error: loader state: {name}") and err.count("\n") == 1, err
    assert "Traceback" not in err


def test_explain_refuses_a_batch_too_large_to_list_in_one_line(data, state, tmp_path, capsys):
    """A state whose global batch holds 2^52 samples (a valid count) ended in a MemoryError traceback, and a batch
    index whose samples lie past 2^53 ran on unbounded: each is now one line, exit 2."""
    big = dict(state, global_batch_size=1 << 52, micro_batch_size=1 << 52, consumed_samples=0)
    bad = tmp_path / "big.json"
    bad.write_text(json.dumps(big))
    assert main(["loader", "explain", str(bad), "--step", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: loader state: global_batch_size: 4503599627370496 samples") and "2^30" in err
    good = tmp_path / "good.json"
    good.write_text(json.dumps(state))
    assert main(["loader", "explain", str(good), "--batch", str(1 << 53)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: batch {1 << 53}: expected a global batch index") and err.count("\n") == 1
