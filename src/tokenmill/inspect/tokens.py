"""The tokenize stage's output (docs/tokenize.md): tokens per source and split from ``tokens.json``, document lengths
in tokens from the ``.docs.parquet`` sidecars, and documents decoded back from the ``.bin/.idx`` files with the
run's own ``tokenizer.json`` (HF ``tokenizers``), so what the loader will feed can be read as text.

Each function takes ``run``: a run folder (`tokenmill.inspect.runs.run_dir`), or the ``tokens_json.TokensIndex``
of one already read.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np

from tokenmill.errors import TokenmillError
from tokenmill.inspect.runs import stage_dir
from tokenmill.tokenize import bundle, tokens_json


def _index(run) -> tokens_json.TokensIndex:
    """The run's validated ``tokens.json``; an index already read is used as it is, so a caller that needs several
    of these views (``tokenmill tokens stats``, `decoded_samples`) reads and validates the file once."""
    if isinstance(run, tokens_json.TokensIndex):
        return run
    path = stage_dir(run, "tokenize") / tokens_json.FILE
    if not path.is_file():
        raise TokenmillError(f"{path} does not exist: the tokenize stage has not completed")
    return tokens_json.read(path)


def token_index(run=None) -> dict:
    """``tokenize/tokens.json``: per split its files (prefix, documents, tokens, by_source), the tokenizer, dtype
    (validated by ``tokenmill.tokenize.tokens_json``)."""
    return _index(run).data


def token_counts(run=None) -> list[dict]:
    """Per split and source: documents and tokens (the end-of-text token of each document included)."""
    out: dict[tuple[str, str], dict[str, int]] = {}
    for split, entry in token_index(run)["splits"].items():
        for f in entry["files"]:
            for source, s in f["by_source"].items():
                cell = out.setdefault((split, source), {"documents": 0, "tokens": 0})
                cell["documents"] += s["documents"]
                cell["tokens"] += s["tokens"]
    return [{"split": sp, "source": so, **c} for (sp, so), c in sorted(out.items())]


def _sidecars(run, split: str | None) -> list[tuple[str, str, Path]]:
    """(split, prefix, sidecar path) of every token file, in the index's order."""
    index = _index(run)
    if split is not None and split not in index.splits:
        raise TokenmillError(f"no split {split!r} in {index.path}; splits: {', '.join(index.splits)}")
    return [(sp, f["prefix"], index.folder / (f["prefix"] + bundle.DOCS))
            for sp, entry in index.splits.items() if split in (None, sp) for f in entry["files"]]


def document_lengths(run=None, split: str | None = "train") -> dict[str, np.ndarray]:
    """Tokens per document (end-of-text included), per source, from the sidecars of ``split`` (None: all)."""
    lengths: dict[str, list[int]] = {}
    for _, _, path in _sidecars(run, split):
        t = bundle.read_docs(path, columns=["source", "tokens"])
        for source, n in zip(t["source"].to_pylist(), t["tokens"].to_pylist()):
            lengths.setdefault(source, []).append(n)
    return {s: np.asarray(v, dtype=np.int64) for s, v in sorted(lengths.items())}


def length_histogram(run=None, split: str | None = "train", bins: int = 30) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Document lengths binned on shared log-spaced edges: ``(edges, {source: counts})``."""
    lengths = document_lengths(run, split)
    values = np.concatenate(list(lengths.values())) if lengths else np.array([1])
    edges = np.unique(np.geomspace(max(1, values.min()), max(2, values.max()) + 1, bins + 1).round())
    return edges, {s: np.histogram(v, bins=edges)[0] for s, v in lengths.items()}


def length_percentiles(run=None, split: str | None = "train", q=(10, 50, 90, 99)) -> list[dict]:
    """Per source: documents, tokens, and length percentiles ``p10``, ``p50``, ..."""
    return [{"source": s, "documents": len(v), "tokens": int(v.sum()),
             **{f"p{p}": int(x) for p, x in zip(q, np.percentile(v, q))}}
            for s, v in document_lengths(run, split).items()]


def tokenizer(run=None):
    """The run's tokenizer (``tokenize/tokenizer.json``) as ``tokenmill.tokenize.tokenizer.LoadedTokenizer``, once its
    sha256 matches the one ``tokens.json`` records (else a TokenmillError naming the file)."""
    from tokenmill.digest import file_sha256
    from tokenmill.tokenize.tokenizer import load_tokenizer

    index = _index(run)
    info, path = index.tokenizer, index.tokenizer_path
    if not path.is_file():
        raise TokenmillError(f"{path} does not exist: tokens.json names it as the run's tokenizer")
    digest = file_sha256(path)
    if digest != info.get("sha256"):
        raise TokenmillError(f"{path}: sha256 {digest[:16]}… differs from {str(info.get('sha256'))[:16]}… recorded in "
                             "tokens.json: the tokenizer changed since the tokenize stage wrote the tokens, so they "
                             "would decode wrongly; restore it or rerun the tokenize stage")
    return load_tokenizer(str(path), info.get("eos_token", "<|endoftext|>"))


def verify_token_files(run=None, on_file=None) -> list[dict]:
    """Every file ``tokens.json`` records, hashed again: the tokenizer, and per split each ``.bin``, ``.idx`` and
    ``.docs.parquet``. Markers of earlier checks (``tokenmill.loader.verify``) are ignored, and refreshed for the files
    that match, so a training run on this node then starts without hashing them. A file whose sha256 the index does
    not record is a failed row too (``recorded`` false), named as the loader names it when it refuses such a file.
    Each row: split, file, bytes, ok, recorded, error, seconds; ``on_file(row)`` is called after each.
    """
    import time

    from tokenmill.loader.verify import Check, require_recorded, verify_file
    from tokenmill.markers import markers_dir

    index = _index(run)
    folder = index.folder
    checks = [("-", Check(index.tokenizer_path, str(index.tokenizer.get("sha256", ""))))]
    for split, entry in index.splits.items():
        for f in entry["files"]:
            for ext in sorted(bundle.HASHED):
                checks.append((split, Check(folder / (f["prefix"] + ext), f["sha256"].get(ext, ""))))
    cache, rows = markers_dir(), []
    for split, check in checks:
        t0 = time.perf_counter()
        try:
            # Nothing recorded: the loader's refusal, naming the index and the file.
            require_recorded(index.path, [str(check.path)] if not check.sha256 else [], allow=False)
            # Token files get a marker; the tokenizer is read by `tokens stats`, which hashes it every time.
            verify_file(check, cache if check.path.suffix in (bundle.BIN, bundle.IDX) else None, use_markers=False)
            error = None
        except tokens_json.DataError as err:
            error = str(err)
        size = check.path.stat().st_size if check.path.is_file() else None
        rows.append({"split": split, "file": str(check.path.relative_to(folder)), "bytes": size, "ok": error is None,
                     "recorded": bool(check.sha256), "error": error, "seconds": round(time.perf_counter() - t0, 3)})
        if on_file is not None:
            on_file(rows[-1])
    return rows


def decoded_samples(run=None, n: int = 3, seed: int = 0, split: str | None = "train", source: str | None = None,
                    max_tokens: int | None = 200) -> list[dict]:
    """``n`` random documents read back from the token files and decoded (first ``max_tokens`` tokens).

    Each: split, prefix, index (sequence in its file), id, source, subset, tokens (the document's count, end-of-text
    included), ends_with_eos, and text.
    """
    from tokenmill.tokenize.indexed import IndexedReader

    index = _index(run)
    candidates = []
    for sp, prefix, path in _sidecars(index, split):
        t = bundle.read_docs(path, columns=list(bundle.DOCS_COLUMNS)).to_pylist()
        candidates += [(sp, prefix, i, row) for i, row in enumerate(t) if source in (None, row["source"])]
    if source is not None and not candidates:
        raise TokenmillError(f"no tokenized documents of source {source!r}")
    chosen = sorted(random.Random(seed).sample(range(len(candidates)), min(n, len(candidates))))
    tok = tokenizer(index)
    out = []
    for k in chosen:
        sp, prefix, i, row = candidates[k]
        seq = IndexedReader(str(index.folder / prefix))[i]
        ends = bool(len(seq)) and int(seq[-1]) == tok.eos_id
        body = seq[:-1] if ends else seq
        out.append({"split": sp, "prefix": prefix, "index": i, **row, "ends_with_eos": ends,
                    "text": tok.decode([int(x) for x in body[:max_tokens]])})
    return out
