"""tokenmill: raw text in, clean, deduplicated, decontaminated, tokenized shards out."""

__version__ = "0.1.0"
