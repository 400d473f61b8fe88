"""Attribution: the documents whose tokens fed a global batch, from a loader state and the tokenize sidecars.

When the loss spikes at step N, a team needs the text that step trained on. The loader's state names the seed,
sizes, weights, skipped batches and data; the order recomputes batch N's samples; each sample's token range in its
stream maps to documents through the ``.idx`` lengths, and ``<file>.docs.parquet`` gives their ids, source and
subset. Every file it reads is checked against the sha256 `tokens.json` records first, as the loader checks its
files (`verify.py`): a changed ``.idx`` or sidecar would name other documents. pyarrow (for the sidecars) and
`tokenizers` (for previews) are imported only here, and only when used.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Sequence

from tokenmill.loader.batches import served_batch
from tokenmill.loader.loader import TokenLoader
from tokenmill.loader.state import MAX_SAMPLES, ResumeError, check_state_shape
from tokenmill.loader.verify import Check, HashMismatch, require_recorded, unhashed, verify_file
from tokenmill.markers import markers_dir
from tokenmill.tokenize import bundle
from tokenmill.tokenize.tokens_json import DataError

MAX_BATCH_TOKENS = 1 << 30
"""The most tokens (global batch size x (seq_len + 1)) explain lists: a few hundred times any real run's global
batch (GPT-3: 3.2M tokens, Llama 3: 16M); a state asking for more is refused rather than exhausting memory."""


def state_from(path: str | Path) -> Any:
    """A loader state from a JSON state file, a trainer checkpoint's ``meta.json``, or a checkpoint folder (its
    shape unchecked: `check_state_shape` names what is wrong)."""
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
    if isinstance(data, dict) and ("consumed_samples" in data or "data" in data):
        return data  # a state file (its shape is checked by whoever uses it, naming the key)
    for keys in (("loader",), ("extra", "loader")):
        node = data
        for key in keys:
            node = node.get(key) if isinstance(node, dict) else None
        if node is not None:
            return node  # a checkpoint's: whatever it holds there is checked as a state, naming the key
    raise ValueError(f"{p}: holds no loader state (expected the dict of TokenLoader.state_dict(), "
                     "or one under 'loader' or 'extra.loader')")


def loader_from_state(state: dict[str, Any], paths: Sequence[str] | None = None,
                      weights: dict[str, float] | None = None, allow_unhashed: bool = False) -> TokenLoader:
    """A loader (rank 0 of the state's world) positioned as the state says; the data must match its fingerprint.
    ``allow_unhashed``: as the loader's (files without a recorded sha256 read unchecked, with a warning)."""
    check_state_shape(state)  # before any of it builds a loader: the state may come from someone else
    tokens = state["global_batch_size"] * (state["seq_len"] + 1)
    if tokens > MAX_BATCH_TOKENS:
        raise ResumeError(f"loader state: global_batch_size: {state['global_batch_size']} samples of seq_len "
                          f"{state['seq_len']} + 1 tokens is {tokens} tokens in one global batch: more than explain "
                          f"lists (2^30)")
    slots = state["weights"]["slots"]
    loader = TokenLoader(list(paths or state["datasets"]), seq_len=state["seq_len"],
                         global_batch_size=state["global_batch_size"], micro_batch_size=state["micro_batch_size"],
                         world_size=state["world_size"], seed=state["seed"], split=state["split"],
                         shuffle=state["shuffle"], shuffle_block=state.get("shuffle_block"),
                         shuffle_window=state.get("shuffle_window", 8), weights=weights or {k: float(v) for k, v in slots.items()},
                         # attribution reads a few files: `explain_batch` checks those, not every file in a thread
                         verify=False, allow_unhashed=allow_unhashed)
    loader.load_state_dict(state)
    return loader


class _Previews:
    """Decoded previews, from the index's tokenizer.json when it is there and its sha256 is the recorded one (a
    changed tokenizer would show other text than was trained on: refused); token ids otherwise."""

    def __init__(self, tokenizer_file: str, sha256: str | None):
        self.decode = None
        try:
            raw = Path(tokenizer_file).read_bytes()
        except OSError:  # no tokenizer file beside the index (or a URI): ids instead
            return
        if sha256:
            digest = hashlib.sha256(raw).hexdigest()
            if digest != sha256:
                raise HashMismatch(tokenizer_file, digest, sha256)
        try:
            from tokenizers import Tokenizer

            self.decode = Tokenizer.from_str(raw.decode("utf-8")).decode
        except Exception:  # noqa: BLE001 - no tokenizers, or not a tokenizer file: show ids instead
            self.decode = None

    def __call__(self, ids, width: int) -> str:
        if self.decode is None:
            return " ".join(str(i) for i in ids[:16])
        text = self.decode([int(i) for i in ids], skip_special_tokens=False)
        text = " ".join(text.split())
        return text if len(text) <= width else text[: width - 1] + "…"


def _sidecar(stream, f, index: str, allow_unhashed: bool) -> dict[str, list]:
    """A token file's ``.docs.parquet`` columns, read whole and checked against the sha256 `tokens.json` records
    (the ids it names are what attribution reports: a changed sidecar would name other documents); one with no
    recorded sha256 is refused as the loader refuses such token files, unless ``allow_unhashed``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = f"{f.prefix}{bundle.DOCS}"
    if not f.docs_sha256:
        require_recorded(index, [name], allow_unhashed)  # refused, or warned of and read unchecked
    try:
        if stream.fetcher is not None:  # a remote stream: through its store, with its retries and deadline
            raw = stream.fetcher.cache.store.read_bytes(name)
        else:
            raw = Path(name).read_bytes()
    except OSError as err:
        raise DataError(f"{name}: cannot read it ({err.strerror or err}); tokens.json lists it") from None
    digest = hashlib.sha256(raw).hexdigest()  # of the bytes parsed below: nothing read twice
    if f.docs_sha256 and digest != f.docs_sha256:
        raise HashMismatch(name, digest, f.docs_sha256)  # a URI stays as it is (a Path would fold its //)
    return pq.read_table(pa.BufferReader(raw), columns=["id", "source", "subset", "tokens"]).to_pydict()


def _check_local(loader: TokenLoader, s: int, files, checked: set) -> None:
    """The local token files ``files`` of stream ``s`` checked against their recorded sha256 before explain reads
    them (their ``.idx`` maps tokens to documents), as the loader checks them; remote files are checked by the cache
    as pinned. A loader that verifies (the trainer's, at a rollback) is asked through its own verifier: a file its
    thread or a batch already verified is not hashed again, markers or not. Otherwise each file goes through
    `verify.verify_file` with the node's markers (free when a loader of this node verified it)."""
    stream = loader.streams[s]
    todo = [i for i in files if (s, i) not in checked]
    if stream.fetcher is not None or not todo:
        return
    if loader.verifier is not None:  # it refused unhashed files when built (`TokenLoader._require_hashes`)
        loader.verifier.require(loader._group_base[s] + i for i in todo)
    else:
        markers = markers_dir()
        for i in todo:
            f = stream.files[i]
            require_recorded(loader.paths[stream.dataset], unhashed(f), loader.allow_unhashed)
            for ext, sha in ((bundle.BIN, f.sha256), (bundle.IDX, f.idx_sha256)):
                if sha:
                    verify_file(Check(Path(f"{f.prefix}{ext}"), sha), markers)
    checked.update((s, i) for i in todo)


def explain_batch(loader: TokenLoader, batch: int, preview_chars: int = 80) -> list[dict[str, Any]]:
    """One row per (sample, document) of global batch ``batch``: who, where, and which tokens of it."""
    layout, g, seq_len = loader.layout, loader.global_batch_size, loader.seq_len
    if isinstance(batch, bool) or not isinstance(batch, int) or not 0 <= batch or (batch + 1) * g > MAX_SAMPLES:
        raise ValueError(f"batch {batch!r}: expected a global batch index from 0 whose samples lie within 2^53 "
                         f"(global batches of {g} samples)")
    where = loader.order.locate(list(range(batch * g, (batch + 1) * g)))
    previews = _Previews(loader.info.get("tokenizer_file", ""), loader.info.get("tokenizer_sha256"))
    sidecars: dict[tuple[int, int], dict[str, list]] = {}
    checked: set[tuple[int, int]] = set()
    rows = []
    for row, (s, sample, epoch) in enumerate(zip(where.stream.tolist(), where.sample.tolist(), where.epoch.tolist())):
        stream = loader.streams[s]
        start, stop = sample * seq_len, sample * seq_len + seq_len + 1
        rank, within = divmod(row, layout.per_rank)
        if stream.fetcher is not None:  # a remote stream: this sample's files pinned in the cache
            found = loader._plan.files_read(loader.order.locate([batch * g + row]))
            stream.fetcher.hold([(loader.streams[s2], i) for s2, i in found])
        _check_local(loader, s, stream.file_range(start, stop), checked)
        for f, d, doc_start, doc_end in stream.documents(start, stop):
            if (s, f) not in sidecars:
                sidecars[(s, f)] = _sidecar(stream, stream.files[f], loader.paths[stream.dataset],
                                            loader.allow_unhashed)
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
            paths: Sequence[str] | None = None, allow_unhashed: bool = False) -> tuple[int, list[dict[str, Any]]]:
    """(global batch index, rows) for training step ``step`` (the step-th batch served, skipped ones not counted,
    0-based) or for global batch index ``batch``. ``allow_unhashed``: token files and sidecars without a recorded
    sha256 are read unchecked (with a warning) instead of refused."""
    if (step is None) == (batch is None):
        raise ValueError("give exactly one of step and batch")
    which, value = ("step", step) if step is not None else ("batch", batch)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SAMPLES:
        raise ValueError(f"{which} {value!r}: expected a training step or batch index from 0")
    loader = loader_from_state(state, paths, allow_unhashed=allow_unhashed)
    try:
        k = batch if batch is not None else served_batch(step, loader.skips)
        return k, explain_batch(loader, k)
    finally:
        loader.close()
