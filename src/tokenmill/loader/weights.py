"""Mixture weights from what the user gave: None (in proportion to samples), per stream or source, or per dataset."""

from __future__ import annotations

import logging
from typing import Sequence

from tokenmill.loader.streams import DataError, TokenStream

log = logging.getLogger(__name__)


def resolve_weights(streams: list[TokenStream], seq_len: int, weights, n_datasets: int) -> dict[str, float]:
    """{stream name: weight} from ``weights`` (`TokenLoader`'s argument):

    - None: each stream in proportion to its samples (a stream shorter than one sample is left out, warned);
    - {name: weight}: a name is a stream (``<source>``, or ``<i>/<source>`` with several datasets) or a source (all
      its streams, split by their samples); streams the mapping does not name get weight 0, that is are left out,
      and a name that matches no stream is a ValueError naming it and the streams there are;
    - one weight per dataset, split among its streams by their samples.

    A stream with a positive weight and fewer than ``seq_len + 1`` tokens is a DataError, as is no stream to serve.
    """
    samples = {s.name: s.samples(seq_len) for s in streams}
    if weights is None:
        out = _by_samples(samples, seq_len)
    elif isinstance(weights, dict):
        out = _by_name(streams, samples, weights)
    elif isinstance(weights, Sequence) and not isinstance(weights, str):
        out = _by_dataset(streams, samples, weights, n_datasets)
    else:
        raise ValueError(f"weights: expected None, a dict or a list, got {type(weights).__name__}")
    _check_servable(out, samples, seq_len)
    return out


def _by_samples(samples: dict[str, int], seq_len: int) -> dict[str, float]:
    """Each stream in proportion to its samples; a stream shorter than one sample is left out, warned."""
    out = {name: float(n) for name, n in samples.items()}
    for name, n in samples.items():
        if n == 0:
            log.warning("stream %s has fewer than seq_len + 1 = %d tokens and is left out", name, seq_len + 1)
    return out


def _by_name(streams: list[TokenStream], samples: dict[str, int], weights: dict) -> dict[str, float]:
    """Weights per stream or source name; streams not named get 0, a name that matches no stream is refused."""
    names = {s.name for s in streams}
    sources = {s.source for s in streams}
    unknown = sorted(k for k in weights if k not in names and k not in sources)
    if unknown:
        raise ValueError(f"weights: unknown stream(s) {unknown}; the streams are {sorted(names)}")
    out = {}
    for s in streams:
        if s.name in weights:
            out[s.name] = float(weights[s.name])
        elif s.source in weights:
            # A source name shared by several datasets: its weight is split by their samples.
            share = sum(samples[t.name] for t in streams if t.source == s.source)
            out[s.name] = float(weights[s.source]) * (samples[s.name] / share if share else 0.0)
        else:
            out[s.name] = 0.0  # not named: left out (a name that matches no stream is refused above)
    left_out = sorted(name for name, w in out.items() if w == 0)
    if left_out:
        log.info("weights: streams %s are not named or weighted 0 and are left out", ", ".join(left_out))
    return out


def _by_dataset(streams: list[TokenStream], samples: dict[str, int], weights: Sequence,
                n_datasets: int) -> dict[str, float]:
    """One weight per dataset, split among its streams by their samples."""
    if len(weights) != n_datasets:
        raise ValueError(f"weights: {len(weights)} weights for {n_datasets} datasets")
    out = {}
    for d, w in enumerate(weights):
        mine = [s for s in streams if s.dataset == d]
        total = sum(samples[s.name] for s in mine)
        for s in mine:
            out[s.name] = float(w) * (samples[s.name] / total if total else 0.0)
    return out


def _check_servable(out: dict[str, float], samples: dict[str, int], seq_len: int) -> None:
    """Refuse a negative or NaN weight, a positive weight on a stream shorter than a sample, and nothing to serve."""
    for name, w in out.items():
        if w != w or w < 0:
            raise ValueError(f"weights: {name} has weight {w}; weights must be non-negative")
        if w > 0 and samples[name] == 0:
            raise DataError(f"stream {name} has weight {w} but fewer than seq_len + 1 = {seq_len + 1} tokens")
    if not any(w > 0 for w in out.values()):
        raise DataError(f"no stream has both a positive weight and at least seq_len + 1 = {seq_len + 1} tokens")
