"""How many band-key partitions a dedup run uses when its config says `auto`: sized from its input."""

from __future__ import annotations

__all__ = ["DOCS_PER_PARTITION", "MIN_PARTITIONS", "MAX_PARTITIONS", "TEXT_BYTES_PER_PARTITION", "auto_partitions"]

MIN_PARTITIONS = 16
"""The least: the count every run used before `auto` (the demo and small runs keep it, and their bytes)."""
MAX_PARTITIONS = 4096
"""The config's own bound on `partitions`."""
DOCS_PER_PARTITION = 1 << 16
"""At most this many input documents per partition. A buckets, verify or index task holds its partition's band rows
(bands x documents / partitions), its candidate pairs and their documents' shingles: at a fixed partition count
these grow with the corpus (2026-11-28: 16 partitions over the 10 GB scale corpus, 500,000 documents each, took an
index task's worker to 1,562 MB; 64 over the 10 GB web-like corpus, 130,000 each, a verify task to 1,373 MB alone).
At 65,536 a partition holds what 64 partitions held of a 4 GB corpus (docs/scale.md, "Partitions sized from the
input")."""
TEXT_BYTES_PER_PARTITION = 1 << 27
"""At most this much text (128 MiB) per partition, for corpora of long documents: verify reads back and shingles
the text of its pairs' documents."""


def auto_partitions(docs: int, text_bytes: int) -> int:
    """16, doubled until neither `DOCS_PER_PARTITION` nor `TEXT_BYTES_PER_PARTITION` is exceeded (at most 4,096).

    A power of two: the components rounds and `by_component` take as tasks a divisor of the partitions, and an
    earlier run's index is read across partition counts modulo their greatest common divisor. The count depends
    on the input alone (the upstream manifest's documents and bytes), never on workers or timing, so that a
    rerun over the same input plans the same tasks and writes the same bytes."""
    if docs < 0 or text_bytes < 0:
        raise ValueError(f"auto_partitions: negative input size (docs={docs}, text_bytes={text_bytes})")
    count = MIN_PARTITIONS
    while count < MAX_PARTITIONS and (docs > count * DOCS_PER_PARTITION or text_bytes > count * TEXT_BYTES_PER_PARTITION):
        count *= 2
    return count
