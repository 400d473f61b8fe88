"""The dedup stage's config."""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import Field, model_validator

from tokenmill.config_base import StageConfig


class DedupConfig(StageConfig):
    """Exact duplicates by a 128-bit hash of the normalized text, then near-duplicates by MinHash LSH, verified."""

    threshold: float = Field(default=0.95, gt=0.0, lt=1.0)
    """Documents whose shingle-set Jaccard with a kept document exceeds this are removed (OPT: 0.95)."""
    num_perm: int = Field(default=320, ge=16, le=4096)
    """MinHash permutations; 320 lets 16 bands x 20 rows catch 99.9% of pairs at exactly 0.95."""
    bands: Optional[int] = Field(default=None, ge=1)
    """LSH bands; default: chosen so that pairs at the threshold become candidates with probability >= min_recall."""
    rows: Optional[int] = Field(default=None, ge=1)
    """Rows per band (with `bands`); bands x rows <= num_perm."""
    min_recall: float = Field(default=0.99, gt=0.0, lt=1.0)
    """Probability that a pair at exactly the threshold becomes a candidate, when bands are chosen."""
    word_ngram: int = Field(default=5, ge=1)
    """Shingle size in words for space-delimited languages."""
    char_ngram: int = Field(default=5, ge=1)
    """Shingle size in characters for Chinese, Japanese and Thai (by the `lang` column)."""
    minhash_seed: int = 1
    """Seed of the MinHash permutations: the same text always gets the same signature."""
    partitions: Union[Literal["auto"], Annotated[int, Field(ge=1, le=4096)]] = "auto"
    """Band-key partitions: one bucket task and one verify task each; more partitions, less memory per task. `auto`
    (the default): 16, doubled until a partition holds at most 65,536 input documents and 128 MiB of text
    (`tokenmill.dedup.sizing`), so that a task's memory stays the same as the corpus grows; the count used is in
    the report (`partitions`)."""
    max_pairs_per_bucket: int = Field(default=10_000, ge=1)
    """A bucket with at most this many pairs has every pair verified; a larger one goes to leader clustering
    (each document compared with cluster leaders, and with members of clusters it may belong to; exact by the
    triangle inequality of the Jaccard distance, see `tokenmill.dedup.leaders`)."""
    max_comparisons_per_document: int = Field(default=1_000, ge=1)
    """In a bucket over `max_pairs_per_bucket`, the most exact Jaccard comparisons one document makes per pass (a
    second pass, central documents first, runs only when the first left pairs undecided): a bucket of k documents
    costs at most 2 k times this. Pairs left undecided are counted (`pairs_not_verified`)."""
    keep: list[Literal["longest", "shortest", "lowest_id"]] = ["longest", "lowest_id"]
    """Which document of a cluster is kept: rules in order, ties broken by the next (then by id)."""
    against: list[str] = []
    """Finished runs (their output folders: paths against the config file's folder, or URIs) to deduplicate against
    without recomputing them: a document of this run that is an exact or verified near duplicate of a document an
    earlier run kept is removed (`exact_duplicate_of_earlier_run`, `near_duplicate_of_earlier_run`), the earlier one
    wins; the rest are deduplicated as usual. Each run must hold a finished dedup stage made with the same num_perm,
    bands/rows, shingle sizes and minhash_seed (checked by `validate` and before any work; see docs/dedup.md)."""
    keep_rule: Literal["greedy", "component"] = "greedy"
    """greedy: a document is removed only with a verified edge above the threshold to a kept one (in a chain A~B~C
    without A~C, A and C stay); component: one document kept per connected component of the verified edges, the
    others removed as `component_duplicate` (datatrove's and NeMo Curator's rule). The report counts what both
    remove, whichever is applied (`tokenmill.dedup.keep_rules`)."""

    @model_validator(mode="after")
    def _bands_fit(self) -> "DedupConfig":
        if (self.bands is None) != (self.rows is None):
            raise ValueError("set both bands and rows, or neither")
        if self.bands is not None and self.bands * self.rows > self.num_perm:
            raise ValueError(f"bands x rows = {self.bands * self.rows} exceeds num_perm = {self.num_perm}")
        return self
