"""The loader's options as one config block: what `TokenLoader` takes beyond the data, the batch layout, the seed and
the split, validated as a train config's `loader:` block (every option reaches the YAML)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Optional, Union

from pydantic import Field, StrictInt

from tokenmill.config_base import StrictModel


class LoaderOptions(StrictModel):
    """`TokenLoader`'s options, each with `TokenLoader`'s default (a test holds them equal)."""

    num_workers: int = Field(default=0, ge=0)
    """DataLoader worker processes building micro-batches ahead (0, the default: in this process). Building one is
    a copy out of the memory-mapped files, about 0.1 ms for 8 x 2048 tokens, and a worker's hand-over through shared
    memory costs about 1 ms, so workers add little where reads are fast (`benchmarks/loader.py` on two quiet cores:
    2.12x nanoGPT's loader with 0 workers, 2.39x with 2; on the same cores busy with other work, 2 fell below 0).
    Use them where the step leaves CPU idle (a GPU step) or a read can stall it: token files on a network filesystem
    or a cold disk (from an object store the prefetch threads fetch ahead without them)."""
    shuffle: bool = True
    """False serves each stream in order (samples 0, 1, 2, ...)."""
    shuffle_block: Union[Literal["file"], Annotated[StrictInt, Field(ge=1)], None] = None
    """None (default): each stream's samples in a global shuffle per epoch. `file`: a block shuffle by token file
    (`tokenmill.loader.blockshuffle.FileBlockShuffle`): each file's samples (those that start in it) are a block, the
    blocks are shuffled, and samples are shuffled within windows of `shuffle_window` blocks; the one sample that
    runs on into the next file reads that file's recorded head (a ranged read), so a window needs `shuffle_window`
    files and each file is fetched about once an epoch. The setting for a `tokens.json` URI whose cache holds less
    than the data (with a global shuffle nearly every sample needs another whole file). An int: blocks of this many
    consecutive samples instead (a window then needs about 2 x `shuffle_window` files). It changes the order, so it
    is part of the state: the same setting gives the same samples read locally or streamed."""
    shuffle_window: int = Field(default=8, ge=1)
    """Blocks per window of the block shuffle: more mixes more, and needs more cache."""
    position_ids: bool = False
    """Also yield position ids that restart at every document start (Megatron's `reset_position_ids`)."""
    prefetch_factor: int = Field(default=2, ge=1)
    """Micro-batches each worker builds ahead (the DataLoader's `prefetch_factor`; with workers only)."""
    verify: bool = True
    """Check every token file against the sha256 that `tokens.json` records, in a background thread; a batch is
    handed out only once the files it reads are verified, and a mismatch is a DataError naming the file
    (`tokenmill.loader.verify`). Verified files are remembered per node. Files fetched from a URI are always
    checked, as they arrive, before any batch reads them."""
    allow_unhashed: bool = False
    """Read token files whose `.bin` or `.idx` sha256 `tokens.json` does not record, unchecked (with a warning naming
    them). Off, such a file of a served stream is a DataError naming the index and the file when the loader is
    built: from a URI always (nothing else checks a download), and locally unless `verify` is off. The tokenize
    stage records every sha256, so only an index edited or made elsewhere lacks one, and an index from someone else
    could leave one out to have any bytes served."""
    cache_dir: Optional[str] = None
    """Where files of a `tokens.json` URI are cached on this node (default `$TOKENMILL_TOKEN_CACHE`, else
    `$XDG_CACHE_HOME/tokenmill/tokens`, else `~/.cache/tokenmill/tokens`); the ranks and workers of a node share
    it, and each file is fetched once while it stays. In a train config, relative to the config file's folder."""
    cache_bytes: Optional[int] = Field(default=None, gt=0)
    """The most bytes that folder ever holds, downloads in progress included (default: the remote data, capped at
    90% of the free space). Smaller than one token file (.bin plus .idx) is a ConfigError."""
    fetch_timeout: float = Field(default=120.0, gt=0)
    """Seconds one request to the store is retried (with backoff) before a DataError naming the URI."""
    prefetch_threads: int = Field(default=4, ge=0)
    """Threads per process fetching the files of coming micro-batches (0: fetch on demand only)."""
    prefetch_bytes: Optional[int] = Field(default=None, gt=0)
    """How far ahead each process fetches, in bytes of distinct files (default: the data when `cache_bytes` holds
    it, else `cache_bytes` halved: for each process under a block shuffle, whose processes read the same files,
    split among the workers under a global shuffle)."""
    worker_timeout: float = Field(default=0.0, ge=0)
    """Seconds to wait for a worker's micro-batches before a DataError saying so (the DataLoader's `timeout`; 0:
    forever). A worker stuck on a read then stops the rank in seconds, naming the option, instead of holding every
    rank until the trainer's hang watchdog fires."""

    RESUMABLE: ClassVar[frozenset[str]] = frozenset({
        "num_workers", "prefetch_factor", "verify", "allow_unhashed", "cache_dir", "cache_bytes", "fetch_timeout",
        "prefetch_threads", "prefetch_bytes", "worker_timeout"})
    """Options a resumed run may change: they change how the samples arrive, never which (the order's options are
    also checked by the loader's own state)."""
