"""The fastText model file format, its checks, and the one binding (fasttext-numpy2) that trains and loads models."""
