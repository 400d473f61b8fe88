"""Near-duplicate detection: shingles, MinHash signatures, LSH bands, candidate pairs, verification, clusters, and the
components engine and keep/drop decisions of the clusters phase; no stage, Ray or file import."""
