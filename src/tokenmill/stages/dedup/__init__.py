"""The dedup stage: exact, then MinHash-LSH near-duplicate removal above a Jaccard threshold, in five phases on Ray."""
