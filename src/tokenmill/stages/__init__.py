"""The pipeline's stages, in order after the implicit ingest: sample (clean, dedup, decontaminate, tokenize follow)."""
