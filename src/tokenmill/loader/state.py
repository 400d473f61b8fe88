"""A saved loader state's shape, checked before any of it is used: a checkpoint's `meta.json` or a state file may
come from someone else, and its numbers index the global order."""

from __future__ import annotations

from typing import Any

from tokenmill.errors import TokenmillError

STATE_VERSION = 1
MAX_SAMPLES = 1 << 53
"""Past any run (2^53 samples), and exact in every JSON reader: a state's counts above it are refused."""


class ResumeError(TokenmillError, ValueError):
    """A loader state that this loader cannot continue exactly; the message names what differs."""


def check_state_shape(state: Any) -> None:
    """Raise ResumeError naming the key unless ``state`` has the shape `TokenLoader.state_dict` writes: a state from
    a checkpoint or a file someone else made is input, and its numbers index the order (a negative or huge count
    would serve other samples than the run's, or fail deep inside). Every key that a reader of a state reads is
    checked here, its type and range: `TokenLoader.check_state_dict` and `load_state_dict`, the trainer, and
    `explain.loader_from_state`, which builds a loader from the state's own seq_len, seed, split, shuffle, sizes,
    weights and datasets (before, a state without seq_len ended in a KeyError traceback)."""
    if not isinstance(state, dict):
        raise ResumeError(f"loader state: expected an object (TokenLoader.state_dict), found {type(state).__name__}")
    if state.get("version") != STATE_VERSION:
        raise ResumeError(f"loader state: version: expected {STATE_VERSION} (a TokenLoader state of this tokenmill), "
                          f"found {state.get('version')!r:.80}")
    _check_layout(state)
    _check_order(state)
    _check_skips(state.get("skip", []))
    _check_sources(state)


def _fail(key: str, problem: str, value: Any) -> ResumeError:
    return ResumeError(f"loader state: {key}: {problem}, found {value!r:.80}")


def _count(value: Any, key: str, least: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MAX_SAMPLES:
        raise _fail(key, f"expected an integer from {least} to 2^53", value)
    return value


def _table(value: Any, key: str, check) -> dict:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise _fail(key, "expected an object", value)
    for k, v in value.items():
        check(v, f"{key}.{k}")
    return value


def _text(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise _fail(key, "expected a string", value)
    return value


def _object(value: Any, key: str) -> dict:
    if not isinstance(value, dict):
        raise _fail(key, "expected an object", value)
    return value


def _check_layout(state: dict) -> None:
    """The state's own layout, as `batches.BatchLayout` requires it of a loader: a loader is built from it
    (`explain.loader_from_state`) and the resume point is computed in it."""
    consumed = _count(state.get("consumed_samples"), "consumed_samples")
    g, mb, world = (_count(state.get(key), key, least=1)
                    for key in ("global_batch_size", "micro_batch_size", "world_size"))
    if g % world:
        raise _fail("world_size", f"expected a divisor of global_batch_size ({g})", world)
    if (g // world) % mb:
        raise _fail("micro_batch_size", f"expected a divisor of global_batch_size / world_size ({g // world})", mb)
    if consumed % (mb * world):
        raise _fail("consumed_samples", f"expected a whole number of micro-batch steps of micro_batch_size x "
                                        f"world_size = {mb * world} samples", consumed)


def _check_order(state: dict) -> None:
    """What the order of samples is made from: seq_len, seed, split and the shuffle."""
    _count(state.get("seq_len"), "seq_len", least=1)
    seed = state.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or not -(1 << 63) <= seed < 1 << 64:
        raise _fail("seed", "expected an integer of at most 64 bits", seed)
    if not _text(state.get("split"), "split"):
        raise _fail("split", "expected the name of a split (train, valid)", "")
    if not isinstance(state.get("shuffle"), bool):
        raise _fail("shuffle", "expected true or false", state.get("shuffle"))
    # Written only with a block shuffle (`TokenLoader.state_dict`): absent is no block shuffle.
    block = state.get("shuffle_block")
    if block is not None and block != "file":
        _count(block, "shuffle_block", least=1)
    if state.get("shuffle_window") is not None:
        _count(state["shuffle_window"], "shuffle_window", least=1)


def _check_skips(skips: Any) -> None:
    if not isinstance(skips, list):
        raise _fail("skip", "expected a list of [first, last] batch ranges", skips)
    for i, r in enumerate(skips):
        key = f"skip[{i}]"
        if not (isinstance(r, (list, tuple)) and len(r) == 2) or _count(r[0], key) > _count(r[1], key):
            raise _fail(key, "expected [first, last] batch indices with first <= last", r)


def _check_sources(state: dict) -> None:
    """What the samples are read from: the data's streams, the weights' slots, the datasets."""
    data = _object(state.get("data"), "data")
    _text(data.get("fingerprint"), "data.fingerprint")
    _table(data.get("streams"), "data.streams", _text)
    weights = _object(state.get("weights"), "weights")
    _text(weights.get("fingerprint"), "weights.fingerprint")
    _count(weights.get("period"), "weights.period", least=1)
    _table(weights.get("slots"), "weights.slots", _count)
    datasets = state.get("datasets")
    if not isinstance(datasets, list) or not datasets or not all(isinstance(d, str) and d for d in datasets):
        raise _fail("datasets", "expected a non-empty list of tokens.json paths or URIs", datasets)
