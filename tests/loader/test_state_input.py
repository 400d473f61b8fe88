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
