"""Near-duplicate detection: shingles, MinHash signatures, LSH bands, candidate pairs, verification, clusters."""
