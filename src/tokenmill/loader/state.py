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
    would serve other samples than the run's, or fail deep inside)."""
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        raise ResumeError(f"not a TokenLoader state of version {STATE_VERSION}: "
                          f"{state.get('version') if isinstance(state, dict) else type(state).__name__}")

    def fail(key: str, problem: str, value: Any) -> ResumeError:
        return ResumeError(f"loader state: {key}: {problem}, found {value!r:.80}")

    def count(value: Any, key: str, least: int = 0) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MAX_SAMPLES:
            raise fail(key, f"expected an integer from {least} to 2^53", value)
        return value

    def table(value: Any, key: str, check) -> dict:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise fail(key, "expected an object", value)
        for k, v in value.items():
            check(v, f"{key}.{k}")
        return value

    def text(value: Any, key: str) -> str:
        if not isinstance(value, str):
            raise fail(key, "expected a string", value)
        return value

    count(state.get("consumed_samples"), "consumed_samples")
    for key in ("global_batch_size", "micro_batch_size", "world_size"):
        count(state.get(key), key, least=1)
    skips = state.get("skip", [])
    if not isinstance(skips, list):
        raise fail("skip", "expected a list of [first, last] batch ranges", skips)
    for i, r in enumerate(skips):
        if not (isinstance(r, (list, tuple)) and len(r) == 2) or count(r[0], f"skip[{i}]") > count(r[1], f"skip[{i}]"):
            raise fail(f"skip[{i}]", "expected [first, last] batch indices with first <= last", r)
    data = state.get("data")
    if not isinstance(data, dict):
        raise fail("data", "expected an object", data)
    text(data.get("fingerprint"), "data.fingerprint")
    table(data.get("streams"), "data.streams", text)
    weights = state.get("weights")
    if not isinstance(weights, dict):
        raise fail("weights", "expected an object", weights)
    text(weights.get("fingerprint"), "weights.fingerprint")
    count(weights.get("period"), "weights.period", least=1)
    table(weights.get("slots"), "weights.slots", count)
    datasets = state.get("datasets", [])
    if not isinstance(datasets, list) or not all(isinstance(d, str) for d in datasets):
        raise fail("datasets", "expected a list of tokens.json paths or URIs", datasets)
