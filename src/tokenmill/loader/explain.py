"""Attribution: the documents whose tokens fed a global batch, from a loader state and the tokenize sidecars.

When the loss spikes at step N, a team needs the text that step trained on. The loader's state names the seed,
sizes, weights, skipped batches and data; the order recomputes batch N's samples; each sample's token range in its
stream maps to documents through the ``.idx`` lengths, and ``<file>.docs.parquet`` gives their ids, source and
subset. pyarrow (for the sidecars) and `tokenizers` (for previews) are imported only here, and only when used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from tokenmill.loader.batches import served_batch
from tokenmill.loader.loader import TokenLoader
from tokenmill.loader.state import MAX_SAMPLES, check_state_shape
from tokenmill.tokenize.tokens_json import DataError


def state_from(path: str | Path) -> dict[str, Any]:
    """A loader state from a JSON state file, a trainer checkpoint's ``meta.json``, or a checkpoint folder."""
    p = Path(path)
    if p.is_dir():
        candidates = [p / "meta.json"] if (p / "meta.json").exists() else sorted(p.glob("step-*/meta.json"))
        if not candidates:
            raise FileNotFoundError(f"{p}: no meta.json and no step-*/meta.json checkpoints in it")
        p = candidates[-1]
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{p}: not a readable JSON loader state: {exc}") from None
    for keys in ((), ("loader",), ("extra", "loader")):
        node = data
        for key in keys:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and "consumed_samples" in node and "data" in node:
            return node
    raise ValueError(f"{p}: holds no loader state (expected the dict of TokenLoader.state_dict(), "
                     "or one under 'loader' or 'extra.loader')")


def loader_from_state(state: dict[str, Any], paths: Sequence[str] | None = None,
                      weights: dict[str, float] | None = None) -> TokenLoader:
    """A loader (rank 0 of the state's world) positioned as the state says; the data must match its fingerprint."""
    check_state_shape(state)  # before any of it builds a loader: the state may come from someone else
    slots = state["weights"]["slots"]
    loader = TokenLoader(list(paths or state["datasets"]), seq_len=state["seq_len"],
                         global_batch_size=state["global_batch_size"], micro_batch_size=state["micro_batch_size"],
                         world_size=state["world_size"], seed=state["seed"], split=state["split"],
                         shuffle=state["shuffle"], shuffle_block=state.get("shuffle_block"),
                         shuffle_window=state.get("shuffle_window", 8), weights=weights or {k: float(v) for k, v in slots.items()},
                         verify=False)  # attribution reads a few documents; `tokens verify` checks the files
    loader.load_state_dict(state)
    return loader


class _Previews:
    def __init__(self, tokenizer_file: str):
        self.decode = None
        try:
            from tokenizers import Tokenizer

            self.decode = Tokenizer.from_file(tokenizer_file).decode
        except Exception:  # noqa: BLE001 - no tokenizers, or no tokenizer file: show ids instead
            self.decode = None

    def __call__(self, ids, width: int) -> str:
        if self.decode is None:
            return " ".join(str(i) for i in ids[:16])
        text = self.decode([int(i) for i in ids], skip_special_tokens=False)
        text = " ".join(text.split())
        return text if len(text) <= width else text[: width - 1] + "…"


def _sidecar(stream, f) -> dict[str, list]:
    """A token file's ``.docs.parquet`` columns, read whole and checked against the sha256 `tokens.json` records
    (the ids it names are what attribution reports: a changed sidecar would name other documents)."""
    import hashlib

    import pyarrow as pa
    import pyarrow.parquet as pq

    name = f"{f.prefix}.docs.parquet"
    try:
        if stream.fetcher is not None:  # a remote stream: through its store, with its retries and deadline
            raw = stream.fetcher.cache.store.read_bytes(name)
        else:
            raw = Path(name).read_bytes()
    except OSError as err:
        raise DataError(f"{name}: cannot read it ({err.strerror or err}); tokens.json lists it") from None
    digest = hashlib.sha256(raw).hexdigest()
    if f.docs_sha256 and digest != f.docs_sha256:
        raise DataError(f"{name}: sha256 {digest[:16]}… differs from {f.docs_sha256[:16]}… recorded in tokens.json: "
                        "the file changed or is corrupt since the tokenize stage wrote it; restore it or rerun the "
                        "tokenize stage")
    return pq.read_table(pa.BufferReader(raw), columns=["id", "source", "subset", "tokens"]).to_pydict()


def explain_batch(loader: TokenLoader, batch: int, preview_chars: int = 80) -> list[dict[str, Any]]:
    """One row per (sample, document) of global batch ``batch``: who, where, and which tokens of it."""
    layout, g, seq_len = loader.layout, loader.global_batch_size, loader.seq_len
    where = loader.order.locate(list(range(batch * g, (batch + 1) * g)))
    previews = _Previews(loader.info.get("tokenizer_file", ""))
    sidecars: dict[tuple[int, int], dict[str, list]] = {}
    rows = []
    for row, (s, sample, epoch) in enumerate(zip(where.stream.tolist(), where.sample.tolist(), where.epoch.tolist())):
        stream = loader.streams[s]
        start, stop = sample * seq_len, sample * seq_len + seq_len + 1
        rank, within = divmod(row, layout.per_rank)
        if stream.fetcher is not None:  # a remote stream: this sample's files pinned in the cache
            found = loader._plan.files_read(loader.order.locate([batch * g + row]))
            stream.fetcher.hold([(loader.streams[s2], i) for s2, i in found])
        for f, d, doc_start, doc_end in stream.documents(start, stop):
            if (s, f) not in sidecars:
                sidecars[(s, f)] = _sidecar(stream, stream.files[f])
            side = sidecars[(s, f)]
            lo, hi = max(start, doc_start), min(stop, doc_end)
            rows.append({
                "batch": batch, "sample_in_batch": row, "rank": rank,
                "micro_batch": within // layout.micro_batch_size, "stream": stream.name, "epoch": epoch,
                "sample": sample, "id": side["id"][d], "source": side["source"][d], "subset": side["subset"][d],
                "file": str(stream.files[f].prefix), "document_in_file": d, "document_tokens": doc_end - doc_start,
                "tokens": [lo - doc_start, hi - doc_start], "tokens_in_sample": hi - lo, "stream_tokens": [lo, hi],
                "preview": previews(stream.read(lo, min(hi - lo, 64)), preview_chars),
            })
    return rows


def explain(state: dict[str, Any], *, step: int | None = None, batch: int | None = None,
            paths: Sequence[str] | None = None) -> tuple[int, list[dict[str, Any]]]:
    """(global batch index, rows) for training step ``step`` (the step-th batch served, skipped ones not counted,
    0-based) or for global batch index ``batch``."""
    if (step is None) == (batch is None):
        raise ValueError("give exactly one of step and batch")
    which, value = ("step", step) if step is not None else ("batch", batch)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SAMPLES:
        raise ValueError(f"{which} {value!r}: expected a training step or batch index from 0")
    loader = loader_from_state(state, paths)
    k = batch if batch is not None else served_batch(step, loader.skips)
    return k, explain_batch(loader, k)
